"""Per-nonzero values gathered from per-node arrays, in one compiled pass.

The additive SDDMM (:func:`distmm.ops.edges.sddmm_add`, GAT's edge scores) puts
``u[row(e)] + v[col(e)]`` on every nonzero e, and an expand ``X[row(e)]``. numpy makes the first
two gathers and an add, each a pass over an (nnz, h) array with a temporary, and its row gather
of a few values per row is slower than a copy; the kernels here read the rows and write each
result once, in parallel. Copies and the same float addition: bitwise numpy's, whatever the
threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from distmm.ops.segment_reduce import MIN_PARALLEL_VALUES


@njit(parallel=True, cache=True, nogil=True)
def _gather_add_kernel(u, iu, v, iv, out):
    for k in prange(out.shape[0]):
        a = iu[k]
        b = iv[k]
        for c in range(out.shape[1]):
            out[k, c] = u[a, c] + v[b, c]


@njit(parallel=True, cache=True, nogil=True)
def _gather_kernel(x, ix, out):
    for k in prange(out.shape[0]):
        a = ix[k]
        for c in range(out.shape[1]):
            out[k, c] = x[a, c]


def gather_rows(x: np.ndarray, ix: np.ndarray) -> np.ndarray:
    """``x[ix]`` for a (rows, h) array and (n,) int64 row indices (in range; not checked), in
    one pass. Not collective. Returns a new C-contiguous (n, h) array of x's dtype."""
    n, h = ix.shape[0], x.shape[1]
    if n * h < MIN_PARALLEL_VALUES:
        return x[ix]
    out = np.empty((n, h), dtype=x.dtype)
    _gather_kernel(np.ascontiguousarray(x), ix, out)
    return out


def gather_add(u: np.ndarray, iu: np.ndarray, v: np.ndarray, iv: np.ndarray) -> np.ndarray:
    """``u[iu] + v[iv]``, bitwise, in one pass. Not collective.

    Parameters
    ----------
    u, v : ndarray, shape (rows_u, h) and (rows_v, h), one float dtype
        Per-node values.
    iu, iv : ndarray of int64, shape (n,)
        The row of ``u`` and of ``v`` for each output row (in range; not checked).

    Returns
    -------
    ndarray, shape (n, h), a new C-contiguous array of u's dtype.
    """
    n, h = iu.shape[0], u.shape[1]
    if n * h < MIN_PARALLEL_VALUES or u.dtype != v.dtype:
        return u[iu] + v[iv]
    out = np.empty((n, h), dtype=u.dtype)
    _gather_add_kernel(np.ascontiguousarray(u), iu, np.ascontiguousarray(v), iv, out)
    return out
