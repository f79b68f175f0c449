"""Sparse S from HDF5: a header reader and a parallel reader that reads only each rank's share.

Layout (0-based indices; groups are not used, the datasets sit at the file's root):

* CSR: datasets ``/indptr`` (m + 1 integers, ``indptr[0] == 0``, non-decreasing, last
  ``== nnz``), ``/indices`` (nnz column indices in ``0..n-1``) and ``/data`` (nnz real
  values);
* COO: datasets ``/row``, ``/col`` (nnz integers each, in ``0..m-1`` and ``0..n-1``) and
  ``/val`` (nnz real values);
* both: the shape ``(m, n)`` as a file attribute ``shape`` or a dataset ``/shape`` (two
  non-negative integers).

Index datasets must have an integer type and value datasets an integer or floating type;
duplicates are allowed (summed later, like duplicates of a Matrix Market file).
``distmm convert`` writes the CSR layout; ``distmm spgemm`` writes it too, so its output can be
read back as S.

:func:`sparse_header` and :func:`read_sparse` are the one place that dispatches on a path's
name: ``.h5`` / ``.hdf5`` go to this module, anything else to the Matrix Market reader.
"""

from __future__ import annotations

import contextlib
import os

import h5py
import numpy as np
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.errors import InputError, agree

__all__ = ["HDF5_SUFFIXES", "h5_header", "is_hdf5_path", "read_hdf5", "read_sparse",
           "sparse_header"]

HDF5_SUFFIXES = (".h5", ".hdf5")
# What h5py raises for a damaged file, depending on where the damage is (fuzzing found
# RuntimeError from a corrupt symbol table, besides OSError).
_H5_FAILURES = (OSError, RuntimeError, KeyError, ValueError, TypeError)
_LAYOUTS = {"csr": ("indptr", "indices", "data"), "coo": ("row", "col", "val")}


def is_hdf5_path(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an HDF5 file by its extension (``.h5`` or ``.hdf5``)."""
    return os.fspath(path).lower().endswith(HDF5_SUFFIXES)


def sparse_header(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """The size of a sparse-matrix file, from its header only. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        ``.h5`` / ``.hdf5``: HDF5 (see the module for the layout); anything else: Matrix
        Market (``.mtx`` or ``.mtx.gz``).

    Returns
    -------
    tuple of int
        ``(rows, cols, entries)``: for HDF5 from the shape and the datasets' lengths (no data
        read, see :func:`h5_header`); for Matrix Market from the size line
        (:func:`distmm.io.matrix_market.mtx_header`; entries before symmetric mirroring).

    Raises
    ------
    InputError
        For a missing, unreadable or malformed file, naming it.
    """
    if is_hdf5_path(path):
        return h5_header(path)[:3]
    from distmm.io.matrix_market import mtx_header

    return mtx_header(path)


def read_sparse(path: str | os.PathLike[str], comm: MPI.Comm,
                check_finite: bool = True) -> CooShare:
    """This rank's COO share of the sparse matrix in ``path``. Collective over ``comm``.

    Parameters
    ----------
    path : str or os.PathLike
        The same path on every rank: ``.h5`` / ``.hdf5`` is read by :func:`read_hdf5`,
        anything else by :func:`distmm.io.matrix_market.read_matrix_market`.
    comm : MPI.Comm
        The ranks that share S.
    check_finite : bool
        Refuse NaN or infinite values of an HDF5 file (a Matrix Market file's are always
        refused).

    Returns
    -------
    CooShare
        This rank's entries (global 0-based coordinates, duplicates not yet summed).

    Raises
    ------
    InputError
        The same on every rank, for any problem with the file.
    """
    if is_hdf5_path(path):
        return read_hdf5(path, comm, check_finite=check_finite)
    from distmm.io.matrix_market import read_matrix_market

    return read_matrix_market(path, comm)


def _open(path: str) -> h5py.File:
    """Open ``path`` read-only, or raise InputError saying why not."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not an HDF5 file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    try:
        if not h5py.is_hdf5(path):
            raise InputError(f"{path}: not an HDF5 file (a .h5/.hdf5 name is read as HDF5; "
                             "Matrix Market files must be named .mtx or .mtx.gz)")
        return h5py.File(path, "r")
    except InputError:
        raise
    except _H5_FAILURES as exc:
        raise InputError(_damaged(path, exc)) from None


