"""1.5D sparse shifting, dense replicating algorithms (paper section V-B; Tables II, III, IV).

Grid: (p/c) x c, position (u, v); q = p/c ranks per layer, c ranks per fiber.

Layout (Table II, second block). A (m x r) and B (n x r) are cut into a p x q grid of blocks:
p near-equal row blocks and q near-equal column blocks of r (``layout.block_offsets``, so r need
not divide; r >= q is required so that every rank holds at least one column). Block (i, j) lives
on grid position (j, i % c): rank (u, v) holds column block u of every row block i with
i % c == v, stacked in increasing i ("local order"). S is cut into p column blocks (all m rows,
the columns of B row block j); column block j lives on (j // c, j % c). So layer v holds exactly
the S column blocks j = v (mod c), and the rows of B that S block j needs (B row block j,
column block u) are already on rank (u, v): B never moves.

The loop (one for every kernel, section IV-A; Algorithm 1 with the roles of S and the dense
matrix exchanged):

1. replication: all-gather the "X" operand along the fiber, giving rank (u, v) column block u
   of all rows of X (an X-side output starts as zeros instead);
2. propagation: q steps; at each the rank applies the local kernel to the S block it holds and
   the stationary rows of the "Y" operand that block needs, then the S blocks shift cyclically
   one position within the layer (the q-th shift brings every block home);
3. reduction: an X-side output (SpMMA) is reduce-scattered along the fiber.

SDDMM: the dot products are partial over column block u, so the SDDMM output travels with its
S block and accumulates; after q shifts it is home and complete, and the owner multiplies it by
S's values (which therefore need not travel). SpMMA: the output (X side, replicated) is
reduce-scattered. SpMMB: the output (Y side) is stationary; nothing is reduced.

Orientations of S. Orientation "a" stores S by column blocks (X = A replicated, Y = B
stationary): SDDMM, SpMMA, SpMMB and FusedMMB use it. Orientation "b" stores S^T by column
blocks, i.e. S by row blocks (X = B replicated, Y = A stationary); it is built on first use by
FusedMMA with replication reuse (one all-to-all of the nonzeros, counted as "distribute").
Section V-B's text speaks of shifting "block rows" of S while Table II gives S a 1 x p grid of
column blocks; the two are these two orientations, and distmm follows Table II for S itself.

FusedMM strategies (section IV-B):
  "none":  SDDMM then SpMM as two separate calls in orientation "a" (FusedMMA: all-gather A,
           2q shifts, reduce-scatter A; FusedMMB: all-gather A twice, 2q shifts).
  "reuse": one all-gather and 2q shifts, no reduction (Table III). FusedMMA replicates B and
           runs SDDMM then SpMMB on S^T (orientation "b"), whose output is the stationary A
           side; FusedMMB replicates A and runs SDDMM then SpMMB on S (orientation "a"), reusing
           the gathered A.
Local kernel fusion is impossible here: A and B are split by columns, so no rank can finish a
dot product before aggregating (section IV-B); the strategy is not offered.

What one shifted block carries. A block moves as one message in coordinate (COO) form, three
words per nonzero as in the paper: the local row index, the local column index and one value
(S's value for SpMM, the partial dot product for SDDMM, the SDDMM output for the SpMM half of
FusedMM). distmm counts elements, so every index and every value is one word whatever its
width: in float32 runs the three arrays are int32 (values bit-cast) and a nonzero is 12 bytes;
in float64 runs they are int64 and a nonzero is 24 bytes. Blocks for SpMMB travel in their
transposed (CSC) order and the local step runs the SpMMA kernel on the transposed block (so the
kernel statistics list those calls under ``spmm_a``); this avoids re-transposing a block at
every step. The receiver must know a block's size before it arrives: each rank's block sizes are
all-gathered within the layer once, when an orientation is built (q integers per rank, counted
under "distribute"), so no counts travel during an operation.

Words sent per rank (= received), one operation, for p | m, p | n, q | r and a layer whose S
blocks in the orientation used hold L nonzeros in total (L = nnz/c when blocks are balanced):
    SDDMM, SpMMB:       replication (c-1) m r/p; propagation 3L in q messages
    SpMMA:              propagation 3L in q messages; reduction (c-1) m r/p
    FusedMMA "none":    (c-1) m r/p + 6L + (c-1) m r/p (all-gather, 2q shifts, reduce-scatter)
    FusedMMB "none":    2 (c-1) m r/p + 6L (two all-gathers of A)
    FusedMMA "reuse":   (c-1) n r/p + 6L_b (L_b: nonzeros of the layer's row blocks of S)
    FusedMMB "reuse":   (c-1) m r/p + 6L
With m = n and balanced blocks, "reuse" is 6 nnz/c + nr(c-1)/p = nr(6 phi/c + (c-1)/p) words in
2p/c + (c-1) messages: Table III's row "1.5D Sparse Shift, Repl. Reuse" exactly, and its
minimiser is Table IV's c = sqrt(6 p phi). Differences from the paper's accounting: when c = p a
layer has one rank, the shifts are local no-ops and the 6 phi/c term vanishes (as in
:mod:`distmm.perf.costmodel`); and each round makes q shifts, the last returning the blocks home, as
Algorithm 1 and Table III count, although an SpMM round could stop after q - 1 (SDDMM cannot:
its output must come home). :meth:`SparseShift15DModel.exact_words` gives these formulas.

Multi-head calls (:mod:`distmm.algorithms.multivalue`: the multi-value SpMM, the multi-head
SDDMM) run the same loop once at width r = H F, with H value words per nonzero in each packet
(S's H values, or the H partial dot products): 3L becomes (2 + H) L above, the dense words
unchanged (``exact_words(..., heads=H)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distmm.algorithms.model import FamilyModel, KernelCalls
from distmm.algorithms.multivalue import MultiHead
from distmm.algorithms.packets import (
    WORDS_PER_NONZERO,
    index_words,
    pack,
    packet_block,
    packet_heads,
    packet_values,
    word_dtype,
)
from distmm.algorithms.placement import Orientation
from distmm.algorithms.two_orientation import TwoOrientationAlgorithm
from distmm.core.aligned import aligned_empty
from distmm.core.coo import CooShare
from distmm.core.grid import ProcessGrid15D, fits_15d
from distmm.core.layout import block_of, block_offsets, block_range
from distmm.core.memory import (
    OPS,
    Memory,
    ceil_div,
    csr_bytes,
    merged,
    modes,
    mpi_reduce_scatter_bytes,
    perm_bytes,
    transpose_bytes,
    two_orientation_memory,
    unpack_bytes,
)
from distmm.errors import require

STRATEGIES = ("none", "reuse")


@dataclass
class _FiberOrientation(Orientation):
    """An orientation whose local rows are in fiber order (see ``SparseShift15D``).

    Local row k of the single block is global (permuted) row ``row_map[k]`` of the X side, so
    the block multiplies the all-gathered X without reordering it.
    """

    row_map: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global (permuted) (row, col) in this orientation's frame of every stored nonzero."""
        blk = self.blocks[0]
        return (self.row_map[blk.row_ids()],
                blk.indices.astype(np.int64) + int(self.col_bases[0]))


