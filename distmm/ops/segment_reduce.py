"""Per-segment sums and maxima of grouped edge values, in one compiled pass.

The edge primitives (:mod:`distmm.ops.edges`: softmax, row and column sums and maxima) reduce
an (entries, h) array whose rows are grouped by segment (a row or column of S) to one row per
segment. numpy's ``ufunc.reduceat`` along axis 0 calls its inner loop once per segment and
column, which on GAT's shapes (h = heads, a few entries per segment) costs more than the rest
of a softmax. The kernels here walk the segments in parallel and reduce each column of a
segment as numpy's loop does: the first entry, plus numpy's pairwise sum of the others (eight
accumulators, blocks of at most 128 halved recursively; a plain sum below eight), so the
results are bitwise numpy's, whatever the threads, and long segments (a hub's edges) keep the
pairwise sum's accuracy.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

# Below this many values, numpy's reduceat is cheaper than starting the parallel region.
MIN_PARALLEL_VALUES = 4096
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum): the
# block size below which it unrolls into eight accumulators instead of halving
_PW_BLOCKSIZE = 128


@njit(cache=True, nogil=True)
def _pairwise_sum(xs, lo, n, k):
    """xs[lo:lo + n, k] summed as numpy's pairwise_sum does, in xs's dtype."""
    if n < 8:
        res = xs.dtype.type(0.0)
        for i in range(n):
            res += xs[lo + i, k]
        return res
    if n <= _PW_BLOCKSIZE:
        r0, r1, r2, r3 = xs[lo, k], xs[lo + 1, k], xs[lo + 2, k], xs[lo + 3, k]
        r4, r5, r6, r7 = xs[lo + 4, k], xs[lo + 5, k], xs[lo + 6, k], xs[lo + 7, k]
        i = 8
        while i < n - (n % 8):
            r0 += xs[lo + i, k]
            r1 += xs[lo + i + 1, k]
            r2 += xs[lo + i + 2, k]
            r3 += xs[lo + i + 3, k]
            r4 += xs[lo + i + 4, k]
            r5 += xs[lo + i + 5, k]
            r6 += xs[lo + i + 6, k]
            r7 += xs[lo + i + 7, k]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += xs[lo + i, k]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(xs, lo, n2, k) + _pairwise_sum(xs, lo + n2, n - n2, k)


@functools.cache
def _segment_kernel(maximum: bool):
    """The per-segment sum (``maximum`` false) or maximum kernel: ``kernel(xs, starts, out)``
    for (n, h) ``xs``. ``maximum`` is a closure constant (one compiled kernel each)."""

    @njit(parallel=True, cache=True, nogil=True)
    def kernel(xs, starts, out):
        n, h = xs.shape
        nseg = starts.shape[0]
        for s in prange(nseg):
            lo = starts[s]
            hi = starts[s + 1] if s + 1 < nseg else n
            # reduceat: the segment's first entry, then its loop takes in the rest
            for k in range(h):
                out[s, k] = xs[lo, k]
            if maximum:  # entry by entry, all columns at once (the order is immaterial)
                for j in range(lo + 1, hi):
                    for k in range(h):
                        a = out[s, k]
                        v = xs[j, k]
                        # np.maximum: the first operand when it is >= or NaN, else the second
                        if not (a >= v or a != a):
                            out[s, k] = v
            elif hi - lo > 1:  # column by column, in numpy's order
                for k in range(h):
                    out[s, k] += _pairwise_sum(xs, lo + 1, hi - lo - 1, k)

    return kernel


_MAXIMUM = {np.add: False, np.maximum: True}


def segment_reduce(ufunc: np.ufunc, xs: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``ufunc.reduceat(xs, starts, axis=0)``, bitwise, for segments that tile ``xs``.

    Parameters
    ----------
    ufunc : np.add or np.maximum
        The reduction (any other ufunc goes to ``reduceat``).
    xs : ndarray, shape (n,) or (n, h)
        Values grouped by segment.
    starts : ndarray of int64, shape (segments,)
        Each segment's first entry, nondecreasing and below n: segment s is
        ``xs[starts[s]:starts[s + 1]]`` (the last runs to the end), an empty one gives its
        start's entry, as ``reduceat`` does.

    Returns
    -------
    ndarray, shape (segments,) or (segments, h)

    Not collective. Float32 and float64 C-contiguous arrays of at least
    ``MIN_PARALLEL_VALUES`` values take the compiled kernels; the rest ``reduceat``.
    """
    maximum = _MAXIMUM.get(ufunc)
    if (maximum is None or xs.dtype not in _FLOATS or xs.ndim not in (1, 2)
            or xs.size < MIN_PARALLEL_VALUES or not xs.flags.c_contiguous
            or starts.dtype != np.int64 or not starts.size or starts[-1] >= xs.shape[0]):
        return ufunc.reduceat(xs, starts, axis=0)
    grid = xs.reshape(xs.shape[0], -1)
    out = np.empty((starts.size, grid.shape[1]), dtype=xs.dtype)
    _segment_kernel(maximum)(grid, starts, out)
    return out.reshape((starts.size,) + xs.shape[1:])
