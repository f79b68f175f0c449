"""The numerical product C = X @ Y that the simulator returns beside its model.

SpArch's merge tree sums the products of one coordinate in float64 (Table I: double-precision
multipliers and adders) and keeps every coordinate that any product reached (the zero eliminator
removes the slots freed by additions, not numerical zeros), so C here is accumulated in float64
and keeps structural zeros; it is cast to the inputs' dtype at the end. Row-wise (Gustavson)
with a dense accumulator: the result does not depend on the merge order the model chose.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _symbolic(x_ptr, x_idx, y_ptr, y_idx, n):
    m = x_ptr.size - 1
    mark = np.full(n, -1, dtype=np.int64)
    c_ptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        cnt = 0
        for p in range(x_ptr[i], x_ptr[i + 1]):
            k = x_idx[p]
            for q in range(y_ptr[k], y_ptr[k + 1]):
                j = y_idx[q]
                if mark[j] != i:
                    mark[j] = i
                    cnt += 1
        c_ptr[i + 1] = c_ptr[i] + cnt
    return c_ptr


@njit(cache=True, nogil=True)
def _numeric(x_ptr, x_idx, x_val, y_ptr, y_idx, y_val, n, c_ptr, c_idx, c_val):
    m = x_ptr.size - 1
    acc = np.zeros(n, dtype=np.float64)
    mark = np.full(n, -1, dtype=np.int64)
    for i in range(m):
        t = c_ptr[i]
        for p in range(x_ptr[i], x_ptr[i + 1]):
            k = x_idx[p]
            a = np.float64(x_val[p])
            for q in range(y_ptr[k], y_ptr[k + 1]):
                j = y_idx[q]
                if mark[j] != i:
                    mark[j] = i
                    acc[j] = 0.0
                    c_idx[t] = j
                    t += 1
                acc[j] += a * np.float64(y_val[q])
        row = np.sort(c_idx[c_ptr[i]:t])
        for s in range(row.size):
            c_idx[c_ptr[i] + s] = row[s]
            c_val[c_ptr[i] + s] = acc[row[s]]


def spgemm(x_ptr: np.ndarray, x_idx: np.ndarray, x_val: np.ndarray, y_ptr: np.ndarray,
           y_idx: np.ndarray, y_val: np.ndarray, n: int, dtype: np.dtype
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr int64, indices int32, data ``dtype``) of X @ Y, column indices sorted,
    structural zeros kept, summed in float64. Y has ``n`` columns. Not collective."""
    x_ptr = x_ptr.astype(np.int64, copy=False)
    y_ptr = y_ptr.astype(np.int64, copy=False)
    c_ptr = _symbolic(x_ptr, x_idx, y_ptr, y_idx, n)
    nnz = int(c_ptr[-1])
    c_idx = np.empty(nnz, dtype=np.int64)
    c_val = np.empty(nnz, dtype=np.float64)
    _numeric(x_ptr, x_idx, x_val, y_ptr, y_idx, y_val, n, c_ptr, c_idx, c_val)
    return c_ptr, c_idx.astype(np.int32), c_val.astype(dtype)
