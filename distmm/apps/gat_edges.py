"""Per-node values onto S's nonzeros and back, for 1.5D dense shifting (what GAT's attention needs).

GAT's scores and softmax move per-node scalars, never dense rows of width r: e_ij = u_i + v_j
needs u for S's rows and v for S's columns on the ranks that store (i, j), and the softmax needs
each row's max and sum over nonzeros that several ranks share. In the 1.5D dense shifting
layout (paper Table II, Algorithm 1) rank (u, v) stores the nonzeros of row superblock u (the A
blocks of its fiber, ranks (u, 0..c-1)) in the column blocks of its layer (the B blocks of ranks
(0..q-1, v)), so

* ``expand_rows``: all-gather of h values per row over the fiber (the superblock's rows),
* ``expand_cols``: all-gather of h values per column over the layer (the layer's columns),
* ``reduce_rows``: local partial sums or maxima per row, reduce-scattered over the fiber,
* ``reduce_cols``: local partials per column, reduce-scattered over the layer.

Words are counted under phases ``edge_expand`` and ``edge_reduce`` (their own phases: the
issue asks that the softmax's reductions be visible next to the SpMM's replication, propagation
and reduction); :func:`edge_words` gives the exact count of each. For a square S with m = n
divisible by p they are, per rank and per head, ``n (c-1)/p`` for the row operations (fiber)
and ``n (q-1)/p`` for the column operations (layer): 1/r of an SDDMM's ``nr((c-1)/p + 1/c)``.

The object holds index arrays built once from the layout (no communication).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from distmm.algorithms.dense_shift_15d import DenseShift15D
from distmm.errors import require
from distmm.layout import block_of

EXPAND, REDUCE = "edge_expand", "edge_reduce"
_OPS = {"sum": (MPI.SUM, np.add, 0.0), "max": (MPI.MAX, np.maximum, -np.inf)}


def _position(obj: DenseShift15D, rank: int) -> tuple[int, int]:
    """Grid position (u, v) of ``rank`` (the same arithmetic as ``dense_rows``)."""
    if obj.grid.order == "fiber":
        return rank // obj.c, rank % obj.c
    return rank % obj.q, rank // obj.q


def _fiber_counts(obj: DenseShift15D, rank: int) -> list[int]:
    """Rows of A held by each rank of ``rank``'s fiber, in fiber order."""
    u, _ = _position(obj, rank)
    off = obj.offsets["a"]
    return [int(off[u * obj.c + k + 1] - off[u * obj.c + k]) for k in range(obj.c)]


def _layer_counts(obj: DenseShift15D, rank: int) -> list[int]:
    """Rows of B held by each rank of ``rank``'s layer, in layer order."""
    _, v = _position(obj, rank)
    off = obj.offsets["b"]
    return [int(off[t * obj.c + v + 1] - off[t * obj.c + v]) for t in range(obj.q)]


def edge_words(obj: DenseShift15D, op: str, heads: int, rank: int) -> int:
    """Words ``rank`` sends in one call of ``op`` with ``heads`` values per node. Not collective.

    ``op`` is one of "expand_rows", "expand_cols", "reduce_rows", "reduce_cols". An all-gather
    among g ranks sends this rank's block to the g - 1 others; a reduce-scatter sends every
    block but its own (:class:`distmm.comm.CountingComm`).
    """
    fiber = op.endswith("rows")
    counts = _fiber_counts(obj, rank) if fiber else _layer_counts(obj, rank)
    if len(counts) == 1:
        return 0
    u, v = _position(obj, rank)
    own = counts[v if fiber else u]
    if op.startswith("expand"):
        return own * heads * (len(counts) - 1)
    return (sum(counts) - own) * heads


