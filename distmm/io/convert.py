"""A Matrix Market file to the HDF5 CSR layout (the `distmm convert` command: distmm.cli.convert).

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

import os

import h5py
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.io.outputs import atomic_output, attr_value

__all__ = ["gather_share", "write_csr_h5"]


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
            out.attrs[key] = attr_value(value)
