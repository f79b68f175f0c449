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

Words per rank, for m = n and both multiples of p, as Table III prints them:
    SDDMM, SpMMA, SpMMB alone:      nr((c-1)/p + 1/c)
    FusedMM, no elision:            nr(2(c-1)/p + 2/c)
    FusedMM, replication reuse:     nr((c-1)/p + 2/c)
    FusedMM, local kernel fusion:   nr(2(c-1)/p + 1/c)
Algorithm 1 shifts Y q times, the last returning it to its owner. distmm sends that last
shift only where Y is the output (SpMMB, and the SpMMB of replication reuse): an input Y is read
from the caller's block, which never moves, so a pass over an input sends q - 1 shifts and each
such pass sends nr/p words and one message fewer than the table (``departure``; the wrapper
counts what is sent, :func:`dense_shift_15d_exact`). When c = p a
layer has one rank, nothing shifts and the 1/c terms vanish (see costmodel).
"""

from __future__ import annotations

import math

import numpy as np

from distmm.algorithms.model import FamilyModel, KernelCalls
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
)
from distmm.errors import require
from distmm.kernels.attention import attention_backward_block, attention_forward_block

STRATEGIES = ("none", "reuse", "fusion")


class DenseShift15DModel(FamilyModel):
    """The cost model of :class:`DenseShift15D` (``DenseShift15D.model``): its grid and
    width rules, Table III/IV rows, kernel calls, exact words and memory (static methods)."""

    # ----------------------------------------------------------------- the cost model
    grid_allows = staticmethod(fits_15d)

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
    def departure(strategy: str, n: int, r: int, p: int, c: float,
                  phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) of Table III's shifts that distmm does not send: the last shift
        of each pass over an input Y block (two passes without elision, SDDMM's with
        replication reuse, the fused kernel's one), which would only return to its owner a
        block the owner never gave away. None where a layer has one rank (no shifts)."""
        if p / c <= 1:
            return 0.0, 0.0
        k = 2 if strategy == "none" else 1
        return k, k * n * r / p

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

    @staticmethod
    def memory_bytes(op: str, strategy: str, m: int, n: int, nnz: float, r: int, p: int,
                     c: int, dtype=np.float32, overlap: bool = False,
                     local: dict[str, int] | None = None) -> Memory:
        """Bytes one rank holds for one ``op`` (see :mod:`distmm.core.memory`). Not collective.

        Per orientation used: q CSR blocks of the X superblock's rows (S, or S^T built on
        first use), their cached transposes where the call runs SpMMB on them, the replicated
        superblock T and the superblock accumulator (c > 1), two shift buffers of the largest
        Y block (q > 1; the same two with or without overlap: a shift always receives into the
        second; one at q = 2 where no pass has an output Y, see :meth:`_shift_views`); the
        caller's dense blocks; the SDDMM result a FusedMM without fusion passes
        to its SpMM. Without ``local`` (:meth:`memory_counts`), the largest blocks of any rank
        and nnz/p nonzeros per rank."""
        q, it = p // c, np.dtype(dtype).itemsize
        k = merged({"rows_a": ceil_div(m, p), "rows_b": ceil_div(n, p),
                    "super_a": ceil_div(m, q), "super_b": ceil_div(n, q),
                    "ymax_a": ceil_div(n, p), "ymax_b": ceil_div(m, p),
                    "ycols_a": ceil_div(n, c), "ycols_b": ceil_div(m, c),
                    "nnz_a": ceil_div(nnz, p), "nnz_b": ceil_div(nnz, p),
                    "zmax_a": ceil_div(nnz, p * q), "zmax_b": ceil_div(nnz, p * q),
                    "share": ceil_div(nnz, p)}, local)
        used = modes(op, strategy)
        parts = {"permutations": perm_bytes(m, n)}
        call: dict[str, int] = {}
        # Block offsets of A and B; per orientation, its blocks' value offsets and columns.
        parts["bookkeeping"] = 16 * (p + 1)
        for o in sorted({"a"} | {o for o, _ in used}):
            parts[f"S {o}"] = csr_bytes(k[f"super_{o}"], k[f"nnz_{o}"], it, q)
            parts["bookkeeping"] += 16 * q + 8
        for o, mode in used:
            sup = k[f"super_{o}"] * r * it
            if mode == "spmm_y":
                parts[f"S {o} transpose"] = transpose_bytes(k[f"ycols_{o}"], k[f"nnz_{o}"], q)
                call["kernel values"] = k[f"zmax_{o}"] * it
            if c > 1 and mode in ("sddmm", "spmm_y", "fused_x"):
                parts["replication"] = sup
            if c > 1 and mode in ("spmm_x", "fused_x"):
                parts["reduction"] = sup
                call["MPI reduce-scatter"] = mpi_reduce_scatter_bytes(sup, c)
            if q > 1:  # at q = 2 an input pass uses one buffer (_shift_views)
                bufs = 2 if q > 2 or any(md == "spmm_y" for oo, md in used if oo == o) else 1
                parts["shift"] = bufs * k[f"ymax_{o}"] * r * it
            if mode == "sddmm" and op.startswith("fusedmm"):
                call["SDDMM result"] = k[f"nnz_{o}"] * it
        return two_orientation_memory(parts, call, k, used, op, r, it, k["zmax_a"], k["zmax_b"])