def _damaged(path: str, exc: BaseException) -> str:
    return f"{path}: cannot read the HDF5 file (damaged or truncated?): {exc}"


def _checked_datasets(path: str, fh: h5py.File):
    """:func:`_datasets`, with h5py's own errors on a damaged file as InputError."""
    try:
        return _datasets(path, fh)
    except InputError:
        raise
    except _H5_FAILURES as exc:
        raise InputError(_damaged(path, exc)) from None


def _shape(path: str, fh: h5py.File) -> tuple[int, int]:
    if "shape" in fh.attrs:
        raw = fh.attrs["shape"]
    elif isinstance(fh.get("shape"), h5py.Dataset):
        raw = fh["shape"][()]
    else:
        raise InputError(f"{path}: no 'shape' (a file attribute or a dataset /shape holding "
                         "rows and columns)")
    arr = np.asarray(raw)
    if arr.shape != (2,) or arr.dtype.kind not in "iu" or (arr < 0).any():
        raise InputError(f"{path}: 'shape' must be two non-negative integers, got {raw!r}")
    return int(arr[0]), int(arr[1])


def _dataset(path: str, fh: h5py.File, name: str, kinds: str, what: str) -> h5py.Dataset:
    obj = fh.get(name)
    if not isinstance(obj, h5py.Dataset):
        raise InputError(f"{path}: missing dataset /{name}")
    if obj.ndim != 1:
        raise InputError(f"{path}: dataset /{name} must be 1-D, got shape {obj.shape}")
    if obj.dtype.kind not in kinds:
        raise InputError(f"{path}: dataset /{name} has type {obj.dtype}; {what} expected")
    return obj


def _layout(path: str, fh: h5py.File) -> str:
    found = [name for name, keys in _LAYOUTS.items() if any(key in fh for key in keys)]
    if len(found) != 1:
        has = ", ".join(f"/{key}" for key in fh) or "nothing"
        why = "both" if found else "neither"
        raise InputError(f"{path}: {why} of the CSR (/indptr, /indices, /data) and COO (/row, "
                         f"/col, /val) layouts; the file holds {has}")
    return found[0]


def _datasets(path: str, fh: h5py.File) -> tuple[str, tuple[int, int], int, list[h5py.Dataset]]:
    """Layout, shape, entries and the three datasets of an open file (checked: presence,
    types, lengths). Not collective; raises InputError."""
    layout = _layout(path, fh)
    shape = _shape(path, fh)
    first, second, values = _LAYOUTS[layout]
    sets = [_dataset(path, fh, first, "iu", "an integer type"),
            _dataset(path, fh, second, "iu", "an integer type"),
            _dataset(path, fh, values, "iuf", "a real (integer or floating) type")]
    if layout == "csr":
        nnz = sets[1].shape[0]
        if sets[0].shape[0] != shape[0] + 1:
            raise InputError(f"{path}: /indptr has {sets[0].shape[0]} entries but the shape "
                             f"says {shape[0]} rows, so it must have {shape[0] + 1}")
        if sets[2].shape[0] != nnz:
            raise InputError(f"{path}: /indices has {nnz} entries but /data has "
                             f"{sets[2].shape[0]}; they must have the same length")
    else:
        nnz = sets[0].shape[0]
        if not (sets[1].shape[0] == sets[2].shape[0] == nnz):
            raise InputError(f"{path}: /row, /col and /val have {nnz}, {sets[1].shape[0]} and "
                             f"{sets[2].shape[0]} entries; they must have the same length")
    return layout, shape, nnz, sets


