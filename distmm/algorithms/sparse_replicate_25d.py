"""2.5D sparse replicating algorithms (paper section V-D; Table II fourth block; Table III row
"2.5D Sparse Replicate, No Elision"; Table IV last row).

Grid: s x s x c with s = sqrt(p/c) (:class:`ProcessGrid25D`); p/c must be a perfect square.
Rank (i, j, k) sits in row i, column j of layer k. Each layer runs Cannon's algorithm on its
s x s square, with S stationary and both dense matrices shifting; the layers share S's sparsity
pattern and split the dense width r among themselves.

Layout (paper Table II, in the form this module implements; see "Differences" below):
  * S (m x n) is cut into s x s blocks by rows (``block_offsets(m, s)``) and columns
    (``block_offsets(n, s)``). Block (I, J) lives on (I, J, *): every rank of the fiber (I, J)
    stores the block's coordinates (one CSR structure, identical on the c ranks).
    The block's values are sharded along the fiber: with the block's nonzeros in CSR order
    (row-major, sorted by (row, column) in the permuted frame), rank (I, J, k) owns the k-th of
    c near-equal contiguous pieces (``block_offsets(nnz_block, c)``). That piece, in that
    order, is the rank's *value order*: ``values``, ``set_values``, SDDMM results and the
    ``values=`` arguments of SpMM all use it (``value_coordinates`` names its coordinates).
  * r is cut into s*c = sqrt(pc) near-equal column blocks (``block_offsets(r, s*c)``); column
    block g = k*s + l is the l-th of the s column blocks of layer k, so layer k works with
    columns [co[k s], co[(k+1) s]) of r only. This is the sentence of section V-D: the
    algorithm "divides the dense embedding matrices into successively more block columns as c
    increases" (sqrt(pc) of them, against sqrt(p/c) for the dense replicating algorithm).
  * A (m x r): row block I (the rows of S's row block I) times column block g = k*s + l is
    held by rank (I, (l - I) mod s, k). B (n x r): row block J times column block k*s + l is
    held by rank ((l - J) mod s, J, k). So rank (i, j, k) holds A[rows i, block k*s+(i+j)%s]
    and B[rows j, block k*s+(i+j)%s], mr/p and nr/p words when everything divides. These are
    the blocks Cannon's algorithm needs at its first step: the inputs are kept pre-skewed in the
    distribution, so no initial skew is ever sent (section V-C: "applications do not need to
    perform this initial shift if they fill the input and output buffers appropriately").

The loop (Algorithm 2 with S stationary, section IV-A's unified form): at step t = 0..s-1 rank
(i, j, k) holds A[i, l] and B[j, l] with l = (i + j + t) mod s, applies the local kernel to its
S block, then shifts its A block one place left along its row (to (i, j-1), from (i, j+1)) and
its B block one place up its column (to (i-1, j), from (i+1, j)). After s steps every block is
home again, so outputs come back in the distribution the inputs came in.
  * SDDMM: A and B are inputs. Each layer accumulates the partial dot products over its own
    columns of r for all nonzeros of its block (kernel ``sddmm`` with unit values); the partial
    sums are reduce-scattered along the fiber (each rank receives its 1/c share), and each rank
    then scales its share by its own share of S's values. The scaling after the reduction is
    the post-multiplication of section IV-A and needs no communication; it is the one piece of
    local arithmetic not done by the node model (an elementwise product of nnz/p values).
  * SpMMA / SpMMB: the values are all-gathered along the fiber first (every layer needs all
    values of its block), then the input dense matrix shifts and the output accumulator (zeros
    in the home block's shape) shifts with it, collecting S_IJ B_J (resp. S_IJ^T A_I) from every
    rank it visits; after s shifts it is home with the finished block.
  * FusedMM, strategy "none" (the only one: section V-D, "Because this algorithm does not
    replicate dense matrices, it cannot benefit from communication elision"): SDDMM with S's
    values, then SpMMA (FusedMMA) or SpMMB (FusedMMB) on the result.
Only one orientation of S is stored: SpMMB uses the kernel's ``spmm_b`` on the same block (its
cached transposed structure), so no S^T is ever redistributed. With ``overlap=True`` the input
shifts are posted before the local kernel and completed after it (the kernel only reads those
blocks); output accumulators are always shifted after the kernel that updates them. Overlap
changes no count.

Words sent per rank (value words count one word per value: the coordinates never move after
distribution, section V-D), for rank (i, j, k) with m_i, n_j rows in its A and B blocks, r_k
columns in its layer, block nonzeros Z and own share z_k (see :meth:`exact_words`):
    SDDMM:        propagation (m_i + n_j) r_k in 2s messages; reduction Z - z_k in c-1 msgs
    SpMMA, SpMMB: replication (c-1) z_k in c-1 messages; propagation (m_i + n_j) r_k in 2s
    FusedMM none: replication (c-1) z_k; propagation 2 (m_i + n_j) r_k in 4s messages;
                  reduction Z - z_k
With m = n, s | n, sc | r, uniform blocks (Z = nnz c/p) and c | Z this is, for FusedMM,
    words    = 4 nr/sqrt(pc) + 2 (c-1) nnz/p = nr/sqrt(p) (4/sqrt(c) + 2 phi (c-1)/sqrt(p))
    messages = 4 sqrt(p/c) + 2 (c-1)
against Table III's nr/sqrt(p) (4/sqrt(c) + 3 phi (c-1)/sqrt(p)) and 4 sqrt(p/c) + 3 (c-1).
Representation: S's coordinates are stored once per rank at distribution (phase
"distribute"); afterwards only values travel, one word each. The paper's 3 words per nonzero
(COO) apply only to algorithms that shift S, so they do not enter these formulas.

Differences from the paper, and why:
  * One value collective fewer. Section V-D describes "an initial all-gather to accumulate the
    sparse matrix values at each layer, and an all-reduce (reduce-scatter + all-gather) between
    the SDDMM and SpMM calls": 3 (c-1) nnz/p words. Here SDDMM needs no all-gather of S's
    values, because each layer reduces unscaled partial dot products and every rank scales
    only its own share afterwards (section IV-A's post-multiplication); the SpMM all-gather is
    the second half of the paper's all-reduce. So FusedMM sends (c-1) nnz/p words and c-1
    messages fewer than Table III; the dense-shift term is identical.
  * When c = p a layer holds a single rank (s = 1): a "cyclic shift" is a local no-op that
    sends nothing, whereas Table III's 4/sqrt(c) term still counts it (as in costmodel's
    note for the 1.5D family).
  * Table II's printed grid shapes for this algorithm (A: p x sqrt(p/c) blocks with owner
    (i/c, j, i%c); B: sqrt(p/c) x p with owner (i, j/c, j%c)) do not map onto an s x s x c grid
    (i/c ranges over p/c values, not s), and Table III's local B dimension n/sqrt(pc) x
    r sqrt(c)/sqrt(p) is not the column count of its own local S (n sqrt(c)/sqrt(p)), so a local
    kernel could not multiply them. The layout above keeps Table III's local S dimensions and
    the same nr/p words per dense block, with B's local block n/s x r/(sc): rows that match
    S's columns, and r cut sqrt(pc) ways as section V-D's prose says.
  * Every operation performs s shifts of each dense matrix, as Algorithm 2 does; the last
    shift of an *input* only returns a copy the caller still holds (3 of the 4s FusedMM shifts
    could be skipped). They are kept so the counts match the paper's 4 sqrt(p/c).

Multi-head calls (:mod:`distmm.algorithms.multivalue`: the multi-value SpMM, the multi-head
SDDMM) run the same Cannon loop once at width r = H F; the fiber's all-gather of S's values
(SpMM) or reduce-scatter of the partial dot products (SDDMM) carries H words per nonzero in
its c - 1 messages: (c-1) z_k becomes H (c-1) z_k and Z - z_k becomes H (Z - z_k) above
(``exact_words(..., heads=H)``).
"""

