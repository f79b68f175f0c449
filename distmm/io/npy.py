"""Dense inputs in .npy files: :func:`npy_header` reads only the header (shape and dtype are
compared before any data is read); :func:`load_dense_npy` memory-maps the file and copies a
rank's rows. Not collective.
"""

from __future__ import annotations

import os

import numpy as np

from distmm.errors import InputError

_F32_MAX = float(np.finfo(np.float32).max)


__all__ = ["load_dense_npy", "npy_header"]


def npy_header(path: str | os.PathLike[str]) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, dtype)`` of a 2-D real ``.npy`` array, read from its header only.

    Not collective. Raises :class:`InputError` naming the file for a missing or unreadable
    file, an ``.npz`` archive, a file that is not a (pickle-free) ``.npy`` array, an array that
    is not 2-D or not real, and a file shorter than its header says (truncated).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a .npy file")
    try:
        with open(path, "rb") as fh:
            npz = fh.read(4) == b"PK\x03\x04"
            fh.seek(0)
            version = np.lib.format.read_magic(fh)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read(fh)
            offset = fh.tell()
            size = os.fstat(fh.fileno()).st_size
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except (ValueError, OSError, EOFError) as exc:
        if npz:
            raise InputError(f"{path}: is an .npz archive; a single .npy array is expected"
                             ) from None
        raise InputError(f"{path}: not a readable .npy array file ({exc})") from None
    if dtype.hasobject:
        raise InputError(f"{path}: holds Python objects; a real numeric array is expected")
    if len(shape) != 2:
        raise InputError(f"{path}: expected a 2-D array, got shape {tuple(shape)}")
    if dtype.kind not in "iuf":
        raise InputError(f"{path}: expected a real numeric array, got dtype {dtype}")
    needed = offset + int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size < needed:
        raise InputError(f"{path}: truncated: its header says {shape[0]} x {shape[1]} {dtype} "
                         f"({needed} bytes) but the file has {size} bytes")
    return (int(shape[0]), int(shape[1])), dtype


def load_dense_npy(path: str | os.PathLike[str], block_rows: int = 65536,
                   dtype=None) -> np.ndarray:
    """Load a 2-D real array from a ``.npy`` file, memory-mapped read-only.

    Not collective: it raises InputError locally, so a caller whose ranks may see different
    files must pass the error through :func:`~distmm.errors.agree`. Refused with an
    InputError naming the file: everything :func:`npy_header` refuses, NaN or infinite values
    (checked in blocks of ``block_rows`` rows; the first one is reported by row and column)
    and, when ``dtype`` (the type the values will be converted to) is float32, finite values
    too large for float32 (the first one and the largest magnitude are reported, with the hint
    to use float64). The array is returned in its stored dtype.
    """
    path = os.fspath(path)
    npy_header(path)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npy array file ({exc})") from exc
    narrow = (dtype is not None and np.dtype(dtype) == np.float32 and arr.dtype.kind == "f"
              and arr.dtype.itemsize > 4)
    first = None  # (row, column, value) of the first value that overflows float32
    largest = 0.0
    if arr.dtype.kind == "f":
        step = max(int(block_rows), 1)
        for start in range(0, arr.shape[0], step):
            block = np.asarray(arr[start : start + step])
            bad = ~np.isfinite(block)
            if bad.any():
                i, j = (int(x[0]) for x in np.nonzero(bad))
                raise InputError(
                    f"{path}: non-finite value {block[i, j]} at row {start + i}, column {j}; "
                    "NaN and infinite values are refused"
                )
            if narrow and block.size:
                magnitude = np.abs(block)
                largest = max(largest, float(magnitude.max()))
                if first is None and largest > _F32_MAX:
                    i, j = (int(x[0]) for x in np.nonzero(magnitude > _F32_MAX))
                    first = (start + i, j, float(block[i, j]))
    if first is not None:
        i, j, value = first
        raise InputError(
            f"{path}: finite values too large for float32 (value {value:.3g} at row {i}, "
            f"column {j}; largest magnitude {largest:.3g}; float32 holds at most "
            f"{_F32_MAX:.3g}): converting them would give infinities; use --dtype float64"
        )
    return arr