def h5_header(path: str | os.PathLike[str]) -> tuple[int, int, int, str]:
    """The size and layout of an HDF5 sparse matrix, without reading its data. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        The HDF5 file (layout in the module's docstring).

    Returns
    -------
    tuple
        ``(rows, cols, entries, layout)``: three ints and ``"csr"`` or ``"coo"``.

    Raises
    ------
    InputError
        Naming the file, for a missing or unreadable file, a file that is not HDF5 or is
        damaged, a missing or malformed shape, neither or both layouts, a missing dataset, a
        dataset of the wrong type or rank, and lengths that do not agree with each other or
        with the shape.
    """
    path = os.fspath(path)
    with _open(path) as fh:
        layout, (m, n), nnz, _ = _checked_datasets(path, fh)
    return m, n, nnz, layout


def _csr_row_start(indptr: h5py.Dataset, target: int, m: int) -> int:
    """The first row ``i`` in 0..m with ``indptr[i] >= target``, by bisection.

    Reads one element per step (about log2(m) reads of 8 bytes), never the whole of indptr.
    """
    lo, hi = 0, m
    while lo < hi:
        mid = (lo + hi) // 2
        if int(indptr[mid]) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _check_range(path: str, arr: np.ndarray, limit: int, what: str, base: int) -> None:
    bad = np.flatnonzero((arr < 0) | (arr >= limit))
    if bad.size:
        k = int(bad[0])
        raise InputError(f"{path}: {what}[{base + k}] = {arr[k]} is out of range "
                         f"(0..{limit - 1})")


def _check_values(path: str, vals: np.ndarray, name: str, base: int) -> None:
    bad = np.flatnonzero(~np.isfinite(vals))
    if bad.size:
        k = int(bad[0])
        raise InputError(f"{path}: /{name}[{base + k}] = {vals[k]} is not finite; NaN and "
                         "infinite values are refused (check_finite=False accepts them)")


def _read_csr(path: str, sets: list[h5py.Dataset], shape: tuple[int, int], nnz: int,
              comm: MPI.Comm, check_finite: bool) -> CooShare | str:
    """This rank's rows of a CSR file, or the problem found (a message). Collective."""
    indptr, indices, data = sets
    m, n = shape
    rank, p = comm.Get_rank(), comm.Get_size()
    # Rows are cut where indptr crosses k*nnz/p, found by bisection on the file. One small
    # allgather makes the cuts non-decreasing even when indptr is not (that is found below),
    # so every row belongs to exactly one rank.
    msg = None
    start = 0
    try:
        start = 0 if rank == 0 else _csr_row_start(indptr, rank * nnz // p, m)
    except _H5_FAILURES as exc:
        msg = _damaged(path, exc)
    cuts = np.maximum.accumulate(np.array(comm.allgather(start) + [m], dtype=np.int64))
    agree(comm, msg)
    lo, hi = int(cuts[rank]), int(cuts[rank + 1])
    ptr = np.asarray(indptr[lo : hi + 1], dtype=np.int64)  # one hyperslab per dataset
    if rank == 0 and ptr[0] != 0:
        return f"{path}: /indptr[0] = {ptr[0]}, must be 0"
    if rank == p - 1 and ptr[-1] != nnz:
        return (f"{path}: /indptr[{m}] = {ptr[-1]}, must equal the number of entries "
                f"({nnz}, the length of /indices)")
    steps = np.flatnonzero(np.diff(ptr) < 0)
    if steps.size:
        k = int(steps[0])
        return (f"{path}: /indptr is not non-decreasing: /indptr[{lo + k}] = {ptr[k]} > "
                f"/indptr[{lo + k + 1}] = {ptr[k + 1]}")
    if ptr[0] < 0 or ptr[-1] > nnz:
        return (f"{path}: /indptr holds {ptr[0] if ptr[0] < 0 else ptr[-1]}, outside "
                f"0..{nnz} (the number of entries)")
    first, last = int(ptr[0]), int(ptr[-1])
    cols = np.asarray(indices[first:last], dtype=np.int64)
    vals = np.asarray(data[first:last], dtype=np.float64)
    _check_range(path, cols, n, "/indices", first)
    if check_finite:
        _check_values(path, vals, data.name.lstrip("/"), first)
    rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(ptr))
    return CooShare(shape=shape, rows=rows, cols=cols, vals=vals)


