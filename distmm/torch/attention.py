"""GAT's attention and aggregation, all heads, as one differentiable operation.

:func:`attend` computes, for node features ``z`` (local nodes, H, C) and attention vectors
``a_src``, ``a_dst`` (H, C),

* the per-node scores ``s_src = <z_j, a_src>`` and ``s_dst = <z_i, a_dst>`` per head, both in
  one dense product of ``z`` (nodes, H C) by the block-diagonal (H C, 2H) matrix that holds
  the attention vectors;
* the edge scores ``e_ij = LeakyReLU(s_dst_i + s_src_j)`` (one additive SDDMM);
* ``alpha = softmax`` of ``e`` over each target's in-edges (one distributed edge softmax),
  optionally dropped out (``alpha * m``, ``m`` Bernoulli(1 - p) / (1 - p));
* ``y_i = sum_j alpha_ij z_j`` per head (one multi-value SpMM).

Its backward is written out by hand, so the block is one autograd node instead of a dozen,
and it needs fewer distributed calls than the chain of its pieces' own backward passes. With
``G`` the gradient of the loss with respect to ``y``:

* ``dalpha_ij = m_ij <G_i, z_j>`` and the softmax's row term
  ``D_i = sum_j alpha_ij dalpha_ij = <G_i, y_i>``, a dense product on each node's own row
  (``y_i`` is whole on its rank in the graph's families), so the softmax's backward needs no
  edge all-reduce: ``dl_ij = alpha_ij (dalpha_ij - D_i)``. Without dropout, one multi-head
  SDDMM of ``[G_i, -D_i]`` and ``[z_j, 1]`` gives ``dalpha_ij - D_i`` directly; with dropout,
  one multi-head SDDMM gives ``<G_i, z_j>`` and an expand gives ``D_i`` at the edges.
* ``de = dl * LeakyReLU'(e)``; ``ds_dst = sum_j de_ij`` (a row reduction) and ``ds_src =
  sum_i de_ij`` (a column reduction).
* ``dz = S(alpha m)^T G`` (one multi-value SpMM of S^T) plus ``[ds_src | ds_dst]`` times the
  block-diagonal matrix transposed; ``da_src``, ``da_dst`` from ``z^T [ds_src | ds_dst]``.

Every distributed call is collective over the graph's ranks (forward and backward); every
rank calls :func:`attend` with the same kinds of arguments (the layer checks them first).

On one rank (p = 1) the same formulas run as a few compiled passes over S's rows
(:mod:`distmm.torch.local_attention`) instead of the distributed calls: no step there needs
communication, and on graphs of a few thousand nodes each distmm call costs more than its
arithmetic.
"""

from __future__ import annotations

import numpy as np

from distmm.torch import functions as fn
from distmm.torch import local_attention as local
from distmm.torch.functions import torch

F = torch.nn.functional


def _block_diagonal(att_src, att_dst):
    """The (H C, 2H) matrix whose column k holds ``att_src[k]`` in rows k C .. (k+1) C - 1
    and column H + k holds ``att_dst[k]`` there: ``z (nodes, H C)`` times it is
    ``[s_src | s_dst]``."""
    H, C = att_src.shape
    eye = torch.eye(H, dtype=att_src.dtype)
    return (torch.stack([att_src, att_dst], -1).unsqueeze(-1)
            * eye[:, None, None, :]).reshape(H * C, 2 * H)


def _edge_array(obj, x: np.ndarray, H: int) -> np.ndarray:
    """A (nnz, H) result of distmm (1-D when H = 1 for some calls) as a plain (nnz, H) array."""
    return np.asarray(x).view(np.ndarray).reshape(-1, H)