from __future__ import annotations

import math

import numpy as np

from distmm.algorithms.base import DistributedMatrix, Orientation
from distmm.algorithms.model import FamilyModel, KernelCalls
from distmm.algorithms.multivalue import MultiHead
from distmm.core.aligned import aligned_copy
from distmm.core.coo import CooShare
from distmm.core.grid import ProcessGrid25D, fits_25d
from distmm.core.layout import block_of, block_offsets, block_range
from distmm.core.memory import (
    OPS,
    Memory,
    ceil_div,
    csr_bytes,
    merged,
    mpi_reduce_scatter_bytes,
    operand_bytes,
    perm_bytes,
    place_bytes,
    transpose_bytes,
)
from distmm.errors import require

STRATEGIES = ("none",)


class SparseReplicate25DModel(FamilyModel):
    """The cost model of :class:`SparseReplicate25D` (``SparseReplicate25D.model``): its grid and
    width rules, Table III/IV rows, kernel calls, exact words and memory (static methods)."""

    # ----------------------------------------------------------------- cost model
    # ----------------------------------------------------------------- the cost model
    grid_allows = staticmethod(fits_25d)

    @staticmethod
    def min_width(p: int, c: int) -> int:
        """The smallest dense width r a call may use: one column per layer and grid column,
        sqrt(pc) = s c."""
        return math.isqrt(p // c) * c

    @staticmethod
    def table3(strategy: str, n: int, r: int, p: int, c: float,
               phi: float = 0.0) -> tuple[float, float]:
        """Table III, 2.5D sparse replicating: (messages, words) per rank of one FusedMM."""
        nr = n * r
        return (4 * math.sqrt(p / c) + 3 * (c - 1),
                nr / math.sqrt(p) * (4 / math.sqrt(c) + 3 * phi * (c - 1) / math.sqrt(p)))

    @staticmethod
    def one_rank_layer_saving(strategy: str, n: int, r: int, p: int, c: float,
                              phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) of Table III's shifts, which a layer of one rank does not send."""
        return 4 * math.sqrt(p / c), n * r * 4 / math.sqrt(p * c)

    @staticmethod
    def departure(strategy: str, n: int, r: int, p: int, c: float,
                  phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) distmm does not send that Table III counts: SDDMM reduces
        unscaled partial dot products and scales afterwards (section IV-A), which saves the
        initial all-gather of S's values."""
        return c - 1, (c - 1) * phi * n * r / p

    @staticmethod
    def nonzero_visits(strategy: str, nnz: float, p: int, c: float) -> float:
        """Nonzeros one rank's kernels walk in one FusedMM: its block's nnz c/p, s times."""
        return 2 * nnz * math.sqrt(c / p)

    @staticmethod
    def table4_best_c(strategy: str, p: int, phi: float = 0.0) -> float:
        """Section V-D's c = p^(1/3) (2 / (3 phi))^(2/3), which minimises Table III's words.
        Table IV prints (p / (2 phi / 3)^2)^(1/3), with the fraction inverted: a typo."""
        return p ** (1 / 3) * (2 / (3 * phi)) ** (2 / 3)

    @staticmethod
    def local_calls(strategy: str, m: float, n: float, nnz: float, r: float, p: int,
                    c: int) -> list[KernelCalls]:
        """s steps per kernel on the stationary (m/s) x (n/s) block of nnz c/p nonzeros at
        width r/sqrt(pc): SDDMM + SpMMA."""
        s = math.isqrt(p // c)
        z, w = nnz * c / p, r / (s * c)
        return [KernelCalls(kind, s, z, m / s, n / s, w) for kind in ("sddmm", "spmm_a")]

    @staticmethod
    def memory_bytes(op: str, strategy: str, m: int, n: int, nnz: float, r: int, p: int,
                     c: int, dtype=np.float32, overlap: bool = False,
                     local: dict[str, int] | None = None) -> Memory:
        """Bytes one rank holds for one ``op`` (see :mod:`distmm.core.memory`). Not collective.

        The stationary block's structure (shared by the fiber's c ranks, each holding it
        whole) with its unit weights, the rank's 1/c share of the values, the partial dot
        products (SDDMM) or all of the block's values (SpMM), the block's cached transpose
        for SpMMB, two A and two B buffers at the layer's widest column block (the same with
        or without overlap; one each when s = 1), the caller's dense blocks. Without ``local``
        (:meth:`memory_counts`), the largest blocks of any rank and nnz c/p nonzeros a
        block."""
        s, it = math.isqrt(p // c), np.dtype(dtype).itemsize
        k = merged({"rows_a": ceil_div(m, s), "rows_b": ceil_div(n, s),
                    "width": ceil_div(r, s * c), "wmax": ceil_div(r, s * c),
                    "block": ceil_div(nnz * c, p), "nnz_a": ceil_div(ceil_div(nnz * c, p), c),
                    "share": ceil_div(nnz, p)}, local)
        z, own, w = k["block"], k["nnz_a"], k["width"]
        kinds = {"sddmm": ["sddmm"], "spmm_a": ["spmm_a"], "spmm_b": ["spmm_b"],
                 "fusedmm_a": ["sddmm", "spmm_a"], "fusedmm_b": ["sddmm", "spmm_b"]}[op]
        # Offsets of the row and column blocks of S, of r's column blocks, of the value
        # shares; the block's value offsets and column base.
        parts = {"permutations": perm_bytes(m, n),
                 "bookkeeping": 16 * (s + 1) + 8 * (s * c + 1) + 8 * (c + 1) + 24,
                 "S": csr_bytes(k["rows_a"], z, it) + own * it,
                 "shift": min(s, 2) * (k["rows_a"] + k["rows_b"]) * k["wmax"] * it}
        call: dict[str, int] = {}
        if "sddmm" in kinds:
            parts["reduction"] = z * it  # the partial dot products
            call["MPI reduce-scatter"] = mpi_reduce_scatter_bytes(z * it, c)
            if op.startswith("fusedmm"):
                call["SDDMM result"] = own * it
        if kinds[-1] != "sddmm":
            parts["replication"] = z * it  # all of the block's values
        if "spmm_b" in kinds:
            parts["S transpose"] = transpose_bytes(k["rows_b"], z)
            call["kernel values"] = z * it
        parts.update(operand_bytes(op, k["rows_a"], k["rows_b"], w, own, it))
        # Each entry goes to the c ranks of its fiber: the share (24 bytes) and its permuted
        # rows, columns and block (24) once, its owners and routed copies (32) c times.
        dist = place_bytes(c * k["share"], z, z, it, kept=(48 + 32 * c) / c)
        return Memory(parts, call, dist + parts["permutations"])

    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    *, block_nnz: float | None = None, nnz: float | None = None,
                    i: int | None = None, j: int | None = None, k: int | None = None,
                    heads: int = 1) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one call of ``op``.

        ``heads`` H > 1: a multi-head SDDMM or multi-value SpMM of width r
        (:mod:`distmm.algorithms.multivalue`): the fiber's all-gather of S's values (SpMM)
        or reduce-scatter of the partial dot products (SDDMM) carries H words per nonzero,
        in the same c - 1 messages; the dense shifts are those of one call.

        ``op`` is one of sddmm, spmm_a, spmm_b, fusedmm_a, fusedmm_b (strategy "none").
        ``block_nnz`` is the nonzero count of the rank's S block (shared by its fiber); with
        only ``nnz`` (all of S's nonzeros) it is taken as nnz*c/p, uniform blocks. Needed when
        c > 1. With the grid position (i, j, k) the result is exact for that rank for any sizes;
        without it, m/s, n/s, r/c and block_nnz/c stand for the rank's A rows, B rows, layer
        columns and value share (exact when they divide). Returns ``{phase: {"words",
        "messages"}}`` for replication, propagation and reduction.
        """
        require(op in OPS, f"unknown op {op!r}; choose one of {', '.join(OPS)}")
        require(strategy in STRATEGIES, f"unknown strategy {strategy!r}")
        SparseReplicate25D._check_grid(p, c)
        require(heads == 1 or op in ("sddmm", "spmm_a", "spmm_b"),
                f"{op} has no multi-head form")
        s = math.isqrt(p // c)
        if block_nnz is None and nnz is not None:
            block_nnz = nnz * c / p
        require(block_nnz is not None or c == 1,
                "exact_words needs block_nnz (or nnz) to count the value collectives when c > 1")
        block_nnz = 0 if block_nnz is None else block_nnz
        if i is None or j is None or k is None:
            mi, nj, rk, own = m / s, n / s, r / c, block_nnz / c
        else:
            mo, no, co = block_offsets(m, s), block_offsets(n, s), block_offsets(r, s * c)
            vo = block_offsets(int(block_nnz), c)
            mi, nj = int(mo[i + 1] - mo[i]), int(no[j + 1] - no[j])
            rk, own = int(co[(k + 1) * s] - co[k * s]), int(vo[k + 1] - vo[k])
        shifts = s if s > 1 else 0
        fiber_msgs = c - 1
        rounds = 2 if op.startswith("fusedmm") else 1
        prop = {"words": rounds * (mi + nj) * rk if shifts else 0,
                "messages": rounds * 2 * shifts}
        repl = {"words": 0, "messages": 0}
        red = {"words": 0, "messages": 0}
        if op != "sddmm":
            repl = {"words": heads * (c - 1) * own, "messages": fiber_msgs}
        if op in ("sddmm", "fusedmm_a", "fusedmm_b"):
            red = {"words": heads * (block_nnz - own), "messages": fiber_msgs}
        return {"replication": repl, "propagation": prop, "reduction": red}


class SparseReplicate25D(DistributedMatrix):
    """S distributed for the 2.5D sparse replicating algorithm; SDDMM, SpMM and FusedMM on it.

    Construction is collective over ``comm`` (p ranks), with replication factor ``c`` (p/c
    must be a perfect square) and the dense width ``r`` (required: A and B are split by
    columns; r >= sqrt(pc)). Every operation is collective and takes/returns dense blocks in
    this object's distribution: rank (i, j, k) holds rows ``dense_rows(side, rank)`` and
    columns ``dense_cols(side, rank)`` of A ("a", m x r) and of B ("b", n x r). Values of S are
    in this rank's value order (its 1/c share of its fiber's block; see the module docstring).
    """

    name = "25d-sparse-replicate"
    model = SparseReplicate25DModel
    strategies = STRATEGIES
    strategy_note = (" (it replicates no dense matrix, so neither replication reuse nor local "
                     "kernel fusion applies: paper section V-D)")
    supports_overlap = True
    splits_r = True
    grid_class = ProcessGrid25D

    def _setup(self, source: CooShare) -> None:
        g, c, s = self.grid, self.c, self.s
        m, n = self.shape
        self.offsets = {"a": block_offsets(m, s), "b": block_offsets(n, s)}
        # S's packets (and column blocks of r) do not show a call's width: compare it first
        for comm in (self.layer, self.fiber, self.row, self.col):
            comm.sizes_show_width = False

        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        pos = block_of(rows, self.offsets["a"]) * s + block_of(cols, self.offsets["b"])
        owners = np.concatenate([g.world_rank(pos // s, pos % s, k)
                                 for k in range(c)]).astype(np.int64)
        rep = (np.tile(rows, c), np.tile(cols, c), np.tile(source.vals, c))
        self._o: Orientation = self.placement.place("a", owners, *rep, self._layout())
        self._S = self._o.blocks[0]
        self._nnz_block = self._o.nnz
        self._vo = block_offsets(self._nnz_block, c)
        self._counts = [int(x) for x in np.diff(self._vo)]
        self._own = slice(int(self._vo[g.k]), int(self._vo[g.k + 1]))
        self._vals = self._o.values[self._own].copy()
        # The block keeps only its structure: its data become the unit weights SDDMM uses, so
        # no stale full copy of S's values lingers (they live in the fiber shares).
        self._ones = np.ones(self._nnz_block, dtype=self.dtype)
        self._S.data = self._o.values = self._ones

    # ----------------------------------------------------------------- layout
    def _layout(self):
        g = self.grid
        mo, no = self.offsets["a"], self.offsets["b"]
        row_base, col_base = int(mo[g.i]), int(no[g.j])
        shape = (int(mo[g.i + 1]) - row_base, int(no[g.j + 1]) - col_base)

        def layout(x: np.ndarray, y: np.ndarray):
            t = np.zeros(x.size, dtype=np.int64)
            return t, x - row_base, y - col_base, 1, [shape], row_base, [col_base]

        return layout

    def _col_block(self, rank: int) -> int:
        """Index g = k*s + (i+j) mod s of the column block of r that ``rank`` holds."""
        i, j, k = self.grid.position(rank)
        return k * self.s + (i + j) % self.s

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        """Global permuted rows of ``side``'s block on ``rank``: row block i of A, j of B."""
        i, j, _ = self.grid.position(rank)
        return block_range(self.offsets[side], i if side == "a" else j)

    def r_rule(self) -> tuple[int, str]:
        """r >= sqrt(pc): r is cut into s*c column blocks, one per layer and grid column."""
        c = self.c
        low = self.model.min_width(self.p, c)
        return low, (
            f"r is cut into sqrt(p/c)*c = {low // c}*{c} = {low} column blocks, one per layer and "
            "grid column; use a larger r or a smaller c")

    def _col_blocks(self) -> int:
        return self.s * self.c

    def _layer_widths(self, r: int) -> np.ndarray:
        """Widths of this layer's s column blocks of r, indexed by l (cached per r)."""
        k, s = self.grid.k, self.s
        return np.diff(self._col_offsets(r)[k * s:(k + 1) * s + 1]).astype(np.int64)

    # ----------------------------------------------------------------- values of S
    @property
    def values(self) -> np.ndarray:
        """This rank's share of its block's values, in value order (a view: do not resize)."""
        return self._vals

    @property
    def block_nnz(self) -> int:
        """Nonzeros of this rank's S block (i, j), whose values its fiber shares."""
        return self._nnz_block

    def _exact_counts(self, op: str, strategy: str) -> dict:
        g = self.grid
        return {"block_nnz": self._nnz_block, "i": g.i, "j": g.j, "k": g.k}

    def _store_values(self, values: np.ndarray) -> None:
        self._vals[...] = values

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global permuted (row, col) of this rank's share of its block, in value order."""
        rows, cols = self._o.coordinates()
        return rows[self._own], cols[self._own]

    def _describe(self) -> dict:
        return {"s": self.s,
                "value_order": "k-th of c contiguous shares of the fiber's S block (CSR order)"}

    # ----------------------------------------------------------------- checks
    # ----------------------------------------------------------------- the loop
    def _cannon(self, mode: str, A_loc: np.ndarray | None, B_loc: np.ndarray | None,
                vals: np.ndarray, r: int, out: np.ndarray | None = None,
                multi: MultiHead | None = None) -> np.ndarray | None:
        """s steps of local kernel + cyclic shifts of A (along the row) and B (up the column).

        ``mode``: "sddmm" (A, B in; partial dot products accumulate into ``out``, one per
        nonzero of the block), "spmm_a" (B in, A out) or "spmm_b" (A in, B out). Returns the
        finished output block for the SpMM modes, written into ``out`` when given. Collective
        over the layer. With ``multi`` (a multi-head call, :mod:`distmm.algorithms.
        multivalue`): ``vals`` is (H, block nnz), the SDDMM's ``out`` (block nnz, H), and
        each step runs the multi-head kernels on the column block present (column block
        k s + l of r), cut into its head segments; the dense shifts are those of one call.
        """
        s, g = self.s, self.grid
        w = self._layer_widths(r)
        wmax = int(w.max())
        mi, nj = self._S.shape
        l0 = (g.i + g.j) % s
        a_in, b_in = mode != "spmm_a", mode != "spmm_b"
        a_cur = self._kernels.buffer("a_cur", (mi * wmax,))
        b_cur = self._kernels.buffer("b_cur", (nj * wmax,))
        # A layer of one rank (s = 1) shifts nothing, so it needs no receive buffers.
        a_nxt = self._kernels.buffer("a_nxt", (mi * wmax,)) if s > 1 else a_cur
        b_nxt = self._kernels.buffer("b_nxt", (nj * wmax,)) if s > 1 else b_cur

        def view(buf: np.ndarray, rows: int, l: int) -> np.ndarray:
            return buf[:rows * int(w[l])].reshape(rows, int(w[l]))

        # an output block (and SDDMM's partial sums) is written by the first step's kernel
        if a_in:
            view(a_cur, mi, l0)[...] = A_loc
        if b_in:
            view(b_cur, nj, l0)[...] = B_loc
        west, east = (g.j - 1) % s, (g.j + 1) % s
        north, south = (g.i - 1) % s, (g.i + 1) % s
        S = self._S
        overlap = self.overlap and s > 1
        for t in range(s):
            l = (l0 + t) % s
            ln = (l + 1) % s
            Ab, Bb = view(a_cur, mi, l), view(b_cur, nj, l)
            An, Bn = view(a_nxt, mi, ln), view(b_nxt, nj, ln)
            reqs = []
            if overlap and a_in:
                reqs += self.row.start_shift(Ab, An, dest=west, source=east)
            if overlap and b_in:
                reqs += self.col.start_shift(Bb, Bn, dest=north, source=south)
            # The shift buffers' views are new objects at every step: the kernel call is
            # prepared each time (key None); only the kernel's own time is "compute".
            if multi is not None:
                co = self._col_offsets(r)
                segs = multi.segments(int(co[g.k * s + l]), int(co[g.k * s + l + 1]))
                if mode == "sddmm":
                    multi.sddmm(S, Ab, Bb, out, accumulate=t > 0, segs=segs)
                else:
                    op, X, Y = (("spmm_multi_a", Bb, Ab) if mode == "spmm_a"
                                else ("spmm_multi_b", Ab, Bb))
                    multi.spmm(op, S, vals, X, Y, accumulate=t > 0, segs=segs)
            elif mode == "sddmm":
                self._kernels.run(None, (), "sddmm", S, vals, Ab, Bb, out, accumulate=t > 0)
            elif mode == "spmm_a":
                self._kernels.run(None, (), "spmm_a", S, vals, Bb, None, Ab, accumulate=t > 0)
            else:
                self._kernels.run(None, (), "spmm_b", S, vals, Ab, None, Bb, accumulate=t > 0)
            if s > 1:
                self.row.finish(reqs)
                if not (overlap and a_in):
                    self.row.shift(Ab, An, dest=west, source=east)
                if not (overlap and b_in):
                    self.col.shift(Bb, Bn, dest=north, source=south)
                a_cur, a_nxt = a_nxt, a_cur
                b_cur, b_nxt = b_nxt, b_cur
        if mode == "sddmm":
            return None
        # The buffers are reused by the next call: the result is copied out of them.
        home = view(a_cur, mi, l0) if mode == "spmm_a" else view(b_cur, nj, l0)
        if out is None:
            return aligned_copy(home)
        out[...] = home
        return out

    def _sddmm(self, A_loc: np.ndarray, B_loc: np.ndarray, vals: np.ndarray, r: int,
               out: np.ndarray | None = None, multi: MultiHead | None = None) -> np.ndarray:
        # multi: H partial sums per nonzero, edge-major, reduced in the one reduce-scatter
        H = 1 if multi is None else multi.heads
        shape = (self._nnz_block,) if multi is None else (self._nnz_block, H)
        partial = self._kernels.buffer("partial", shape)
        self._cannon("sddmm", A_loc, B_loc, self._ones, r, partial, multi)  # step 0 writes it
        own = self._own.stop - self._own.start
        mine = out if out is not None else np.empty(shape[:0] + (own,) + shape[1:],
                                                    dtype=self.dtype)
        self.fiber.reduce_scatter(partial, mine, [H * k for k in self._counts])
        with self.stats.timer("compute"):
            # section IV-A: post-multiply by S's values, no communication
            mine *= vals if multi is None else vals[:, None]
        return mine

    def _spmm(self, mode: str, X_loc: np.ndarray, vals: np.ndarray, r: int,
              out: np.ndarray | None = None, multi: MultiHead | None = None) -> np.ndarray:
        if multi is None:
            full = self._kernels.buffer("full_values", (self._nnz_block,))
            self.fiber.allgatherv(np.ascontiguousarray(vals), full, self._counts)
        else:  # every head's values in one all-gather, edge-major, then one row per head
            H = multi.heads
            edges = self._kernels.buffer("full_values", (self._nnz_block, H))
            self.fiber.allgatherv(np.ascontiguousarray(vals.T), edges,
                                  [H * k for k in self._counts])
            full = np.ascontiguousarray(edges.T)
        if mode == "spmm_a":
            return self._cannon(mode, None, X_loc, full, r, out, multi)
        return self._cannon(mode, X_loc, None, full, r, out, multi)

    # ----------------------------------------------------------------- the operations
    def _spmm_a(self, B_loc, vals, r, out):
        return self._spmm("spmm_a", B_loc, vals, r, out)

    def _spmm_b(self, A_loc, vals, r, out):
        return self._spmm("spmm_b", A_loc, vals, r, out)

    def _multi_pass(self, op: str, X, Y, vals, r, out, multi):
        """One multi-head call (:mod:`distmm.algorithms.multivalue`): ``op`` "sddmm" (X = A,
        Y = B, vals (own,), out (own, H)), "spmm_a" (X = B) or "spmm_b" (X = A) with vals
        (H, own). Collective."""
        if op == "sddmm":
            return self._sddmm(X, Y, vals, r, out, multi)
        return self._spmm(op, X, vals, r, out, multi)

    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | str | None = None) -> np.ndarray:
        # Only "none" exists: SDDMM, then SpMMA or SpMMB on its output (section V-D).
        R = self._sddmm(A_loc, B_loc, self._values_for("a", values), r)
        if side == "a":
            return self._spmm("spmm_a", B_loc, R, r, out)
        return self._spmm("spmm_b", A_loc, R, r, out)

    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's block sizes for :meth:`memory_bytes`."""
        mi, nj = self._S.shape
        return {"rows_a": mi, "rows_b": nj, "width": self.local_width(r),
                "wmax": int(self._layer_widths(r).max()), "block": self._nnz_block,
                "nnz_a": self._vals.size}



__all__ = ["SparseReplicate25D"]
