"""Edge softmax over the rows (or columns) of S, and its backward pass.

``alpha_e = exp(e - max_row) / sum_row exp(e - max_row)`` over the nonzeros of each row of S
(each column, for ``dim="col"``: the softmax over a node's incoming edges when S is stored
transposed), one softmax per head column. A row's nonzeros may sit on several ranks (S's block
row is spread over the ranks of a fiber or layer in most families), so the row maximum and the
row sum are each all-reduced over exactly the ranks holding nonzeros of that row
(:meth:`distmm.ops.edges.EdgePlan.row_totals`), counted under phase "softmax".

Conventions: a row without nonzeros has no values, so nothing to normalise. A row whose scores
are all -inf (every edge masked) gives alpha = 0 on its edges, never NaN; -inf scores in a row
with a finite one give alpha = 0. NaN and +inf scores are refused.
"""

from __future__ import annotations

import numpy as np

from distmm.errors import require
from distmm.ops.edges import (
    DIMS,
    EdgeSizes,
    _as2d,
    _shaped,
    check_edges,
    edge_allreduce_words,
    edge_plan,
)

PHASE = "softmax"


def edge_softmax(obj, values: np.ndarray, dim: str = "row") -> np.ndarray:
    """Numerically stable softmax of edge scores within each row ("row") or column ("col").

    Parameters
    ----------
    obj : DistributedMatrix
    values : ndarray, shape (nnz_local,) or (nnz_local, h)
        Scores in the object's value order and dtype; -inf masks an edge.
    dim : {"row", "col"}

    Returns
    -------
    ndarray, same shape: the attention coefficients, in value order (``obj.value_coordinates()``
    names each one's row and column).

    Collective over ``obj.comm``; words under phase "softmax" (:func:`softmax_words`).
    """
    require(dim in DIMS, f"dim must be 'row' or 'col', got {dim!r}")
    check_edges(obj, "edge_softmax", (values, "scores"), allow="softmax", variant=dim)
    plan = edge_plan(obj, dim)
    seg = plan.seg
    e = seg.sort(_as2d(values))  # grouped by row: per-row values spread by np.repeat
    row_max = plan.row_totals(obj.world, e, "max", PHASE)
    # A row with every edge masked: exp(-inf - 0) = 0 everywhere, so its alpha is 0, not NaN.
    row_max[np.isneginf(row_max)] = 0.0
    ex = np.exp(e - seg.repeat(row_max))
    total = plan.row_totals(obj.world, ex, "sum", PHASE)
    # total >= 1 wherever the row has a finite score (its maximum contributes exp(0)).
    scale = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
    alpha = seg.unsort(ex * seg.repeat(scale))
    return _shaped(alpha, values)


def edge_softmax_backward(obj, alpha: np.ndarray, grad_alpha: np.ndarray,
                          dim: str = "row") -> np.ndarray:
    """Gradient of a loss with respect to the scores, given alpha = edge_softmax(scores).

    ``grad_e = alpha * (grad_alpha - sum_row(alpha * grad_alpha))``, the row sum taken over
    the row's nonzeros on every rank (one edge all-reduce).

    Parameters
    ----------
    alpha, grad_alpha : ndarray, shape (nnz_local,) or (nnz_local, h)
        The forward result and the loss's gradient with respect to it, value order.
    dim : {"row", "col"}
        As in the forward call.

    Returns
    -------
    ndarray, same shape: the gradient with respect to the scores.

    Collective over ``obj.comm``; words under phase "softmax"
    (:func:`softmax_backward_words`).
    """
    require(dim in DIMS, f"dim must be 'row' or 'col', got {dim!r}")
    check_edges(obj, "edge_softmax_backward", (alpha, "alpha"), (grad_alpha, "grad_alpha"),
                variant=dim)
    plan = edge_plan(obj, dim)
    seg = plan.seg
    a, g = seg.sort(_as2d(alpha)), seg.sort(_as2d(grad_alpha))
    ag = a * g
    dot = plan.row_totals(obj.world, ag, "sum", PHASE)
    grad = seg.unsort(ag - a * seg.repeat(dot))
    return _shaped(grad, alpha)


def softmax_words(sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one :func:`edge_softmax` on a rank with plan ``sizes`` (two edge all-reduces:
    the row maximum and the row sum). Not collective."""
    w = edge_allreduce_words(sizes, h)
    return {k: 2 * x for k, x in w.items()}


def softmax_backward_words(sizes: EdgeSizes, h: int = 1) -> dict[str, int]:
    """Words of one :func:`edge_softmax_backward` (one edge all-reduce). Not collective."""
    return edge_allreduce_words(sizes, h)