class Attention(torch.autograd.Function):
    """``y = S(softmax_row(LeakyReLU(s_dst_i + s_src_j)) * m) z``, per head; see the module
    docstring. Inputs: obj, z (n, H, C) contiguous, att_src and att_dst (H, C), slope,
    dropout probability (0: none)."""

    @staticmethod
    def forward(ctx, obj, z, att_src, att_dst, slope: float, drop: float):
        n, H, C = z.shape
        W = _block_diagonal(att_src, att_dst)
        z2 = z.reshape(n, H * C)
        s = torch.mm(z2, W)  # (n, 2H): [s_src | s_dst]
        csr = local.csr_of(obj)
        if csr is None:
            e = _edge_array(obj, obj.sddmm_add(s[:, H:].contiguous().numpy(),
                                               s[:, :H].contiguous().numpy()), H)
            lt = torch.from_numpy(e)
            F.leaky_relu_(lt, slope)  # e is distmm's new array: LeakyReLU in place
            alpha = _edge_array(obj, obj.edge_softmax(e, "row"), H)
        else:
            nnz = csr[1].size
            e, alpha = (np.empty((nnz, H), dtype=obj.dtype) for _ in range(2))
            local.scores(*csr[:2], s[:, H:].contiguous().numpy(), s[:, :H].contiguous().numpy(),
                         slope, e, alpha)
            torch.exp_(torch.from_numpy(alpha))  # vectorised, between the compiled passes
            local.normalize(csr[0], alpha)
            lt = torch.from_numpy(e)
        mask = None
        weights = alpha
        if drop > 0.0:
            mask = torch.empty(alpha.shape, dtype=z.dtype).bernoulli_(1.0 - drop)
            mask.div_(1.0 - drop)
            weights = alpha * mask.numpy()
        zn = z2.numpy()
        if csr is not None:
            vals = weights
            y = torch.empty(n, H, C, dtype=z.dtype)
            local.aggregate(*csr[:2], weights, z.numpy(), y.numpy())
        elif H == 1:
            vals = weights.reshape(-1)
            y = fn._run(obj, "spmm_a", zn, values=vals if vals.flags.c_contiguous else vals.copy())
        else:
            vals = np.ascontiguousarray(weights.T)
            y = fn._run(obj, "spmm_a", zn, values=vals)
        if csr is None:
            y = torch.from_numpy(np.asarray(y).view(np.ndarray)).reshape(n, H, C)
        ctx.csr = csr
        ctx.obj, ctx.slope, ctx.drop = obj, slope, drop
        ctx.vals = vals  # the SpMM's values, reused by the backward's SpMM of S^T
        ctx.save_for_backward(z, W, y, torch.from_numpy(alpha), lt, mask)
        return y

    @staticmethod
    @fn._first_order
    def backward(ctx, G):
        obj = ctx.obj
        z, W, y, alpha, lt, mask = ctx.saved_tensors
        n, H, C = z.shape
        G = G.contiguous()
        z2 = z.reshape(n, H * C)
        if ctx.csr is not None:
            dz = torch.empty(n, H, C, dtype=z.dtype)
            ds = torch.empty(n, 2 * H, dtype=z.dtype)
            ds_src, ds_dst = ds[:, :H].numpy(), ds[:, H:].numpy()
            masked = mask is not None
            de = np.empty(alpha.shape, dtype=obj.dtype)
            local.score_grads(*ctx.csr[:2], alpha.numpy(), (mask if masked else alpha).numpy(),
                              masked, lt.numpy(), ctx.slope, G.numpy(), z.numpy(), y.numpy(),
                              de, ds_dst)
            local.source_grads(*ctx.csr[2:], de, ctx.vals, G.numpy(), dz.numpy(), ds_src)
            dz = dz.reshape(n, H * C).addmm_(ds, W.t()).reshape(n, H, C)
        else:
            ds, dz = _distributed_backward(ctx, obj, G, z, y, alpha, lt, mask, W)
        if not ctx.needs_input_grad[1]:
            dz = None
        dW = None
        if ctx.needs_input_grad[2] or ctx.needs_input_grad[3]:
            # each head's own block of z^T [ds_src | ds_dst]: (C, 2, H)
            dW = torch.diagonal(torch.mm(z2.t(), ds).reshape(H, C, 2, H), dim1=0, dim2=3)
        da_src = dW[:, 0].t() if dW is not None and ctx.needs_input_grad[2] else None
        da_dst = dW[:, 1].t() if dW is not None and ctx.needs_input_grad[3] else None
        return None, dz, da_src, da_dst, None, None


def _distributed_backward(ctx, obj, G, z, y, alpha, lt, mask, W):
    """(ds = [ds_src | ds_dst] (n, 2H), dz (n, H, C)) by distmm's distributed calls."""
    n, H, C = z.shape
    z2, g2 = z.reshape(n, H * C), G.reshape(n, H * C)
    # the softmax's row term D_i = <G_i, y_i>, one per node and head
    D = torch.bmm(G.view(n * H, 1, C), y.view(n * H, C, 1)).view(n, H)
    ones = fn._ones(obj)
    d = _edge_array(obj, _sddmm(obj, g2.numpy(), z2.numpy(), ones, H), H)
    dl = torch.from_numpy(d)  # <G_i, z_j>, per head
    if mask is not None:
        dl.mul_(mask)
    dl.sub_(torch.from_numpy(_edge_array(obj, obj.expand("a", D.numpy()), H)))
    dl.mul_(alpha)
    de = torch.ops.aten.leaky_relu_backward(dl, lt, ctx.slope, True).numpy()
    ds = torch.cat([torch.from_numpy(_edge_array(obj, obj.reduce(de, "col", "sum"), H)),
                    torch.from_numpy(_edge_array(obj, obj.reduce(de, "row", "sum"), H))],
                   1)  # (n, 2H): [ds_src | ds_dst]
    dz = None
    if ctx.needs_input_grad[1]:
        dz = torch.from_numpy(np.asarray(fn._run(obj, "spmm_b", g2.numpy(), values=ctx.vals))
                              .view(np.ndarray)).reshape(n, H * C)
        dz.addmm_(ds, W.t())
        dz = dz.reshape(n, H, C)
    return ds, dz


def _sddmm(obj, A: np.ndarray, B: np.ndarray, ones: np.ndarray, H: int) -> np.ndarray:
    """``<A_i,k, B_j,k>`` at every nonzero and head k: (nnz, H). One head is S's own SDDMM."""
    if H == 1:
        return fn._run(obj, "sddmm", A, B, values=ones)
    return obj.sddmm(A, B, values=ones, heads=H)


@fn._eager
def attend(obj, z, att_src, att_dst, slope: float, dropout: float = 0.0):
    """GAT's attention and aggregation on the distributed S ``obj`` (rows targets, columns
    sources; a graph's pattern object): ``z`` (local nodes, H, C), ``att_src`` and ``att_dst``
    (1, H, C) or (H, C), LeakyReLU ``slope``, ``dropout`` on the attention (0 for none; pass
    0 outside training). Returns (local nodes, H, C), differentiable in ``z``, ``att_src`` and
    ``att_dst``. Collective over ``obj.comm``, forward and backward; the caller checks the
    arguments (:func:`distmm.torch.functions._check_call`)."""
    H, C = int(z.shape[1]), int(z.shape[2])
    return Attention.apply(obj, z.contiguous(), att_src.reshape(H, C),
                           att_dst.reshape(H, C), float(slope), float(dropout))


__all__ = ["attend"]