class SparseShift15DModel(FamilyModel):
    """The cost model of :class:`SparseShift15D` (``SparseShift15D.model``): its grid and
    width rules, Table III/IV rows, kernel calls, exact words and memory (static methods)."""

    # ----------------------------------------------------------------- the cost model
    # ----------------------------------------------------------------- the cost model
    grid_allows = staticmethod(fits_15d)

    @staticmethod
    def min_width(p: int, c: int) -> int:
        """The smallest dense width r a call may use: one column per rank of a layer, p/c."""
        return p // c

    @staticmethod
    def table3(strategy: str, n: int, r: int, p: int, c: float,
               phi: float = 0.0) -> tuple[float, float]:
        """Table III, 1.5D sparse shifting: (messages, words) per rank of one FusedMM ("none"
        pays a second replication, as section V derives the rows the table omits)."""
        nr = n * r
        repl = 2 if strategy == "none" else 1
        return 2 * p / c + repl * (c - 1), nr * (6 * phi / c + repl * (c - 1) / p)

    @staticmethod
    def one_rank_layer_saving(strategy: str, n: int, r: int, p: int, c: float,
                              phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) of Table III's shifts, which a layer of one rank does not send."""
        return 2 * p / c, n * r * 6 * phi / c

    @staticmethod
    def nonzero_visits(strategy: str, nnz: float, p: int, c: float) -> float:
        """Nonzeros one rank's kernels walk in one FusedMM: its layer's nnz/c, twice."""
        return 2 * nnz / c

    @staticmethod
    def table4_best_c(strategy: str, p: int, phi: float = 0.0) -> float:
        """Table IV: sqrt(6 p phi) with replication reuse; sqrt(3 p phi) without elision (the
        same derivation)."""
        return math.sqrt((6 if strategy == "reuse" else 3) * p * phi)

    @staticmethod
    def local_calls(strategy: str, m: float, n: float, nnz: float, r: float, p: int,
                    c: int) -> list[KernelCalls]:
        """q steps per kernel, each on a shifted m x (n/p) column block of S (nnz/p nonzeros)
        at width r/q, rebuilt from its COO packet every step (even when q = 1). "none": SDDMM
        + SpMMA; "reuse": SDDMM on S^T's n x (m/p) blocks, then SpMMA on their transposes as
        they travelled ((m/p) x n)."""
        q = p // c
        z, w = nnz / p, r / q
        if strategy == "none":
            return [KernelCalls(kind, q, z, m, n / p, w, unpacked=True)
                    for kind in ("sddmm", "spmm_a")]
        return [KernelCalls("sddmm", q, z, n, m / p, w, unpacked=True),
                KernelCalls("spmm_a", q, z, m / p, n, w, unpacked=True)]

    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    nnz: float | None = None, layer_nnz: dict[str, float] | None = None,
                    heads: int = 1) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one operation. Not collective.

        ``heads`` H > 1: a multi-head SDDMM or multi-value SpMM of width r
        (:mod:`distmm.algorithms.multivalue`), whose packets carry H value words per nonzero:
        2 + H words a shifted nonzero where one call has 3, the dense words unchanged.

        Exact when p divides m and n and p/c divides r. The shifted nonzeros are
        ``layer_nnz["a"]`` (this rank's layer's column blocks of S, orientation "a") and
        ``layer_nnz["b"]`` (its row blocks, orientation "b"), as :meth:`shifted_nnz` reports
        for q > 1; missing entries default to ``nnz / c`` (balanced blocks). Returns
        ``{phase: {"words": w, "messages": k}}`` for replication, propagation and reduction.
        """
        require(op in OPS, f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        require(strategy in STRATEGIES, f"unknown strategy {strategy!r}")
        require(p % c == 0, f"c={c} does not divide p={p}")
        require(heads == 1 or op in ("sddmm", "spmm_a", "spmm_b"),
                f"{op} has no multi-head form")
        q = p // c
        shifts = q if q > 1 else 0
        layer_nnz = dict(layer_nnz or {})
        for name in ("a", "b"):
            if name not in layer_nnz:
                require(nnz is not None, "exact_words needs nnz or layer_nnz")
                layer_nnz[name] = nnz / c
        a_blk, b_blk = m * r / p, n * r / p
        phases = {ph: {"words": 0.0, "messages": 0}
                  for ph in ("replication", "propagation", "reduction")}

        def add(phase: str, words: float, msgs: int) -> None:
            phases[phase]["words"] += words
            phases[phase]["messages"] += msgs

        def rounds(name: str, k: int) -> None:
            if shifts:
                per_nz = WORDS_PER_NONZERO - 1 + heads
                add("propagation", k * per_nz * layer_nnz[name], k * shifts)

        gather_a = ("replication", (c - 1) * a_blk, c - 1)
        if op in ("sddmm", "spmm_b"):
            add(*gather_a)
            rounds("a", 1)
        elif op == "spmm_a":
            rounds("a", 1)
            add("reduction", (c - 1) * a_blk, c - 1)
        elif strategy == "none":
            add(*gather_a)
            rounds("a", 2)
            if op == "fusedmm_a":
                add("reduction", (c - 1) * a_blk, c - 1)
            else:
                add(*gather_a)
        elif op == "fusedmm_a":
            add("replication", (c - 1) * b_blk, c - 1)
            rounds("b", 2)
        else:
            add(*gather_a)
            rounds("a", 2)
        return phases

    @staticmethod
    def memory_bytes(op: str, strategy: str, m: int, n: int, nnz: float, r: int, p: int,
                     c: int, dtype=np.float32, overlap: bool = False,
                     local: dict[str, int] | None = None) -> Memory:
        """Bytes one rank holds for one ``op`` (see :mod:`distmm.core.memory`). Not collective.

        Per orientation used: one CSR block with a row pointer over all m (or n) rows of the
        X side, its packed coordinates (2 words a nonzero) for each frame the call ships and,
        for the transposed frame, the block's cached transpose; the replicated X operand and
        the X-side accumulator, all rows at width r/q; two packet buffers of 3 words per
        nonzero of the layer's largest block (the same two with or without overlap; one when
        q = 1); the fiber-order row maps of both sides; the caller's dense blocks. Without
        ``local`` (:meth:`memory_counts`), the largest blocks of any rank and nnz/p nonzeros a
        block."""
        q, it = p // c, np.dtype(dtype).itemsize
        word = word_dtype(dtype).itemsize
        k = merged({"rows_a": q * ceil_div(m, p), "rows_b": q * ceil_div(n, p),
                    "width": ceil_div(r, q), "ycols_a": ceil_div(n, p),
                    "ycols_b": ceil_div(m, p), "nnz_a": ceil_div(nnz, p),
                    "nnz_b": ceil_div(nnz, p), "zmax_a": ceil_div(nnz, p),
                    "zmax_b": ceil_div(nnz, p), "share": ceil_div(nnz, p)}, local)
        w, xrows = k["width"], {"a": m, "b": n}
        # FusedMMB without elision stays in orientation "a" (SDDMM, then SpMMB on S).
        used = ([("a", "sddmm"), ("a", "spmm_y")] if (op, strategy) == ("fusedmm_b", "none")
                else modes(op, strategy))
        # Offsets of A's and B's row blocks, layer starts, the column blocks of r.
        parts = {"permutations": perm_bytes(m, n) + 16 * (m + n),
                 "bookkeeping": 16 * (p + 1) + 16 * (c + 1) + 8 * (q + 1)}
        call: dict[str, int] = {}
        for o in sorted({"a"} | {o for o, _ in used}):
            parts[f"S {o}"] = csr_bytes(xrows[o], k[f"nnz_{o}"], it)
            parts["bookkeeping"] += 8 * q + 24  # the layer's block sizes; value offsets
        for o, mode in used:
            z, zmax = k[f"nnz_{o}"], k[f"zmax_{o}"]
            frame = "csc" if mode == "spmm_y" else "csr"
            parts[f"S {o} packed {frame}"] = 2 * z * word
            if frame == "csc":
                parts[f"S {o} transpose"] = transpose_bytes(k[f"ycols_{o}"], z)
            if mode == "spmm_x":  # the superblock accumulator of the reduction
                parts["reduction"] = xrows[o] * w * it
            elif c > 1:  # a fiber of one rank replicates nothing: T is the block
                parts["replication"] = xrows[o] * w * it
            if mode == "spmm_x":
                call["MPI reduce-scatter"] = mpi_reduce_scatter_bytes(xrows[o] * w * it, c)
            parts["shift"] = min(q, 2) * WORDS_PER_NONZERO * zmax * word
            rows = xrows[o] if frame == "csr" else k[f"ycols_{o}"]
            call["unpacked block"] = max(call.get("unpacked block", 0),
                                         unpack_bytes(rows, zmax, word))
            if mode == "sddmm":
                call["unit values"] = zmax * it
                if op.startswith("fusedmm"):
                    call["SDDMM result"] = z * it
        return two_orientation_memory(parts, call, k, used, op, w, it, k["nnz_a"], k["nnz_b"])

    @classmethod
    def best_c(cls, m: int, n: int, r: int, p: int, nnz: float, strategy: str = "reuse",
               op: str = "fusedmm_a") -> int:
        """The divisor c of p (with r >= p/c) minimising :meth:`exact_words` of one ``op``
        with balanced blocks; ties go to the smaller c. Not collective."""
        cs = [c for c in range(1, p + 1) if cls.grid_allows(p, c) and r >= cls.min_width(p, c)]
        require(bool(cs), f"no replication factor fits p={p}, r={r} (need r >= p/c)")

        def words(c: int) -> float:
            return sum(ph["words"] for ph in
                       cls.exact_words(op, m, n, r, p, c, strategy, nnz=nnz).values())

        return min(cs, key=lambda c: (words(c), c))


class SparseShift15D(TwoOrientationAlgorithm):
    """S distributed for the 1.5D sparse shifting algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks, replication factor ``c`` (a divisor of
    p) and dense width ``r`` (required, r >= p/c). Every operation is collective over ``comm``
    and takes/returns dense blocks in this object's distribution: rank (u, v) holds rows
    ``dense_rows(side, rank)`` (row blocks v, v+c, v+2c, ...) and columns
    ``dense_cols(side, rank)`` (column block u of r) of A ("a", m x r) and B ("b", n x r).
    """

    name = "15d-sparse-shift"
    model = SparseShift15DModel
    strategies = STRATEGIES
    strategy_note = (" (local kernel fusion needs whole dense rows, which this algorithm "
                     "splits by columns)")
    supports_overlap = True
    splits_r = True
    grid_class = ProcessGrid15D

    @classmethod
    def _check_arguments(cls, p: int, c, order: str, shape: tuple[int, int]) -> None:
        super()._check_arguments(p, c, order, shape)
        require(max(shape) < 2**31 - 1, f"S of shape {shape} exceeds 32-bit local indices")

    def _setup(self, source: CooShare) -> None:
        m, n = self.shape
        p = self.p
        self.offsets = {"a": block_offsets(m, p), "b": block_offsets(n, p)}
        self._pack_dtype = word_dtype(self.dtype)
        # S's packets (and column blocks of r) do not show a call's width: compare it first
        for comm in (self.layer, self.fiber):
            comm.sizes_show_width = False
        # Fiber order of each side's rows: layer 0's rows (its row blocks in local order), then
        # layer 1's, ...: exactly the order in which an all-gather along the fiber stacks them.
        self._row_map, self._row_pos, self._layer_starts = {}, {}, {}
        for side, off in self.offsets.items():
            blocks = [b for v in range(self.c) for b in range(p)[self.grid.layer_blocks(v)]]
            row_map = np.concatenate([block_range(off, b) for b in blocks])
            pos = np.empty_like(row_map)
            pos[row_map] = np.arange(row_map.size, dtype=np.int64)
            sizes = np.diff(off)
            per_layer = [int(sizes[self.grid.layer_blocks(v)].sum()) for v in range(self.c)]
            self._row_map[side], self._row_pos[side] = row_map, pos
            self._layer_starts[side] = np.concatenate(([0], np.cumsum(per_layer))).astype(
                np.int64)
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        self._o: dict[str, _FiberOrientation] = {}
        self._layer_nnz: dict[str, np.ndarray] = {}
        self._packed_index: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]] = {}
        self._build("a", rows, cols, source.vals)

    # ----------------------------------------------------------------- layout
    def _owner(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """World rank storing each S entry (given in S's frame) in orientation ``name``."""
        y = cols if name == "a" else rows
        _, ys = self._frames(name)
        j = block_of(y, self.offsets[ys])
        return self.grid.world_rank(j // self.c, j % self.c).astype(np.int64)

    def _build(self, name: str, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        """Place orientation ``name`` (collective) and learn its layer's block sizes."""
        xs, ys = self._frames(name)
        u, v = self.grid.u, self.grid.v
        j = u * self.c + v
        yo = self.offsets[ys]
        pos = self._row_pos[xs]
        shape = (int(self.offsets[xs][-1]), int(yo[j + 1] - yo[j]))

        def layout(r_s: np.ndarray, c_s: np.ndarray):
            x, y = (r_s, c_s) if name == "a" else (c_s, r_s)
            t = np.zeros(x.size, dtype=np.int64)
            return t, pos[x], y - yo[j], 1, [shape], 0, [int(yo[j])]

        o = self.placement.place(name, self._owner(name, rows, cols), rows, cols, vals, layout)
        self._o[name] = _FiberOrientation(o.name, o.blocks, o.offsets, o.values, o.row_base,
                                          o.col_bases, self._row_map[xs])
        counts = np.zeros(self.q, dtype=np.int64)
        self.layer.allgatherv(np.array([o.nnz], dtype=np.int64), counts, [1] * self.q,
                              phase="distribute")
        self._layer_nnz[name] = counts

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        _, v = self.grid.position(rank)
        ls = self._layer_starts[side]
        return self._row_map[side][ls[v]:ls[v + 1]]

    def r_rule(self) -> tuple[int, str]:
        """r >= p/c: each of the p/c ranks of a layer holds one column block of r."""
        low = self.model.min_width(self.p, self.c)
        return low, (
            f"each of the p/c={low} ranks of a layer holds one of p/c column blocks of r; "
            "use a larger c or another algorithm")

    def _col_blocks(self) -> int:
        return self.q

    def _col_block(self, rank: int) -> int:
        return self.grid.position(rank)[0]

    def _build_b(self, rows, cols, vals) -> None:
        self._build("b", rows, cols, vals)

    def shifted_nnz(self, name: str = "a") -> int:
        """Nonzeros this rank sends (and receives) in one propagation round in orientation
        ``name``: the total of its layer's blocks (0 when a layer has one rank). Collective
        only when orientation "b" must first be built."""
        require(name in ("a", "b"), f"orientation must be 'a' or 'b', got {name!r}")
        self._orientation(name)
        return int(self._layer_nnz[name].sum()) if self.q > 1 else 0

    def _exact_counts(self, op: str, strategy: str) -> dict:
        return {"layer_nnz": {name: self.shifted_nnz(name) for name in ("a", "b")}}

    # ----------------------------------------------------------------- checks
    # ----------------------------------------------------------------- moving S blocks
    def _index_part(self, name: str, frame: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The (row, col) part of this rank's packed block, and the value permutation.

        ``frame`` "csr" packs the block in its stored order; "csc" packs its transpose in CSR
        order (rows = the block's columns), with ``perm`` taking value order to that order."""
        key = (name, frame)
        if key not in self._packed_index:
            blk = self._o[name].blocks[0]
            if frame == "csr":
                rows, cols, perm = blk.row_ids(), blk.indices, None
            else:
                indptr_t, cols, perm = blk.transpose()
                rows = np.repeat(np.arange(blk.shape[1], dtype=np.int64), np.diff(indptr_t))
            self._packed_index[key] = (index_words(rows, cols, self.dtype), perm)
        return self._packed_index[key]

    # ----------------------------------------------------------------- the loop
    def _fiber_rows(self, name: str) -> np.ndarray:
        """Rows of the fiber's X blocks: layer v's rows, for v = 0 .. c-1 (fiber order)."""
        return np.diff(self._layer_starts[self._frames(name)[0]])

    def _propagate(self, name: str, mode: str, vals: np.ndarray | None,
                   T: np.ndarray | None, Y: np.ndarray | None,
                   out: np.ndarray | None, multi: MultiHead | None = None) -> np.ndarray:
        """q steps of local kernel + cyclic shift of the S blocks within the layer.

        ``mode`` "sddmm": the block carries partial dot products (T is X, Y the stationary Y
        block); returns the finished dot products of this rank's block in value order.
        "spmm_x": the block carries ``vals``; out (X side, fiber order) += S @ Y.
        "spmm_y": the block carries ``vals`` in transposed order; out (Y side) += S^T @ T.
        At step s rank u holds the block of layer position (u + s) mod q.
        With ``multi`` (a multi-head call, :mod:`distmm.algorithms.multivalue`) the block
        carries H value words per nonzero in the same message (``vals`` is (H, nnz); the
        partial dot products (nnz, H)), and each step runs the multi-head kernels on this
        rank's column slice cut into head segments.
        """
        self._orientation(name)
        xs, ys = self._frames(name)
        u, q = self.grid.u, self.q
        nnz = self._layer_nnz[name]
        ysz = np.diff(self.offsets[ys])[self.grid.layer_blocks()]
        ly = np.concatenate(([0], np.cumsum(ysz))).astype(np.int64)
        mx = int(self.offsets[xs][-1])
        frame = "csc" if mode == "spmm_y" else "csr"
        heads = 0 if multi is None else multi.heads
        per_nz = WORDS_PER_NONZERO if multi is None else 2 + heads
        size = per_nz * int(nnz.max(initial=0))
        cur = self._kernels.buffer("cur", (size,), self._pack_dtype)
        # A layer of one rank (q = 1) shifts nothing, so it needs no receive buffer.
        nxt = self._kernels.buffer("nxt", (size,), self._pack_dtype) if q > 1 else cur
        index, perm = self._index_part(name, frame)
        pack(cur, index, 0 if mode == "sddmm" else vals, self.dtype, perm, heads)
        ones = np.ones(int(nnz.max(initial=0)), dtype=self.dtype) if mode == "sddmm" else None
        # With overlap, SpMM steps send the block on while the kernel reads it; SDDMM must
        # finish accumulating before its block leaves.
        overlap = self.overlap and q > 1 and mode != "sddmm"
        left, right = (u - 1) % q, (u + 1) % q
        for step in range(q):
            t, t_next = (u + step) % q, (u + step + 1) % q
            kt = int(nnz[t])
            send = cur[:per_nz * kt]
            recv = nxt[:per_nz * int(nnz[t_next])]
            reqs = self.layer.start_shift(send, recv, dest=left, source=right) if overlap else []
            ysl = slice(int(ly[t]), int(ly[t + 1]))
            # The block that arrived is a new object at every step: its kernel call is
            # prepared each time (key None); only the kernel's own time is "compute".
            bv = packet_values(cur, kt, self.dtype)
            blk = packet_block(cur, kt, (mx, ysz[t]) if frame == "csr" else (ysz[t], mx), bv)
            if multi is not None:  # every head, one pass; the first SpMM_X step writes
                hv = packet_heads(cur, kt, heads, self.dtype, edge_major=mode == "sddmm")
                if mode == "sddmm":
                    multi.sddmm(blk, T, Y[ysl], hv)
                elif mode == "spmm_x":
                    multi.spmm("spmm_multi_a", blk, hv, Y[ysl], out, accumulate=step > 0)
                else:
                    multi.spmm("spmm_multi_a", blk, hv, T, out[ysl], accumulate=False)
            elif mode == "sddmm":
                self._kernels.run(None, (), "sddmm", blk, ones[:kt], T, Y[ysl], bv)
            elif mode == "spmm_x":  # the first step writes the accumulator
                self._kernels.run(None, (), "spmm_a", blk, bv, Y[ysl], None, out,
                                 accumulate=step > 0)
            else:  # S_t^T @ T, run as SpMMA on the transposed block that travelled; each
                # step writes its own rows of out
                self._kernels.run(None, (), "spmm_a", blk, bv, T, None, out[ysl],
                                 accumulate=False)
            if q > 1:
                if overlap:
                    self.layer.finish(reqs)
                else:
                    self.layer.shift(send, recv, dest=left, source=right)
                cur, nxt = nxt, cur
        if multi is not None:
            return packet_heads(cur, int(nnz[u]), heads, self.dtype, edge_major=True)
        return packet_values(cur, int(nnz[u]), self.dtype)

    # pieces expressed in an orientation's frame ------------------------------------------
    def _sddmm_in(self, name: str, X_loc, Y_loc, vals, r, T=None, out=None,
                  multi: MultiHead | None = None) -> tuple[np.ndarray, np.ndarray]:
        if T is None:
            T = self._replicate(name, X_loc)
        dots = self._propagate(name, "sddmm", None, T, Y_loc, None, multi)
        if multi is not None:  # (nnz, H) partial sums, complete: S's values once per head
            return np.multiply(dots, vals[:, None], out=out), T
        return np.multiply(vals, dots, out=out), T

    def _spmm_x_in(self, name: str, Y_loc, vals, r, out=None,
                   multi: MultiHead | None = None) -> np.ndarray:
        xs, _ = self._frames(name)
        T_out = self._kernels.buffer(("T_out", name),
                                     (int(self.offsets[xs][-1]), self.local_width(r)))
        # written by the first step
        self._propagate(name, "spmm_x", vals, None, Y_loc, T_out, multi)
        return self._reduce(name, T_out, out)

    def _spmm_y_in(self, name: str, X_loc, vals, r, T=None, out=None,
                   multi: MultiHead | None = None) -> np.ndarray:
        if T is None:
            T = self._replicate(name, X_loc)
        _, ys = self._frames(name)
        if out is None:  # every step writes its own rows of out
            out = aligned_empty((self._local_rows(ys), self.local_width(r)), self.dtype)
        self._propagate(name, "spmm_y", vals, T, None, out, multi)
        return out

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | str | None = None) -> np.ndarray:
        if strategy == "none":
            R, _ = self._sddmm_in("a", A_loc, B_loc, self._values_for("a", values), r)
            if side == "a":
                return self._spmm_x_in("a", B_loc, R, r, out)
            return self._spmm_y_in("a", A_loc, R, r, out=out)
        # Replication reuse: replicate the operand that is not the output's side and finish
        # with the SpMM whose output is stationary (FusedMMA on S^T, section IV-B).
        name = "b" if side == "a" else "a"
        X, Y = (B_loc, A_loc) if side == "a" else (A_loc, B_loc)
        R, T = self._sddmm_in(name, X, Y, self._values_for(name, values), r)
        return self._spmm_y_in(name, None, R, r, T=T, out=out)

    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's block sizes for :meth:`memory_bytes` (orientations built so far)."""
        out = {"rows_a": self._local_rows("a"), "rows_b": self._local_rows("b"),
               "width": self.local_width(r)}
        for o, orient in self._o.items():
            out.update({f"nnz_{o}": orient.nnz, f"ycols_{o}": orient.blocks[0].shape[1],
                        f"zmax_{o}": int(self._layer_nnz[o].max(initial=0))})
        return out



__all__ = ["STRATEGIES", "SparseShift15D"]
