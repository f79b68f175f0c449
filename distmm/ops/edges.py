"""Edge values <-> per-node vectors: row/column reductions, expansion, and the additive SDDMM.

Edge values are arrays in the object's value order (``obj.values.shape``), 1-D or (nnz, h) for h
heads; per-node arrays are the A-side (rows of A) or B-side (rows of B) blocks of this rank,
(``obj.dense_rows(side, rank).size``,) or (that, h). A row of S may have nonzeros on several
ranks, and its per-node value may be needed on several ranks (the row group of the column-split
families, :mod:`distmm.ops.groups`); both sets come from the layout and from where S's values
live, in every family alike.

One :class:`EdgePlan` per object and dimension ("row": S's rows, A side; "col": S's columns, B
side), built on first use with one all-to-all of row ids (phase "plan") and cached: S's
structure never changes. Each rank reduces its values per distinct row locally, then:

* **reduce** (phase "row_reduce" / "col_reduce"): the partial results go to each row's
  combiner (:mod:`distmm.ops.holders`), which combines them; the row group then all-gathers its
  members' chunks, so every rank holding the row's dense block gets the full value;
* **edge all-reduce** (used by edge softmax): the combined value goes back to the ranks that
  contributed, so each nonzero sees its row's total;
* **expand** (phase "expand"): the inverse of reduce. A rank that holds the row's dense block
  reads its own copy; any other rank with nonzeros in the row receives the value from the row's
  combiner.

Words are counted in elements: h per (row, rank) pair that crosses ranks. Empty rows (no
nonzeros anywhere) reduce to 0 (sum) and -inf (max).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmm.core.layout import block_offsets
from distmm.errors import require
from distmm.ops.checks import agree_width, block_side, columns, full_check_due
from distmm.ops.gather import gather_add, gather_rows
from distmm.ops.groups import row_group
from distmm.ops.holders import SIDE_OF_DIM, holders
from distmm.ops.segment_reduce import segment_reduce

PLAN_PHASE = "plan"
REDUCE_PHASE = {"row": "row_reduce", "col": "col_reduce"}
EXPAND_PHASE = "expand"
SDDMM_ADD_PHASE = "sddmm_add"
DIMS = tuple(SIDE_OF_DIM)
DIM_OF_SIDE = {side: dim for dim, side in SIDE_OF_DIM.items()}
REDUCE_OPS = {"sum": (np.add, 0.0), "max": (np.maximum, -np.inf)}


@dataclass(frozen=True)
class EdgeSizes:
    """The sizes of one rank's plan that its word counts depend on (one dimension).

    Attributes
    ----------
    distinct : int
        Distinct rows (columns, for "col") with nonzeros on this rank.
    to_others : int
        Those of them whose combiner is another rank.
    from_others : int
        (row, rank) pairs with the row combined here and nonzeros of it on another rank.
    remote : int
        Distinct rows with nonzeros here that this rank's dense block does not hold.
    serve : int
        (row, rank) pairs with the row combined here and nonzeros of it on a rank outside the
        row's group.
    block_rows, chunk_rows, group_size : int
        Rows of this rank's dense block, rows it combines, ranks in its row group.
    """

    distinct: int
    to_others: int
    from_others: int
    remote: int
    serve: int
    block_rows: int
    chunk_rows: int
    group_size: int


def _words(sent: int, received: int) -> dict[str, int]:
    return {"words_sent": int(sent), "words_received": int(received)}


def reduce_words(sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one :func:`reduce` on a rank with plan ``sizes`` and h columns.

    Partials to combiners, then the row group's all-gather of the combined chunks:
    sent ``h (to_others + chunk_rows (g - 1))``, received
    ``h (from_others + block_rows - chunk_rows)``. Not collective.
    """
    g = sizes.group_size
    return _words(h * (sizes.to_others + sizes.chunk_rows * (g - 1)),
                  h * (sizes.from_others + sizes.block_rows - sizes.chunk_rows))