class EdgeOps15D:
    """Per-node vectors onto S's nonzeros (value order) and reductions back, on 1.5D dense
    shifting.

    Parameters
    ----------
    obj : DenseShift15D
        The distributed S. Its value order (``obj.values``, SDDMM outputs, ``values=`` of
        SpMM) is the order of every edge array here.

    Construction is not collective (index arithmetic only). Every method is collective over
    ``obj.comm`` (over the fiber or the layer, which every rank belongs to).
    """

    def __init__(self, obj) -> None:
        require(isinstance(obj, DenseShift15D),
                f"the per-node edge operations (GAT's scores and edge softmax) are implemented "
                f"for 15d-dense-shift only, not {getattr(obj, 'name', type(obj).__name__)}")
        self.obj = obj
        u, v, c = obj.grid.u, obj.grid.v, obj.c
        rows, cols = obj.value_coordinates()
        offa, offb = obj.offsets["a"], obj.offsets["b"]
        self.fiber_counts = _fiber_counts(obj, obj.rank)
        self.layer_counts = _layer_counts(obj, obj.rank)
        self.row_idx = rows - offa[u * c]
        blocks = block_of(cols, offb)
        layer_start = np.concatenate(([0], np.cumsum(self.layer_counts)))
        self.col_idx = layer_start[blocks // c] + cols - offb[blocks]
        self.nnz = rows.size
        self._own_rows = self.fiber_counts[v]
        self._own_cols = self.layer_counts[u]
        self._segments = {"rows": _segments(self.row_idx),
                          "cols": _segments(self.col_idx)}

    # ---------------------------------------------------------------- node -> edge
    def expand_rows(self, x: np.ndarray) -> np.ndarray:
        """``out[k] = x[row of nonzero k]``: (local A rows, h) -> (nnz, h). Collective."""
        full = self._gather(self.obj.fiber, x, self.fiber_counts, self._own_rows)
        return full[self.row_idx]

    def expand_cols(self, x: np.ndarray) -> np.ndarray:
        """``out[k] = x[column of nonzero k]``: (local B rows, h) -> (nnz, h). Collective."""
        full = self._gather(self.obj.layer, x, self.layer_counts, self._own_cols)
        return full[self.col_idx]

    # ---------------------------------------------------------------- edge -> node
    def reduce_rows(self, vals: np.ndarray, op: str = "sum") -> np.ndarray:
        """Sum or max of each row's edge values: (nnz, h) -> (local A rows, h). Collective.

        A row without nonzeros gets 0 (for "max" too, so that the result is always finite)."""
        return self._reduce(self.obj.fiber, vals, op, "rows", self.fiber_counts,
                            self._own_rows)

    def reduce_cols(self, vals: np.ndarray, op: str = "sum") -> np.ndarray:
        """Sum or max of each column's edge values: (nnz, h) -> (local B rows, h).
        Collective. An empty column gets 0."""
        return self._reduce(self.obj.layer, vals, op, "cols", self.layer_counts,
                            self._own_cols)

    def softmax_rows(self, e: np.ndarray) -> np.ndarray:
        """Softmax of edge values within each row of S (numerically stable: the row max is
        subtracted). (nnz, h) -> (nnz, h); collective (two fiber reductions, two expansions).
        An empty row has no entries, so nothing is undefined."""
        m = self.reduce_rows(e, "max")
        ex = np.exp(e - self.expand_rows(m))
        return ex / self.expand_rows(self.reduce_rows(ex, "sum"))

    # ---------------------------------------------------------------- helpers
    def _gather(self, comm, x: np.ndarray, counts: list[int], own: int) -> np.ndarray:
        x = np.ascontiguousarray(x)
        require(x.ndim == 2 and x.shape[0] == own,
                f"per-node values must have shape ({own}, heads), got {tuple(x.shape)}")
        h = x.shape[1]
        full = np.empty((sum(counts), h), dtype=x.dtype)
        comm.allgatherv(x, full, [k * h for k in counts], phase=EXPAND)
        return full

    def _reduce(self, comm, vals: np.ndarray, op: str, which: str, counts: list[int],
                own: int) -> np.ndarray:
        require(op in _OPS, f"reduction must be 'sum' or 'max', got {op!r}")
        require(vals.ndim == 2 and vals.shape[0] == self.nnz,
                f"edge values must have shape ({self.nnz}, heads), got {tuple(vals.shape)}")
        mpi_op, ufunc, identity = _OPS[op]
        order, starts, present = self._segments[which]
        h = vals.shape[1]
        partial = np.full((sum(counts), h), identity, dtype=vals.dtype)
        if starts.size:
            partial[present] = ufunc.reduceat(vals[order], starts, axis=0)
        out = np.empty((own, h), dtype=vals.dtype)
        comm.reduce_scatter(partial, out, [k * h for k in counts], phase=REDUCE, op=mpi_op)
        out[np.isneginf(out)] = 0.0
        return out


def _segments(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort order of ``idx``, the start of each run of equal values, and the value of each run
    (for ``ufunc.reduceat``)."""
    order = np.argsort(idx, kind="stable")
    s = idx[order]
    if s.size == 0:
        return order, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    return order, starts, s[starts]
