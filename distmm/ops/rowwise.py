"""Row-wise dot products of two dense blocks of one side (the per-row scalars of batched CG).

``row_dot(obj, side, X, Y)[i] = sum_k X[i, k] Y[i, k]`` over the whole row i. A rank holds
whole rows in 1.5D dense shifting (no communication); in the column-split families it holds a
piece of each row's columns, and the partial sums are all-reduced over the row group
(:mod:`distmm.ops.groups`), counted under phase ``"row_dot"``.
"""

from __future__ import annotations

import numpy as np

from distmm.errors import require
from distmm.ops.checks import same_primitive
from distmm.ops.groups import row_group, row_group_size
from distmm.ops.holders import column_range, global_width

PHASE = "row_dot"


def row_dot(obj, side: str, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Dot product of each row of X with the same row of Y, over all r columns.

    Parameters
    ----------
    obj : DistributedMatrix
        The distributed S whose layout X and Y follow.
    side : {"a", "b"}
        Which dense distribution X and Y are in (rows of A, or rows of B).
    X, Y : ndarray, shape (local rows, local columns)
        This rank's blocks of two matrices of that side, same shape and dtype.

    Returns
    -------
    ndarray, shape (local rows,)
        The full dot product of each local row, identical on every rank of its row group, in
        the blocks' dtype.

    Collective over ``obj.comm`` (the first call on a side splits the row-group communicator;
    later calls talk within the row group only). Shapes are checked locally; every rank of a
    group holds the same rows, so a shape error shows on all of them alike, and a group of
    several ranks compares the call and its width r first (one uncounted all-gather of three
    integers), so that column pieces of different widths never add up.
    """
    require(side in ("a", "b"), f"side must be 'a' or 'b', got {side!r}")
    nrows = obj.dense_rows(side, obj.rank).size
    require(X.ndim == 2 and X.shape == Y.shape and X.shape[0] == nrows,
            f"row_dot needs two blocks of {nrows} rows and equal shapes on side {side!r}; "
            f"got {tuple(X.shape)} and {tuple(Y.shape)}")
    r = global_width(obj, X, side)  # every rank: collective where r is per call and split
    group = row_group(obj, side)
    if group.size > 1:  # column pieces of one width r on every rank of the group
        # a piece that is not this rank's of r says its own width (pieces of one width that
        # make up r always fit it), so two ranks agree only on pieces of one r
        fits = X.shape[1] == len(column_range(obj, side, obj.rank, r))
        same_primitive(obj, f"row_dot {side}", (r if fits else -1 - X.shape[1],), group)
    partial = np.einsum("ij,ij->i", X, Y)
    if group.size == 1:
        return partial
    out = np.empty_like(partial)
    group.allreduce(partial, out, phase=PHASE)
    return out


def row_dot_words(obj, side: str, rank: int) -> int:
    """Words ``rank`` sends (and receives) in one :func:`row_dot` on ``side``.

    The row group's all-reduce of one value per local row, counted as a reduce-scatter plus an
    all-gather: ``2 * rows * (g - 1) // g`` for a group of g ranks, 0 when g = 1. Not
    collective.
    """
    g = row_group_size(obj, side, rank)
    rows = obj.dense_rows(side, rank).size
    return 2 * rows * (g - 1) // g if g > 1 else 0
