"""X^T Y of two distributed dense blocks of one side, replicated on every rank.

The weight gradients of a GNN layer (H^T dZ) and the normal equations of small dense solves
need the r1 x r2 product of two tall distributed matrices. Every element of a dense side lives on
exactly one rank (paper Table II: no family stores a dense input twice), so summing each rank's
contribution over all ranks counts every row once. In the column-split families a rank holds
only a column piece of its rows: the row group first all-gathers Y's pieces (so each rank has
its rows of Y whole), each rank multiplies its piece of X^T by them, giving rows
``dense_cols`` of the result's partial sum over its rows, and one all-reduce of the r1 x r2
matrix over all ranks completes it. Both steps are counted under phase "xty".
"""

from __future__ import annotations

import numpy as np

from distmm.errors import require
from distmm.ops.checks import agree_width, block_side
from distmm.ops.groups import row_group, row_group_size
from distmm.ops.holders import column_range, global_width, holders

PHASE = "xty"


def _check(obj, side: str, X, what: str, r: int) -> str | None:
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        return f"{what} must be a 2-D numpy array"
    rows = obj.dense_rows(side, obj.rank).size
    width = len(column_range(obj, side, obj.rank, r))
    if X.shape != (rows, width):
        return (f"{what} has shape {X.shape} on this rank, but its side-{side!r} block of a "
                f"matrix with {r} columns has shape {(rows, width)}")
    if X.dtype != obj.dtype:
        return f"{what} has dtype {X.dtype}, expected {obj.dtype}"
    return None


def xty(obj, X: np.ndarray, Y: np.ndarray, side: str | None = None) -> np.ndarray:
    """X^T Y of two dense matrices distributed on the same side.

    Parameters
    ----------
    obj : DistributedMatrix
    X : ndarray, this rank's block of an (rows of the side) x r1 matrix
    Y : ndarray, this rank's block of an (rows of the side) x r2 matrix, same side
    side : {"a", "b"}, optional
        The side of both blocks; read from the blocks when they carry it.

    Returns
    -------
    ndarray, shape (r1, r2), in the object's dtype: the full product, identical on every rank.

    Collective over ``obj.comm``; words under phase "xty" (:func:`xty_words`).
    """
    side = block_side(obj, side, (X, "X"), (Y, "Y"))
    require(side in ("a", "b"), "xty needs side='a' or side='b' for plain arrays")
    r1, r2 = global_width(obj, X, side), global_width(obj, Y, side)
    msg = _check(obj, side, X, "X", r1) or _check(obj, side, Y, "Y", r2)
    agree_width(obj, msg, r1, r2, call="xty", variant=side)
    me = obj.rank
    H = holders(obj, side)
    members = H.members(H.color[me])
    cols2 = [column_range(obj, side, int(k), r2) for k in members]
    rows = X.shape[0]
    counts = np.array([rows * len(c) for c in cols2], dtype=np.int64)
    gathered = np.empty(int(counts.sum()), dtype=obj.dtype)
    row_group(obj, side).allgatherv(np.ascontiguousarray(Y), gathered, counts, phase=PHASE)
    Y_rows = np.empty((rows, r2), dtype=obj.dtype)
    start = 0
    for cols, count in zip(cols2, counts, strict=True):
        Y_rows[:, cols.start:cols.stop] = gathered[start:start + count].reshape(rows, len(cols))
        start += count
    cols1 = column_range(obj, side, me, r1)
    partial = np.zeros((r1, r2), dtype=obj.dtype)
    partial[cols1.start:cols1.stop] = np.asarray(X).T @ Y_rows
    out = np.empty_like(partial)
    obj.world.allreduce(partial, out, phase=PHASE)
    return out


def xty_words(obj, side: str, rank: int, r1: int, r2: int) -> dict[str, int]:
    """Words ``rank`` sends and receives in one :func:`xty` of widths r1, r2 on ``side``.

    The row group's all-gather of Y's pieces (``rows w2 (g - 1)`` sent, ``rows (r2 - w2)``
    received, w2 the rank's piece of r2) plus the all-reduce of the r1 x r2 result, counted as a
    reduce-scatter and an all-gather: ``2 r1 r2 (p - 1) // p`` each way. Not collective.
    """
    rows = obj.dense_rows(side, rank).size
    g = row_group_size(obj, side, rank)
    w2 = len(column_range(obj, side, rank, r2))
    p = obj.p
    reduce_words = 2 * r1 * r2 * (p - 1) // p if p > 1 else 0
    gather_sent = rows * w2 * (g - 1)
    gather_received = rows * (r2 - w2) if g > 1 else 0
    return {"words_sent": gather_sent + reduce_words,
            "words_received": gather_received + reduce_words}
