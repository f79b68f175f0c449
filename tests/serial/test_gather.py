"""The compiled gathers of the edge primitives (distmm.ops.gather) against numpy's ``u[iu] +
v[iv]`` and ``v[iv]``: bitwise, below and above the size where they go parallel."""

from __future__ import annotations

import numpy as np
import pytest

from distmm.ops.gather import gather_add, gather_rows
from distmm.ops.segment_reduce import MIN_PARALLEL_VALUES


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,h", [(0, 3), (5, 1), (MIN_PARALLEL_VALUES // 8 + 1, 8),
                                 (MIN_PARALLEL_VALUES + 7, 1), (3000, 5)])
def test_gather_add_is_numpys_bit_for_bit(dtype, n, h):
    rng = np.random.default_rng(3)
    u = (rng.standard_normal((41, h)) * 10.0 ** rng.integers(-6, 6, (41, h))).astype(dtype)
    v = (rng.standard_normal((29, 2 * h))[:, ::2] * 1e3).astype(dtype)  # strided
    u[0, 0], v[0, 0] = np.nan, np.inf
    iu = rng.integers(0, 41, n).astype(np.int64)
    iv = rng.integers(0, 29, n).astype(np.int64)
    want = u[iu] + v[iv]
    got = gather_add(u, iu, v, iv)
    assert got.dtype == want.dtype and got.shape == want.shape == (n, h)
    bits = np.uint32 if dtype == np.float32 else np.uint64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(bits), want[ok].view(bits))
    rows = gather_rows(v, iv)
    assert rows.dtype == v.dtype and rows.shape == (n, h) and rows.flags.c_contiguous
    np.testing.assert_array_equal(rows.view(bits), v[iv].view(bits))
