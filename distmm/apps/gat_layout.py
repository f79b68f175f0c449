"""Whole node rows on any algorithm family: the layout layer under the distributed GAT.

A GAT layer needs whole rows of its per-node arrays (``X W^T``, the per-node scores, the
concatenation of heads), while four of the five families cut the dense width r of A and B into
column pieces over a *row group* (paper Table II; :mod:`distmm.ops.groups`): 1.5D sparse
shifting gives a row block to the q = p/c ranks of a layer, 2.5D dense replicating to the s
ranks of a grid row (A) or of a wrapped anti-diagonal (B), 2.5D sparse replicating to the s c
ranks sharing a row block; 1.5D dense shifting and the sparsity-aware family keep whole rows
(groups of one). And in the 2.5D families a rank's A-side and B-side rows are different node
blocks.

:class:`NodeLayout` holds, for one distributed S (square), what the layer needs beyond the
family's own calls, from the family's public layout surface alone (``dense_rows``,
``dense_cols``, ``local_rows``, ``r_rule``) so that one code serves every family:

* **whole rows per side**: every rank keeps whole rows of its A-side and B-side node blocks,
  replicated over the side's row group;
* **pieces**: the column piece of a (rows, H, F) array, seen as (rows, H F), that the
  family's multi-value SpMM and multi-head SDDMM take on this rank (:meth:`piece`), each
  head padded to ``width(F, H) = max(F, ceil(r_min / H))`` where H F is below the family's
  smallest width r_min (padding columns are zeros: they add nothing to an SDDMM's dot
  products, and the SpMM's padding columns are dropped);
* **row-group all-gather** (phase ``gat_allgather``): the SpMM's output pieces of all heads
  made whole rows again in one all-gather over the row group (:meth:`allgather`,
  :meth:`allgather_words`);
* **whole-row transfer** (phase ``gat_transfer``): per-node rows moved from the A-side blocks
  to the B-side blocks or back (:class:`RowTransfer`, :meth:`transfer_words`); nothing moves
  (and no message is sent) where every rank's two blocks hold the same rows, as in the 1.5D
  families on a square S;
* **counted rows**: the rows this rank counts in a sum over nodes (a weight gradient, a loss),
  so that each node counts once per row group (the rows the group's *combiner* chunking gives
  this rank, :mod:`distmm.ops.holders`).

Words are counted through the object's :class:`~distmm.core.comm.CountingComm` wrappers.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from distmm.core.comm import mpi_type
from distmm.errors import require
from distmm.ops.groups import row_group
from distmm.ops.holders import column_range, holders

ALLGATHER_PHASE = "gat_allgather"
TRANSFER_PHASE = "gat_transfer"
SIDES = ("a", "b")


class RowTransfer:
    """The plan moving whole rows of per-node arrays from side ``src``'s blocks to side
    ``dst``'s (square S), built from the layout alone, identically on every rank.

    Each destination rank takes each of its rows from one holder on the source side: itself
    where it holds the row there (no words), else one member of the row's source row group,
    the destinations of a group being dealt to its members in world-rank order (so a member
    sends at most ceil(destinations / members) copies). Not collective to build;
    :meth:`apply` is (one all-to-all, phase ``gat_transfer``, skipped on every rank when no
    rank needs another's rows).
    """

    def __init__(self, obj, src: str, dst: str) -> None:
        Hs = holders(obj, src)
        me, p = obj.rank, obj.p
        send_parts: list[list[np.ndarray]] = [[] for _ in range(p)]
        recv_parts: list[list[np.ndarray]] = [[] for _ in range(p)]
        self.local_src = np.zeros(0, dtype=np.int64)   # positions in my src block ...
        self.local_dst = np.zeros(0, dtype=np.int64)   # ... copied to these of my dst block
        pending: dict[int, list[tuple[int, np.ndarray]]] = {}
        self.remote = False
        for d in range(p):
            rows = obj.dense_rows(dst, d)
            colors = Hs.row_color[rows]
            for g in np.unique(colors):
                idx = np.flatnonzero(colors == g)
                if Hs.color[d] == g:
                    if d == me:
                        self.local_src = np.concatenate([self.local_src,
                                                         Hs.position[rows[idx]]])
                        self.local_dst = np.concatenate([self.local_dst, idx])
                    continue
                pending.setdefault(int(g), []).append((d, idx))
        for g, dests in pending.items():
            members = Hs.members(g)
            for t, (d, idx) in enumerate(dests):
                source = int(members[t % members.size])
                self.remote = True
                if source == me:
                    send_parts[d].append(Hs.position[obj.dense_rows(dst, d)[idx]])
                if d == me:
                    recv_parts[source].append(idx)
        empty = np.zeros(0, dtype=np.int64)
        self.send_rows = [np.concatenate(x) if x else empty for x in send_parts]
        self.recv_rows = [np.concatenate(x) if x else empty for x in recv_parts]
        self.dst_rows = obj.dense_rows(dst, me).size

    def rows_sent(self) -> int:
        """Rows this rank sends to other ranks in one :meth:`apply`."""
        return int(sum(x.size for x in self.send_rows))

    def rows_received(self) -> int:
        """Rows this rank receives from other ranks in one :meth:`apply`."""
        return int(sum(x.size for x in self.recv_rows))

    def apply(self, world, X: np.ndarray) -> np.ndarray:
        """This rank's dst-side rows of the per-node array whose src-side rows are ``X``
        ((src rows, w), whole rows). Collective over ``world`` unless no rank sends."""
        X = np.ascontiguousarray(X)
        w = int(np.prod(X.shape[1:], dtype=np.int64))
        out = np.empty((self.dst_rows,) + X.shape[1:], dtype=X.dtype)
        out[self.local_dst] = X[self.local_src]
        if not self.remote:
            return out
        send = np.concatenate([X[r].reshape(-1) for r in self.send_rows]) if any(
            r.size for r in self.send_rows) else np.zeros(0, dtype=X.dtype)
        recv = np.empty(self.rows_received() * w, dtype=X.dtype)
        world.alltoallv(send, [r.size * w for r in self.send_rows], recv,
                        [r.size * w for r in self.recv_rows], phase=TRANSFER_PHASE)
        flat = out.reshape(self.dst_rows, -1)
        pos = 0
        for rows in self.recv_rows:
            flat[rows] = recv[pos:pos + rows.size * w].reshape(rows.size, w)
            pos += rows.size * w
        return out


class NodeLayout:
    """Whole node rows of a square distributed S on any family (see the module docstring).

    Parameters
    ----------
    obj : DistributedMatrix
        A square S on any family of :data:`distmm.algorithms.ALGORITHMS`.

    Construction is not collective (layout arithmetic over every rank). The row-group
    communicators are split on first use (collective over ``obj.comm``).
    """

    def __init__(self, obj) -> None:
        require(obj.shape[0] == obj.shape[1],
                f"GAT needs a square S; this one is {obj.shape[0]} x {obj.shape[1]}")
        self.obj = obj
        self.min_width = int(obj.r_rule()[0]) if obj.splits_r else 1
        self.nodes = {side: obj.local_rows(side) for side in SIDES}
        self.counted = {}
        for side in SIDES:
            H = holders(obj, side)
            rows = obj.dense_rows(side, obj.rank)
            self.counted[side] = H.combiner[rows] == obj.rank
        self._transfers: dict[str, RowTransfer] = {}

    # -------------------------------------------------------------------- layout facts
    def members(self, side: str, rank: int | None = None) -> np.ndarray:
        """World ranks of ``rank``'s row group on ``side`` (default this rank), ascending: the
        order of its communicator. Not collective."""
        H = holders(self.obj, side)
        return H.members(H.color[self.obj.rank if rank is None else rank])

    def group_size(self, side: str, rank: int | None = None) -> int:
        """Ranks in ``rank``'s row group on ``side`` (default this rank). Not collective."""
        return int(self.members(side, rank).size)

    def width(self, F: int, heads: int = 1) -> int:
        """The width per head at which the family's calls run ``heads`` heads of F features:
        F, or where heads * F is below the family's smallest width r_min, ceil(r_min /
        heads) (the extra columns of each head are zero padding). The calls' width is
        ``heads * width(F, heads)``."""
        return max(int(F), -(-self.min_width // int(heads)))

    def columns(self, side: str, F: int, rank: int | None = None, heads: int = 1) -> range:
        """The columns (of ``heads * width(F, heads)``) of this rank's piece on ``side``. Not
        collective."""
        rank = self.obj.rank if rank is None else rank
        return column_range(self.obj, side, rank, heads * self.width(F, heads))

    def pieces_split(self) -> bool:
        """Whether the family cuts the width into pieces (else a piece is the whole row)."""
        return bool(self.obj.splits_r)

    # -------------------------------------------------------------------- pieces
    def piece(self, side: str, X: np.ndarray) -> np.ndarray:
        """This rank's column piece of the whole rows ``X`` ((rows, H, F), H heads), each head
        padded with zero columns up to ``width(F, H)``, seen as (rows, H width(F, H)): a new
        C-contiguous (rows, w) array (``X`` reshaped where the family keeps whole rows). Not
        collective."""
        n, H, F = X.shape
        Fp = self.width(F, H)
        if not self.pieces_split() and Fp == F:
            return X.reshape(n, H * F)  # the whole row
        cols = self.columns(side, F, heads=H)
        if Fp != F:
            padded = np.zeros((n, H, Fp), dtype=X.dtype)
            padded[:, :, :F] = X
            X = padded
        return np.ascontiguousarray(X.reshape(n, H * Fp)[:, cols.start:cols.stop])

    def allgather(self, side: str, piece: np.ndarray, heads: int, F: int) -> np.ndarray:
        """Whole rows (rows, H, F) from this rank's piece (rows, w) of the H heads' columns
        (:meth:`piece`'s columns, of H width(F, H)), by one all-gather over the row group of
        ``side`` (phase ``gat_allgather``; nothing is sent in a group of one). Collective over
        ``obj.comm`` the first time (the group's split), over the row group afterwards."""
        n, H = piece.shape[0], int(heads)
        Fp = self.width(F, H)
        if not self.pieces_split():
            out = piece.reshape(n, H, Fp)
            return np.ascontiguousarray(out[:, :, :F]) if Fp != F else out
        group = row_group(self.obj, side)
        ranges = [column_range(self.obj, side, int(k), H * Fp) for k in self.members(side)]
        counts = [n * len(cr) for cr in ranges]
        recv = np.empty(sum(counts), dtype=piece.dtype)
        group.allgatherv(np.ascontiguousarray(piece), recv, counts, phase=ALLGATHER_PHASE)
        out = np.empty((n, H * Fp), dtype=piece.dtype)
        pos = 0
        for cr, cnt in zip(ranges, counts, strict=True):
            out[:, cr.start:cr.stop] = recv[pos:pos + cnt].reshape(n, len(cr))
            pos += cnt
        out = out.reshape(n, H, Fp)
        return np.ascontiguousarray(out[:, :, :F]) if Fp != F else out

    def allgather_words(self, side: str, heads: int, F: int, rank: int | None = None
                        ) -> dict[str, int]:
        """Words ``rank`` sends and receives in one :meth:`allgather` of ``heads`` heads of F
        features on ``side``: with g ranks in its row group, ``rows`` rows and a piece of w of
        the ``W = heads width(F, heads)`` columns, sent ``rows w (g - 1)``, received ``rows
        (W - w)`` (0 and 0 in a group of one). Not collective."""
        rank = self.obj.rank if rank is None else rank
        g = self.group_size(side, rank)
        if not self.pieces_split() or g == 1:
            return {"words_sent": 0, "words_received": 0}
        rows = self.obj.dense_rows(side, rank).size
        w = len(self.columns(side, F, rank, heads))
        W = heads * self.width(F, heads)
        return {"words_sent": rows * w * (g - 1), "words_received": rows * (W - w)}

    # -------------------------------------------------------------------- transfers
    def transfer_plan(self, to_side: str) -> RowTransfer:
        """The cached :class:`RowTransfer` into ``to_side``. Not collective."""
        plan = self._transfers.get(to_side)
        if plan is None:
            src = "b" if to_side == "a" else "a"
            plan = self._transfers[to_side] = RowTransfer(self.obj, src, to_side)
        return plan

    def transfer(self, X: np.ndarray, to_side: str) -> np.ndarray:
        """``to_side``'s whole rows of a per-node array whose other-side whole rows are
        ``X`` ((rows, ...) any trailing shape). Collective over ``obj.comm`` where any rank's
        two blocks differ (phase ``gat_transfer``), else a local copy on every rank."""
        return self.transfer_plan(to_side).apply(self.obj.world, X)

    def transfer_words(self, to_side: str, w: int, rank: int | None = None) -> dict[str, int]:
        """Words this rank sends and receives in one :meth:`transfer` of w values per row
        (this rank only: the plan is this rank's). Not collective."""
        plan = self.transfer_plan(to_side)
        return {"words_sent": plan.rows_sent() * w, "words_received": plan.rows_received() * w}

    # -------------------------------------------------------------------- output
    def gather(self, side: str, X: np.ndarray, root: int = 0) -> np.ndarray | None:
        """The whole per-node array (n, w), original node order, on ``root`` from every
        rank's whole rows ``X`` of ``side`` (each row sent once, by the rank counting it);
        None elsewhere. Collective over ``obj.comm`` (not counted: output, like
        :meth:`~distmm.algorithms.base.DistributedMatrix.gather`)."""
        comm, obj = self.obj.comm, self.obj
        keep = self.counted[side]
        ids = np.ascontiguousarray(self.nodes[side][keep], dtype=np.int64)
        rows = np.ascontiguousarray(X[keep], dtype=X.dtype).reshape(ids.size, -1)
        w = rows.shape[1]
        counts = np.zeros(obj.p, dtype=np.int64)
        comm.Allgather(np.array([ids.size], dtype=np.int64), counts)
        n = int(counts.sum())
        all_ids = np.empty(n, dtype=np.int64) if obj.rank == root else None
        all_rows = np.empty(n * w, dtype=X.dtype) if obj.rank == root else None
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        comm.Gatherv([ids, ids.size, MPI.INT64_T],
                     [all_ids, (counts, displs), MPI.INT64_T] if obj.rank == root else None,
                     root=root)
        t = mpi_type(np.dtype(X.dtype))
        comm.Gatherv([rows, rows.size, t],
                     [all_rows, (counts * w, displs * w), t] if obj.rank == root else None,
                     root=root)
        if obj.rank != root:
            return None
        out = np.empty((n, w), dtype=X.dtype)
        out[all_ids] = all_rows.reshape(n, w)
        return out


# ------------------------------------------------------------------------ closed forms
def row_group_shape(algorithm: str, n: int, p: int, c: int) -> tuple[float, int]:
    """(rows of a rank's node block, ranks in its row group) of a square n x n S on
    ``algorithm`` with p ranks and replication c, blocks balanced (Table II): 1.5D dense
    shifting and the sparsity-aware family n/p rows, groups of one; 1.5D sparse shifting
    n/c rows (a layer's p/c row blocks), groups of q = p/c; 2.5D dense replicating n/(s c)
    rows, groups of s = sqrt(p/c) (a grid row for A, a wrapped anti-diagonal for B); 2.5D
    sparse replicating n/s rows, groups of s c. The same for the A and B sides. Not
    collective."""
    s = math.isqrt(p // c) if p % c == 0 else 0
    return {"15d-dense-shift": (n / p, 1), "15d-sparse-aware": (n / p, 1),
            "15d-sparse-shift": (n / c, p // c),
            "25d-dense-replicate": (n / (s * c), s),
            "25d-sparse-replicate": (n / s, s * c)}[algorithm]


def allgather_model_words(algorithm: str, n: int, p: int, c: int, heads: int, F: int) -> float:
    """Mean words a rank sends in one row-group all-gather (:meth:`NodeLayout.allgather`) of
    ``heads`` heads of F features, either side, blocks and widths balanced: with ``rows``
    and ``g`` of :func:`row_group_shape` and ``W = heads max(F, ceil(r_min / heads))`` (the
    width of the layer's multi-head calls, r_min the family's smallest width),
    ``rows (W / g) (g - 1)``. Not collective."""
    from distmm.algorithms import family

    rows, g = row_group_shape(algorithm, n, p, c)
    if g == 1:
        return 0.0
    r_min = family(algorithm).model.min_width(p, c)
    W = heads * max(F, -(-r_min // heads))
    return rows * (W / g) * (g - 1)


def transfer_model_words(algorithm: str, n: int, p: int, c: int, w: int) -> float:
    """Mean words a rank sends in one whole-row transfer (:meth:`NodeLayout.transfer`) of w
    values per row between the A and B blocks, blocks balanced: 0 in the 1.5D families (a
    rank's two blocks are the same nodes); in 2.5D dense replicating every rank with j != 0
    receives its n/(s c) rows, ``(1 - 1/s) n w / (s c)``; in 2.5D sparse replicating every
    rank with i != j its n/s rows, ``(1 - 1/s) n w / s``. Each block moved is sent by one
    holder, so the mean sent equals the mean received. Not collective."""
    if algorithm not in ("25d-dense-replicate", "25d-sparse-replicate"):
        return 0.0
    rows, _ = row_group_shape(algorithm, n, p, c)
    s = math.isqrt(p // c)
    return (1 - 1 / s) * rows * w
