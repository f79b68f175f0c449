"""Arrays whose data starts on a cache line.

numpy's allocator aligns data to 16 bytes, and a large array's data usually starts 16 bytes
past a page (the C allocator's header), so a dense row of 64 bytes (r = 16 in float32, 8 in
float64) spans two cache lines and a row of 128 bytes three. The sparse kernels gather whole
rows at random, so every misaligned row costs a line more to fetch; on rows of one to a few
lines that is up to twice the traffic (docs/performance.md, "Cache-line aligned blocks").
The dense blocks and scratch buffers distmm allocates start on a 64-byte boundary (the cache
line of current x86-64 and most Arm server cores, and one AVX-512 vector), so a row whose
byte length is a multiple of 64 occupies exactly that many lines. Arrays the caller allocates
are used as they are.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["ALIGNMENT", "aligned_copy", "aligned_empty", "is_aligned", "padding"]

ALIGNMENT = 64


class _PaddedBuffer(np.ndarray):
    """The byte buffer under an aligned array: :data:`ALIGNMENT` bytes longer than its data
    (the type marks it for :func:`padding`; the aligned arrays themselves are plain)."""


def aligned_empty(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts on an
    :data:`ALIGNMENT`-byte boundary.

    A view into a byte buffer ``ALIGNMENT`` bytes longer than the data (the view keeps it
    alive, as any numpy view does). Not collective.
    """
    # Called for the result of every call without out=: a tuple takes the short way.
    dtype = np.dtype(dtype)
    if isinstance(shape, tuple):
        shape = tuple(map(int, shape))
    else:
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(map(int, shape))
    nbytes = math.prod(shape) * dtype.itemsize
    raw = _PaddedBuffer(nbytes + ALIGNMENT, dtype=np.uint8)  # owns its memory
    # the address through a compiled call on a plain view: numpy's ``raw.ctypes.data`` (or
    # its array interface) builds an object per call and costs more than the rest together
    offset = -_address(raw.view(np.ndarray)) % ALIGNMENT
    return np.ndarray(shape, dtype, buffer=raw, offset=offset)


@numba.njit(cache=True)
def _address(a: np.ndarray) -> int:
    """The address of ``a``'s data."""
    return a.ctypes.data


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` (same dtype) on an aligned buffer. Not collective."""
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def padding(base: np.ndarray) -> int:
    """The bytes of ``base`` (an array that owns its buffer) that only align the data of an
    aligned array: :data:`ALIGNMENT` for the buffer under one, else 0. Not collective."""
    return ALIGNMENT if isinstance(base, _PaddedBuffer) else 0


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array``'s data starts on an :data:`ALIGNMENT`-byte boundary (an empty array
    has no data to fetch: always True; numpy does not offset the pointer of an empty slice).
    Not collective."""
    return array.size == 0 or array.__array_interface__["data"][0] % ALIGNMENT == 0
