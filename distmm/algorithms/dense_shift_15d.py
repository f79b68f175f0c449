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

import numpy as np
from mpi4py import MPI

from distmm.algorithms.base import TwoOrientationAlgorithm
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
                 node_model: str | NodeModel = "reference", dtype=np.float32, permute: bool = True,
                 seed: int = 0, order: str = "fiber", check_finite: bool = True,
                 overlap: bool = False) -> None:
        # r is not needed here (A and B keep whole rows); the families that split the dense
        # matrices by columns take it at construction.
        super().__init__(source, comm, node_model=node_model, dtype=dtype, permute=permute,
                         seed=seed, check_finite=check_finite)
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

    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    nnz: float | None = None) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one ``op`` (nnz does not matter
        here: only dense blocks move). See :func:`distmm.costmodel.dense_shift_15d_exact`."""
        from distmm.costmodel import dense_shift_15d_exact

        return dense_shift_15d_exact(op, m, n, r, p, c, strategy)

    def describe(self) -> dict:
        return {**super().describe(), "c": self.c, "order": self.grid.order,
                "overlap": self.overlap}

    # ----------------------------------------------------------------- the loop (Algorithm 1)
    def _replicate(self, name: str, X_loc: np.ndarray) -> np.ndarray:
        """All-gather this fiber's X blocks into the row superblock T (replication)."""
        xs, _ = self._frames(name)
        off, u, c = self.offsets[xs], self.grid.u, self.c
        r = X_loc.shape[1]
        counts = [int(off[u * c + k + 1] - off[u * c + k]) * r for k in range(c)]
        T = np.empty((int(off[u * c + c] - off[u * c]), r), dtype=self.dtype)
        self.fiber.allgatherv(X_loc, T, counts)
        return T

    def _reduce(self, name: str, T: np.ndarray) -> np.ndarray:
        """Reduce-scatter the X-side superblock T back to the fiber's blocks (reduction)."""
        xs, _ = self._frames(name)
        off, u, c, v = self.offsets[xs], self.grid.u, self.c, self.grid.v
        r = T.shape[1]
        counts = [int(off[u * c + k + 1] - off[u * c + k]) * r for k in range(c)]
        out = np.empty((int(off[u * c + v + 1] - off[u * c + v]), r), dtype=self.dtype)
        self.fiber.reduce_scatter(T, out, counts)
        return out

    def _propagate(self, name: str, mode: str, vals: np.ndarray, T: np.ndarray | None,
                   Y_loc: np.ndarray | None, r: int, out: np.ndarray | None) -> np.ndarray | None:
        """q steps of local kernel + cyclic shift of the Y block within the layer.

        ``mode`` is "sddmm" (out: values), "spmm_x" (out: X-side superblock), "spmm_y" (Y is
        the output; returns this rank's finished Y block) or "fused_x" (out: X-side
        superblock). Rank u holds the Y block of layer position (u + t) mod q at step t.
        """
        o = self._orientation(name)
        _, ys = self._frames(name)
        yo, c, v, u, q = self.offsets[ys], self.c, self.grid.v, self.grid.u, self.q
        sizes = [int(yo[t * c + v + 1] - yo[t * c + v]) for t in range(q)]
        cur = np.zeros((max(sizes), r), dtype=self.dtype)
        nxt = np.empty_like(cur)
        if mode != "spmm_y":
            cur[:sizes[u]] = Y_loc
        k = self.kernel
        left, right = (u - 1) % q, (u + 1) % q
        # Overlap (the paper's future work, section VII): send the Y block on while the kernel
        # reads it. Impossible when Y is the output (spmm_y): it must be finished first.
        overlap = self.overlap and q > 1 and mode != "spmm_y"
        for step in range(q):
            t = (u + step) % q
            Yb = cur[:sizes[t]]
            S, sv = o.blocks[t], o.block_values(vals, t)
            if overlap:
                pending = self.layer.start_shift(cur[:sizes[t]], nxt[:sizes[(t + 1) % q]],
                                                 dest=left, source=right)
            with self.stats.timer("compute"):
                if mode == "sddmm":
                    k.sddmm(S, sv, T, Yb, o.block_values(out, t))
                elif mode == "spmm_x":
                    k.spmm_a(S, sv, Yb, out)
                elif mode == "spmm_y":
                    k.spmm_b(S, sv, T, Yb)
                else:
                    k.fusedmm_a(S, sv, T, Yb, out)
            if overlap:
                self.layer.finish(pending)
                cur, nxt = nxt, cur
            elif q > 1:
                t_next = (t + 1) % q
                self.layer.shift(cur[:sizes[t]], nxt[:sizes[t_next]], dest=left, source=right)
                cur, nxt = nxt, cur
        return np.ascontiguousarray(cur[:sizes[u]]) if mode == "spmm_y" else None

    # pieces expressed in an orientation's frame ------------------------------------------
    def _sddmm_in(self, name: str, X_loc, Y_loc, vals, T=None):
        o, r = self._orientation(name), Y_loc.shape[1]
        if T is None:
            T = self._replicate(name, X_loc)
        out = np.zeros(o.nnz, dtype=self.dtype)
        self._propagate(name, "sddmm", vals, T, Y_loc, r, out)
        return out, T

    def _spmm_x_in(self, name: str, Y_loc, vals):
        o, r = self._orientation(name), Y_loc.shape[1]
        T_out = np.zeros((o.blocks[0].shape[0] if o.blocks else 0, r), dtype=self.dtype)
        self._propagate(name, "spmm_x", vals, None, Y_loc, r, T_out)
        return self._reduce(name, T_out)

    def _spmm_y_in(self, name: str, X_loc, vals, T=None):
        if T is None:
            T = self._replicate(name, X_loc)
        return self._propagate(name, "spmm_y", vals, T, None, T.shape[1], None)

    def _fused_x_in(self, name: str, X_loc, Y_loc, vals):
        o, r = self._orientation(name), Y_loc.shape[1]
        T = self._replicate(name, X_loc)
        T_out = np.zeros((o.blocks[0].shape[0] if o.blocks else 0, r), dtype=self.dtype)
        self._propagate(name, "fused_x", vals, T, Y_loc, r, T_out)
        return self._reduce(name, T_out)

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str,
                 values: np.ndarray | None = None) -> np.ndarray:
        require(strategy in STRATEGIES,
                f"unknown FusedMM strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
        self.check_inputs(("a", A_loc, "A"), ("b", B_loc, "B"), values=values)
        # FusedMMB(A, B, S) = FusedMMA(B, A, S^T): swap roles and orientations (IV-B).
        same, other = ("a", "b") if side == "a" else ("b", "a")
        X, Y = (A_loc, B_loc) if side == "a" else (B_loc, A_loc)
        if strategy == "fusion":
            return self._fused_x_in(same, X, Y, self._values_for(same, values))
        if strategy == "none":
            R, _ = self._sddmm_in(same, X, Y, self._values_for(same, values))
            return self._spmm_x_in(same, Y, R)
        R, T = self._sddmm_in(other, Y, X, self._values_for(other, values))
        return self._spmm_y_in(other, None, R, T=T)
