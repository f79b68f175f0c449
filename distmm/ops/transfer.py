"""Moving a dense block between the A-side and B-side distributions of a square S.

A GNN layer's output Z = S H W is A-side (rows of S), and the next layer multiplies it by S
again from the B side; ALS alternates between user and item factors the same way. For square S
(m == n, one permutation for rows and columns) the two distributions hold the same global rows
in most places, so a plan built once from the layout (no communication) lists, per rank pair,
which rows and columns move; applying it is one all-to-all, counted under phase "transfer".

Per family (Table II layouts, square S): 1.5D dense and sparse shifting place A and B alike,
so nothing moves. 2.5D dense replicating stores B pre-skewed (rank (i, j, k) holds B row block
((i+j) mod s)c+k): every rank with j != 0 sends its whole block, m (r - w_0) words in all (w_0:
width of column block 0). 2.5D sparse replicating holds A row block i and B row block j on rank
(i, j, k): ranks with i != j send their whole block, (1 - 1/s) m r words in all when s c divides
r. In every family each rank's block moves whole, to one rank, or stays
(:func:`transfer_words`).
"""

from __future__ import annotations

import numpy as np

from distmm.errors import require
from distmm.ops.checks import agree_width, block_side
from distmm.ops.holders import column_range, global_width, holders

PHASE = "transfer"
OTHER = {"a": "b", "b": "a"}


class TransferPlan:
    """Flat indices of what this rank sends to and receives from each rank (layout only)."""

    def __init__(self, obj, src: str, r: int) -> None:
        dst = OTHER[src]
        self.src, self.dst, self.r = src, dst, r
        self.send_index, self.sendcounts = self._side(obj, src, dst, r)
        self.recv_index, self.recvcounts = self._side(obj, dst, src, r)
        me = obj.rank
        self.shape = (obj.dense_rows(dst, me).size, len(column_range(obj, dst, me, r)))

    @staticmethod
    def _side(obj, mine: str, theirs: str, r: int) -> tuple[np.ndarray, np.ndarray]:
        """Flat indices into this rank's ``mine`` block of the elements shared with each rank's
        ``theirs`` block, grouped by rank, each group in (global row, column) order."""
        me, p = obj.rank, obj.p
        rows = obj.dense_rows(mine, me)
        cols = column_range(obj, mine, me, r)
        Ht = holders(obj, theirs)
        their_color = Ht.row_color[rows]
        by_row = np.argsort(rows, kind="stable")
        parts, counts = [], np.zeros(p, dtype=np.int64)
        for k in range(p):
            kc = column_range(obj, theirs, k, r)
            lo, hi = max(cols.start, kc.start), min(cols.stop, kc.stop)
            sel = by_row[their_color[by_row] == Ht.color[k]]
            if hi <= lo or sel.size == 0:
                continue
            local = np.arange(lo - cols.start, hi - cols.start, dtype=np.int64)
            parts.append((sel[:, None] * len(cols) + local[None, :]).reshape(-1))
            counts[k] = parts[-1].size
        index = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return index, counts

    def apply(self, world, X: np.ndarray) -> np.ndarray:
        """Move ``X`` (this rank's src block) into a new dst block (collective)."""
        send = X.reshape(-1)[self.send_index]
        recv = np.empty(self.recv_index.size, dtype=X.dtype)
        world.alltoallv(send, self.sendcounts, recv, self.recvcounts, phase=PHASE)
        out = np.empty(self.shape, dtype=X.dtype)
        out.reshape(-1)[self.recv_index] = recv
        return out


def transfer_plan(obj, src: str, r: int) -> TransferPlan:
    """The cached plan moving side ``src`` blocks of width r to the other side. Not collective."""
    cache = obj._edges.transfer_plans
    if (src, r) not in cache:
        cache[(src, r)] = TransferPlan(obj, src, r)
    return cache[(src, r)]


def transfer(obj, X: np.ndarray, to_side: str) -> np.ndarray:
    """Redistribute a dense matrix from the other side's distribution to ``to_side``'s.

    Parameters
    ----------
    obj : DistributedMatrix
        A square S (m == n).
    X : ndarray
        This rank's block of an n x r matrix in the distribution of side ``OTHER[to_side]``.
    to_side : {"a", "b"}

    Returns
    -------
    ndarray: this rank's block of the same matrix in ``to_side``'s distribution (a new array,
    also when nothing moves).

    Collective over ``obj.comm``; words under phase "transfer" (:func:`transfer_words`). The
    plan is built on first use for each direction and r, from the layout alone.
    """
    require(to_side in OTHER, f"to_side must be 'a' or 'b', got {to_side!r}")
    require(obj.shape[0] == obj.shape[1],
            f"transfer between the A and B distributions needs a square S; this one is "
            f"{obj.shape[0]} x {obj.shape[1]}")
    src = OTHER[to_side]
    block_side(obj, src, (X, "the block to transfer"))
    msg = None
    r = global_width(obj, X, src)
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        msg = "the block to transfer must be a 2-D numpy array"
    else:
        expect = (obj.dense_rows(src, obj.rank).size, len(column_range(obj, src, obj.rank, r)))
        if X.shape != expect:
            msg = (f"the block to transfer has shape {X.shape} on this rank, but a side-{src!r} "
                   f"block of width {r} has shape {expect}")
        elif X.dtype != obj.dtype:
            msg = f"the block to transfer has dtype {X.dtype}, expected {obj.dtype}"
    agree_width(obj, msg, r, call="transfer", variant=to_side)
    return transfer_plan(obj, src, r).apply(obj.world, np.ascontiguousarray(X))


def transfer_words(obj, to_side: str, r: int, rank: int) -> dict[str, int]:
    """Words ``rank`` sends and receives in one :func:`transfer` of width r (square S).

    Closed form: each rank's block moves whole or stays, so ``rank`` sends its source block
    (rows x columns) unless its two blocks hold the same rows and columns, and receives its
    destination block on the same condition. Not collective.
    """
    src = OTHER[to_side]
    rows_s, rows_d = obj.dense_rows(src, rank), obj.dense_rows(to_side, rank)
    cols_s, cols_d = column_range(obj, src, rank, r), column_range(obj, to_side, rank, r)
    stays = np.array_equal(rows_s, rows_d) and cols_s == cols_d
    return {"words_sent": 0 if stays else rows_s.size * len(cols_s),
            "words_received": 0 if stays else rows_d.size * len(cols_d)}
