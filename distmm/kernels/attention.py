"""Compiled multi-head GAT attention on one block of S: the fused forward step (online
softmax) and its backward, every head in one pass over the block's nonzeros.

These are the local kernels of :meth:`DenseShift15D.fused_attention
<distmm.algorithms.dense_shift_15d.DenseShift15D.fused_attention>` and
:meth:`~distmm.algorithms.dense_shift_15d.DenseShift15D.fused_attention_backward`, one call
per block that meets the shifted B block. Per stored entry (i, j) of a block and head h:

    e_ijh = LeakyReLU(s_dst[i, h] + s_src[j, h])
    alpha_ijh = exp(e_ijh - L_ih),  L_ih = log sum_j exp(e_ijh)   (row i's softmax)
    out[i, h] = sum_j alpha_ijh scale_ijh z[j, h]                  (scale: attention dropout)

Forward (:func:`attention_forward_block`): each row keeps a running maximum m, a running
sum l of exp(e - m) and an accumulator acc of exp(e - m) scale z_j per head, as
memory-efficient attention kernels do (Milakov and Gimelshein's online softmax). Per row
and block, a first sweep over the row's entries finds the block's maximum score per head
(scores only: H additions and comparisons per entry); where it raises m, l and acc are
rescaled by exp(m_old - m_new) once; the second sweep adds exp(e - m) and its weighted z_j.
The row's entries and gathered rows are in cache for the second sweep; no (nnz, heads)
array is written, and no branch on a new maximum sits in the inner loop.

Backward (:func:`attention_backward_block`): given the per-row statistics L (one number per
row and head, kept by the forward) the coefficients are recomputed from the per-node scores,
so the backward needs neither alpha nor the scores stored. With dout the gradient of out and
t_ih = dout_ih . out_ih (row i's sum_j alpha_ijh d alpha_ijh, a local dot product):

    d alpha_ijh = scale_ijh dout_ih . z_jh
    dpre_ijh = LeakyReLU'(pre_ijh) alpha_ijh (d alpha_ijh - t_ih)
    dz[j, h] += alpha_ijh scale_ijh dout_ih      d s_src[j, h] += dpre_ijh
    d s_dst[i, h] += dpre_ijh

The column-side sums (dz, d s_src) run row-parallel over the block's cached transpose, each
thread owning its columns, and write dpre into a block-sized scratch in the block's value
order; the row sums d s_dst are a second, row-parallel pass over that scratch.

Packed operands (what the distributed loop shifts and replicates, so that one message moves
a node's every head): a B-side row is ``[z (H*F) | s_src (H)]``; in the backward an A-side
row is ``[dout (H*F) | t (H) | L (H) | s_dst (H)]`` and a B-side gradient row
``[dz (H*F) | d s_src (H)]``. Not collective; every function runs on one rank's data.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from distmm.core.sparse import CSRBlock
from distmm.kernels.numba_util import FASTMATH
from distmm.kernels.reference import _num_chunks, _row_split

__all__ = ["attention_backward_block", "attention_forward_block", "forward_reference",
           "backward_reference"]


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _forward_kernel(indptr, indices, T, Y, scale, soff, has_scale, H, F, slope, m, lsum, acc,
                    nchunks):
    HF = H * F
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        if hi > lo:
            bm = np.empty(H, dtype=acc.dtype)
        for i in range(lo, hi):
            start = indptr[i]
            end = indptr[i + 1]
            if end == start:
                continue
            mi = m[i]
            li = lsum[i]
            ai = acc[i]
            ti = T[i]
            # the block's maximum score of the row per head (scores are a few flops each:
            # computed again below rather than stored)
            for h in range(H):
                bm[h] = mi[h]
            for t in range(start, end):
                y = Y[indices[t]]
                for h in range(H):
                    x = ti[h] + y[HF + h]
                    e = x if x > 0 else slope * x
                    if e > bm[h]:
                        bm[h] = e
            # raise the running maximum once per row and block, rescaling what the row holds
            # (exp(-inf) = 0 the first time)
            for h in range(H):
                if bm[h] > mi[h]:
                    f = math.exp(mi[h] - bm[h])
                    li[h] *= f
                    for k in range(h * F, h * F + F):
                        ai[k] *= f
                    mi[h] = bm[h]
            for t in range(start, end):
                y = Y[indices[t]]
                for h in range(H):
                    x = ti[h] + y[HF + h]
                    e = x if x > 0 else slope * x
                    p = math.exp(e - mi[h])
                    li[h] += p
                    w = p * scale[soff + t, h] if has_scale else p
                    for k in range(F):
                        ai[h * F + k] += w * y[h * F + k]


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _backward_cols_kernel(indptr_t, indices_t, perm, XR, Y, scale, soff, has_scale, H, F,
                          slope, G, dpre, nchunks):
    HF = H * F
    zero = G.dtype.type(0)
    one = G.dtype.type(1)
    for c in prange(nchunks):
        lo = _row_split(indptr_t, c, nchunks)
        hi = _row_split(indptr_t, c + 1, nchunks)
        for j in range(lo, hi):
            y = Y[j]
            g = G[j]
            for tt in range(indptr_t[j], indptr_t[j + 1]):
                i = indices_t[tt]
                t = perm[tt]
                x = XR[i]
                for h in range(H):
                    pre = x[HF + 2 * H + h] + y[HF + h]
                    e = pre if pre > 0 else slope * pre
                    alpha = math.exp(e - x[HF + H + h])
                    s = scale[soff + t, h] if has_scale else one
                    dot = zero
                    for k in range(h * F, h * F + F):
                        dot += x[k] * y[k]
                    de = alpha * (s * dot - x[HF + h])
                    d = de if pre > 0 else slope * de
                    dpre[t, h] = d
                    g[HF + h] += d
                    w = alpha * s
                    for k in range(h * F, h * F + F):
                        g[k] += w * x[k]


@njit(parallel=True, cache=True, nogil=True)
def _row_sums_kernel(indptr, dpre, out, nchunks):
    H = out.shape[1]
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        for i in range(lo, hi):
            for t in range(indptr[i], indptr[i + 1]):
                for h in range(H):
                    out[i, h] += dpre[t, h]


def _scale_operand(scale: np.ndarray | None, H: int, dtype) -> tuple[np.ndarray, bool]:
    if scale is None:
        return np.ones((1, H), dtype=dtype), False
    return scale, True


def attention_forward_block(S: CSRBlock, T: np.ndarray, Y: np.ndarray, H: int, F: int,
                            slope: float, m: np.ndarray, lsum: np.ndarray, acc: np.ndarray,
                            scale: np.ndarray | None = None, scale_offset: int = 0) -> None:
    """Add block S's entries to the running softmax state of its rows, every head at once.

    Parameters
    ----------
    S : CSRBlock (rows, cols)
    T : ndarray (rows, H)
        s_dst of the block's rows.
    Y : ndarray (cols, H * (F + 1))
        The block's columns' packed ``[z | s_src]`` rows.
    H, F : int
        Heads, features per head.
    slope : float
        LeakyReLU's negative slope.
    m, lsum : ndarray (rows, H)
        Running maximum (-inf before any entry) and sum of exp(e - m); updated in place.
    acc : ndarray (rows, H * F)
        Running sum of exp(e - m) scale z_j; updated in place.
    scale : ndarray (nnz_total, H), optional
        Factors of the normalised coefficients (attention dropout); entry t of S reads row
        ``scale_offset + t``.

    All arrays C-contiguous of one float dtype. Not collective.
    """
    if S.nnz == 0:
        return
    sc, has = _scale_operand(scale, H, Y.dtype)
    _forward_kernel(S.indptr, S.indices, T, Y, sc, int(scale_offset), has, H, F,
                    Y.dtype.type(slope), m, lsum, acc, _num_chunks(S.shape[0]))


def attention_backward_block(S: CSRBlock, XR: np.ndarray, Y: np.ndarray, H: int, F: int,
                             slope: float, G: np.ndarray, d_dst: np.ndarray,
                             scale: np.ndarray | None = None, scale_offset: int = 0) -> None:
    """Add block S's entries' gradients (see the module docstring), every head at once.

    Parameters
    ----------
    S : CSRBlock (rows, cols)
    XR : ndarray (rows, H * (F + 3))
        The block's rows' packed ``[dout | t | L | s_dst]``.
    Y : ndarray (cols, H * (F + 1))
        The block's columns' packed ``[z | s_src]``.
    G : ndarray (cols, H * (F + 1))
        The columns' packed gradients ``[dz | d s_src]``; added to.
    d_dst : ndarray (rows, H)
        The rows' d s_dst; added to.
    scale, scale_offset
        As in :func:`attention_forward_block`.

    Not collective.
    """
    if S.nnz == 0:
        return
    sc, has = _scale_operand(scale, H, Y.dtype)
    indptr_t, indices_t, perm = S.transpose()
    dpre = np.empty((S.nnz, H), dtype=Y.dtype)
    _backward_cols_kernel(indptr_t, indices_t, perm, XR, Y, sc, int(scale_offset), has, H, F,
                          Y.dtype.type(slope), G, dpre, _num_chunks(S.shape[1]))
    _row_sums_kernel(S.indptr, dpre, d_dst, _num_chunks(S.shape[0]))


# ------------------------------------------------------------------------ numpy references
def _scores(S: CSRBlock, s_dst: np.ndarray, s_src: np.ndarray, slope: float):
    rows = S.row_ids()
    pre = s_dst[rows] + s_src[S.indices]
    return rows, pre, np.where(pre > 0, pre, slope * pre)


def forward_reference(S: CSRBlock, s_dst: np.ndarray, s_src: np.ndarray, Z: np.ndarray,
                      slope: float, scale: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The whole attention on one block, in numpy (the oracle of the kernels): returns out
    (rows, H, F) and L (rows, H; -inf on rows without entries). Z is (cols, H, F). Not
    collective."""
    nrows, H = S.shape[0], s_dst.shape[1]
    rows, _, e = _scores(S, s_dst, s_src, slope)
    L = np.full((nrows, H), -np.inf)
    np.maximum.at(L, rows, e)
    ex = np.exp(e - L[rows])
    tot = np.zeros((nrows, H))
    np.add.at(tot, rows, ex)
    with np.errstate(divide="ignore"):
        L = L + np.log(tot)
    alpha = np.exp(e - L[rows])
    if scale is not None:
        alpha = alpha * scale
    out = np.zeros((nrows, H, Z.shape[2]))
    np.add.at(out, rows, alpha[:, :, None] * Z[S.indices])
    return out, L


def backward_reference(S: CSRBlock, s_dst, s_src, Z, L, out, dout, slope,
                       scale=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The attention's backward on one block in numpy: (dZ (cols, H, F), d_dst (rows, H),
    d_src (cols, H)) from the forward's L and out and the gradient dout (rows, H, F). Not
    collective."""
    rows, pre, e = _scores(S, s_dst, s_src, slope)
    cols = S.indices
    alpha = np.exp(e - L[rows])
    s = np.ones_like(alpha) if scale is None else scale
    dalpha = s * np.einsum("khf,khf->kh", dout[rows], Z[cols])
    t = np.einsum("nhf,nhf->nh", dout, out)
    de = alpha * (dalpha - t[rows])
    dpre = np.where(pre > 0, de, slope * de)
    dZ = np.zeros_like(Z)
    np.add.at(dZ, cols, (alpha * s)[:, :, None] * dout[rows])
    d_dst = np.zeros((S.shape[0], L.shape[1]))
    np.add.at(d_dst, rows, dpre)
    d_src = np.zeros((S.shape[1], L.shape[1]))
    np.add.at(d_src, cols, dpre)
    return dZ, d_dst, d_src
