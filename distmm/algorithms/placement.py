"""Placing S: routing its nonzeros to their owners, building the owners' CSR blocks, the
load-balancing permutations, and moving S's values between two stored orientations.

A :class:`Placement` is the part of a distributed matrix
(:class:`~distmm.algorithms.base.DistributedMatrix`) that does this; it holds only what the
exchanges need (the communicator, its counting wrapper and counters, the dtype and S's shape)
and is built before the family places S (``_setup``). Every exchange is counted under phase
"distribute" (placing S) or "values" (moving values). Families call it as the matrix's
``placement`` part (``S.placement.place``, ``exchange``, ``value_plan``, ``move_values``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from distmm.core.comm import CommStats, CountingComm
from distmm.core.coo import CooShare
from distmm.core.permute import balance_permutation
from distmm.core.sparse import CSRBlock


@dataclass
class Orientation:
    """One stored orientation of S on this rank, as a list of CSR blocks.

    In orientation "a" the blocks are pieces of S (rows index A, columns index B); in
    orientation "b" they are pieces of S^T (rows index B, columns index A). ``values`` is the
    flat array of the blocks' values in value order; each block's ``data`` is a view into it.
    ``row_base`` is the global (permuted) index of local row 0 and ``col_bases[t]`` the global
    index of local column 0 of block t.
    """

    name: str
    blocks: list[CSRBlock]
    offsets: np.ndarray
    values: np.ndarray
    row_base: int
    col_bases: np.ndarray

    def block_values(self, values: np.ndarray, t: int) -> np.ndarray:
        """Block t's piece of ``values`` (value order): a view, or ``values`` itself where
        block t holds every value. Not collective."""
        bounds = self.__dict__.get("_bounds")
        if bounds is None:  # the offsets as Python ints: every kernel step reads them
            bounds = self.__dict__["_bounds"] = self.offsets.tolist()
        lo, hi = bounds[t], bounds[t + 1]
        if lo == 0 and hi == values.shape[0]:
            return values
        return values[lo:hi]

    @property
    def nnz(self) -> int:
        return int(self.offsets[-1])

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global (permuted) (row, col) in this orientation's frame of every stored nonzero."""
        rows = [blk.row_ids() + self.row_base for blk in self.blocks]
        cols = [blk.indices.astype(np.int64) + base
                for blk, base in zip(self.blocks, self.col_bases, strict=True)]
        return concat_ids(rows), concat_ids(cols)


