"""distmm.ops.segment_reduce against numpy's ufunc.reduceat, bit for bit."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from distmm.ops.segment_reduce import MIN_PARALLEL_VALUES, segment_reduce


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, but any NaN for a NaN: which NaN (sign, payload) comes out of a sum with
    NaN and infinities among its terms depends on how the hardware orders them."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = np.uint32 if want.dtype == np.float32 else np.uint64
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


def _case(rng, n: int, h: int | None, dtype, lengths=None):
    """(xs, starts): n grouped values (h columns, or 1-D) in segments of random lengths,
    with empty segments, NaN, infinities and signed zeros among the values."""
    if lengths is None:
        lengths = rng.integers(0, 9, size=n)
        lengths = lengths[np.cumsum(lengths) <= n]
        lengths[-1] += n - lengths.sum()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    starts = starts[starts < n]
    shape = (n,) if h is None else (n, h)
    xs = rng.standard_normal(shape).astype(dtype)
    flat = xs.reshape(-1)
    special = rng.choice(flat.size, size=flat.size // 50, replace=False)
    flat[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dtype),
                               size=special.size)
    return xs, starts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("h", [None, 1, 3, 8])
@pytest.mark.parametrize("ufunc", [np.add, np.maximum])
def test_bitwise_reduceat(ufunc, h, dtype):
    rng = np.random.default_rng(7 + (h or 0))
    n = 2 * MIN_PARALLEL_VALUES + 37
    xs, starts = _case(rng, n, h, dtype)
    assert (np.diff(starts) == 0).any() and (np.diff(starts) > 4).any()  # empty and long
    want = ufunc.reduceat(xs, starts, axis=0)
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        _same(segment_reduce(ufunc, xs, starts), want)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_one_segment_and_one_entry_segments():
    rng = np.random.default_rng(3)
    n = MIN_PARALLEL_VALUES + 1
    for lengths in (np.array([n]), np.ones(n, dtype=np.int64)):
        xs, starts = _case(rng, n, 2, np.float64, lengths)
        for ufunc in (np.add, np.maximum):
            _same(segment_reduce(ufunc, xs, starts), ufunc.reduceat(xs, starts, axis=0))


def test_other_inputs_take_reduceat():
    """Small, strided, integer or other-ufunc inputs give reduceat's result (its own path)."""
    rng = np.random.default_rng(5)
    xs, starts = _case(rng, 2 * MIN_PARALLEL_VALUES, 4, np.float64)
    cases = [(np.add, xs[:100], starts[starts < 100]),
             (np.add, xs[:, ::2], starts),
             (np.maximum, (xs * 8).astype(np.int64), starts),
             (np.minimum, xs, starts)]
    for ufunc, x, s in cases:
        np.testing.assert_array_equal(segment_reduce(ufunc, x, s), ufunc.reduceat(x, s, axis=0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segments_across_the_pairwise_block_sizes(dtype):
    """Segments of every length around numpy's pairwise-sum thresholds (8 accumulators from
    eight entries, halving above 128), each column summed bitwise as numpy does."""
    rng = np.random.default_rng(11)
    lengths = np.array([1, 2, 7, 8, 9, 10, 15, 16, 17, 127, 128, 129, 130, 136, 255, 256, 257,
                        1000, 1031, 4097])
    xs, starts = _case(rng, int(lengths.sum()) + 1, 3, dtype, np.append(lengths, 1))
    xs = np.where(np.isfinite(xs), xs, 1.0).astype(dtype)  # finite: every bit counts
    _same(segment_reduce(np.add, xs, starts), np.add.reduceat(xs, starts, axis=0))
