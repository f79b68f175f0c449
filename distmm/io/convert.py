"""``distmm convert IN.mtx[.gz] OUT.h5``: a Matrix Market file to the HDF5 CSR layout.

Collective: every rank reads its share of the Matrix Market file with the parallel reader
(:func:`~distmm.io.matrix_market.read_matrix_market`), the shares are gathered in rank order to
rank 0 (``Gatherv``, buffer methods), and rank 0 assembles CSR (duplicates summed, symmetric
files expanded, column indices sorted within each row) and writes it through
:func:`~distmm.io.outputs.atomic_output`, so ``OUT.h5`` is either absent (or its old self) or
complete.
Rank 0 therefore holds the whole matrix once (about 20 bytes per nonzero plus the CSR copy).
The layout written is the one :mod:`distmm.io.hdf5` reads.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import h5py
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.errors import Checks, agree, require
from distmm.io.hdf5 import HDF5_SUFFIXES, is_hdf5_path
from distmm.io.matrix_market import mtx_header, read_matrix_market
from distmm.io.outputs import atomic_output, check_output

__all__ = ["add_parser", "cmd_convert", "gather_share", "write_csr_h5"]


def add_parser(sub) -> None:
    """Register ``distmm convert`` on the ``distmm`` command's subparsers."""
    cv = sub.add_parser("convert", help="convert a Matrix Market file to HDF5 (CSR layout; "
                                        "parallel read, atomic write)")
    cv.add_argument("input", help="S as .mtx or .mtx.gz")
    cv.add_argument("output", help="HDF5 file to write (.h5 or .hdf5; written atomically)")
    cv.set_defaults(func=cmd_convert)


def gather_share(share: CooShare, comm: MPI.Comm, root: int = 0) -> sp.csr_matrix | None:
    """Every rank's entries, in rank order, as one CSR matrix on ``root``.

    Collective over ``comm``: one ``Allgather`` of the counts and three ``Gatherv`` calls
    (rows, columns, values; buffer methods).

    Parameters
    ----------
    share : CooShare
        This rank's entries.
    comm : MPI.Comm
        The ranks holding the shares.
    root : int
        The rank that receives the matrix.

    Returns
    -------
    scipy.sparse.csr_matrix or None
        On ``root``: the matrix, duplicates summed, column indices sorted; None elsewhere.
    """
    counts = np.zeros(comm.Get_size(), dtype=np.int64)
    comm.Allgather(np.array([share.nnz], dtype=np.int64), counts)
    total = int(counts.sum())
    is_root = comm.Get_rank() == root
    parts = []
    for local, dtype, mpi_type in ((share.rows, np.int64, MPI.INT64_T),
                                   (share.cols, np.int64, MPI.INT64_T),
                                   (share.vals, np.float64, MPI.DOUBLE)):
        whole = np.empty(total if is_root else 0, dtype=dtype)
        comm.Gatherv([local, mpi_type], [whole, (counts, None), mpi_type] if is_root else None,
                     root=root)
        parts.append(whole)
    if not is_root:
        return None
    rows, cols, vals = parts
    csr = sp.csr_matrix((vals, (rows, cols)), shape=share.shape)
    csr.sum_duplicates()
    csr.sort_indices()
    return csr


def write_csr_h5(path: str | os.PathLike[str], csr: sp.csr_matrix,
                 attrs: dict | None = None) -> None:
    """Write ``csr`` to ``path`` in the HDF5 CSR layout, atomically. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        The output; written through :func:`distmm.io.outputs.atomic_output` (temporary file renamed
        into place, nothing left behind on failure).
    csr : scipy.sparse.csr_matrix
        The matrix. Stored as ``/indptr`` and ``/indices`` (int32 when every value fits, else
        int64) and ``/data`` (float64), contiguous (no chunking or compression: each rank's
        share is then one contiguous read), and the shape as file attribute ``shape``.
    attrs : dict, optional
        Further file attributes (strings or numbers).

    Returns
    -------
    None
    """
    big = max(csr.nnz, csr.shape[1]) >= np.iinfo(np.int32).max
    index = np.int64 if big else np.int32
    with atomic_output(path) as tmp, h5py.File(tmp, "w") as out:
        out.create_dataset("indptr", data=csr.indptr.astype(index, copy=False))
        out.create_dataset("indices", data=csr.indices.astype(index, copy=False))
        out.create_dataset("data", data=csr.data.astype(np.float64, copy=False))
        out.attrs["shape"] = np.asarray(csr.shape, dtype=np.int64)
        for key, value in (attrs or {}).items():
            out.attrs[key] = value


def _prechecks(args, comm: MPI.Comm) -> None:
    """Every check that reads no data (not collective): names, the output path (rank 0,
    the writer) and the input's header. Raises InputError."""
    require(not is_hdf5_path(args.input),
            f"{args.input}: convert reads Matrix Market (.mtx or .mtx.gz), not HDF5")
    require(is_hdf5_path(args.output),
            f"{args.output}: the output must be named {' or '.join(HDF5_SUFFIXES)}")
    if comm.Get_rank() == 0:
        problem = check_output(args.output, "OUT", [args.input])
        require(problem is None, problem or "")
    mtx_header(args.input)


def cmd_convert(args: argparse.Namespace) -> int:
    """Run ``distmm convert`` (collective over COMM_WORLD); one JSON line on rank 0."""
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    with checks.guard():
        _prechecks(args, comm)
    checks.agree()
    t0 = time.perf_counter()
    share = read_matrix_market(args.input, comm)
    read_seconds = time.perf_counter() - t0
    entries = int(comm.allreduce(share.nnz))
    csr = gather_share(share, comm)
    del share
    msg = None
    if csr is not None:
        try:
            write_csr_h5(args.output, csr, {"source": os.path.abspath(args.input)})
        except OSError as exc:
            msg = f"OUT {args.output}: cannot write ({exc.strerror or exc})"
    agree(comm, msg)
    if csr is not None:
        print(json.dumps({"event": "convert", "input": args.input, "output": args.output,
                          "shape": list(csr.shape), "entries_read": entries, "nnz": csr.nnz,
                          "p": comm.Get_size(), "read_seconds": read_seconds,
                          "seconds": time.perf_counter() - t0}, sort_keys=True), flush=True)
    return 0
