"""The reference node model: numba kernels for every local operation, and the oracle for the rest.

Every other node model is tested against this one, so it is written for correctness first, but
it is also the model that runs by default, so it is written to be fast on a multicore CPU:

* **Row-parallel, race-free.** Every kernel walks the rows of a CSR structure in parallel and each
  row is owned by exactly one thread, so nothing is ever written by two threads. The operations
  that produce one output row per *column* of the block (``spmm_b``, ``fusedmm_b``) run the same
  row-parallel kernels on the cached transposed structure (:meth:`CSRBlock.transpose`), reading
  the values through ``perm`` (``vals[perm[t]]``) inside the kernel instead of materialising
  ``vals[perm]``.
* **Balanced by nonzeros, not rows.** ``prange`` hands each thread one contiguous range of its
  iterations, so the kernels prange over one chunk per thread, and the chunk boundaries are found
  by binary search so that every chunk holds about the same ``nnz + rows``. A power-law block
  with a few dense rows no longer leaves one thread with most of the work.
* **Vectorised inner loops.** Dense rows are C-contiguous; the loop over the dense width r is the
  innermost loop and is compiled with the ``reassoc`` and ``contract`` fast-math flags, so LLVM
  vectorises dot products (a reduction) and emits fused multiply-adds. NaN and infinity keep their
  IEEE meaning (no ``nnan``/``ninf``). Four nonzeros are processed together so that one pass over
  the accumulator row (SpMM) or over the shared row of ``A`` (SDDMM) serves four of them.
* **Fused without intermediates.** FusedMM computes each nonzero's weight
  ``vals[k] * dot(A_i, B_j)`` and adds ``w * B_j`` to the row accumulator straight away, while
  ``B_j`` is still in L1; only r values per thread are ever held beyond a few scalars.

Accumulation precision: all arithmetic is done in the dtype of the operands. float64 inputs are
accumulated in float64; float32 inputs are accumulated in float32 (dot products in SDDMM/FusedMM
and the row sums of SpMM). The vectorised reductions keep 8 to 32 independent partial sums,
which keeps the float32 rounding error of a dot product of length r well below
``r * eps32 * sum|a_k b_k|``; the tests check float32 results against a float64 oracle at a
relative tolerance of 1e-4 for r up to 128 (and the error grows like sqrt(r) in practice, so
r ~ 1024 is fine). Callers who need more should pass float64.

The Python wrappers check dtypes, dimensions, shapes and contiguity (raising :class:`ValueError`
with a precise message; nothing is cast silently) and then make exactly one numba call.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from distmm.kernels.base import NodeModel
from distmm.sparse import CSRBlock

__all__ = ["ReferenceModel"]

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# reassociation (vectorised reductions) and contraction (FMA); no nnan/ninf, so NaN/inf propagate
_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}
# each row costs about as much as this many nonzeros (loop overhead, writing the output row)
_ROW_COST = 1
_EMPTY_PERM = np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# load balance


@njit(cache=True, nogil=True)
def _row_split(indptr, chunk, nchunks):
    """The first row of ``chunk`` out of ``nchunks`` chunks of about equal nnz + rows."""
    m = indptr.shape[0] - 1
    if chunk <= 0:
        return 0
    if chunk >= nchunks:
        return m
    total = indptr[m] + _ROW_COST * m
    target = (total * chunk) // nchunks
    # smallest i in [0, m] with indptr[i] + ROW_COST * i >= target (the cost is monotone in i)
    lo = 0
    hi = m
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid] + _ROW_COST * mid < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _num_chunks(m: int) -> int:
    """One chunk per numba thread (never more chunks than rows, never fewer than one).

    Computed in Python and passed in: ``numba.get_num_threads`` inside a kernel would stop numba
    from caching the compiled kernel on disk.
    """
    return max(1, min(numba.get_num_threads(), m))


# --------------------------------------------------------------------------------------------
# kernels. ``perm`` is empty for a block's own structure and the transpose permutation when the
# structure is the cached transpose: the value of the t-th stored entry is then vals[perm[t]].


@njit(parallel=True, cache=True, nogil=True, fastmath=_FASTMATH)
def _spmm_kernel(indptr, indices, vals, perm, X, out, nchunks):
    """out[i] += sum_t vals(t) * X[indices[t]] over the stored entries t of row i."""
    r = out.shape[1]
    use_perm = perm.shape[0] > 0
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        acc = np.empty(r, dtype=out.dtype)
        for i in range(lo, hi):
            start = indptr[i]
            end = indptr[i + 1]
            if start == end:
                continue
            for k in range(r):
                acc[k] = 0
            t = start
            while t + 4 <= end:
                j0 = indices[t]
                j1 = indices[t + 1]
                j2 = indices[t + 2]
                j3 = indices[t + 3]
                if use_perm:
                    v0 = vals[perm[t]]
                    v1 = vals[perm[t + 1]]
                    v2 = vals[perm[t + 2]]
                    v3 = vals[perm[t + 3]]
                else:
                    v0 = vals[t]
                    v1 = vals[t + 1]
                    v2 = vals[t + 2]
                    v3 = vals[t + 3]
                x0 = X[j0]
                x1 = X[j1]
                x2 = X[j2]
                x3 = X[j3]
                for k in range(r):
                    acc[k] += v0 * x0[k] + v1 * x1[k] + v2 * x2[k] + v3 * x3[k]
                t += 4
            while t < end:
                v = vals[perm[t]] if use_perm else vals[t]
                x = X[indices[t]]
                for k in range(r):
                    acc[k] += v * x[k]
                t += 1
            o = out[i]
            for k in range(r):
                o[k] += acc[k]


@njit(parallel=True, cache=True, nogil=True, fastmath=_FASTMATH)
def _sddmm_kernel(indptr, indices, vals, A, B, out, nchunks):
    """out[t] += vals[t] * dot(A[i], B[indices[t]]) for every stored entry t of every row i."""
    r = A.shape[1]
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        for i in range(lo, hi):
            start = indptr[i]
            end = indptr[i + 1]
            a = A[i]
            t = start
            while t + 4 <= end:
                b0 = B[indices[t]]
                b1 = B[indices[t + 1]]
                b2 = B[indices[t + 2]]
                b3 = B[indices[t + 3]]
                s0 = out.dtype.type(0)
                s1 = out.dtype.type(0)
                s2 = out.dtype.type(0)
                s3 = out.dtype.type(0)
                for k in range(r):
                    ak = a[k]
                    s0 += ak * b0[k]
                    s1 += ak * b1[k]
                    s2 += ak * b2[k]
                    s3 += ak * b3[k]
                out[t] += vals[t] * s0
                out[t + 1] += vals[t + 1] * s1
                out[t + 2] += vals[t + 2] * s2
                out[t + 3] += vals[t + 3] * s3
                t += 4
            while t < end:
                b = B[indices[t]]
                s = out.dtype.type(0)
                for k in range(r):
                    s += a[k] * b[k]
                out[t] += vals[t] * s
                t += 1


@njit(parallel=True, cache=True, nogil=True, fastmath=_FASTMATH)
def _fused_kernel(indptr, indices, vals, perm, X, Y, out, nchunks):
    """out[i] += sum_t w_t * Y[j_t] with w_t = vals(t) * dot(X[i], Y[j_t]), j_t = indices[t].

    On a block's own structure (X, Y) = (A, B) gives fusedmm_a; on the transposed structure
    (X, Y) = (B, A) gives fusedmm_b.
    """
    r = out.shape[1]
    use_perm = perm.shape[0] > 0
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        acc = np.empty(r, dtype=out.dtype)
        for i in range(lo, hi):
            start = indptr[i]
            end = indptr[i + 1]
            if start == end:
                continue
            for k in range(r):
                acc[k] = 0
            x = X[i]
            t = start
            while t + 4 <= end:
                y0 = Y[indices[t]]
                y1 = Y[indices[t + 1]]
                y2 = Y[indices[t + 2]]
                y3 = Y[indices[t + 3]]
                s0 = out.dtype.type(0)
                s1 = out.dtype.type(0)
                s2 = out.dtype.type(0)
                s3 = out.dtype.type(0)
                for k in range(r):
                    xk = x[k]
                    s0 += xk * y0[k]
                    s1 += xk * y1[k]
                    s2 += xk * y2[k]
                    s3 += xk * y3[k]
                if use_perm:
                    w0 = vals[perm[t]] * s0
                    w1 = vals[perm[t + 1]] * s1
                    w2 = vals[perm[t + 2]] * s2
                    w3 = vals[perm[t + 3]] * s3
                else:
                    w0 = vals[t] * s0
                    w1 = vals[t + 1] * s1
                    w2 = vals[t + 2] * s2
                    w3 = vals[t + 3] * s3
                for k in range(r):
                    acc[k] += w0 * y0[k] + w1 * y1[k] + w2 * y2[k] + w3 * y3[k]
                t += 4
            while t < end:
                y = Y[indices[t]]
                s = out.dtype.type(0)
                for k in range(r):
                    s += x[k] * y[k]
                w = (vals[perm[t]] if use_perm else vals[t]) * s
                for k in range(r):
                    acc[k] += w * y[k]
                t += 1
            o = out[i]
            for k in range(r):
                o[k] += acc[k]


# --------------------------------------------------------------------------------------------
# validation


def _check_dense(name: str, arr: np.ndarray, rows: int, dtype: np.dtype,
                 r: int | None) -> int:
    """Check one dense operand; return its width r."""
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise ValueError(f"{name} has dtype {arr.dtype}, expected {dtype} (the dtype of vals; "
                         "nothing is cast implicitly)")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
    if arr.shape[0] != rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows, expected {rows} (shape {arr.shape})")
    if r is not None and arr.shape[1] != r:
        raise ValueError(f"{name} has width {arr.shape[1]}, expected {r} like the other "
                         "dense operands")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return int(arr.shape[1])


def _check_vals(S: CSRBlock, vals: np.ndarray) -> np.dtype:
    """Check the values array against the block; return the common dtype."""
    if not isinstance(vals, np.ndarray):
        raise ValueError(f"vals must be a numpy array, got {type(vals).__name__}")
    dtype = vals.dtype
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"vals has dtype {dtype}; only float32 and float64 are supported")
    if dtype != S.data.dtype:
        raise ValueError(f"vals has dtype {dtype} but the block's dtype is {S.data.dtype}")
    if vals.ndim != 1 or vals.shape[0] != S.nnz:
        raise ValueError(f"vals must have shape ({S.nnz},) (the block's nnz), got {vals.shape}")
    if not vals.flags.c_contiguous:
        raise ValueError("vals must be contiguous")
    return dtype


def _check_out_vector(S: CSRBlock, out: np.ndarray, dtype: np.dtype) -> None:
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ValueError(f"out has dtype {out.dtype}, expected {dtype} (the dtype of vals)")
    if out.ndim != 1 or out.shape[0] != S.nnz:
        raise ValueError(f"out must have shape ({S.nnz},) (the block's nnz), got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be contiguous")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")


def _check_out_dense(out: np.ndarray, rows: int, dtype: np.dtype, r: int) -> None:
    _check_dense("out", out, rows, dtype, r)
    if not out.flags.writeable:
        raise ValueError("out must be writeable")


# --------------------------------------------------------------------------------------------


class ReferenceModel(NodeModel):
    """Numba CPU kernels for SDDMM, SpMM (both sides) and FusedMM (both sides).

    Every operation accumulates into ``out`` (see :mod:`distmm.kernels.base` for shapes). The
    ``_b`` operations use the block's cached transpose, built on their first call.
    """

    name = "reference"
    native = frozenset({"sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"})

    def _sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
               out: np.ndarray) -> None:
        """out[k] += vals[k] * dot(A[row_k], B[col_k])."""
        m, n = S.shape
        dtype = _check_vals(S, vals)
        r = _check_dense("A", A, m, dtype, None)
        _check_dense("B", B, n, dtype, r)
        _check_out_vector(S, out, dtype)
        if S.nnz == 0 or r == 0:
            return
        _sddmm_kernel(S.indptr, S.indices, vals, A, B, out, _num_chunks(m))

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals) @ B."""
        m, n = S.shape
        dtype = _check_vals(S, vals)
        r = _check_dense("B", B, n, dtype, None)
        _check_out_dense(out, m, dtype, r)
        if S.nnz == 0 or r == 0:
            return
        _spmm_kernel(S.indptr, S.indices, vals, _EMPTY_PERM, B, out, _num_chunks(m))

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals)^T @ A, row-parallel over the cached transpose."""
        m, n = S.shape
        dtype = _check_vals(S, vals)
        r = _check_dense("A", A, m, dtype, None)
        _check_out_dense(out, n, dtype, r)
        if S.nnz == 0 or r == 0:
            return
        indptr_t, indices_t, perm = S.transpose()
        _spmm_kernel(indptr_t, indices_t, vals, perm, A, out, _num_chunks(n))

    def _fusedmm_a(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                   out: np.ndarray) -> None:
        """out += (S(vals) * (A B^T)) @ B, one row's worth of intermediates per thread."""
        m, n = S.shape
        dtype = _check_vals(S, vals)
        r = _check_dense("A", A, m, dtype, None)
        _check_dense("B", B, n, dtype, r)
        _check_out_dense(out, m, dtype, r)
        if S.nnz == 0 or r == 0:
            return
        _fused_kernel(S.indptr, S.indices, vals, _EMPTY_PERM, A, B, out, _num_chunks(m))

    def _fusedmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                   out: np.ndarray) -> None:
        """out += (S(vals) * (A B^T))^T @ A, row-parallel over the cached transpose."""
        m, n = S.shape
        dtype = _check_vals(S, vals)
        r = _check_dense("A", A, m, dtype, None)
        _check_dense("B", B, n, dtype, r)
        _check_out_dense(out, n, dtype, r)
        if S.nnz == 0 or r == 0:
            return
        indptr_t, indices_t, perm = S.transpose()
        _fused_kernel(indptr_t, indices_t, vals, perm, B, A, out, _num_chunks(n))
