"""SpMM with one set of edge values per head, in one distributed call.

``Y[i, k, :] = sum_j alpha[(i, j), k] Z[j, k, :]`` for heads k = 0 .. h-1 (GAT's aggregation):
:func:`spmm_heads`, the one entry point (``graph.spmm_heads`` and ``GATConv`` call it), so that
how the heads are computed is this module's business alone. It runs distmm's multi-value SpMM
on S itself (:mod:`distmm.algorithms.multivalue`): ``Z`` (nodes, h, F) is seen, without a copy,
as the (nodes, h F) block whose columns hold the heads one after the other, and the attention
(S's nonzeros, h) in value order, transposed, is the (h, nonzeros) value array, one row per
head. Forward and backward (:class:`HeadSpMM`):

* ``Y = S(alpha) Z``: one ``S.spmm_a(Z, values=alpha^T)``;
* ``dZ = S(alpha)^T G``: one ``S.spmm_b(G, values=alpha^T)``;
* ``d alpha[e, k] = <G_i,k, Z_j,k>`` at each nonzero e = (i, j): one multi-head SDDMM
  ``S.sddmm(G, Z, heads=h)`` on the same (nodes, h F) views, whose (nonzeros, h) result is
  d alpha in its own layout.

On 15d-dense-shift each multi-value SpMM is one pass of Algorithm 1 at width h F; the other
families run it as one SpMM per head (:mod:`distmm.algorithms.multivalue`). The multi-head
SDDMM is one pass of the family's own SDDMM loop on both families a graph runs on
(15d-dense-shift, 15d-sparse-aware). One head is S's own single-value SpMM
(:class:`distmm.torch.functions.SpMMA`).
"""

from __future__ import annotations

import numpy as np

from distmm.torch import functions as fn
from distmm.torch.functions import torch


def _head_values(alpha) -> np.ndarray:
    """The attention (nnz_local, h) as the multi-value SpMM's (h, nnz_local) array."""
    return np.ascontiguousarray(fn.as_numpy(alpha).T)


def _plain(x) -> np.ndarray:
    """A result block of distmm as a plain ndarray (no copy), for ``torch.from_numpy``."""
    return np.asarray(x).view(np.ndarray)


class HeadSpMM(torch.autograd.Function):
    """``Y[i, k] = sum_j alpha[(i, j), k] z[j, k]``: alpha (nnz_local, h) in S's value order,
    z (n_local, h, F) B-side rows, Y (n_local, h, F) A-side rows; see the module docstring."""

    @staticmethod
    def forward(ctx, obj, alpha, z):
        ctx.obj = obj
        ctx.save_for_backward(alpha, z)
        n, h, F = z.shape
        y = obj.spmm_a(fn.as_numpy(z).reshape(n, h * F), values=_head_values(alpha))
        return torch.from_numpy(_plain(y)).reshape(-1, h, F)

    @staticmethod
    @fn._first_order
    def backward(ctx, G):
        obj = ctx.obj
        alpha, z = ctx.saved_tensors
        n, h, F = z.shape
        g = fn.as_numpy(G)
        dalpha = dz = None
        if ctx.needs_input_grad[1]:
            dalpha = torch.from_numpy(obj.sddmm(
                g.reshape(g.shape[0], h * F), fn.as_numpy(z).reshape(n, h * F),
                values=fn._ones(obj), heads=h))
        if ctx.needs_input_grad[2]:
            dz = obj.spmm_b(g.reshape(g.shape[0], h * F), values=_head_values(alpha))
            dz = torch.from_numpy(_plain(dz)).reshape(-1, h, F)
        return None, dalpha, dz


@fn._eager
def spmm_heads(graph, pattern_name: str, alpha, z):
    """Every head's aggregation ``Y[i, k] = sum_j alpha[(i, j), k] z[j, k]``, differentiable in
    ``alpha`` ((this rank's nonzeros of the pattern, h), value order) and ``z`` ((num_local,
    h, F) node rows): (num_local, h, F). One distributed multi-value SpMM forward; one
    multi-value SpMMB and one multi-head SDDMM backward. Collective. The arguments are the
    caller's to check."""
    obj = graph.obj(z.dtype, pattern_name)
    if int(z.shape[1]) == 1:
        out = fn.SpMMA.apply(obj, z.reshape(z.shape[0], z.shape[2]), alpha.reshape(-1))
        return out.reshape(z.shape)
    return HeadSpMM.apply(obj, alpha, z.contiguous())
