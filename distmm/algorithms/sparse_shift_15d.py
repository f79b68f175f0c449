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
:mod:`distmm.costmodel`); and each round makes q shifts, the last returning the blocks home, as
Algorithm 1 and Table III count, although an SpMM round could stop after q - 1 (SDDMM cannot:
its output must come home). :meth:`SparseShift15D.exact_words` gives these formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from distmm.algorithms.base import Orientation, TwoOrientationAlgorithm
from distmm.algorithms.model import KernelCalls
from distmm.comm import CountingComm
from distmm.coo import CooShare
from distmm.errors import require
from distmm.grid import RANK_ORDERS, ProcessGrid15D
from distmm.kernels import NodeModel
from distmm.layout import block_of, block_offsets
from distmm.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock

STRATEGIES = ("none", "reuse")
OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")
WORDS_PER_NONZERO = 3
_PACK_DTYPE = {np.dtype(np.float32): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.int64)}


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


class SparseShift15D(TwoOrientationAlgorithm):
    """S distributed for the 1.5D sparse shifting algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks, replication factor ``c`` (a divisor of
    p) and dense width ``r`` (required, r >= p/c). Every operation is collective over ``comm``
    and takes/returns dense blocks in this object's distribution: rank (u, v) holds rows
    ``dense_rows(side, rank)`` (row blocks v, v+c, v+2c, ...) and columns
    ``dense_cols(side, rank)`` (column block u of r) of A ("a", m x r) and B ("b", n x r).
    """

    name = "15d-sparse-shift"
    strategies = STRATEGIES
    supports_overlap = True
    splits_r = True

    def __init__(self, source: CooShare, comm: MPI.Comm, c: int = 1, r: int | None = None,
                 node_model: str | NodeModel = "reference", dtype=np.float32,
                 permute: bool | str = "auto", seed: int = 0, order: str = "fiber",
                 check_finite: bool = True,
                 overlap: bool = False, checks: str = "once") -> None:
        self.overlap = bool(overlap)
        p = comm.Get_size()
        # Every check below depends only on arguments that agree across ranks: they raise the
        # same InputError everywhere before anything is communicated.
        require(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1,
                f"replication factor c must be an integer >= 1, got {c!r}")
        require(p % c == 0, f"replication factor c={c} does not divide the number of ranks p={p}")
        require(order in RANK_ORDERS,
                f"unknown rank order {order!r}; choose one of {', '.join(RANK_ORDERS)}")
        m, n = int(source.shape[0]), int(source.shape[1])
        require(max(m, n) < 2**31 - 1, f"S of shape {(m, n)} exceeds 32-bit local indices")
        # The grid sizes first: r_rule needs them to check a default r before any message.
        self.c, self.q = int(c), p // int(c)
        q = self.q
        super().__init__(source, comm, node_model=node_model, dtype=dtype, permute=permute,
                         seed=seed, check_finite=check_finite, r=r, checks=checks)
        self.grid = ProcessGrid15D.create(comm, self.c, order)
        self.layer = CountingComm(self.grid.layer_comm, self.stats)
        self.fiber = CountingComm(self.grid.fiber_comm, self.stats)
        self.offsets = {"a": block_offsets(m, p), "b": block_offsets(n, p)}
        self._pack_dtype = _PACK_DTYPE[self.dtype]
        # Fiber order of each side's rows: layer 0's rows (its row blocks in local order), then
        # layer 1's, ...: exactly the order in which an all-gather along the fiber stacks them.
        self._row_map, self._row_pos, self._layer_starts = {}, {}, {}
        for side, off in self.offsets.items():
            blocks = [t * self.c + v for v in range(self.c) for t in range(q)]
            row_map = np.concatenate([np.arange(off[b], off[b + 1], dtype=np.int64)
                                      for b in blocks]) if blocks else np.zeros(0, np.int64)
            pos = np.empty_like(row_map)
            pos[row_map] = np.arange(row_map.size, dtype=np.int64)
            sizes = np.diff(off)
            per_layer = [int(sizes[v::self.c].sum()) for v in range(self.c)]
            self._row_map[side], self._row_pos[side] = row_map, pos
            self._layer_starts[side] = np.concatenate(([0], np.cumsum(per_layer))).astype(
                np.int64)
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        self._o: dict[str, _FiberOrientation] = {}
        self._layer_nnz: dict[str, np.ndarray] = {}
        self._packed_index: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]] = {}
        self._build("a", rows, cols, source.vals)
        self._plan = None
        self._b_stale = False
        self._source = None

    # ----------------------------------------------------------------- layout
    @staticmethod
    def _frames(name: str) -> tuple[str, str]:
        """(X side, Y side) of an orientation: X is replicated, Y stationary."""
        return ("a", "b") if name == "a" else ("b", "a")

    def _position(self, rank: int) -> tuple[int, int]:
        """Grid position (u, v) of a world rank."""
        if self.grid.order == "fiber":
            return rank // self.c, rank % self.c
        return rank % self.q, rank // self.q

    def _world(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.grid.order == "fiber":
            return (u * self.c + v).astype(np.int64)
        return (v * self.q + u).astype(np.int64)

    def _owner(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """World rank storing each S entry (given in S's frame) in orientation ``name``."""
        y = cols if name == "a" else rows
        _, ys = self._frames(name)
        j = block_of(y, self.offsets[ys])
        return self._world(j // self.c, j % self.c)

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

        o = self._place(name, self._owner(name, rows, cols), rows, cols, vals, layout)
        self._o[name] = _FiberOrientation(o.name, o.blocks, o.offsets, o.values, o.row_base,
                                          o.col_bases, self._row_map[xs])
        counts = np.zeros(self.q, dtype=np.int64)
        self.layer.allgatherv(np.array([o.nnz], dtype=np.int64), counts, [1] * self.q,
                              phase="distribute")
        self._layer_nnz[name] = counts

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        _, v = self._position(rank)
        ls = self._layer_starts[side]
        return self._row_map[side][ls[v]:ls[v + 1]]

    def r_rule(self) -> tuple[int, str]:
        """r >= p/c: each of the p/c ranks of a layer holds one column block of r."""
        return self.min_width(self.p, self.c), (
            f"each of the p/c={self.q} ranks of a layer holds one of p/c column blocks of r; "
            "use a larger c or another algorithm")

    def _col_blocks(self) -> int:
        return self.q

    def _col_block(self, rank: int) -> int:
        return self._position(rank)[0]

    def _build_b(self, rows, cols, vals) -> None:
        self._build("b", rows, cols, vals)

    def shifted_nnz(self, name: str = "a") -> int:
        """Nonzeros this rank sends (and receives) in one propagation round in orientation
        ``name``: the total of its layer's blocks (0 when a layer has one rank). Collective
        only when orientation "b" must first be built."""
        require(name in ("a", "b"), f"orientation must be 'a' or 'b', got {name!r}")
        self._orientation(name)
        return int(self._layer_nnz[name].sum()) if self.q > 1 else 0

    def describe(self) -> dict:
        return {**super().describe(), "c": self.c, "order": self.grid.order,
                "overlap": self.overlap}

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
            self._packed_index[key] = (np.concatenate((rows, cols)).astype(self._pack_dtype),
                                       perm)
        return self._packed_index[key]

    def _pack(self, name: str, frame: str, vals: np.ndarray | None, buf: np.ndarray) -> None:
        """Write this rank's block as [rows | cols | values] into ``buf`` (values 0 if None)."""
        index, perm = self._index_part(name, frame)
        nnz = index.size // 2
        buf[:2 * nnz] = index
        out = buf[2 * nnz:3 * nnz].view(self.dtype)
        if vals is None:
            out[...] = 0
        elif perm is None:
            out[...] = vals
        else:
            np.take(vals, perm, out=out)

    def _unpack(self, buf: np.ndarray, nnz: int, shape: tuple[int, int]
                ) -> tuple[CSRBlock, np.ndarray]:
        """A CSR block (and its values, a view into ``buf``) from a packed block."""
        rows = buf[:nnz]
        indptr = np.zeros(shape[0] + 1, dtype=INDPTR_DTYPE)
        np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
        indices = buf[nnz:2 * nnz].astype(INDEX_DTYPE, copy=False)
        vals = buf[2 * nnz:3 * nnz].view(self.dtype)
        return CSRBlock(shape=shape, indptr=indptr, indices=indices, data=vals), vals

    # ----------------------------------------------------------------- the loop
    def _replicate(self, name: str, X_loc: np.ndarray, r: int) -> np.ndarray:
        """All-gather column block u of all X rows along the fiber, in fiber order."""
        xs, _ = self._frames(name)
        ls, w = self._layer_starts[xs], self.local_width(r)
        counts = [int(ls[v + 1] - ls[v]) * w for v in range(self.c)]
        T = self._buffer(("T", name), (int(ls[-1]), w))
        self.fiber.allgatherv(X_loc, T, counts)
        return T

    def _reduce(self, name: str, T: np.ndarray, r: int, out: np.ndarray | None = None
                ) -> np.ndarray:
        """Reduce-scatter the X-side buffer T (fiber order) back to this fiber's blocks."""
        xs, _ = self._frames(name)
        ls, w, v = self._layer_starts[xs], self.local_width(r), self.grid.v
        counts = [int(ls[k + 1] - ls[k]) * w for k in range(self.c)]
        if out is None:
            out = np.empty((int(ls[v + 1] - ls[v]), w), dtype=self.dtype)
        self.fiber.reduce_scatter(T, out, counts)
        return out

    def _propagate(self, name: str, mode: str, vals: np.ndarray | None,
                   T: np.ndarray | None, Y: np.ndarray | None,
                   out: np.ndarray | None) -> np.ndarray:
        """q steps of local kernel + cyclic shift of the S blocks within the layer.

        ``mode`` "sddmm": the block carries partial dot products (T is X, Y the stationary Y
        block); returns the finished dot products of this rank's block in value order.
        "spmm_x": the block carries ``vals``; out (X side, fiber order) += S @ Y.
        "spmm_y": the block carries ``vals`` in transposed order; out (Y side) += S^T @ T.
        At step s rank u holds the block of layer position (u + s) mod q.
        """
        self._orientation(name)
        xs, ys = self._frames(name)
        u, v, c, q = self.grid.u, self.grid.v, self.c, self.q
        nnz = self._layer_nnz[name]
        yo = self.offsets[ys]
        ysz = [int(yo[t * c + v + 1] - yo[t * c + v]) for t in range(q)]
        ly = np.concatenate(([0], np.cumsum(ysz))).astype(np.int64)
        mx = int(self.offsets[xs][-1])
        frame = "csc" if mode == "spmm_y" else "csr"
        size = WORDS_PER_NONZERO * int(nnz.max(initial=0))
        cur = self._buffer("cur", (size,), self._pack_dtype)
        nxt = self._buffer("nxt", (size,), self._pack_dtype)
        self._pack(name, frame, None if mode == "sddmm" else vals, cur)
        ones = np.ones(int(nnz.max(initial=0)), dtype=self.dtype) if mode == "sddmm" else None
        # With overlap, SpMM steps send the block on while the kernel reads it; SDDMM must
        # finish accumulating before its block leaves.
        overlap = self.overlap and q > 1 and mode != "sddmm"
        left, right = (u - 1) % q, (u + 1) % q
        k = self.kernel
        for step in range(q):
            t, t_next = (u + step) % q, (u + step + 1) % q
            kt = int(nnz[t])
            send = cur[:WORDS_PER_NONZERO * kt]
            recv = nxt[:WORDS_PER_NONZERO * int(nnz[t_next])]
            reqs = self.layer.start_shift(send, recv, dest=left, source=right) if overlap else []
            ysl = slice(int(ly[t]), int(ly[t + 1]))
            with self.stats.timer("compute"):
                if frame == "csr":
                    blk, bv = self._unpack(cur, kt, (mx, ysz[t]))
                else:
                    blk, bv = self._unpack(cur, kt, (ysz[t], mx))
                if mode == "sddmm":
                    k.sddmm(blk, ones[:kt], T, Y[ysl], bv)
                elif mode == "spmm_x":  # the first step writes the accumulator
                    k.spmm_a(blk, bv, Y[ysl], out, accumulate=step > 0)
                else:  # S_t^T @ T, run as SpMMA on the transposed block that travelled; each
                    # step writes its own rows of out
                    k.spmm_a(blk, bv, T, out[ysl], accumulate=False)
            if q > 1:
                if overlap:
                    self.layer.finish(reqs)
                else:
                    self.layer.shift(send, recv, dest=left, source=right)
                cur, nxt = nxt, cur
        ku = int(nnz[u])
        return cur[2 * ku:3 * ku].view(self.dtype)

    # pieces expressed in an orientation's frame ------------------------------------------
    def _sddmm_in(self, name: str, X_loc, Y_loc, vals, r, T=None, out=None
                  ) -> tuple[np.ndarray, np.ndarray]:
        if T is None:
            T = self._replicate(name, X_loc, r)
        dots = self._propagate(name, "sddmm", None, T, Y_loc, None)
        return np.multiply(vals, dots, out=out), T

    def _spmm_x_in(self, name: str, Y_loc, vals, r, out=None) -> np.ndarray:
        xs, _ = self._frames(name)
        T_out = self._buffer(("T_out", name), (int(self.offsets[xs][-1]), self.local_width(r)))
        self._propagate(name, "spmm_x", vals, None, Y_loc, T_out)  # written by the first step
        return self._reduce(name, T_out, r, out)

    def _spmm_y_in(self, name: str, X_loc, vals, r, T=None, out=None) -> np.ndarray:
        if T is None:
            T = self._replicate(name, X_loc, r)
        _, ys = self._frames(name)
        if out is None:  # every step writes its own rows of out
            out = np.empty((self._local_rows(ys), self.local_width(r)), dtype=self.dtype)
        self._propagate(name, "spmm_y", vals, T, None, out)
        return out

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _check_strategy(self, strategy: str) -> None:
        require(strategy in STRATEGIES,
                f"unknown FusedMM strategy {strategy!r} for {self.name}; choose one of "
                f"{', '.join(STRATEGIES)} (local kernel fusion needs whole dense rows, which "
                "this algorithm splits by columns)")

    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | None = None) -> np.ndarray:
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

    # ----------------------------------------------------------------- the cost model
    # ----------------------------------------------------------------- the cost model
    @staticmethod
    def grid_allows(p: int, c: int) -> bool:
        """Whether p ranks form this family's grid with replication factor c: c | p."""
        return c >= 1 and p % c == 0

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
                    nnz: float | None = None, layer_nnz: dict[str, float] | None = None
                    ) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one operation. Not collective.

        Exact when p divides m and n and p/c divides r. The shifted nonzeros are
        ``layer_nnz["a"]`` (this rank's layer's column blocks of S, orientation "a") and
        ``layer_nnz["b"]`` (its row blocks, orientation "b"), as :meth:`shifted_nnz` reports
        for q > 1; missing entries default to ``nnz / c`` (balanced blocks). Returns
        ``{phase: {"words": w, "messages": k}}`` for replication, propagation and reduction.
        """
        require(op in OPS, f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        require(strategy in STRATEGIES, f"unknown strategy {strategy!r}")
        require(p % c == 0, f"c={c} does not divide p={p}")
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
                add("propagation", k * WORDS_PER_NONZERO * layer_nnz[name], k * shifts)

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


__all__ = ["STRATEGIES", "SparseShift15D"]
