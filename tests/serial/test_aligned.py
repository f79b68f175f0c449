"""distmm.core.aligned: arrays whose data starts on a 64-byte cache line."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from distmm.core.aligned import ALIGNMENT, aligned_copy, aligned_empty, is_aligned


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
@pytest.mark.parametrize("shape", [7, (1,), (5, 3), (943, 16), (2, 3, 4), (0,), (0, 16)])
def test_shape_dtype_layout_and_alignment(shape, dtype):
    a = aligned_empty(shape, dtype)
    want = (shape,) if isinstance(shape, int) else shape
    assert a.shape == want and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert is_aligned(a)
    if a.size:
        assert _address(a) % ALIGNMENT == 0
    src = np.arange(a.size, dtype=dtype).reshape(want)
    z = aligned_copy(src)
    assert is_aligned(z) and z.shape == want and z.dtype == dtype and (z == src).all()


def test_many_allocations_are_all_aligned_and_independent():
    """Whatever offset the allocator returns (it varies with size and history), every array
    starts on a line, and the arrays do not overlap."""
    arrays = [aligned_empty((n, 3), np.float32) for n in range(1, 200)]
    for k, a in enumerate(arrays):
        assert is_aligned(a)
        a.fill(k)
    for k, a in enumerate(arrays):
        assert (a == k).all()


def test_the_view_keeps_its_buffer_alive():
    a = aligned_empty((1000, 16), np.float64)
    a[...] = 1.5
    gc.collect()
    assert a.base is not None and float(a.sum()) == 1.5 * a.size


def test_is_aligned_sees_a_misaligned_view():
    a = aligned_empty(64, np.uint8)
    assert is_aligned(a) and not is_aligned(a[16:]) and is_aligned(a[16:16])


def test_held_bytes_counts_the_data_not_the_alignment_padding():
    from distmm.core.memory import held_bytes

    a = aligned_empty((100, 16), np.float32)
    assert held_bytes(a, a[3:], {"x": a.T}) == a.nbytes
    plain = np.empty((100, 16), np.float32)
    assert held_bytes(a, plain) == 2 * plain.nbytes
    assert type(a) is np.ndarray and type(aligned_copy(a)) is np.ndarray
