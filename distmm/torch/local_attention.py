"""GAT's attention on one rank's whole graph, in compiled passes over S's rows.

Where S lives on one rank (p = 1), every row and column of S is local, so the attention of
:mod:`distmm.torch.attention` needs no communication, and its steps (additive scores,
LeakyReLU, the row softmax, the weighted aggregation and, backward, the score gradients and
both reductions) can each walk S's rows once, with every intermediate edge value in a
register, instead of one distmm call (and one (nnz, H) array) per step. The results are the
same quantities as the distributed steps compute (the same formulas; sums in another order,
so equal to rounding).

S's rows are walked in value order, which on one rank is CSR order (rows nondecreasing:
:func:`csr_of` checks it and answers None otherwise, and the caller then takes the
distributed steps). The passes run on numba's threads (distmm's per-rank count), over
target rows, or, for the backward's sums into source rows, over source rows through the
transposed order (CSC), so that no two threads write one row.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


def csr_of(obj) -> tuple[np.ndarray, ...] | None:
    """(indptr, source positions, colptr, order, target positions) of one-rank ``obj``'s
    nonzeros: CSR in value order (the positions are those of its A-side and B-side blocks),
    and the value order sorted by source (``order``, grouped by ``colptr``) with each entry's
    target; None where ``obj`` spans several ranks or its value order is not grouped by row.
    Cached on ``obj``. Not collective."""
    if obj.p != 1:
        return None
    cache = obj.__dict__.get("_torch_local_csr")
    if cache is None:
        rows, cols = (np.asarray(x, dtype=np.int64) for x in obj.value_coordinates())
        a, b = (np.asarray(obj.dense_rows(s, obj.rank), dtype=np.int64) for s in "ab")
        ra, rb = np.argsort(a, kind="stable"), np.argsort(b, kind="stable")
        ri = ra[np.searchsorted(a[ra], rows)] if rows.size else rows
        ci = rb[np.searchsorted(b[rb], cols)] if cols.size else cols
        ok = (rows.size == 0 or (np.all(np.diff(ri) >= 0) and np.array_equal(a[ri], rows)
                                 and np.array_equal(b[ci], cols)))
        cache = False
        if ok:
            indptr = np.searchsorted(ri, np.arange(a.size + 1)).astype(np.int64)
            order = np.argsort(ci, kind="stable").astype(np.int64)
            colptr = np.searchsorted(ci[order], np.arange(b.size + 1)).astype(np.int64)
            cache = (indptr, ci, colptr, order, ri[order].astype(np.int64))
        obj.__dict__["_torch_local_csr"] = cache
    return cache or None


@njit(parallel=True, cache=True, nogil=True)
def scores(indptr, cols, s_dst, s_src, slope, lrelu, shifted):
    """``lrelu[e] = LeakyReLU(s_dst[i] + s_src[j])`` at every nonzero e = (i, j) and head, and
    ``shifted[e]`` that less its row's maximum (the stable softmax's exponent); (nnz, H)."""
    n, H = s_dst.shape
    sl = s_dst.dtype.type(slope)
    for i in prange(n):
        lo, hi = indptr[i], indptr[i + 1]
        for k in range(H):
            m = -np.inf
            for p in range(lo, hi):
                v = s_dst[i, k] + s_src[cols[p], k]
                v = v if v > 0 else v * sl
                lrelu[p, k] = v
                m = max(m, v)
            for p in range(lo, hi):
                shifted[p, k] = lrelu[p, k] - m


@njit(parallel=True, cache=True, nogil=True)
def normalize(indptr, ex):
    """Divide each row's (nnz, H) values by their sum over the row, per head, in place."""
    n, H = indptr.size - 1, ex.shape[1]
    one = ex.dtype.type(1.0)
    for i in prange(n):
        lo, hi = indptr[i], indptr[i + 1]
        if hi == lo:  # a row without nonzeros: nothing to normalise
            continue
        for k in range(H):
            total = ex.dtype.type(0.0)
            for p in range(lo, hi):
                total += ex[p, k]
            inv = one / total
            for p in range(lo, hi):
                ex[p, k] *= inv


@njit(parallel=True, cache=True, nogil=True)
def aggregate(indptr, cols, w, z, y):
    """``y[i, k] = sum_j w[(i, j), k] z[j, k]`` (y zeroed here): (n, H, C) node arrays."""
    n, H, C = y.shape
    for i in prange(n):
        for k in range(H):
            for c in range(C):
                y[i, k, c] = 0
        for p in range(indptr[i], indptr[i + 1]):
            j = cols[p]
            for k in range(H):
                a = w[p, k]
                for c in range(C):
                    y[i, k, c] += a * z[j, k, c]


@njit(parallel=True, cache=True, nogil=True)
def score_grads(indptr, cols, alpha, mask, masked, lrelu, slope, G, z, y, de, ds_dst):
    """Per edge e = (i, j) and head: ``h = <G_i, z_j>`` (times ``mask[e]`` when ``masked``),
    ``de[e] = alpha[e] (h - <G_i, y_i>) LeakyReLU'``, and ``ds_dst[i] = sum_j de``; over
    target rows."""
    n, H, C = y.shape
    sl = z.dtype.type(slope)
    for i in prange(n):
        for k in range(H):
            d = z.dtype.type(0)
            for c in range(C):
                d += G[i, k, c] * y[i, k, c]  # the softmax's row term <G_i, y_i>
            acc = z.dtype.type(0)
            for p in range(indptr[i], indptr[i + 1]):
                j = cols[p]
                h = z.dtype.type(0)
                for c in range(C):
                    h += G[i, k, c] * z[j, k, c]
                if masked:
                    h *= mask[p, k]
                g = alpha[p, k] * (h - d)
                if not lrelu[p, k] > 0:  # LeakyReLU's derivative at 0 is the slope, as torch's
                    g *= sl
                de[p, k] = g
                acc += g
            ds_dst[i, k] = acc


@njit(parallel=True, cache=True, nogil=True)
def source_grads(colptr, order, targets, de, w, G, dz, ds_src):
    """``ds_src[j] = sum_i de[(i, j)]`` and ``dz[j] = sum_i w[(i, j)] G_i`` per head, over
    source rows (entries ``order[colptr[j]:colptr[j + 1]]``, whose targets are ``targets``)."""
    nb = colptr.size - 1
    H, C = dz.shape[1], dz.shape[2]
    for j in prange(nb):
        for k in range(H):
            acc = dz.dtype.type(0)
            for c in range(C):
                dz[j, k, c] = 0
            for q in range(colptr[j], colptr[j + 1]):
                p, i = order[q], targets[q]
                acc += de[p, k]
                a = w[p, k]
                for c in range(C):
                    dz[j, k, c] += a * G[i, k, c]
            ds_src[j, k] = acc