class DenseShift15D(TwoOrientationAlgorithm):
    """S distributed for the 1.5D dense shifting algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks and replication factor ``c`` (c must
    divide p). Every operation is collective over ``comm`` and takes/returns dense blocks in
    this object's distribution: rank (u, v) holds rows ``dense_rows(side, rank)`` of A ("a",
    m x r) and B ("b", n x r), all r columns.
    """

    name = "15d-dense-shift"
    model = DenseShift15DModel
    strategies = STRATEGIES
    supports_overlap = True
    grid_class = ProcessGrid15D

    def _setup(self, source: CooShare) -> None:
        # A and B keep whole rows, so any r >= 1 works per call; ``r`` is only a default width.
        m, n = self.shape
        self.offsets = {"a": block_offsets(m, self.p), "b": block_offsets(n, self.p)}
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        self._o = {"a": self.placement.place("a", self._owner("a", rows, cols), rows, cols,
                                    source.vals, self._layout("a"))}

    # ----------------------------------------------------------------- layout
    def _owner(self, name: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """World rank storing each S entry (given in S's frame) in orientation ``name``."""
        x, y = (rows, cols) if name == "a" else (cols, rows)
        xs, ys = self._frames(name)
        xb = block_of(x, self.offsets[xs])
        yb = block_of(y, self.offsets[ys])
        return self.grid.world_rank(xb // self.c, yb % self.c).astype(np.int64)

    def _layout(self, name: str):
        xs, ys = self._frames(name)
        xo, yo = self.offsets[xs], self.offsets[ys]
        c, q, fiber = self.c, self.q, self.grid.fiber_blocks()
        row_base = int(xo[fiber.start])
        nrows = int(xo[fiber.stop] - row_base)
        col_bases = yo[:-1][self.grid.layer_blocks()].copy()
        shapes = [(nrows, int(w)) for w in np.diff(yo)[self.grid.layer_blocks()]]

        def layout(x: np.ndarray, y: np.ndarray):
            yb = block_of(y, yo)
            t = yb // c
            return t, x - row_base, y - yo[yb], q, shapes, row_base, col_bases

        def frame(rows, cols):
            return (rows, cols) if name == "a" else (cols, rows)

        return lambda rows, cols: layout(*frame(rows, cols))

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        u, v = self.grid.position(rank)
        return block_range(self.offsets[side], u * self.c + v)

    def _build_b(self, rows, cols, vals) -> None:
        self._o["b"] = self.placement.place("b", self._owner("b", rows, cols), rows, cols, vals,
                                   self._layout("b"))

    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's block sizes for :meth:`memory_bytes` (orientations built so far)."""
        u, v, c, q = self.grid.u, self.grid.v, self.c, self.q
        out = {"rows_a": self._local_rows("a"), "rows_b": self._local_rows("b")}
        for o in self._o:
            xs, ys = self._frames(o)
            xo, yo = self.offsets[xs], self.offsets[ys]
            sizes = [int(yo[t * c + v + 1] - yo[t * c + v]) for t in range(q)]
            blocks = self._o[o].blocks
            out.update({f"super_{o}": int(xo[u * c + c] - xo[u * c]),
                        f"ymax_{o}": max(sizes), f"ycols_{o}": sum(sizes),
                        f"nnz_{o}": self._o[o].nnz,
                        f"zmax_{o}": max(blk.nnz for blk in blocks)})
        return out

    def _replayable(self) -> bool:
        """With c = 1 a call is q kernels on the caller's blocks and the shift buffers, and q
        shifts between them (none on one rank): nothing is replicated, reduced or copied
        (plan.py). With overlap the shifts are split around the kernels and not traced."""
        return self.c == 1 and (self.q == 1 or not self.overlap)

    # ----------------------------------------------------------------- the loop (Algorithm 1)
    def _fiber_rows(self, name: str) -> np.ndarray:
        """Rows of the fiber's X blocks: the row superblock T is blocks uc .. uc + c - 1."""
        return np.diff(self.offsets[self._frames(name)[0]])[self.grid.fiber_blocks()]

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
        u, q = self.grid.u, self.q
        if q == 1:  # one rank per layer: nothing shifts, the kernel reads Y (or writes it) in place
            return self._local_step(o, mode, vals, T, Y_loc, r, out, result)
        cur, nxt = self._shift_views(self._frames(name)[1], r, both=mode == "spmm_y")
        left, right = (u - 1) % q, (u + 1) % q
        # Overlap (the paper's future work, section VII): send the Y block on while the kernel
        # reads it. Impossible when Y is the output (spmm_y): it must be finished first.
        overlap = self.overlap and mode != "spmm_y"
        if mode == "spmm_y" and result is None:
            # The output Y block is written by the first step's kernel; the last shift brings
            # this rank's finished block home, straight into the result.
            result = aligned_empty(cur[u].shape, self.dtype)
        for step in range(q):
            t = (u + step) % q
            # An input Y block is read and sent on from the caller's block at the first step
            # (no copy into the shift buffers); from then on, from the buffer it arrived in.
            Yb = Y_loc if step == 0 and mode != "spmm_y" else cur[t]
            recv = result if mode == "spmm_y" and step == q - 1 else nxt[(t + 1) % q]
            # Algorithm 1's last shift returns Y to its owner. An input Y never left its
            # owner (the caller's block is only read), so that shift would move a copy no
            # kernel reads: it is not sent (``departure``). An output Y must travel home.
            sends = step < q - 1 or mode == "spmm_y"
            if overlap and sends:
                pending = self.layer.start_shift(Yb, recv, dest=left, source=right)
            self._kernel_step(o, t, mode, vals, T, Yb, out, first=step == 0)
            if overlap and sends:
                self.layer.finish(pending)
            elif sends:
                self.layer.shift(Yb, recv, dest=left, source=right)
                self._traced_shift(self.layer, Yb, recv, left, right)
            cur, nxt = nxt, cur
        return result if mode == "spmm_y" else None

    def _shift_views(self, ys: str, r: int, both: bool) -> tuple[list, list]:
        """The two shift buffers of Y blocks of side ``ys`` and width r, as their views sized
        for the Y block of each layer position t (kept with the buffers, so that every call
        hands the kernels the same objects).

        A pass over an input Y at q = 2 receives one block and sends nothing more (its last
        shift is not sent), so it uses the second buffer only: unless the pass needs ``both``
        (an output Y), the first is then not allocated and its views are None. A later pass
        that needs it allocates it."""
        both = both or self.q > 2
        key = ("shift views", ys, r, both)
        views = self._kernels.scratch.get(key)
        if views is None:
            sizes = np.diff(self.offsets[ys])[self.grid.layer_blocks()]
            roles = ("cur", "nxt") if both else ("nxt",)
            bufs = [self._kernels.buffer(role, (int(sizes.max()), r)) for role in roles]
            lists = [[buf[:int(k)] for k in sizes] for buf in bufs]
            if not both:
                lists.insert(0, [None] * sizes.size)
            views = self._kernels.scratch[key] = tuple(lists)
        return views

    def _local_step(self, o, mode: str, vals, T, Y_loc, r: int, out, result):
        """:meth:`_propagate` for a layer of one rank (q = 1): one kernel call on S's only
        block, with no shift buffer between the caller's blocks and the kernel."""
        if mode != "spmm_y":
            self._kernel_step(o, 0, mode, vals, T, Y_loc, out, first=True)
            return None
        Y = aligned_empty((o.blocks[0].shape[1], r), self.dtype) if result is None else result
        self._kernel_step(o, 0, mode, vals, T, Y, out, first=True)
        return Y

    def _kernel_step(self, o, t: int, mode: str, vals, T, Yb, out, first: bool) -> None:
        """The local kernel on S's block t and the Y block present (its own time is the
        "compute" phase; see :meth:`~distmm.algorithms.prepared.PreparedCalls.run`, which
        keeps the prepared call per step).

        The first step of a loop writes its output instead of accumulating into it, so no
        output is zero-filled first; SDDMM always writes (every step fills its own block's
        values)."""
        S, sv = o.blocks[t], o.block_values(vals, t)
        # per width too: calls of two widths made in turns (the layers of a GAT) each keep
        # their prepared calls instead of replacing the other's
        key = (self._kind, o.name, t, mode, first, Yb.shape[1])
        run = self._kernels.run  # (looked up once: every call's step)
        if mode == "sddmm":
            run(key, (vals, T, Yb, out), "sddmm", S, sv, T, Yb, o.block_values(out, t), False)
        elif mode == "spmm_x":
            run(key, (vals, Yb, out), "spmm_a", S, sv, Yb, None, out, not first)
        elif mode == "spmm_y":
            run(key, (vals, T, Yb), "spmm_b", S, sv, T, None, Yb, not first)
        else:
            run(key, (vals, T, Yb, out), "fusedmm_a", S, sv, T, Yb, out, not first)

    # pieces expressed in an orientation's frame ------------------------------------------
    def _superblock_out(self, name: str, r: int) -> np.ndarray:
        """The X-side accumulator of an orientation (kept between calls; the first kernel step
        writes it)."""
        o = self._orientation(name)
        return self._kernels.buffer(("T_out", name), (o.blocks[0].shape[0] if o.blocks else 0, r))

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
            return aligned_empty((self._orientation(name).blocks[0].shape[0], r), self.dtype)
        return out

    # ----------------------------------------------------------------- one rank
    # On one rank (q = 1, c = 1) Algorithm 1 is one kernel step on the caller's arrays and S's
    # only block, with nothing replicated, shifted or reduced: the loop pieces below run that
    # step as _local_step does, without the loop's frames, which a plain call on a small
    # graph pays on top of its kernel. The step is the whole call, so that a repeat of the call
    # runs the same prepared kernel alone (PreparedCalls.rerun).
    def _one_rank_step(self, o, mode: str, op: str, sources: tuple, vals, X, Y, out,
                       r: int, fresh: tuple | None) -> None:
        """The one kernel step of a call on one rank (the family's loop there) in
        orientation ``o``, under :meth:`_kernel_step`'s prepared-call key. ``sources`` are
        the whole call's operands, its result last: the caller's ``out=``, or a new array
        made as ``fresh[0](*fresh[1:])``."""
        run = self._kernels.run((self._kind, o.name, 0, mode, True, r), sources, op,
                                o.blocks[0], vals, X, Y, out, False)
        if self.checks == "once":
            self._kernels.note_only_step(self._kind, run, sources, fresh)

    def _sddmm(self, A_loc, B_loc, vals, r, out):
        if self.p > 1:
            return super()._sddmm(A_loc, B_loc, vals, r, out)
        o = self._o["a"]
        out, fresh = self._one_rank_out(np.empty, o.nnz, out)
        self._one_rank_step(o, "sddmm", "sddmm", (vals, A_loc, B_loc, out), vals, A_loc, B_loc,
                            out, r, fresh)
        return out

    def _one_rank_out(self, make, shape, out) -> tuple:
        """(the result, how a repeat makes it anew or None) of a step on one rank: the
        caller's ``out=``, or a new array ``make(shape, dtype)`` (SDDMM's values, an SpMM's or
        FusedMM's aligned rows)."""
        if out is not None:
            return out, None
        fresh = (make, shape, self.dtype)
        return make(shape, self.dtype), fresh

    def _spmm_a(self, B_loc, vals, r, out):
        if self.p > 1:
            return super()._spmm_a(B_loc, vals, r, out)
        o = self._o["a"]
        out, fresh = self._one_rank_out(aligned_empty, (o.blocks[0].shape[0], r), out)
        self._one_rank_step(o, "spmm_x", "spmm_a", (vals, B_loc, out), vals, B_loc, None, out, r,
                            fresh)
        return out

    def _spmm_b(self, A_loc, vals, r, out):
        if self.p > 1:
            return super()._spmm_b(A_loc, vals, r, out)
        o = self._o["a"]
        out, fresh = self._one_rank_out(aligned_empty, (o.blocks[0].shape[1], r), out)
        self._one_rank_step(o, "spmm_y", "spmm_b", (vals, A_loc, out), vals, A_loc, None, out, r,
                            fresh)
        return out

    # ----------------------------------------------------------------- FusedMM (IV-B)
    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values: np.ndarray | str | None = None) -> np.ndarray:
        # FusedMMB(A, B, S) = FusedMMA(B, A, S^T): swap roles and orientations (IV-B).
        same, other = ("a", "b") if side == "a" else ("b", "a")
        X, Y = (A_loc, B_loc) if side == "a" else (B_loc, A_loc)
        if strategy == "fusion":
            vals = self._values_for(same, values)
            if self.p == 1:  # one kernel step (see _one_rank_step)
                o = self._orientation(same)
                out, fresh = self._one_rank_out(aligned_empty, (o.blocks[0].shape[0], r), out)
                self._one_rank_step(o, "fused_x", "fusedmm_a", (vals, X, Y, out), vals, X, Y,
                                    out, r, fresh)
                return out
            return self._fused_x_in(same, X, Y, vals, r, out)
        if strategy == "none":
            R, _ = self._sddmm_in(same, X, Y, self._values_for(same, values), r)
            return self._spmm_x_in(same, Y, R, r, out)
        R, T = self._sddmm_in(other, Y, X, self._values_for(other, values), r)
        return self._spmm_y_in(other, None, R, r, T=T, out=out)

    # ----------------------------------------------------------------- fused GAT attention
    def fused_attention(self, s_dst: np.ndarray, s_src: np.ndarray, Z: np.ndarray,
                        negative_slope: float = 0.2,
                        edge_scale: np.ndarray | None = None,
                        return_stats: bool = False):
        """GAT attention in one loop of Algorithm 1 with an online softmax (forward):
        ``out_i,h = sum_j softmax_j(LeakyReLU(s_dst[i,h] + s_src[j,h])) * scale_ij,h z_j,h``.

        The paper (Figure 9's caption) calls 1.5D local kernel fusion "incompatible with
        softmax regularization of learned edge weights": the softmax of row i needs all of row
        i's scores before any of them can weight a z_j. The online softmax of memory-efficient
        attention kernels removes that obstacle. Each rank keeps, per row of its row
        superblock and head, a running maximum m, a running sum l of exp(e - m) and an
        accumulator acc of exp(e - m) z_j; when a block of B's rows arrives during the shifts,
        the block's scores are computed from the per-node scalars it carries, m is raised, l
        and acc are rescaled by exp(m_old - m_new), and the block's contributions are added. No
        SDDMM output is materialised (scores live one block at a time) and S's values are not
        touched.

        Communication, on rank (u, v) with H heads of F features (exact:
        :func:`fused_attention_words`): replication, an all-gather of s_dst (H per row) over
        the fiber; propagation, q - 1 shifts of the B block [z | s_src] (H (F + 1) per row)
        around the layer (as the family's input passes, Algorithm 1's last shift is not sent);
        reduction, the c ranks of a fiber hold partial (m, l, acc) of the same rows over
        different columns: each sends every other member the partials of that member's rows
        (one all-to-all, H (F + 2) per row) and the owner merges them: M = max m_k,
        l = sum l_k exp(m_k - M), acc = sum acc_k exp(m_k - M); out = acc / l. The unfused
        layer (``S.sddmm_add``, ``S.edge_softmax``, one ``S.spmm_a`` per head) moves the
        per-node scores, two edge all-reduces and, per head, q - 1 shifts of width F and a
        reduce-scatter of width F.

        Parameters
        ----------
        s_dst, s_src : ndarray, shape (local nodes, H)
            Per-node scores (A side and B side), in the matrix's dtype. S must be square with
            A and B sharing one layout.
        Z : ndarray, shape (local nodes, H * F)
            The nodes' features per head (B side).
        negative_slope : float
            LeakyReLU's slope below zero.
        edge_scale : ndarray, shape (nnz_local, H), optional
            Factors applied to the normalised coefficients (attention dropout), value order.
        return_stats : bool
            Also return each row's log-sum-exp L (what :meth:`fused_attention_backward`
            needs).

        Returns
        -------
        ndarray, shape (local nodes, H, F)
            This rank's rows of the output (A side); a row without nonzeros gives 0.
        ndarray, shape (local nodes, H), with ``return_stats`` only
            ``L[i, h] = log sum_j exp(e_ijh)`` (-inf on a row without nonzeros).

        The local step is one compiled call per block
        (:func:`~distmm.kernels.attention.attention_forward_block`): every head in one pass
        over the block's nonzeros.

        Collective over the matrix's communicator.
        """
        H, F, u, v, c, fib, lay, cur, edge_scale = self._attention_operands(s_dst, s_src, Z,
                                                                            edge_scale)
        dt = self.dtype
        # replication: the superblock's destination scores
        T = np.empty((sum(fib), H), dtype=dt)
        self.fiber.allgatherv(np.ascontiguousarray(s_dst, dtype=dt), T, [k * H for k in fib])
        o = self._orientation("a")
        nrows = sum(fib)
        m = np.full((nrows, H), -np.inf, dtype=dt)
        lsum = np.zeros((nrows, H), dtype=dt)
        acc = np.zeros((nrows, H * F), dtype=dt)
        nxt = np.empty_like(cur)

        def step(t: int, Yb: np.ndarray) -> None:
            with self.stats.timer("compute"):
                attention_forward_block(o.blocks[t], T, Yb, H, F, negative_slope, m, lsum,
                                        acc, edge_scale, int(o.offsets[t]))

        self._attention_shifts(cur, nxt, lay, step)
        # reduction: merge the fiber's partials of each member's rows on that member
        part = np.concatenate([m, lsum, acc], axis=1)
        w = H * (F + 2)
        own = fib[v]
        if c > 1:
            recv = np.empty((c, own, w), dtype=dt)
            self.fiber.alltoallv(np.ascontiguousarray(part), [k * w for k in fib], recv,
                                [own * w] * c, phase="reduction")
        else:
            recv = part[None]
        ms, ls, accs = recv[:, :, :H], recv[:, :, H:2 * H], recv[:, :, 2 * H:].reshape(c, own, H, F)
        M = ms.max(axis=0)
        with np.errstate(invalid="ignore"):
            fac = np.where(np.isneginf(ms), 0.0, np.exp(ms - M[None])).astype(dt)
        total = (ls * fac).sum(axis=0)
        num = (accs * fac[..., None]).sum(axis=0)
        out = np.zeros((own, H, F), dtype=dt)
        np.divide(num, total[..., None], out=out, where=total[..., None] > 0)
        if not return_stats:
            return out
        with np.errstate(divide="ignore"):
            L = (M + np.log(total)).astype(dt)   # -inf on rows without entries
        return out, L

    def fused_attention_backward(self, s_dst: np.ndarray, s_src: np.ndarray, Z: np.ndarray,
                                 out: np.ndarray, L: np.ndarray, dout: np.ndarray,
                                 negative_slope: float = 0.2,
                                 edge_scale: np.ndarray | None = None
                                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The backward of :meth:`fused_attention`, in one loop of Algorithm 1.

        Stored per-row statistics, not recomputation: the forward keeps L = log-sum-exp of
        each row and head (``return_stats``; H numbers per node), from which every
        coefficient alpha_ij = exp(e_ij - L_i) is recomputed from the per-node scores as the
        blocks pass, so neither alpha nor the scores (H numbers per edge each) are stored
        and the forward's loop is not run again. With t_i = dout_i . out_i (a local dot
        product, sum_j alpha_ij d alpha_ij): d alpha_ij = scale_ij dout_i . z_j,
        dpre_ij = LeakyReLU'(pre_ij) alpha_ij (d alpha_ij - t_i), and

            dZ_j = sum_i alpha_ij scale_ij dout_i,  d s_src_j = sum_i dpre_ij,
            d s_dst_i = sum_j dpre_ij.

        Communication, on rank (u, v) (exact: :func:`fused_attention_backward_words`):
        replication, an all-gather of ``[dout | t | L | s_dst]`` (H (F + 3) per row) over
        the fiber; propagation, q - 1 shifts of the B block ``[z | s_src]`` and q shifts of
        its gradient rows ``[dZ | d s_src]`` (H (F + 1) per row each), which travel with it
        and come home finished (as SpMMB's output, Algorithm 1); reduction, d s_dst's
        partials over the fiber (a reduce-scatter, H per row). The local step is one
        compiled call per block (:func:`~distmm.kernels.attention.attention_backward_block`).

        Parameters
        ----------
        s_dst, s_src : ndarray, shape (local nodes, H)
            The forward's per-node scores.
        Z : ndarray, shape (local nodes, H * F)
            The forward's features.
        out, L : ndarray, shapes (local nodes, H, F) and (local nodes, H)
            The forward's output and statistics (``fused_attention(..., return_stats=True)``).
        dout : ndarray, shape (local nodes, H, F)
            The gradient of the loss with respect to ``out``.
        negative_slope, edge_scale
            As given to the forward.

        Returns
        -------
        (dZ (local nodes, H, F), d_dst (local nodes, H), d_src (local nodes, H))
            This rank's rows (B side for dZ and d_src, A side for d_dst; they coincide).

        Collective over the matrix's communicator.
        """
        H, F, u, v, c, fib, lay, cur, edge_scale = self._attention_operands(s_dst, s_src, Z,
                                                                            edge_scale)
        dt = self.dtype
        own, nrows = fib[v], sum(fib)
        t = np.einsum("nhf,nhf->nh", dout, out)
        mine = np.concatenate([np.reshape(dout, (own, H * F)), t, L, s_dst], axis=1).astype(dt)
        wx = H * (F + 3)
        XR = np.empty((nrows, wx), dtype=dt)
        self.fiber.allgatherv(np.ascontiguousarray(mine), XR, [k * wx for k in fib])
        o = self._orientation("a")
        nxt = np.empty_like(cur)
        g_cur = np.zeros_like(cur)
        g_nxt = np.empty_like(cur)
        d_dst = np.zeros((nrows, H), dtype=dt)

        def step(tb: int, Yb: np.ndarray, Gb: np.ndarray) -> None:
            with self.stats.timer("compute"):
                attention_backward_block(o.blocks[tb], XR, Yb, H, F, negative_slope, Gb,
                                         d_dst, edge_scale, int(o.offsets[tb]))

        G = self._attention_shifts(cur, nxt, lay, step, g_cur, g_nxt)
        if c > 1:
            mine_dst = np.empty((own, H), dtype=dt)
            self.fiber.reduce_scatter(d_dst, mine_dst, [k * H for k in fib])
            d_dst = mine_dst
        dZ = np.ascontiguousarray(G[:, :H * F]).reshape(own, H, F)
        return dZ, d_dst, np.ascontiguousarray(G[:, H * F:])

    def _attention_operands(self, s_dst, s_src, Z, edge_scale):
        """What both fused attention loops start from: (H, F, u, v, c, the fiber's and the
        layer's block rows, a shift buffer holding this rank's packed ``[z | s_src]`` rows,
        the dropout factors contiguous in the matrix's dtype or None). Not collective."""
        H = s_dst.shape[1]
        F = Z.shape[1] // H
        u, v = self.grid.u, self.grid.v
        fib, lay = _attention_rows(self, u, v)
        cur = np.empty((max(lay), H * (F + 1)), dtype=self.dtype)
        cur[:lay[u], :H * F] = Z
        cur[:lay[u], H * F:] = s_src
        if edge_scale is not None:
            edge_scale = np.ascontiguousarray(edge_scale, dtype=self.dtype)
        return H, F, u, v, self.c, fib, lay, cur, edge_scale

    def _attention_shifts(self, cur: np.ndarray, nxt: np.ndarray, lay: list[int], step,
                          out_cur: np.ndarray | None = None,
                          out_nxt: np.ndarray | None = None) -> np.ndarray | None:
        """The fused attention's loop (Algorithm 1's shifts): at step s this rank runs
        ``step(t, Y)`` on block t = (u + s) mod q with the packed B block Y present (in
        ``cur``, rows ``lay[t]``), then sends it left and receives the next from the right.
        The input block's last shift is not sent (it would only return home). With
        ``out_cur`` (the backward's gradient rows, zeroed, travelling with the block),
        ``step(t, Y, G)`` gets them too, and they are shifted at every step, the last
        bringing this rank's finished rows home; returns them."""
        u, q = self.grid.u, self.q
        left, right = (u - 1) % q, (u + 1) % q
        for s in range(q):
            t = (u + s) % q
            nt = (t + 1) % q
            if out_cur is None:
                step(t, cur[:lay[t]])
            else:
                step(t, cur[:lay[t]], out_cur[:lay[t]])
            if s < q - 1:
                self.layer.shift(cur[:lay[t]], nxt[:lay[nt]], dest=left, source=right)
                cur, nxt = nxt, cur
            if out_cur is not None and q > 1:
                self.layer.shift(out_cur[:lay[t]], out_nxt[:lay[nt]], dest=left, source=right)
                out_cur, out_nxt = out_nxt, out_cur
        return None if out_cur is None else out_cur[:lay[u]]


def dense_shift_15d_exact(op: str, m: int, n: int, r: int, p: int, c: int,
                          strategy: str = "none") -> dict[str, dict[str, float]]:
    """Words and messages sent per rank, per phase, by :class:`DenseShift15D` for one op.

    Assumes p divides m and n (otherwise these are averages). Returns
    ``{phase: {"words": w, "messages": k}}`` for replication, propagation and reduction.
    """
    require(op in OPS, f"unknown op {op!r}")
    require(p % c == 0, f"c={c} does not divide p={p}")
    q = p // c
    if op == "fusedmm_b":
        # FusedMMB is FusedMMA on the transposed problem (section IV-B).
        return dense_shift_15d_exact("fusedmm_a", n, m, r, p, c, strategy)
    a_blk, b_blk = m * r / p, n * r / p
    # A pass over an input Y sends q - 1 shifts, one that returns the output Y home q.
    shifts, out_shifts = (q - 1, q) if q > 1 else (0, 0)
    repl = {"words": 0.0, "messages": 0}
    prop = {"words": 0.0, "messages": 0}
    red = {"words": 0.0, "messages": 0}

    def add(d: dict, words: float, msgs: int) -> None:
        d["words"] += words
        d["messages"] += msgs

    if op == "sddmm":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
    elif op == "spmm_b":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, out_shifts * b_blk, out_shifts)
    elif op == "spmm_a":
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "none":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, 2 * shifts * b_blk, 2 * shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "reuse":
        add(repl, (c - 1) * b_blk, c - 1)
        add(prop, (shifts + out_shifts) * a_blk, shifts + out_shifts)
    elif strategy == "fusion":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    else:
        require(False, f"unknown strategy {strategy!r}")
    return {"replication": repl, "propagation": prop, "reduction": red}


def _attention_rows(S: DenseShift15D, u: int, v: int) -> tuple[list[int], list[int]]:
    """Rows of the A blocks of fiber u and of the B blocks of layer v, in fiber and layer
    order (the fused attention's replicated and shifted pieces)."""
    return (np.diff(S.offsets["a"])[S.grid.fiber_blocks(u)].tolist(),
            np.diff(S.offsets["b"])[S.grid.layer_blocks(v)].tolist())


def fused_attention_words(S: DenseShift15D, heads: int, features: int,
                          rank: int) -> dict[str, int]:
    """Words ``rank`` sends per phase in one :meth:`DenseShift15D.fused_attention` on ``S``
    with ``heads`` heads of ``features`` features. Not collective."""
    u, v = S.grid.position(rank)
    fib, lay = _attention_rows(S, u, v)
    own = fib[v]
    c, q = S.c, S.q
    out = {"replication": own * heads * (c - 1) if c > 1 else 0,
           "reduction": (sum(fib) - own) * heads * (features + 2) if c > 1 else 0,
           "propagation": 0}
    if q > 1:
        width = heads * (features + 1)
        # step s < q - 1 sends the block of layer position (u + s) mod q
        out["propagation"] = sum(lay[(u + s) % q] for s in range(q - 1)) * width
    return out


def fused_attention_backward_words(S: DenseShift15D, heads: int, features: int,
                                   rank: int) -> dict[str, int]:
    """Words ``rank`` sends per phase in one :meth:`DenseShift15D.fused_attention_backward`
    on ``S`` with ``heads`` heads of ``features`` features. Not collective."""
    u, v = S.grid.position(rank)
    fib, lay = _attention_rows(S, u, v)
    own = fib[v]
    c, q = S.c, S.q
    out = {"replication": own * heads * (features + 3) * (c - 1) if c > 1 else 0,
           "reduction": (sum(fib) - own) * heads if c > 1 else 0,
           "propagation": 0}
    if q > 1:
        width = heads * (features + 1)
        # the input block: q - 1 shifts; its gradient rows: q (the last brings them home)
        out["propagation"] = (sum(lay[(u + s) % q] for s in range(q - 1))
                              + sum(lay)) * width
    return out
