"""1.5D dense shifting, dense replicating algorithms (paper section V-A, Algorithm 1).

Grid: (p/c) x c, position (u, v); q = p/c ranks per layer. Table II layout: A and B are cut into
p row blocks; block i lives on grid position (i // c, i % c). S is cut into q row superblocks
(the rows of A blocks uc..uc+c-1) by p column blocks (the rows of B blocks); rank (u, v) stores
row superblock u of every column block j with j % c == v, i.e. exactly the B blocks that pass
through layer v. One loop serves every kernel (paper section IV-A): replicate (all-gather) the
"X" operand along the fiber, shift the "Y" operand q times around the layer, applying the local
kernel to the S block that meets the Y block present, and reduce-scatter X-side outputs.

S is stored in two orientations: "a" (S itself; X = A, Y = B) and "b" (S^T; X = B, Y = A). SDDMM,
SpMMA and SpMMB use orientation "a". FusedMM picks the orientation its strategy needs (section
IV-B): FusedMMA without elision and with local kernel fusion replicate A (orientation "a");
replication reuse replicates B and runs SpMMB on S^T, so the output travels home with the shifts
and no reduce-scatter is needed (orientation "b"). FusedMMB mirrors this. Orientation "b" is built
on first use from orientation "a" (one all-to-all of the nonzeros, counted as "distribute").

Words per rank, for m = n and both multiples of p (Table III), counted by the wrapper:
    SDDMM, SpMMA, SpMMB alone:      nr((c-1)/p + 1/c)
    FusedMM, no elision:            nr(2(c-1)/p + 2/c)
    FusedMM, replication reuse:     nr((c-1)/p + 2/c)
    FusedMM, local kernel fusion:   nr(2(c-1)/p + 1/c)
Each op performs q shifts (the last returns Y to its owner, as in Algorithm 1); when c = p a
layer has one rank, the shift is a local no-op and the 1/c terms vanish (see costmodel).
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from distmm.algorithms.base import TwoOrientationAlgorithm
from distmm.algorithms.model import KernelCalls
from distmm.comm import CountingComm
from distmm.coo import CooShare
from distmm.errors import require
from distmm.grid import ProcessGrid15D
from distmm.kernels import NodeModel
from distmm.layout import block_of, block_offsets

STRATEGIES = ("none", "reuse", "fusion")


class DenseShift15D(TwoOrientationAlgorithm):
    """S distributed for the 1.5D dense shifting algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks and replication factor ``c`` (c must
    divide p). Every operation is collective over ``comm`` and takes/returns dense blocks in
    this object's distribution: rank (u, v) holds rows ``dense_rows(side, rank)`` of A ("a",
    m x r) and B ("b", n x r), all r columns.
    """

    name = "15d-dense-shift"
    strategies = STRATEGIES
    supports_overlap = True

    def __init__(self, source: CooShare, comm: MPI.Comm, c: int = 1, r: int | None = None,
                 node_model: str | NodeModel = "reference", dtype=np.float32,
                 permute: bool | str = "auto", seed: int = 0, order: str = "fiber",
                 check_finite: bool = True,
                 overlap: bool = False, checks: str = "once") -> None:
        # A and B keep whole rows, so any r >= 1 works per call; ``r`` is only a default width.
        super().__init__(source, comm, node_model=node_model, dtype=dtype, permute=permute,
                         seed=seed, check_finite=check_finite, r=r, checks=checks)
        self.grid = ProcessGrid15D.create(comm, c, order)
        self.c, self.q = c, self.grid.q
        self.overlap = bool(overlap)
        self.layer = CountingComm(self.grid.layer_comm, self.stats)
        self.fiber = CountingComm(self.grid.fiber_comm, self.stats)
        m, n = self.shape
        self.offsets = {"a": block_offsets(m, self.p), "b": block_offsets(n, self.p)}
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        self._o = {"a": self._place("a", self._owner("a", rows, cols), rows, cols,
                                    source.vals, self._layout("a"))}
        self._plan = None
        self._b_stale = False

    # ----------------------------------------------------------------- layout
    def _frames(self, name: str) -> tuple[str, str]:
        """(X side, Y side) of an orientation."""
        return ("a", "b") if name == "a" else ("b", "a")

    def _owner(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """World rank storing each S entry (given in S's frame) in orientation ``name``."""
        x, y = (rows, cols) if name == "a" else (cols, rows)
        xs, ys = self._frames(name)
        xb = block_of(x, self.offsets[xs])
        yb = block_of(y, self.offsets[ys])
        u, v = xb // self.c, yb % self.c
        if self.grid.order == "fiber":
            return (u * self.c + v).astype(np.int64)
        return (v * self.q + u).astype(np.int64)

    def _layout(self, name: str):
        xs, ys = self._frames(name)
        xo, yo = self.offsets[xs], self.offsets[ys]
        u, v, c, q = self.grid.u, self.grid.v, self.c, self.q
        row_base = int(xo[u * c])
        nrows = int(xo[u * c + c] - row_base)
        col_bases = np.array([yo[t * c + v] for t in range(q)], dtype=np.int64)
        shapes = [(nrows, int(yo[t * c + v + 1] - yo[t * c + v])) for t in range(q)]

        def layout(x: np.ndarray, y: np.ndarray):
            yb = block_of(y, yo)
            t = yb // c
            return t, x - row_base, y - yo[yb], q, shapes, row_base, col_bases

        def frame(rows, cols):
            return (rows, cols) if name == "a" else (cols, rows)

        return lambda rows, cols: layout(*frame(rows, cols))

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        u, v = (rank // self.c, rank % self.c) if self.grid.order == "fiber" else (
            rank % self.q, rank // self.q)
        b = u * self.c + v
        off = self.offsets[side]
        return np.arange(off[b], off[b + 1], dtype=np.int64)

    def _build_b(self, rows, cols, vals) -> None:
        self._o["b"] = self._place("b", self._owner("b", rows, cols), rows, cols, vals,
                                   self._layout("b"))

    # ----------------------------------------------------------------- the cost model
    @staticmethod
    def grid_allows(p: int, c: int) -> bool:
        """Whether p ranks form this family's grid with replication factor c: c | p."""
        return c >= 1 and p % c == 0

    @staticmethod
    def min_width(p: int, c: int) -> int:
        """The smallest dense width r a call may use: A and B keep whole rows."""
        return 1

    @staticmethod
    def table3(strategy: str, n: int, r: int, p: int, c: float,
               phi: float = 0.0) -> tuple[float, float]:
        """Table III, 1.5D dense shifting: (messages, words) per rank of one FusedMM."""
        nr = n * r
        if strategy == "none":
            return 2 * p / c + 2 * (c - 1), nr * (2 / c + 2 * (c - 1) / p)
        if strategy == "reuse":
            return 2 * p / c + (c - 1), nr * (2 / c + (c - 1) / p)
        return p / c + 2 * (c - 1), nr * (1 / c + 2 * (c - 1) / p)

    @staticmethod
    def one_rank_layer_saving(strategy: str, n: int, r: int, p: int, c: float,
                              phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) of Table III's shifts, which a layer of one rank does not send."""
        k = 1 if strategy == "fusion" else 2
        return p / c * k, n * r * k / c

    @staticmethod
    def nonzero_visits(strategy: str, nnz: float, p: int, c: float) -> float:
        """Nonzeros one rank's kernels walk in one FusedMM (the fused kernel walks S once)."""
        return (1 if strategy == "fusion" else 2) * nnz / p

    @staticmethod
    def table4_best_c(strategy: str, p: int, phi: float = 0.0) -> float:
        """Table IV, 1.5D dense shifting: the real c minimising Table III's words."""
        return {"none": math.sqrt(p), "reuse": math.sqrt(2 * p),
                "fusion": math.sqrt(p / 2)}[strategy]

    @staticmethod
    def local_calls(strategy: str, m: float, n: float, nnz: float, r: float, p: int,
                    c: int) -> list[KernelCalls]:
        """q steps per kernel, each on an (mc/p) x (n/p) block of nnz/(pq) nonzeros at full
        width r. "fusion": q fused calls; "none": q SDDMM + q SpMMA; "reuse": q SDDMM + q SpMMB
        on S^T's (nc/p) x (m/p) blocks (transposes cached)."""
        q = p // c
        z = nnz / (p * q)
        if strategy == "fusion":
            return [KernelCalls("fusedmm", q, z, m * c / p, n / p, r)]
        if strategy == "none":
            return [KernelCalls(kind, q, z, m * c / p, n / p, r) for kind in ("sddmm", "spmm_a")]
        return [KernelCalls(kind, q, z, n * c / p, m / p, r) for kind in ("sddmm", "spmm_b")]


    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    nnz: float | None = None) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one ``op`` (nnz does not matter
        here: only dense blocks move). See :func:`dense_shift_15d_exact`."""
        return dense_shift_15d_exact(op, m, n, r, p, c, strategy)

    def describe(self) -> dict:
        return {**super().describe(), "c": self.c, "order": self.grid.order,
                "overlap": self.overlap}

    # ----------------------------------------------------------------- the loop (Algorithm 1)
    def _replicate(self, name: str, X_loc: np.ndarray) -> np.ndarray:
        """All-gather this fiber's X blocks into the row superblock T (replication)."""
        if self.c == 1:  # a fiber of one rank: the block is the superblock, nothing to copy
            return X_loc
        xs, _ = self._frames(name)
        off, u, c = self.offsets[xs], self.grid.u, self.c
        r = X_loc.shape[1]
        counts = [int(off[u * c + k + 1] - off[u * c + k]) * r for k in range(c)]
        T = self._buffer(("T", name), (int(off[u * c + c] - off[u * c]), r))
        self.fiber.allgatherv(X_loc, T, counts)
        return T

    def _reduce(self, name: str, T: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Reduce-scatter the X-side superblock T back to the fiber's blocks (reduction)."""
        xs, _ = self._frames(name)
        off, u, c, v = self.offsets[xs], self.grid.u, self.c, self.grid.v
        r = T.shape[1]
        counts = [int(off[u * c + k + 1] - off[u * c + k]) * r for k in range(c)]
        if out is None:
            out = np.empty((int(off[u * c + v + 1] - off[u * c + v]), r), dtype=self.dtype)
        self.fiber.reduce_scatter(T, out, counts)
        return out

    def _propagate(self, name: str, mode: str, vals: np.ndarray, T: np.ndarray | None,
                   Y_loc: np.ndarray | None, r: int, out: np.ndarray | None,
                   result: np.ndarray | None = None) -> np.ndarray | None:
        """q steps of local kernel + cyclic shift of the Y block within the layer.

        ``mode`` is "sddmm" (out: values), "spmm_x" (out: X-side superblock), "spmm_y" (Y is
        the output; returns this rank's finished Y block) or "fused_x" (out: X-side
        superblock). Rank u holds the Y block of layer position (u + t) mod q at step t.
        ``result`` (spmm_y only): where to put the finished Y block (default: a new array).
        """
        o = self._orientation(name)
        _, ys = self._frames(name)
        yo, c, v, u, q = self.offsets[ys], self.c, self.grid.v, self.grid.u, self.q
        sizes = [int(yo[t * c + v + 1] - yo[t * c + v]) for t in range(q)]
        if q == 1:  # one rank per layer: nothing shifts, the kernel reads Y (or writes it) in place
            return self._local_step(o, mode, vals, T, Y_loc, r, out, result)
        cur = self._buffer("cur", (max(sizes), r))
        nxt = self._buffer("nxt", (max(sizes), r))
        if mode != "spmm_y":  # an output Y block is written by the first step's kernel
            cur[:sizes[u]] = Y_loc
        left, right = (u - 1) % q, (u + 1) % q
        # Overlap (the paper's future work, section VII): send the Y block on while the kernel
        # reads it. Impossible when Y is the output (spmm_y): it must be finished first.
        overlap = self.overlap and mode != "spmm_y"
        for step in range(q):
            t = (u + step) % q
            if overlap:
                pending = self.layer.start_shift(cur[:sizes[t]], nxt[:sizes[(t + 1) % q]],
                                                 dest=left, source=right)
            self._kernel_step(o, t, mode, vals, T, cur[:sizes[t]], out, first=step == 0)
            if overlap:
                self.layer.finish(pending)
            else:
                self.layer.shift(cur[:sizes[t]], nxt[:sizes[(t + 1) % q]], dest=left,
                                 source=right)
            cur, nxt = nxt, cur
        if mode != "spmm_y":
            return None
        if result is None:
            return cur[:sizes[u]].copy()  # cur is reused by the next call
        result[...] = cur[:sizes[u]]
        return result

    def _local_step(self, o, mode: str, vals, T, Y_loc, r: int, out, result):
        """:meth:`_propagate` for a layer of one rank (q = 1): one kernel call on S's only
        block, with no shift buffer between the caller's blocks and the kernel."""
        if mode != "spmm_y":
            self._kernel_step(o, 0, mode, vals, T, Y_loc, out, first=True)
            return None
        Y = np.empty((o.blocks[0].shape[1], r), dtype=self.dtype) if result is None else result
        self._kernel_step(o, 0, mode, vals, T, Y, out, first=True)
        return Y

    def _kernel_step(self, o, t: int, mode: str, vals, T, Yb, out, first: bool) -> None:
        """The local kernel on S's block t and the Y block present (timed as "compute").

        The first step of a loop writes its output instead of accumulating into it, so no
        output is zero-filled first; SDDMM always writes (every step fills its own block's
        values)."""
        S, sv, k = o.blocks[t], o.block_values(vals, t), self.kernel
        with self.stats.timer("compute"):
            if mode == "sddmm":
                k.sddmm(S, sv, T, Yb, o.block_values(out, t), accumulate=False)
            elif mode == "spmm_x":
                k.spmm_a(S, sv, Yb, out, accumulate=not first)
            elif mode == "spmm_y":
                k.spmm_b(S, sv, T, Yb, accumulate=not first)
            else:
                k.fusedmm_a(S, sv, T, Yb, out, accumulate=not first)

    # pieces expressed in an orientation's frame ------------------------------------------
    def _superblock_out(self, name: str, r: int) -> np.ndarray:
        """The X-side accumulator of an orientation (kept between calls; the first kernel step
        writes it)."""
        o = self._orientation(name)
        return self._buffer(("T_out", name), (o.blocks[0].shape[0] if o.blocks else 0, r))

    def _sddmm_in(self, name: str, X_loc, Y_loc, vals, r, T=None, out=None):
        o = self._orientation(name)
        if T is None:
            T = self._replicate(name, X_loc)
        if out is None:
            out = np.empty(o.nnz, dtype=self.dtype)  # every block's kernel writes its values
        self._propagate(name, "sddmm", vals, T, Y_loc, r, out)
        return out, T

    def _spmm_x_in(self, name: str, Y_loc, vals, r, out=None):
        T_out = self._x_accumulator(name, r, out)
        self._propagate(name, "spmm_x", vals, None, Y_loc, r, T_out)
        return T_out if self.c == 1 else self._reduce(name, T_out, out)

    def _spmm_y_in(self, name: str, X_loc, vals, r, T=None, out=None):
        if T is None:
            T = self._replicate(name, X_loc)
        return self._propagate(name, "spmm_y", vals, T, None, r, None, result=out)

    def _fused_x_in(self, name: str, X_loc, Y_loc, vals, r, out=None):
        T = self._replicate(name, X_loc)
        T_out = self._x_accumulator(name, r, out)
        self._propagate(name, "fused_x", vals, T, Y_loc, r, T_out)
        return T_out if self.c == 1 else self._reduce(name, T_out, out)

    def _x_accumulator(self, name: str, r: int, out) -> np.ndarray:
        """Where the X-side superblock accumulates: with c = 1 the superblock is this rank's
        own block, so the result itself (``out``, or a new array) and the reduction is
        skipped; else the object's scratch superblock. Not zeroed: the first kernel step
        writes it."""
        if self.c > 1:
            return self._superblock_out(name, r)
        if out is None:
            return np.empty((self._orientation(name).blocks[0].shape[0], r), dtype=self.dtype)
        return out

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | None = None) -> np.ndarray:
        # FusedMMB(A, B, S) = FusedMMA(B, A, S^T): swap roles and orientations (IV-B).
        same, other = ("a", "b") if side == "a" else ("b", "a")
        X, Y = (A_loc, B_loc) if side == "a" else (B_loc, A_loc)
        if strategy == "fusion":
            return self._fused_x_in(same, X, Y, self._values_for(same, values), r, out)
        if strategy == "none":
            R, _ = self._sddmm_in(same, X, Y, self._values_for(same, values), r)
            return self._spmm_x_in(same, Y, R, r, out)
        R, T = self._sddmm_in(other, Y, X, self._values_for(other, values), r)
        return self._spmm_y_in(other, None, R, r, T=T, out=out)


DENSE_SHIFT_OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def dense_shift_15d_exact(op: str, m: int, n: int, r: int, p: int, c: int,
                          strategy: str = "none") -> dict[str, dict[str, float]]:
    """Words and messages sent per rank, per phase, by :class:`DenseShift15D` for one op.

    Assumes p divides m and n (otherwise these are averages). Returns
    ``{phase: {"words": w, "messages": k}}`` for replication, propagation and reduction.
    """
    require(op in DENSE_SHIFT_OPS, f"unknown op {op!r}")
    require(p % c == 0, f"c={c} does not divide p={p}")
    q = p // c
    if op == "fusedmm_b":
        # FusedMMB is FusedMMA on the transposed problem (section IV-B).
        return dense_shift_15d_exact("fusedmm_a", n, m, r, p, c, strategy)
    a_blk, b_blk = m * r / p, n * r / p
    shifts = q if q > 1 else 0
    repl = {"words": 0.0, "messages": 0}
    prop = {"words": 0.0, "messages": 0}
    red = {"words": 0.0, "messages": 0}

    def add(d: dict, words: float, msgs: int) -> None:
        d["words"] += words
        d["messages"] += msgs

    if op in ("sddmm", "spmm_b"):
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
    elif op == "spmm_a":
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "none":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, 2 * shifts * b_blk, 2 * shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "reuse":
        add(repl, (c - 1) * b_blk, c - 1)
        add(prop, 2 * shifts * a_blk, 2 * shifts)
    elif strategy == "fusion":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    else:
        require(False, f"unknown strategy {strategy!r}")
    return {"replication": repl, "propagation": prop, "reduction": red}
