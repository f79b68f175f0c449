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
distributed steps). Serial kernels: the backward scatters into source rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def csr_of(obj) -> tuple[np.ndarray, np.ndarray] | None:
    """(indptr, source positions) of one-rank ``obj``'s nonzeros in value order, in the
    positions of its A-side and B-side blocks; None where ``obj`` spans several ranks or its
    value order is not grouped by row. Cached on ``obj``. Not collective."""
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
        indptr = np.searchsorted(ri, np.arange(a.size + 1)).astype(np.int64)
        cache = obj.__dict__["_torch_local_csr"] = (indptr, ci) if ok else False
    return cache or None


@njit(cache=True, nogil=True)
def scores(indptr, cols, s_dst, s_src, slope, lrelu, shifted):
    """``lrelu[e] = LeakyReLU(s_dst[i] + s_src[j])`` at every nonzero e = (i, j) and head, and
    ``shifted[e]`` that less its row's maximum (the stable softmax's exponent); (nnz, H)."""
    n, H = s_dst.shape
    sl = s_dst.dtype.type(slope)
    m = np.empty(H, s_dst.dtype)
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        for k in range(H):
            m[k] = -np.inf
        for p in range(lo, hi):
            j = cols[p]
            for k in range(H):
                v = s_dst[i, k] + s_src[j, k]
                v = v if v > 0 else v * sl
                lrelu[p, k] = v
                m[k] = max(m[k], v)
        for p in range(lo, hi):
            for k in range(H):
                shifted[p, k] = lrelu[p, k] - m[k]


@njit(cache=True, nogil=True)
def normalize(indptr, ex):
    """Divide each row's (nnz, H) values by their sum over the row, per head, in place."""
    n, H = indptr.size - 1, ex.shape[1]
    total = np.empty(H, ex.dtype)
    one = ex.dtype.type(1.0)
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        if hi == lo:  # a row without nonzeros: nothing to normalise
            continue
        for k in range(H):
            total[k] = 0
        for p in range(lo, hi):
            for k in range(H):
                total[k] += ex[p, k]
        for k in range(H):
            total[k] = one / total[k]
        for p in range(lo, hi):
            for k in range(H):
                ex[p, k] *= total[k]


@njit(cache=True, nogil=True)
def aggregate(indptr, cols, w, z, y):
    """``y[i, k] = sum_j w[(i, j), k] z[j, k]`` (y zeroed here): (n, H, C) node arrays."""
    n, H, C = y.shape
    for i in range(n):
        for k in range(H):
            for c in range(C):
                y[i, k, c] = 0
        for p in range(indptr[i], indptr[i + 1]):
            j = cols[p]
            for k in range(H):
                a = w[p, k]
                for c in range(C):
                    y[i, k, c] += a * z[j, k, c]


@njit(cache=True, nogil=True)
def backward(indptr, cols, alpha, w, mask, masked, lrelu, slope, G, z, y, dz, ds_src, ds_dst):
    """The attention's backward on one rank (zeroes and fills dz (n, H, C), ds_src and
    ds_dst (n, H)): per edge and head, ``h = <G_i, z_j>``, ``dl = alpha (m h - <G_i, y_i>)``,
    ``de = dl LeakyReLU'``; ``ds_dst[i] += de``, ``ds_src[j] += de``,
    ``dz[j] += w G_i``. ``mask`` (nnz, H) multiplies h when ``masked``."""
    n, H, C = z.shape
    sl = z.dtype.type(slope)
    d = np.empty(H, z.dtype)
    for j in range(n):
        for k in range(H):
            ds_src[j, k] = 0
            ds_dst[j, k] = 0
            for c in range(C):
                dz[j, k, c] = 0
    for i in range(n):
        for k in range(H):
            acc = z.dtype.type(0)
            for c in range(C):
                acc += G[i, k, c] * y[i, k, c]
            d[k] = acc  # the softmax's row term <G_i, y_i>
        for p in range(indptr[i], indptr[i + 1]):
            j = cols[p]
            for k in range(H):
                h = z.dtype.type(0)
                for c in range(C):
                    h += G[i, k, c] * z[j, k, c]
                if masked:
                    h *= mask[p, k]
                de = alpha[p, k] * (h - d[k])
                if not lrelu[p, k] > 0:  # LeakyReLU's derivative at 0 is the slope, as torch's
                    de *= sl
                ds_dst[i, k] += de
                ds_src[j, k] += de
                a = w[p, k]
                for c in range(C):
                    dz[j, k, c] += a * G[i, k, c]
