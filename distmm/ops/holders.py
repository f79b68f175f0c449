"""Which ranks hold each dense row of a side: the layout facts every primitive plans with.

Pure layout arithmetic over ``obj.dense_rows(side, k)`` for every rank k (no communication),
computed once per object and side and cached on the object. A row of side "a" (a row of A, an
A-side node) is held by exactly one row group (:mod:`distmm.ops.groups`): one rank in 1.5D
dense shifting, several ranks each holding a piece of the row's r columns in the column-split
families (paper Table II). Every holder keeps the row at the same position of its block.

Each group's rows are cut into near-equal contiguous chunks, one per member in world-rank order
(the order of the group's communicator): the member whose chunk holds a row is the row's
*combiner*, the one rank that combines partial results for the row and serves its per-node
value to ranks outside the group. Chunks spread this work evenly over the group, as the
reduce-scatter of a bandwidth-optimal all-reduce does (paper section V, citing Chan et al.).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmm.core.layout import block_of, block_offsets
from distmm.ops.groups import row_group_color

SIDE_OF_DIM = {"row": "a", "col": "b"}


@dataclass(frozen=True)
class Holders:
    """Layout of one side's dense rows over the ranks (identical on every rank).

    Attributes
    ----------
    color : ndarray, shape (p,)
        Row-group colour of each rank (:func:`distmm.ops.groups.row_group_color`).
    row_color : ndarray, shape (rows of the side,)
        Colour of the group holding each global (permuted) row.
    position : ndarray, shape (rows of the side,)
        Position of each row in its holders' dense blocks.
    combiner : ndarray, shape (rows of the side,)
        World rank of each row's combiner.
    """

    color: np.ndarray
    row_color: np.ndarray
    position: np.ndarray
    combiner: np.ndarray

    def members(self, color: int) -> np.ndarray:
        """World ranks of the group with colour ``color``, ascending."""
        return np.flatnonzero(self.color == color)

    def chunk(self, rank: int) -> slice:
        """The positions (in its block) of the rows ``rank`` combines."""
        members = self.members(self.color[rank])
        nrows = int(np.count_nonzero(self.row_color == self.color[rank]))
        off = block_offsets(nrows, members.size)
        j = int(np.searchsorted(members, rank))
        return slice(int(off[j]), int(off[j + 1]))


def holders(obj, side: str) -> Holders:
    """The :class:`Holders` of ``side`` ("a" or "b") on ``obj``. Not collective; cached."""
    cache = obj._edges.holders
    if side not in cache:
        cache[side] = _build(obj, side)
    return cache[side]


def _build(obj, side: str) -> Holders:
    p = obj.p
    nrows = obj.shape[0] if side == "a" else obj.shape[1]
    color = np.array([row_group_color(obj, side, k) for k in range(p)], dtype=np.int64)
    row_color = np.full(nrows, -1, dtype=np.int64)
    position = np.full(nrows, -1, dtype=np.int64)
    combiner = np.full(nrows, -1, dtype=np.int64)
    for g in np.unique(color[color < p]):
        rows = obj.dense_rows(side, int(g))
        members = np.flatnonzero(color == g)
        pos = np.arange(rows.size, dtype=np.int64)
        row_color[rows] = g
        position[rows] = pos
        combiner[rows] = members[block_of(pos, block_offsets(rows.size, members.size))]
    if nrows and row_color.min() < 0:
        raise AssertionError(f"the {obj.name} layout leaves some rows of side {side!r} unheld")
    return Holders(color, row_color, position, combiner)


def global_width(obj, X: np.ndarray, side: str) -> int:
    """The global width r of the dense matrix whose block on this rank is ``X``.

    Collective over ``obj.comm`` when the family splits r across ranks and was given no r at
    construction (every rank then takes this branch); otherwise not collective: a block that
    knows its global shape says so, 1.5D dense shifting holds whole rows (r is the block's
    width), and a family distributed for ``obj.r`` uses that.
    """
    local = int(X.shape[1]) if isinstance(X, np.ndarray) and X.ndim == 2 else -1
    if obj.r is None and getattr(obj, "splits_r", False):
        # The members of a row group hold disjoint column pieces that make up r: gather every
        # rank's width (p integers, phase "other") and add up one non-empty group's pieces.
        widths = np.empty(obj.p, dtype=np.int64)
        with obj.stats.timer("other"):
            obj.comm.Allgather(np.array([local], dtype=np.int64), widths)
        if obj.p > 1:
            obj.stats.add("other", obj.p - 1, obj.p - 1, obj.p - 1, obj.p - 1)
        H = holders(obj, side)
        groups = H.color[H.color < obj.p]
        return int(widths[H.members(groups.min())].sum()) if groups.size else local
    shape = getattr(X, "global_shape", None)
    if shape is not None:
        return int(shape[1])
    return int(obj.r) if obj.r is not None else local


def column_range(obj, side: str, rank: int, r: int) -> range:
    """The columns (of r) of ``side``'s dense block on ``rank``. Not collective."""
    return range(r)[obj.dense_cols(side, rank, r)]