def _read_coo(path: str, sets: list[h5py.Dataset], shape: tuple[int, int], nnz: int,
              comm: MPI.Comm, check_finite: bool) -> CooShare:
    """This rank's equal slice of a COO file (InputError on a bad entry). Not collective."""
    rank, p = comm.Get_rank(), comm.Get_size()
    lo, hi = rank * nnz // p, (rank + 1) * nnz // p
    row, col, val = sets
    rows = np.asarray(row[lo:hi], dtype=np.int64)
    cols = np.asarray(col[lo:hi], dtype=np.int64)
    vals = np.asarray(val[lo:hi], dtype=np.float64)
    _check_range(path, rows, shape[0], "/row", lo)
    _check_range(path, cols, shape[1], "/col", lo)
    if check_finite:
        _check_values(path, vals, "val", lo)
    return CooShare(shape=shape, rows=rows, cols=cols, vals=vals)


def read_hdf5(path: str | os.PathLike[str], comm: MPI.Comm,
              check_finite: bool = True) -> CooShare:
    """Read an HDF5 sparse matrix (CSR or COO layout, see the module) into one share per rank.

    Collective over ``comm``; every rank passes the same ``path`` (a shared file system is
    assumed) and opens the file itself: there is no root and no data travels between ranks.
    No rank reads the whole file: with the CSR layout rank k of p finds, by bisection on
    ``/indptr`` (single-element reads), the first row whose entries start at or after
    k*nnz/p, and reads its rows with one hyperslab of each dataset (``/indptr``, then the
    matching ranges of ``/indices`` and ``/data``), so the shares are balanced by nonzeros; with
    the COO layout rank k reads entries [k*nnz/p, (k+1)*nnz/p) of each dataset.

    Parameters
    ----------
    path : str or os.PathLike
        The HDF5 file, the same on every rank.
    comm : MPI.Comm
        The ranks that share S.
    check_finite : bool
        Refuse NaN or infinite values (default True).

    Returns
    -------
    CooShare
        This rank's entries, global 0-based coordinates, values as float64.

    Raises
    ------
    InputError
        The same on every rank (agreed in one collective, :func:`distmm.errors.agree`),
        naming the file and the position of the first bad element: everything
        :func:`h5_header` refuses; ``/indptr`` not starting at 0, not non-decreasing or not
        ending at nnz; an index out of range; with ``check_finite`` a NaN or infinite value.
    """
    path = os.fspath(path)
    msg: str | None = None
    share: CooShare | str | None = None
    fh = None
    try:
        fh = _open(path)
        layout, shape, nnz, sets = _checked_datasets(path, fh)
    except InputError as exc:
        msg = str(exc)
    try:
        agree(comm, msg)
        assert fh is not None
        try:
            if layout == "csr":
                share = _read_csr(path, sets, shape, nnz, comm, check_finite)
            else:
                share = _read_coo(path, sets, shape, nnz, comm, check_finite)
        except InputError as exc:
            share = str(exc)
        except _H5_FAILURES as exc:
            share = _damaged(path, exc)
    finally:
        if fh is not None:
            with contextlib.suppress(*_H5_FAILURES):
                fh.close()
    agree(comm, share if isinstance(share, str) else None)
    assert isinstance(share, CooShare)
    return share
