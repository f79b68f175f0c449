"""Row groups: the ranks that hold the same rows of a dense side.

In 1.5D dense shifting every rank holds whole rows of its own block of A and of B, so a row
group is one rank. The families that split A and B by columns (1.5D sparse shifting, both 2.5D
families; paper Table II) give the same row block to several ranks, each holding a different
piece of its r columns: 1.5D sparse shifting a layer's q ranks, 2.5D dense replicating the s
ranks of a grid row (A) or of a wrapped anti-diagonal (B), 2.5D sparse replicating the s*c
ranks that share a row block. Anything that needs whole rows (a row's dot product, X^T Y)
combines over exactly these ranks.

The groups are derived from the layout alone (``obj.dense_rows(side, k)`` is arithmetic that any
rank can evaluate for any k), so the same code serves every family; each group's communicator is
built once per object and side, kept in the object's ``_edges`` part
(:class:`~distmm.ops.state.EdgeState`) and freed by the object's ``close()``.
"""

from __future__ import annotations

import numpy as np

from distmm.core.comm import CountingComm


def row_group_color(obj, side: str, rank: int) -> int:
    """The colour of ``rank``'s row group on ``side``: the lowest rank holding the same rows.

    Not collective. Ranks whose block on ``side`` is empty (fewer rows than blocks) are each a
    group of their own (colour ``p + rank``): there is nothing to combine for them.
    """
    mine = obj.dense_rows(side, rank)
    if mine.size == 0:
        return obj.p + rank
    for k in range(rank):
        rows = obj.dense_rows(side, k)
        if rows.size == mine.size and rows[0] == mine[0] and np.array_equal(rows, mine):
            return k
    return rank


def row_group(obj, side: str) -> CountingComm:
    """The counting communicator over the ranks holding the same ``side`` rows as this rank.

    Collective over ``obj.comm`` the first time it is asked for on a side (a communicator
    split), cached afterwards. Its ranks are ordered by world rank. Words sent through it are
    counted in ``obj.stats``.
    """
    state = obj._edges
    cache = state.row_groups
    if side not in cache:
        color = row_group_color(obj, side, obj.rank)
        sub = obj.comm.Split(color=color, key=obj.rank)
        state.comms.append(sub)
        cache[side] = CountingComm(sub, obj.stats)
    return cache[side]


def row_group_size(obj, side: str, rank: int) -> int:
    """Ranks in ``rank``'s row group on ``side`` (not collective; pure layout arithmetic)."""
    color = row_group_color(obj, side, rank)
    if color >= obj.p:
        return 1
    return sum(1 for k in range(obj.p) if row_group_color(obj, side, k) == color)