def concat_ids(parts: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class Placement:
    """Places S on the ranks of ``comm`` and moves its values (see the module docstring).

    Parameters
    ----------
    comm : MPI.Comm
        The matrix's communicator (p ranks).
    world : CountingComm
        The counting wrapper of ``comm`` (every word it sends is counted in ``stats``).
    stats : CommStats
        The matrix's counters.
    dtype : numpy dtype
        The dtype of S's values.
    shape : (int, int)
        S's shape (m, n).
    """

    def __init__(self, comm: MPI.Comm, world: CountingComm, stats: CommStats, dtype,
                 shape: tuple[int, int]) -> None:
        self.comm, self.world, self.stats = comm, world, stats
        self.p = comm.Get_size()
        self.dtype = np.dtype(dtype)
        self.shape = shape

    def balance_permutations(self, source: CooShare, mode: str, seed: int
                              ) -> tuple[np.ndarray, np.ndarray]:
        """The row and column permutations for load balance by ``mode`` (one shared
        permutation when S is square; collective: the "blocks" weights are all-reduced)."""
        # Rows are assigned to the p finest row blocks any family uses (the 1.5D families'
        # blocks; each 2.5D block is a union of consecutive ones), so "blocks" keeps the
        # natural order inside every 1.5D block and inside each p-th of a 2.5D block.
        m, n = self.shape
        row_w = col_w = None
        if mode == "blocks":
            row_w, col_w = self.row_weights(source)
        if m == n:
            perm = balance_permutation(mode, m, self.p, seed,
                                       None if row_w is None else [row_w, col_w])
            return perm, perm
        return (balance_permutation(mode, m, self.p, seed, None if row_w is None else [row_w]),
                balance_permutation(mode, n, self.p, seed + 1,
                                    None if col_w is None else [col_w]))

    def row_weights(self, source: CooShare) -> tuple[np.ndarray, np.ndarray]:
        """Global nonzeros per row and per column of S (collective: one all-reduce of m + n
        integers, counted under "distribute"), the weights the permutation balances."""
        m, n = self.shape
        local = np.concatenate((np.bincount(source.rows, minlength=m),
                                np.bincount(source.cols, minlength=n))).astype(np.int64)
        total = np.empty_like(local)
        self.world.allreduce(local, total, phase="distribute")
        return total[:m], total[m:]

    def place(self, name: str, owners: np.ndarray, rows: np.ndarray, cols: np.ndarray,
               vals: np.ndarray, layout: callable) -> Orientation:
        """Send each entry to its owner and build the owner's blocks (collective).

        ``rows``/``cols`` are permuted global coordinates in the orientation's frame and
        ``layout(rows, cols)`` returns, on the owner, ``(block_index, local_row, local_col,
        nblocks, block_shapes, row_base, col_bases)``.
        """
        rows, cols, vals = self.exchange(owners, (rows, cols, vals))
        t, lr, lc, nblocks, shapes, row_base, col_bases = layout(rows, cols)
        order = np.argsort(t, kind="stable")
        bounds = np.searchsorted(t[order], np.arange(nblocks + 1))
        blocks = []
        for b in range(nblocks):
            sel = order[bounds[b]:bounds[b + 1]]
            blocks.append(CSRBlock.from_coo(lr[sel], lc[sel], vals[sel], shapes[b], self.dtype))
        offsets = np.zeros(nblocks + 1, dtype=np.int64)
        np.cumsum([blk.nnz for blk in blocks], out=offsets[1:])
        values = np.empty(int(offsets[-1]), dtype=self.dtype)
        for b, blk in enumerate(blocks):
            values[offsets[b]:offsets[b + 1]] = blk.data
            blk.data = values[offsets[b]:offsets[b + 1]]
        return Orientation(name, blocks, offsets, values, row_base, np.asarray(col_bases))

    def exchange(self, owners: np.ndarray, arrays: tuple[np.ndarray, ...]
                  ) -> tuple[np.ndarray, ...]:
        """Route entry k of every array to rank ``owners[k]`` (collective, phase distribute)."""
        order = np.argsort(owners, kind="stable")
        sendcounts = np.bincount(owners, minlength=self.p).astype(np.int64)
        recvcounts = np.empty(self.p, dtype=np.int64)
        with self.stats.timer("distribute"):
            self.comm.Alltoall(sendcounts, recvcounts)
        self.stats.add("distribute", self.p - 1, self.p - 1, self.p - 1, self.p - 1)
        out = []
        for arr in arrays:
            send = np.ascontiguousarray(arr[order])
            recv = np.empty(int(recvcounts.sum()), dtype=send.dtype)
            self.world.alltoallv(send, sendcounts, recv, recvcounts, phase="distribute")
            out.append(recv)
        return tuple(out)

    def value_plan(self, src: Orientation, dst: Orientation, src_owner, dst_owner):
        """How to move values from ``src`` value order to ``dst`` value order.

        Both sides sort their nonzeros by (other side's owner, global key) without
        communicating, so the k-th value sent from rank a to rank b is the k-th nonzero of b
        that a owns. ``src_owner(rows, cols)`` gives the owner in ``src``'s orientation of
        entries given in S's frame; likewise ``dst_owner``.
        """
        n = self.shape[1]
        si, sj = _s_frame(src)
        di, dj = _s_frame(dst)
        s_to = dst_owner(si, sj)
        d_from = src_owner(di, dj)
        send_order = np.lexsort((si * n + sj, s_to))
        recv_order = np.lexsort((di * n + dj, d_from))
        sendcounts = np.bincount(s_to, minlength=self.p)
        recvcounts = np.bincount(d_from, minlength=self.p)
        return send_order, sendcounts, recv_order, recvcounts

    def move_values(self, plan, src_values: np.ndarray, dst_values: np.ndarray) -> None:
        send_order, sendcounts, recv_order, recvcounts = plan
        recv = np.empty(recv_order.size, dtype=src_values.dtype)
        self.world.alltoallv(np.ascontiguousarray(src_values[send_order]), sendcounts, recv,
                             recvcounts, phase="values")
        dst_values[recv_order] = recv


def _s_frame(o: Orientation) -> tuple[np.ndarray, np.ndarray]:
    """Global (row, col) in S's own frame of an orientation's stored nonzeros."""
    rows, cols = o.coordinates()
    return (rows, cols) if o.name == "a" else (cols, rows)


def check_share(source: CooShare, check_finite: bool) -> str | None:
    """Local check of a rank's COO share (a hand-made one may hold anything)."""
    m, n = source.shape
    if min(m, n) < 0:
        return f"the sparse matrix has a negative dimension {source.shape}"
    if source.nnz and (source.rows.min() < 0 or source.rows.max() >= m
                       or source.cols.min() < 0 or source.cols.max() >= n):
        return f"a nonzero of the sparse matrix lies outside its shape {source.shape}"
    if check_finite and not np.isfinite(source.vals).all():
        return "the sparse matrix has NaN or infinite values"
    return None


__all__ = ["Orientation", "Placement", "check_share", "concat_ids"]