def expand_words(sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one :func:`expand`: sent ``h serve``, received ``h remote``. Not collective."""
    return _words(h * sizes.serve, h * sizes.remote)


def edge_allreduce_words(sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one all-reduce of edge values over the ranks sharing each row: partials to the
    combiners and totals back, ``h (to_others + from_others)`` each way. Not collective."""
    w = h * (sizes.to_others + sizes.from_others)
    return _words(w, w)


def sddmm_add_words(row_sizes: EdgeSizes, col_sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one :func:`sddmm_add`: an expand on each side. Not collective."""
    a, b = expand_words(row_sizes, h), expand_words(col_sizes, h)
    return {k: a[k] + b[k] for k in a}


class Segments:
    """Equal keys (0..nseg-1, each present) grouped: a stable sorting order (None when the
    keys are already sorted, the common case of CSR value order) and segment bounds."""

    def __init__(self, keys: np.ndarray, nseg: int) -> None:
        self.order = None
        if keys.size > 1 and np.any(keys[1:] < keys[:-1]):
            self.order = np.argsort(keys, kind="stable")
            keys = keys[self.order]
        self.starts = np.searchsorted(keys, np.arange(nseg))
        self.lengths = np.diff(np.append(self.starts, keys.size))

    def sort(self, x: np.ndarray) -> np.ndarray:
        """``x`` grouped by segment."""
        return x if self.order is None else x[self.order]

    def unsort(self, xs: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`sort`."""
        if self.order is None:
            return xs
        out = np.empty_like(xs)
        out[self.order] = xs
        return out

    def reduce(self, ufunc, xs: np.ndarray) -> np.ndarray:
        """Per-segment reduction of grouped ``xs`` (``ufunc.reduceat``, bitwise)."""
        if self.starts.size == 0:
            return np.empty((0,) + xs.shape[1:], dtype=xs.dtype)
        return segment_reduce(ufunc, xs, self.starts)

    def repeat(self, per_segment: np.ndarray) -> np.ndarray:
        """Each segment's value at each of its (grouped) entries."""
        return np.repeat(per_segment, self.lengths, axis=0)


class EdgePlan:
    """Who sends what for one dimension of S on this rank (built once, collective).

    Use :func:`edge_plan` to get the cached plan of an object.
    """

    def __init__(self, obj, dim: str) -> None:
        side = SIDE_OF_DIM[dim]
        H = holders(obj, side)
        me, p = obj.rank, obj.p
        rows, cols = obj.value_coordinates()
        key = np.asarray(rows if dim == "row" else cols, dtype=np.int64)
        uniq, inv = np.unique(key, return_inverse=True)
        self.dim, self.side, self.nnz = dim, side, key.size
        self.inv = inv.reshape(-1)
        self.seg = Segments(self.inv, uniq.size)
        # Partials travel to each row's combiner, grouped by destination.
        dest = H.combiner[uniq]
        self.send_order = np.argsort(dest, kind="stable")
        self.sendcounts = np.bincount(dest, minlength=p).astype(np.int64)
        self.recvcounts = np.empty(p, dtype=np.int64)
        with obj.stats.timer(PLAN_PHASE):
            obj.comm.Alltoall(self.sendcounts, self.recvcounts)
        if p > 1:
            obj.stats.add(PLAN_PHASE, p - 1, p - 1, p - 1, p - 1)
        recv_ids = np.empty(int(self.recvcounts.sum()), dtype=np.int64)
        obj.world.alltoallv(uniq[self.send_order], self.sendcounts, recv_ids, self.recvcounts,
                            phase=PLAN_PHASE)
        src = np.repeat(np.arange(p), self.recvcounts)
        pos = H.position[recv_ids]
        targets, cinv = np.unique(pos, return_inverse=True)
        self.cinv = cinv.reshape(-1)
        self.cseg = Segments(self.cinv, targets.size)
        self.chunk = H.chunk(me)
        self.targets = targets - self.chunk.start
        # Expand: the combiner serves ranks outside the row's group; members read their own.
        serve = H.color[src] != H.row_color[recv_ids]
        self.serve_pos = pos[serve]
        self.serve_counts = np.bincount(src[serve], minlength=p).astype(np.int64)
        local = H.row_color[uniq] == H.color[me]
        self.local_uniq = np.flatnonzero(local)
        self.local_pos = H.position[uniq[local]]
        self.remote_uniq = self.send_order[~local[self.send_order]]
        self.remote_counts = np.bincount(dest[self.remote_uniq], minlength=p).astype(np.int64)
        self.block_rows = obj.dense_rows(side, me).size
        self.group = row_group(obj, side)
        members = H.members(H.color[me])
        self.chunk_sizes = np.diff(block_offsets(self.block_rows, members.size))
        self.sizes = EdgeSizes(
            distinct=int(uniq.size), to_others=int(np.count_nonzero(dest != me)),
            from_others=int(np.count_nonzero(src != me)), remote=int(np.count_nonzero(~local)),
            serve=int(np.count_nonzero(serve)), block_rows=int(self.block_rows),
            chunk_rows=int(self.chunk.stop - self.chunk.start),
            group_size=int(self.group.size))
        # Where no rank sends a partial or a per-node value to another (one rank; the rows of
        # 1.5D dense shifting at c = 1), the all-to-alls of combine, to_rows and spread move
        # nothing: they are skipped, on every rank alike, as this all-reduce agrees.
        crossing = np.array([self.sizes.to_others + self.sizes.from_others,
                             self.sizes.remote + self.sizes.serve], dtype=np.int64)
        total = np.empty_like(crossing)
        obj.world.allreduce(crossing, total, phase=PLAN_PHASE)
        self.private_rows = int(total[0]) == 0
        self.private_values = int(total[1]) == 0
        # Where every node's value is this rank's own, the row of this rank's per-node block
        # that each nonzero reads: a spread is then one gather (:meth:`source`).
        self.direct = (self.local_pos[self.inv].astype(np.int64) if self.private_values
                       else None)

    # ----------------------------------------------------------------- pieces
    def partial(self, values: np.ndarray, op: str) -> np.ndarray:
        """This rank's per-distinct-row reduction of (nnz, h) ``values`` (value order)."""
        return self.seg.reduce(REDUCE_OPS[op][0], self.seg.sort(values))

    def combine(self, world, partial: np.ndarray, op: str, phase: str) -> np.ndarray:
        """Send partials to the combiners; returns the combined (targets, h) rows here."""
        if self.private_rows:  # every partial is its row's only one, and combined here
            combined = np.empty_like(partial)
            combined[self.cinv] = partial[self.send_order]
            return combined
        h = partial.shape[1]
        recv = np.empty((int(self.recvcounts.sum()), h), dtype=partial.dtype)
        world.alltoallv(np.ascontiguousarray(partial[self.send_order]), self.sendcounts * h,
                        recv, self.recvcounts * h, phase=phase)
        return self.cseg.reduce(REDUCE_OPS[op][0], self.cseg.sort(recv))

    def to_nodes(self, combined: np.ndarray, op: str, phase: str) -> np.ndarray:
        """The (block_rows, h) per-node result from this rank's combined rows (row group
        all-gather of the chunks)."""
        h = combined.shape[1]
        mine = np.full((self.chunk.stop - self.chunk.start, h), REDUCE_OPS[op][1],
                       dtype=combined.dtype)
        mine[self.targets] = combined
        out = np.empty((self.block_rows, h), dtype=combined.dtype)
        self.group.allgatherv(mine, out, self.chunk_sizes * h, phase=phase)
        return out

    def to_rows(self, world, combined: np.ndarray, phase: str) -> np.ndarray:
        """Return each combined row to its contributors: (distinct rows, h) totals, in the
        order of :attr:`seg` (use ``seg.repeat`` for grouped per-value totals)."""
        h = combined.shape[1]
        back = np.ascontiguousarray(combined[self.cinv])
        got = np.empty((self.send_order.size, h), dtype=combined.dtype)
        world.alltoallv(back, self.recvcounts * h, got, self.sendcounts * h, phase=phase)
        per_row = np.empty_like(got)
        per_row[self.send_order] = got
        return per_row

    def row_totals(self, world, grouped: np.ndarray, op: str, phase: str) -> np.ndarray:
        """All-reduce of grouped (``seg.sort``-ed) values over the ranks sharing each row:
        (distinct rows, h) totals in :attr:`seg` order."""
        partial = self.seg.reduce(REDUCE_OPS[op][0], grouped)
        if self.private_rows:  # each row's partial is its total (combine, to_rows: identity)
            return partial
        return self.to_rows(world, self.combine(world, partial, op, phase), phase)

    def spread(self, world, X: np.ndarray, phase: str) -> np.ndarray:
        """(nnz, h) values of per-node (block_rows, h) ``X`` at each local nonzero."""
        return gather_rows(*self.source(world, X, phase))

    def source(self, world, X: np.ndarray, phase: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows, index) such that ``rows[index]`` is :meth:`spread`'s result, without
        making it: per-node ``X`` itself and each nonzero's row of it where every value is
        this rank's own, else the (distinct rows, h) values after the exchange and
        :attr:`inv`. Collective as :meth:`spread` (the same messages)."""
        if self.private_values:
            return X, self.direct
        return self._per_row(world, X, phase), self.inv

    def _per_row(self, world, X: np.ndarray, phase: str) -> np.ndarray:
        """(distinct rows, h) values of per-node ``X``: this rank's own, and the others'
        through one all-to-all (only where some rank's values cross: not private_values)."""
        h = X.shape[1]
        per_row = np.empty((self.seg.starts.size, h), dtype=X.dtype)
        per_row[self.local_uniq] = X[self.local_pos]
        recv = np.empty((self.remote_uniq.size, h), dtype=X.dtype)
        world.alltoallv(np.ascontiguousarray(X[self.serve_pos]), self.serve_counts * h,
                        recv, self.remote_counts * h, phase=phase)
        per_row[self.remote_uniq] = recv
        return per_row


def edge_plan(obj, dim: str) -> EdgePlan:
    """The cached :class:`EdgePlan` of ``obj`` for ``dim`` ("row" or "col").

    Collective over ``obj.comm`` the first time for each dim (one all-to-all of row ids, phase
    "plan"); afterwards local.
    """
    require(dim in DIMS, f"dim must be 'row' or 'col', got {dim!r}")
    cache = obj._edges.edge_plans
    if dim not in cache:
        cache[dim] = EdgePlan(obj, dim)
    return cache[dim]


def _as2d(X: np.ndarray) -> np.ndarray:
    return X[:, None] if X.ndim == 1 else X


def _shaped(out: np.ndarray, like: np.ndarray) -> np.ndarray:
    return out.reshape(-1) if like.ndim == 1 else out


def _check_arrays(obj, nrows: int, arrays, allow: str, kind: str, call: str,
                  variant: str = "") -> None:
    scan = full_check_due(obj, call) and getattr(obj, "check_finite", True)
    msg, widths = None, set()
    for X, what in arrays:
        m, w = columns(X, nrows, obj.dtype, what, allow, scan)
        msg = msg or m
        widths.add(w)
    if len(widths) > 1:
        msg = msg or f"the {kind} arrays have different shapes"
    agree_width(obj, msg, widths.pop() if len(widths) == 1 else -1, call=call, variant=variant)


def check_edges(obj, call: str, *arrays: tuple[np.ndarray, str], allow: str = "nan",
                variant: str = "") -> None:
    """Check edge-value arrays (value order, one h for all) for primitive ``call``: collective
    under the object's checks policy (:func:`distmm.ops.checks.agree_width`; ``variant``: the
    dim or side that tells apart primitives of one name)."""
    _check_arrays(obj, obj.values.shape[0], arrays, allow, "edge-value", call, variant)


def reduce(obj, values: np.ndarray, dim: str = "row", op: str = "sum") -> np.ndarray:
    """Reduce edge values over each row ("row") or column ("col") of S.

    Parameters
    ----------
    obj : DistributedMatrix
    values : ndarray, shape (nnz_local,) or (nnz_local, h)
        Values in the object's value order, in its dtype (one column per head).
    dim : {"row", "col"}
    op : {"sum", "max"}

    Returns
    -------
    ndarray, shape (rows,) or (rows, h)
        For "row": the A-side per-node block, one entry per row of ``obj.dense_rows("a",
        rank)``; for "col": the B-side one. Every rank holding a row's dense block gets the
        full value (all ranks of the row group). Rows without nonzeros give 0 (sum) or -inf
        (max).

    Collective over ``obj.comm``; words under phase "row_reduce" / "col_reduce"
    (:func:`reduce_words`).
    """
    require(dim in DIMS, f"dim must be 'row' or 'col', got {dim!r}")
    require(op in REDUCE_OPS, f"op must be 'sum' or 'max', got {op!r}")
    check_edges(obj, "reduce", (values, "values"), variant=f"{dim} {op}")
    plan = edge_plan(obj, dim)
    phase = REDUCE_PHASE[dim]
    v = _as2d(values)
    combined = plan.combine(obj.world, plan.partial(v, op), op, phase)
    return _shaped(plan.to_nodes(combined, op, phase), values)


def check_nodes(obj, side: str, call: str, *arrays: tuple[np.ndarray, str]) -> None:
    """Check per-node arrays of ``side`` (one h for all), like :func:`check_edges`."""
    _check_arrays(obj, obj.dense_rows(side, obj.rank).size, arrays, "nan", "per-node", call,
                  side)


def expand(obj, side: str, X: np.ndarray, phase: str = EXPAND_PHASE) -> np.ndarray:
    """Spread a per-node array onto S's nonzeros: ``out[e] = X[row(e)]`` ("a") or
    ``X[col(e)]`` ("b").

    Parameters
    ----------
    obj : DistributedMatrix
    side : {"a", "b"}
        "a": X is A-side (one entry per row of S); "b": B-side (per column of S).
    X : ndarray, shape (rows,) or (rows, h)
        This rank's per-node block (rows = ``obj.dense_rows(side, rank).size``), in the
        object's dtype; the copies on a row group's ranks must agree (the one on the row's
        combiner is used by ranks outside the group).

    Returns
    -------
    ndarray, shape (nnz_local,) or (nnz_local, h), in value order.

    Collective over ``obj.comm``; words under ``phase`` (:func:`expand_words`).
    """
    require(side in DIM_OF_SIDE, f"side must be 'a' or 'b', got {side!r}")
    block_side(obj, side, (X, "the per-node array"))
    check_nodes(obj, side, "expand", (X, "the per-node array"))
    plan = edge_plan(obj, DIM_OF_SIDE[side])
    return _shaped(plan.spread(obj.world, _as2d(np.asarray(X)), phase), X)


def sddmm_add(obj, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The additive SDDMM of per-node scalars: ``e_ij = u_i + v_j`` at S's nonzeros.

    GAT's per-edge score before the LeakyReLU (a_dst . z_i + a_src . z_j per head): it moves
    h words per (node, rank) pair instead of dense rows of width r.

    Parameters
    ----------
    u : ndarray, shape (rows of A block,) or (that, h)
        A-side per-node values.
    v : ndarray, shape (rows of B block,) or (that, h)
        B-side per-node values, same h.

    Returns
    -------
    ndarray, shape (nnz_local,) or (nnz_local, h), in value order.

    Collective over ``obj.comm``; words under phase "sddmm_add" (:func:`sddmm_add_words`).
    S's own values are not applied (multiply by ``obj.values`` for that).
    """
    block_side(obj, "a", (u, "u"))
    block_side(obj, "b", (v, "v"))
    nu, nv = (obj.dense_rows(s, obj.rank).size for s in ("a", "b"))
    scan = full_check_due(obj, "sddmm_add") and getattr(obj, "check_finite", True)
    mu, wu = columns(u, nu, obj.dtype, "u", scan=scan)
    mv, wv = columns(v, nv, obj.dtype, "v", scan=scan)
    msg = mu or mv or (None if wu == wv else "u and v have different shapes (heads)")
    agree_width(obj, msg, wu if wu == wv else -1, call="sddmm_add")
    pu, iu = edge_plan(obj, "row").source(obj.world, _as2d(np.asarray(u)), SDDMM_ADD_PHASE)
    pv, iv = edge_plan(obj, "col").source(obj.world, _as2d(np.asarray(v)), SDDMM_ADD_PHASE)
    return _shaped(gather_add(pu, iu, pv, iv), u)
