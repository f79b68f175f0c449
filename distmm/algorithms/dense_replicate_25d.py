"""2.5D dense replicating algorithms (paper section V-C, Algorithm 2, Tables II-IV).

Grid and layout (Table II, third block)
---------------------------------------
p ranks form an s x s x c grid, s = sqrt(p/c) (p/c must be a perfect square); rank (i, j, k)
is row i, column j of layer k (:class:`~distmm.core.grid.ProcessGrid25D`). The rows of A (m) and of
B (n) are cut into s*c near-equal row blocks and the r columns into s near-equal column blocks
(``layout.block_offsets``; r >= s is required so that no rank holds an empty column block).
"Superblock" x of A (or B) is row blocks xc .. xc+c-1. S is cut into s row superblocks (those of
A) by s*c column blocks (the row blocks of B).

* A: rank (i, j, k) holds row block ic+k, column block j: Table II's owner (I // c, J, I % c)
  of block (I, J). A never moves except along the fiber.
* B: rank (i, j, k) holds row block ((i+j) mod s)c + k, column block j. This is Table II's
  layout with Algorithm 2's initial skew (line 4) applied once, at distribution time.
* S: rank (i, j, k) stores block (row superblock i, column block ((i+j) mod s)c + k): Table II's
  owner (I, J // c, J % c) with the skew of Algorithm 2 line 3 applied at distribution time.

Because B and S are stored pre-skewed, no skew is ever sent; the paper does not count the skew
either ("applications do not need to perform this initial shift if they fill the input and
output buffers appropriately"). Scatter/gather handle the layout, so callers never see it.

The loop (Algorithm 2), one function for every kernel (section IV-A)
-------------------------------------------------------------------
All-gather the "X" operand along the fiber (rank (i, j, k) then holds X superblock rows, column
block j), then run s Cannon steps inside the layer: apply the local kernel to the S block and the
"Y" block present, then cyclically shift the S block one way and the Y block along the processor
column (to (i-1, j), from (i+1, j)). After s steps every S and Y block is home again. Outputs:

* SDDMM: the partial dot products over column block j travel *with* the S block and accumulate
  as it visits the s ranks of its group, so they come home complete; the values of S are applied
  there, once (R = S(values) o sum_t A_t B_t^T; one elementwise product, O(nnz)).
* SpMM with an X-side output (SpMMA in orientation "a"): the X superblock accumulates locally and
  is reduce-scattered along the fiber at the end (Algorithm 2 line 22).
* SpMM with a Y-side output (SpMMB in orientation "a"): the output block travels with the Y
  shifts and arrives home complete; no reduction.

Two stored orientations of S
----------------------------
"a" (S; X = A, Y = B): the S block moves along the processor row (to (i, j-1), from (i, j+1)),
exactly as in Algorithm 2. At step t rank (i, j, k) holds S(superblock i, B block
((i+j+t) mod s)c + k) and that B block's column block j.

"b" (S^T; X = B, Y = A), for FusedMM with the roles of A and B interchanged (section IV-B). With
one fixed layout of A and B for all operations, X = B superblock (i+j) mod s is constant along
the wrapped anti-diagonals i + j = const of a layer, not along processor rows, so the S^T block
moves along the anti-diagonal (to (i-1, j+1), from (i+1, j-1)) while A moves along the column as
B does in "a". At step t rank (i, j, k) holds S^T(B superblock (i+j) mod s, A block
((i+t) mod s)c + k). It is still one cyclic shift of one block per step among s ranks: words
and messages are those of a row shift. (A row shift would need A or B stored in a second,
differently skewed layout and a re-layout per call, which the paper does not count either.)
"b" is built from "a" on first use (an all-to-all of the nonzeros, counted as "distribute");
after ``set_values`` its values are refreshed by one all-to-all of values (phase "values").

SDDMM, SpMMA and SpMMB use "a". FusedMM strategies (local kernel fusion is impossible here: A and
B are divided by columns, so no rank sees whole dot products, section IV-B and V-C):

* "none": SDDMM then SpMM, both in the output's own orientation ("a" for FusedMMA: all-gather
  A, 2s shifts of S and of B, reduce-scatter A; "b" for FusedMMB, mirrored).
* "reuse": replication reuse, the only elision the paper allows for this family. FusedMMA
  all-gathers B once and runs SDDMM then SpMMB in orientation "b": the output A travels with the
  Y shifts and arrives home, so there is no reduction. FusedMMB mirrors it in orientation "a".

Sparse blocks on the wire, and the paper's 3 words per nonzero
---------------------------------------------------------------
A moving S block is sent as one message of 3 words per nonzero, COO: local row, local column and
one value (the word is an int32 for float32 data, an int64 for float64 data; the value's bits are
carried in that word). The third word is S's value in SpMM and the partial SDDMM sum in SDDMM
(S's values are not needed while an SDDMM propagates: they are applied at home). This is the
paper's COO accounting exactly (section V-B, "each nonzero consists of three words"). Nonzeros
are sent in the block's CSR order, so the receiver rebuilds the CSR structure by a bincount of
the rows; only two packets are ever held, as the paper's memory analysis assumes. The nonzero
count of every block of the layer is learnt once (an all-gather at distribution time).

Words per rank (exact, counted by the wrapper)
----------------------------------------------
With m and n multiples of s*c, r a multiple of s, a = mr/p and b = nr/p (one dense block), and z
= the nonzeros of the s blocks this rank sends in one propagation loop (z = s nnz/p when the
blocks are balanced), every loop costs 3z + s*(dense block) words and 2s messages (s of S, s of
the dense block) when s > 1, and nothing when s = 1 (one rank per layer: the shift is a no-op):

    SDDMM, SpMMB:            replication (c-1)a;   propagation 3z + s b
    SpMMA:                   propagation 3z + s b;  reduction (c-1)a
    FusedMMA, "none":        replication (c-1)a;   propagation 2(3z + s b);  reduction (c-1)a
    FusedMMA, "reuse":       replication (c-1)b;   propagation 2(3z + s a)
    FusedMMB:                FusedMMA with m and n (a and b) interchanged.

Messages: c-1 per all-gather or reduce-scatter, 2s per loop. Reduction to Table III for
FusedMM with replication reuse, m = n, balanced blocks (z = s nnz/p = s phi nr/p) and s > 1:
since s/p = 1/sqrt(pc) and (c-1)/p = (c^(3/2) - c^(1/2)) / (sqrt(p) sqrt(pc)),

    words = 6 s phi nr/p + 2 s nr/p + (c-1) nr/p
          = nr/sqrt(pc) (6 phi + 2 + c^(3/2)/sqrt(p) - sqrt(c)/sqrt(p)),
    messages = 4 sqrt(p/c) + (c-1),

which is Table III's row "2.5D Dense Replicate, Repl. Reuse". "none" adds the reduce-scatter,
nr(c-1)/p words and c-1 messages, whose minimisation gives Table IV's c = (p(1+3phi)^2/4)^(1/3)
(reuse: (p(1+3phi)^2)^(1/3)). Differences from the paper's accounting: when s = 1 (c = p) the
4 sqrt(p/c) shifts are not sent; and every propagation loop resends the coordinates of S (the
paper's 6 phi = 2 loops x 3 words, so this matches). Local kernel dimensions are Table III's:
S blocks (m/s) x (n/(sc)) = (n sqrt(c)/sqrt(p)) x (n/sqrt(pc)), dense blocks (n/(sc)) x (r/s).

Multi-head calls (:mod:`distmm.algorithms.multivalue`: the multi-value SpMM, the multi-head
SDDMM) run the same loop once at width r = H F, with H value words per nonzero in each S
packet (S's H values, or the H partial dot products): 3z becomes (2 + H) z above, the dense
words unchanged (``exact_words(..., heads=H)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distmm.algorithms.model import FamilyModel, KernelCalls
from distmm.algorithms.multivalue import MultiHead
from distmm.algorithms.packets import (
    index_words,
    pack,
    packet_block,
    packet_heads,
    packet_values,
    word_dtype,
)
from distmm.algorithms.placement import Orientation
from distmm.algorithms.two_orientation import TwoOrientationAlgorithm
from distmm.core.aligned import aligned_copy
from distmm.core.comm import CountingComm
from distmm.core.coo import CooShare
from distmm.core.grid import ProcessGrid25D, fits_25d
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
PHASES = ("replication", "propagation", "reduction")


@dataclass
class _Loop:
    """What one rank needs to run the propagation loop of one orientation.

    ``step_nnz[t]`` / ``step_yrows[t]``: nonzeros of the S block and rows of the Y block this
    rank holds at step t; ``home_index``: the home block's COO coordinates as packet words
    (:func:`~distmm.algorithms.packets.index_words`); ``s_comm``, ``s_dest``, ``s_src``:
    where the S block goes and comes from.
    """

    step_nnz: np.ndarray
    step_yrows: np.ndarray
    home_index: np.ndarray
    s_comm: CountingComm
    s_dest: int
    s_src: int


class DenseReplicate25DModel(FamilyModel):
    """The cost model of :class:`DenseReplicate25D` (``DenseReplicate25D.model``): its grid and
    width rules, Table III/IV rows, kernel calls, exact words and memory (static methods)."""

    @staticmethod
    def orientation_of(op: str, strategy: str = "none") -> str:
        """The orientation of S ("a" or "b") whose blocks ``op`` shifts."""
        require(op in OPS, f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        if op == "fusedmm_a":
            return "b" if strategy == "reuse" else "a"
        if op == "fusedmm_b":
            return "a" if strategy == "reuse" else "b"
        return "a"

    # ----------------------------------------------------------------- the cost model
    grid_allows = staticmethod(fits_25d)

    @staticmethod
    def min_width(p: int, c: int) -> int:
        """The smallest dense width r a call may use: one column per grid column, sqrt(p/c)."""
        return math.isqrt(p // c)

    @staticmethod
    def table3(strategy: str, n: int, r: int, p: int, c: float,
               phi: float = 0.0) -> tuple[float, float]:
        """Table III, 2.5D dense replicating: (messages, words) per rank of one FusedMM."""
        nr = n * r
        repl = 2 if strategy == "none" else 1
        return (4 * math.sqrt(p / c) + repl * (c - 1),
                nr * ((6 * phi + 2) / math.sqrt(p * c) + repl * (c - 1) / p))

    @staticmethod
    def one_rank_layer_saving(strategy: str, n: int, r: int, p: int, c: float,
                              phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) of Table III's shifts, which a layer of one rank does not send."""
        return 4 * math.sqrt(p / c), n * r * (6 * phi + 2) / math.sqrt(p * c)

    @staticmethod
    def nonzero_visits(strategy: str, nnz: float, p: int, c: float) -> float:
        """Nonzeros one rank's kernels walk in one FusedMM: nnz/sqrt(pc) per kernel."""
        return 2 * nnz / math.sqrt(p * c)

    @staticmethod
    def table4_best_c(strategy: str, p: int, phi: float = 0.0) -> float:
        """Table IV, 2.5D dense replicating: the real c minimising Table III's words."""
        return (p * (1 + 3 * phi) ** 2 / (4 if strategy == "none" else 1)) ** (1 / 3)

    @staticmethod
    def local_calls(strategy: str, m: float, n: float, nnz: float, r: float, p: int,
                    c: int) -> list[KernelCalls]:
        """s steps per kernel on (m/s) x (n/(sc)) blocks of nnz/p nonzeros at width r/s; every
        block but the home one is rebuilt from its packet. "none": SDDMM + SpMMA; "reuse":
        SDDMM + SpMMB on S^T's (n/s) x (m/(sc)) blocks, whose transposes must be built for
        every block that arrived (s - 1 of s)."""
        s = math.isqrt(p // c)
        z, w = nnz / p, r / s
        rows, cols = (m / s, n / (s * c)) if strategy == "none" else (n / s, m / (s * c))
        out = []
        for kind in ("sddmm", "spmm_a" if strategy == "none" else "spmm_b"):
            out.append(KernelCalls(kind, 1, z, rows, cols, w))
            if s > 1:  # the other s - 1 blocks arrive as packets
                out.append(KernelCalls(kind, s - 1, z, rows, cols, w, unpacked=True,
                                       transposed=kind == "spmm_b"))
        return out

    @staticmethod
    def memory_bytes(op: str, strategy: str, m: int, n: int, nnz: float, r: int, p: int,
                     c: int, dtype=np.float32, overlap: bool = False,
                     local: dict[str, int] | None = None) -> Memory:
        """Bytes one rank holds for one ``op`` (see :mod:`distmm.core.memory`). Not collective.

        Per orientation used: the home CSR block (X superblock rows), its coordinates as wire
        words (2 a nonzero) and, where the call runs SpMMB on it, its cached transpose; the
        replicated X superblock or the X-side accumulator at width r/s; two packet buffers of
        3 words per nonzero of the largest block the rank sees and two dense buffers of the
        largest Y block (the same with or without overlap; one each when s = 1); the
        caller's dense blocks. Without ``local`` (:meth:`memory_counts`), the largest blocks
        of any rank and nnz/p nonzeros a block."""
        s, it = math.isqrt(p // c), np.dtype(dtype).itemsize
        word = word_dtype(dtype).itemsize
        k = merged({"rows_a": ceil_div(m, s * c), "rows_b": ceil_div(n, s * c),
                    "width": ceil_div(r, s), "super_a": ceil_div(m, s),
                    "super_b": ceil_div(n, s), "hcols_a": ceil_div(n, s * c),
                    "hcols_b": ceil_div(m, s * c), "ymax_a": ceil_div(n, s * c),
                    "ymax_b": ceil_div(m, s * c), "nnz_a": ceil_div(nnz, p),
                    "nnz_b": ceil_div(nnz, p), "zmax_a": ceil_div(nnz, p),
                    "zmax_b": ceil_div(nnz, p), "share": ceil_div(nnz, p)}, local)
        w = k["width"]
        used = modes(op, strategy)
        # Offsets of A's and B's row blocks and of the column blocks of r.
        parts = {"permutations": perm_bytes(m, n),
                 "bookkeeping": 16 * (s * c + 1) + 8 * (s + 1)}
        call: dict[str, int] = {}
        for o in sorted({"a"} | {o for o, _ in used}):
            parts[f"S {o}"] = csr_bytes(k[f"super_{o}"], k[f"nnz_{o}"], it) \
                + 2 * k[f"nnz_{o}"] * word
            parts["bookkeeping"] += 24 + 16 * s  # value offsets, column base, step sizes
        for o, mode in used:
            z, zmax, ymax = k[f"nnz_{o}"], k[f"zmax_{o}"], k[f"ymax_{o}"]
            sup = k[f"super_{o}"] * w * it
            if mode == "spmm_x":  # the superblock accumulator of the reduction
                parts["reduction"] = sup
            elif c > 1:  # a fiber of one rank replicates nothing: T is the block
                parts["replication"] = sup
            if mode == "spmm_x":
                call["MPI reduce-scatter"] = mpi_reduce_scatter_bytes(sup, c)
            parts["shift"] = min(s, 2) * (3 * zmax * word + ymax * w * it)
            block = unpack_bytes(k[f"super_{o}"], zmax, word) if s > 1 else 0
            if mode == "spmm_y":
                parts[f"S {o} transpose"] = transpose_bytes(k[f"hcols_{o}"], z)
                block += zmax * it + (transpose_bytes(ymax, zmax) + 16 * zmax
                                      if s > 1 else 0)
            call["unpacked block"] = max(call.get("unpacked block", 0), block)
            if mode == "sddmm":
                call["unit values"] = zmax * it
                if op.startswith("fusedmm"):
                    call["SDDMM result"] = z * it
        return two_orientation_memory(parts, call, k, used, op, w, it, k["nnz_a"], k["nnz_b"])

    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    nnz: float | None = None, shifted_nnz: float | None = None,
                    heads: int = 1) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one ``op`` (see module docstring).

        ``heads`` H > 1: a multi-head SDDMM or multi-value SpMM of width r
        (:mod:`distmm.algorithms.multivalue`), whose S packets carry H value words per
        nonzero: 2 + H words a shifted nonzero where one call has 3, the dense words
        unchanged.

        Exact when s*c divides m and n and s divides r (s = sqrt(p/c)). ``shifted_nnz`` is
        the number of nonzeros this rank sends in one propagation loop (its group's s blocks;
        :meth:`shifted_nnz`); without it the blocks are taken as balanced, s * nnz / p.
        Returns ``{phase: {"words": w, "messages": k}}`` for replication, propagation and
        reduction. Not collective.
        """
        require(op in OPS, f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        DenseReplicate25D._check_grid(p, c)
        s = math.isqrt(p // c)
        require(heads == 1 or op in ("sddmm", "spmm_a", "spmm_b"),
                f"{op} has no multi-head form")
        if op.startswith("fusedmm"):
            require(strategy in STRATEGIES,
                    f"unknown FusedMM strategy {strategy!r}; choose one of "
                    f"{', '.join(STRATEGIES)}")
        if op == "fusedmm_b":
            # FusedMMB is FusedMMA on the transposed problem (section IV-B).
            return DenseReplicate25DModel.exact_words("fusedmm_a", n, m, r, p, c, strategy, nnz,
                                                 shifted_nnz)
        if shifted_nnz is None:
            require(nnz is not None, "exact_words needs nnz or shifted_nnz")
            shifted_nnz = s * nnz / p
        a_blk, b_blk = m * r / p, n * r / p
        shifts = s if s > 1 else 0
        z = shifted_nnz if s > 1 else 0
        out = {ph: {"words": 0.0, "messages": 0} for ph in PHASES}

        def add(phase: str, words: float, msgs: int) -> None:
            out[phase]["words"] += words
            out[phase]["messages"] += msgs

        def loop(dense_blk: float, times: int = 1) -> None:
            add("propagation", times * ((2 + heads) * z + shifts * dense_blk),
                times * 2 * shifts)

        if op in ("sddmm", "spmm_b"):
            add("replication", (c - 1) * a_blk, c - 1)
            loop(b_blk)
        elif op == "spmm_a":
            loop(b_blk)
            add("reduction", (c - 1) * a_blk, c - 1)
        elif strategy == "none":
            add("replication", (c - 1) * a_blk, c - 1)
            loop(b_blk, 2)
            add("reduction", (c - 1) * a_blk, c - 1)
        else:
            add("replication", (c - 1) * b_blk, c - 1)
            loop(a_blk, 2)
        return out


class DenseReplicate25D(TwoOrientationAlgorithm):
    """S distributed for the 2.5D dense replicating algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks, replication factor ``c`` (p/c a perfect
    square) and dense width ``r`` (required: A and B are split into s = sqrt(p/c) column blocks,
    so r >= s). Every operation is collective over ``comm`` and takes/returns dense blocks in
    this object's distribution: rows ``dense_rows(side, rank)`` and columns
    ``dense_cols(side, rank)`` of A ("a", m x r) and B ("b", n x r).
    """

    name = "25d-dense-replicate"
    model = DenseReplicate25DModel
    strategies = STRATEGIES
    strategy_note = (" (local kernel fusion is not possible with this algorithm: A and B are "
                     "divided by columns, so no rank holds whole dot products; paper sections "
                     "IV-B, V-C)")
    supports_overlap = True
    splits_r = True
    grid_class = ProcessGrid25D

    def _setup(self, source: CooShare) -> None:
        s = self.s
        self._word = word_dtype(self.dtype)
        # S's packets (and column blocks of r) do not show a call's width: compare it first
        for comm in (self.layer, self.fiber, self.row, self.col):
            comm.sizes_show_width = False
        m, n = self.shape
        self.offsets = {"a": block_offsets(m, s * self.c), "b": block_offsets(n, s * self.c)}
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        self._o: dict[str, Orientation] = {}
        self._loops: dict[str, _Loop] = {}
        self._add_orientation("a", rows, cols, source.vals)

    # ----------------------------------------------------------------- grid positions
    def _xsuper(self, name: str, i, j):
        """The X superblock held (after replication) at layer position (i, j)."""
        return i if name == "a" else (i + j) % self.s

    def _yblock(self, name: str, i, j, t):
        """Layer index of the Y block at (i, j) in step t (global block: that * c + k)."""
        return (i + j + t) % self.s if name == "a" else (i + t) % self.s

    def _member(self, name: str, i, j, t):
        """Layer position whose home S block sits at (i, j) in step t."""
        s = self.s
        return (i, (j + t) % s) if name == "a" else ((i + t) % s, (j - t) % s)

    # ----------------------------------------------------------------- layout
    def _owner(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """World rank storing each S entry (given in S's frame) in orientation ``name``."""
        ab = block_of(rows, self.offsets["a"])
        bb = block_of(cols, self.offsets["b"])
        c, s = self.c, self.s
        if name == "a":  # S(A superblock i, B block Jc+k) on (i, (J - i) mod s, k)
            i, big_j, k = ab // c, bb // c, bb % c
            j = (big_j - i) % s
        else:  # S^T(B superblock d, A block ic+k) on (i, (d - i) mod s, k)
            i, k, d = ab // c, ab % c, bb // c
            j = (d - i) % s
        return np.asarray(self.grid.world_rank(i, j, k), dtype=np.int64)

    def _home(self, name: str) -> tuple[int, int, int, int]:
        """(row_base, nrows, col_base, ncols) of this rank's home block, orientation frame."""
        xs, ys = self._frames(name)
        i, j, k, c = self.grid.i, self.grid.j, self.grid.k, self.c
        xo, yo = self.offsets[xs], self.offsets[ys]
        x = self._xsuper(name, i, j)
        y = self._yblock(name, i, j, 0) * c + k
        return (int(xo[x * c]), int(xo[x * c + c] - xo[x * c]), int(yo[y]),
                int(yo[y + 1] - yo[y]))

    def _layout(self, name: str):
        row_base, nrows, col_base, ncols = self._home(name)

        def layout(rows: np.ndarray, cols: np.ndarray):
            x, y = (rows, cols) if name == "a" else (cols, rows)
            t = np.zeros(x.size, dtype=np.int64)
            return (t, x - row_base, y - col_base, 1, [(nrows, ncols)], row_base,
                    np.array([col_base], dtype=np.int64))

        return layout

    def _add_orientation(self, name: str, rows, cols, vals) -> None:
        """Place S in orientation ``name`` and learn the layer's block sizes (collective)."""
        o = self.placement.place(name, self._owner(name, rows, cols), rows, cols, vals,
                        self._layout(name))
        self._o[name] = o
        home = o.blocks[0]
        s, c = self.s, self.c
        table = np.empty(s * s, dtype=np.int64)
        self.layer.allgatherv(np.array([home.nnz], dtype=np.int64), table, [1] * (s * s),
                              phase="distribute")
        i, j, k = self.grid.i, self.grid.j, self.grid.k
        yo = self.offsets[self._frames(name)[1]]
        step_nnz = np.empty(s, dtype=np.int64)
        step_yrows = np.empty(s, dtype=np.int64)
        for t in range(s):
            mi, mj = self._member(name, i, j, t)
            step_nnz[t] = table[mi * s + mj]
            y = self._yblock(name, i, j, t) * c + k
            step_yrows[t] = yo[y + 1] - yo[y]
        if name == "a":
            s_comm, dest, src = self.row, (j - 1) % s, (j + 1) % s
        else:
            s_comm = self.layer
            dest = ((i - 1) % s) * s + (j + 1) % s
            src = ((i + 1) % s) * s + (j - 1) % s
        self._loops[name] = _Loop(step_nnz, step_yrows,
                                  index_words(home.row_ids(), home.indices, self.dtype), s_comm,
                                  dest, src)

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        """Global permuted rows of ``side``'s block on ``rank``: A row block ic+k, B row block
        ((i+j) mod s)c+k (pre-skewed). Not collective."""
        i, j, k = self.grid.position(rank)
        x = i if side == "a" else (i + j) % self.s
        return block_range(self.offsets[side], x * self.c + k)

    def r_rule(self) -> tuple[int, str]:
        """r >= s = sqrt(p/c): the s columns of a layer each hold one column block of r."""
        low = self.model.min_width(self.p, self.c)
        return low, (
            f"A and B are split into s = sqrt(p/c) = {low} column blocks, one per grid "
            "column; use a larger r or a larger c")

    def _col_blocks(self) -> int:
        return self.s

    def _col_block(self, rank: int) -> int:
        """Column block j (Table II), the same for A and B."""
        return int(self.grid.position(rank)[1])

    def _build_b(self, rows, cols, vals) -> None:
        self._add_orientation("b", rows, cols, vals)

    def _describe(self) -> dict:
        return {"s": self.s,
                "layout": "A per Table II; B and S stored with Algorithm 2's initial skew"}

    # ----------------------------------------------------------------- the loop (Algorithm 2)
    def _fiber_rows(self, name: str) -> np.ndarray:
        """Rows of the fiber's X blocks: X superblock x is row blocks xc .. xc + c - 1."""
        x, c = self._xsuper(name, self.grid.i, self.grid.j), self.c
        return np.diff(self.offsets[self._frames(name)[0]])[x * c:(x + 1) * c]

    def _propagate(self, name: str, mode: str, third: np.ndarray, T: np.ndarray | None,
                   Y_loc: np.ndarray | None, r: int, T_out: np.ndarray | None = None,
                   result: np.ndarray | None = None, multi: MultiHead | None = None
                   ) -> tuple[np.ndarray, np.ndarray | None]:
        """s Cannon steps: local kernel, then shift the S block and the Y block (propagation).

        ``third`` is the third COO word of the home block's nonzeros at the start: S's values
        for SpMM, zeros for SDDMM (the partial sums). ``mode``: "sddmm" (T and Y_loc in),
        "spmm_x" (Y_loc in, T_out accumulates the X superblock) or "spmm_y" (T in; the Y
        block is the output and travels). Returns (third word of the home block after the
        loop, a view valid until the next call; this rank's Y output block for "spmm_y",
        written into ``result`` when given, or None).
        With ``multi`` (a multi-head call, :mod:`distmm.algorithms.multivalue`) the S block
        carries H value words per nonzero in the same message (``third`` (H, nnz) or 0; the
        partial sums (nnz, H)), and each step runs the multi-head kernels on the column
        block j cut into head segments; the dense blocks are those of one call.
        """
        o = self._orientation(name)
        lp = self._loops[name]
        home, s, w, dt = o.blocks[0], self.s, self.local_width(r), self.dtype
        z, yrows = lp.step_nnz, lp.step_yrows
        z0 = int(z[0])
        heads = 0 if multi is None else multi.heads
        per_nz = 3 if multi is None else 2 + heads
        cur = self._kernels.buffer("cur", (per_nz * int(z.max()),), self._word)
        # A layer of one rank (s = 1) shifts nothing, so it needs no receive buffers.
        nxt = self._kernels.buffer("nxt", (per_nz * int(z.max()),), self._word) if s > 1 else cur
        pack(cur, lp.home_index, third, dt, heads=heads)
        ycur = self._kernels.buffer("ycur", (int(yrows.max()), w))
        ynxt = self._kernels.buffer("ynxt", (int(yrows.max()), w)) if s > 1 else ycur
        if mode != "spmm_y":  # an output Y block is written by the first step's kernel
            ycur[:yrows[0]] = Y_loc
        ones = np.ones(int(z.max()), dtype=dt) if mode == "sddmm" else None
        i = self.grid.i
        up, down = (i - 1) % s, (i + 1) % s
        # Overlap: a block the kernel only reads is sent on before the kernel runs; a block it
        # writes (SDDMM's partial sums travelling with S, SpMMB's output Y) after.
        pre_s = self.overlap and s > 1 and mode != "sddmm"
        pre_y = self.overlap and s > 1 and mode != "spmm_y"
        for step in range(s):
            zs, ys = int(z[step]), int(yrows[step])
            nz, ny = int(z[(step + 1) % s]), int(yrows[(step + 1) % s])
            vals = packet_values(cur, zs, dt)
            Yb = ycur[:ys]
            reqs = []
            if pre_s:
                reqs += lp.s_comm.start_shift(cur[:per_nz * zs], nxt[:per_nz * nz],
                                              dest=lp.s_dest, source=lp.s_src)
            if pre_y:
                reqs += self.col.start_shift(ycur[:ys], ynxt[:ny], dest=up, source=down)
            # A block that arrived is a new object at every step: its kernel call is prepared
            # each time (key None); only the kernel's own time is "compute".
            blk = home if step == 0 else packet_block(cur, zs, (home.shape[0], ys), vals)
            if multi is not None:  # every head, one pass; the first SpMM step writes
                hv = packet_heads(cur, zs, heads, dt, edge_major=mode == "sddmm")
                if mode == "sddmm":
                    multi.sddmm(blk, T, Yb, hv)
                elif mode == "spmm_x":
                    multi.spmm("spmm_multi_a", blk, hv, Yb, T_out, accumulate=step > 0)
                else:
                    multi.spmm("spmm_multi_b", blk, hv, T, Yb, accumulate=step > 0)
            elif mode == "sddmm":
                self._kernels.run(None, (), "sddmm", blk, ones[:zs], T, Yb, vals)
            elif mode == "spmm_x":
                self._kernels.run(None, (), "spmm_a", blk, vals, Yb, None, T_out,
                                 accumulate=step > 0)
            else:
                self._kernels.run(None, (), "spmm_b", blk, vals, T, None, Yb,
                                 accumulate=step > 0)
            if s > 1:
                if not pre_s:
                    reqs += lp.s_comm.start_shift(cur[:per_nz * zs], nxt[:per_nz * nz],
                                                  dest=lp.s_dest, source=lp.s_src)
                if not pre_y:
                    reqs += self.col.start_shift(ycur[:ys], ynxt[:ny], dest=up, source=down)
                self.col.finish(reqs)
                cur, nxt = nxt, cur
                ycur, ynxt = ynxt, ycur
        out_third = packet_values(cur, z0, dt) if multi is None else \
            packet_heads(cur, z0, heads, dt, edge_major=True)
        if mode != "spmm_y":
            return out_third, None
        if result is None:
            return out_third, aligned_copy(ycur[:yrows[0]])  # ycur is reused by the next call
        result[...] = ycur[:yrows[0]]
        return out_third, result

    # pieces expressed in an orientation's frame ------------------------------------------
    def _sddmm_in(self, name: str, X_loc, Y_loc, vals, r, T=None, out=None,
                  multi: MultiHead | None = None):
        if T is None:
            T = self._replicate(name, X_loc)
        partial, _ = self._propagate(name, "sddmm", 0.0, T, Y_loc, r, multi=multi)
        # R = S(vals) o (sum over the s column blocks of A_t B_t^T), per head with multi
        return np.multiply(partial, vals if multi is None else vals[:, None], out=out), T

    def _spmm_x_in(self, name: str, Y_loc, vals, r, out=None, multi: MultiHead | None = None):
        o = self._orientation(name)
        T_out = self._kernels.buffer(("T_out", name), (o.blocks[0].shape[0], self.local_width(r)))
        # written by step 0
        self._propagate(name, "spmm_x", vals, None, Y_loc, r, T_out, multi=multi)
        return self._reduce(name, T_out, out)

    def _spmm_y_in(self, name: str, X_loc, vals, r, T=None, out=None,
                   multi: MultiHead | None = None):
        if T is None:
            T = self._replicate(name, X_loc)
        return self._propagate(name, "spmm_y", vals, T, None, r, result=out, multi=multi)[1]

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | str | None = None) -> np.ndarray:
        # FusedMMB(A, B, S) = FusedMMA(B, A, S^T): swap roles and orientations (IV-B).
        same, other = ("a", "b") if side == "a" else ("b", "a")
        X, Y = (A_loc, B_loc) if side == "a" else (B_loc, A_loc)
        if strategy == "none":
            R, _ = self._sddmm_in(same, X, Y, self._values_for(same, values), r)
            return self._spmm_x_in(same, Y, R, r, out)
        R, T = self._sddmm_in(other, Y, X, self._values_for(other, values), r)
        return self._spmm_y_in(other, None, R, r, T=T, out=out)

    # ----------------------------------------------------------------- communication model

    def shifted_nnz(self, op: str, strategy: str = "none") -> int:
        """Nonzeros this rank sends in one propagation loop of ``op`` (0 when s = 1).

        Collective when it has to build the transposed orientation; pass the result to
        :meth:`exact_words` as ``shifted_nnz``."""
        lp = self._loops.get(self.model.orientation_of(op, strategy))
        if lp is None:
            self._orientation("b")
            lp = self._loops["b"]
        return int(lp.step_nnz.sum()) if self.s > 1 else 0

    def _exact_counts(self, op: str, strategy: str) -> dict:
        return {"shifted_nnz": self.shifted_nnz(op, strategy)}

    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's block sizes for :meth:`memory_bytes` (orientations built so far)."""
        out = {"rows_a": self._local_rows("a"), "rows_b": self._local_rows("b"),
               "width": self.local_width(r)}
        for o, orient in self._o.items():
            home, lp = orient.blocks[0], self._loops[o]
            out.update({f"super_{o}": home.shape[0], f"hcols_{o}": home.shape[1],
                        f"nnz_{o}": orient.nnz, f"zmax_{o}": int(lp.step_nnz.max()),
                        f"ymax_{o}": int(lp.step_yrows.max())})
        return out



__all__ = ["DenseReplicate25D"]
