"""COO shares: how a global sparse matrix arrives before it is distributed onto a grid.

A *COO share* is one rank's part of a global sparse matrix: some of its entries as global
(row, col, value) triples. The shares of all ranks are disjoint slices of the entry list and
their union is the whole matrix. Which rank holds which entry is arbitrary (whatever was cheapest
for the reader or generator), and a coordinate may appear several times, on one rank or on
several: duplicates are meant to be summed when the matrix is assembled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.errors import agree, require


@dataclass(frozen=True, eq=False)
class CooShare:
    """One rank's share of the entries of a global sparse matrix, in COO form.

    ``shape`` is the global (rows, cols); ``rows`` and ``cols`` are 0-based global int64
    indices and ``vals`` float64 values, all three of the same length. Duplicated coordinates
    are allowed (they are summed later). The constructor converts the arrays to these dtypes
    and checks that their lengths match; it does not check index ranges (the readers and
    :meth:`from_scipy` do, collectively).
    """

    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", (int(self.shape[0]), int(self.shape[1])))
        for name, dtype in (("rows", np.int64), ("cols", np.int64), ("vals", np.float64)):
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if arr.ndim != 1:
                raise ValueError(f"CooShare.{name} must be 1-D, got shape {arr.shape}")
            object.__setattr__(self, name, arr)
        if not (self.rows.shape == self.cols.shape == self.vals.shape):
            raise ValueError(
                "CooShare arrays must have equal lengths, got "
                f"{self.rows.size}, {self.cols.size}, {self.vals.size}"
            )

    @property
    def nnz(self) -> int:
        """Number of entries in this rank's share (duplicates counted). Not collective."""
        return int(self.rows.size)

    def to_scipy(self) -> sp.coo_matrix:
        """This share alone as a scipy COO matrix of the global shape (duplicates kept)."""
        return sp.coo_matrix((self.vals, (self.rows, self.cols)), shape=self.shape)

    def gather_scipy(self, comm: MPI.Comm, root: int = 0) -> sp.coo_matrix | None:
        """The union of all ranks' shares as one scipy COO matrix on ``root``, None elsewhere.

        Collective over ``comm``. Entries are concatenated in rank order, duplicates kept. Meant
        for tests and small matrices: everything travels to one rank.
        """
        parts = comm.gather((self.rows, self.cols, self.vals), root=root)
        if comm.Get_rank() != root:
            return None
        rows = np.concatenate([p[0] for p in parts])
        cols = np.concatenate([p[1] for p in parts])
        vals = np.concatenate([p[2] for p in parts])
        return sp.coo_matrix((vals, (rows, cols)), shape=self.shape)

    @classmethod
    def from_scipy(
        cls,
        matrix: sp.spmatrix | sp.sparray | None,
        comm: MPI.Comm,
        root: int | None = 0,
    ) -> CooShare:
        """Split a scipy sparse matrix into near-equal COO shares, one per rank of ``comm``.

        Collective over ``comm``. With ``root=None`` every rank passes the same full matrix and
        keeps slice k of p of its entries (no data moves; shapes and entry counts are checked to
        agree across ranks). Otherwise only rank ``root`` needs the matrix (the others may pass
        None): the shape and the per-rank counts are broadcast, then the index and value arrays
        are scattered with buffer-based Scatterv, rank k receiving slice k of p. Slices are in
        the matrix's COO entry order, duplicates kept. Raises InputError on every rank for a
        complex matrix, a negative shape or an index out of range.
        """
        p = comm.Get_size()
        rank = comm.Get_rank()
        if root is not None:
            require(0 <= int(root) < p, f"root must be in [0, {p}), got {root}")
            root = int(root)
        holds = root is None or rank == root

        msg: str | None = None
        coo: sp.coo_matrix | None = None
        if holds:
            coo, msg = _validated_coo(matrix)
        agree(comm, msg)

        if root is None:
            assert coo is not None
            views = comm.allgather((coo.shape, coo.nnz))
            require(
                all(v == views[0] for v in views),
                "CooShare.from_scipy(root=None) needs the same matrix on every rank; got "
                f"(shape, nnz) = {views}",
            )
            lo, hi = rank * coo.nnz // p, (rank + 1) * coo.nnz // p
            return cls(
                shape=coo.shape,
                rows=coo.row[lo:hi].astype(np.int64),
                cols=coo.col[lo:hi].astype(np.int64),
                vals=coo.data[lo:hi].astype(np.float64),
            )

        # Shape and counts first, then the three arrays with Scatterv.
        head = np.zeros(2 + p, dtype=np.int64)
        if rank == root:
            assert coo is not None
            bounds = np.arange(p + 1, dtype=np.int64) * coo.nnz // p
            head[0], head[1] = coo.shape
            head[2:] = np.diff(bounds)
        comm.Bcast(head, root=root)
        shape = (int(head[0]), int(head[1]))
        counts = head[2:]
        displs = np.zeros(p, dtype=np.int64)
        np.cumsum(counts[:-1], out=displs[1:])
        mine = int(counts[rank])

        out = []
        for attr, dtype, mpitype in (
            ("row", np.int64, MPI.INT64_T),
            ("col", np.int64, MPI.INT64_T),
            ("data", np.float64, MPI.DOUBLE),
        ):
            recv = np.empty(mine, dtype=dtype)
            if rank == root:
                send = np.ascontiguousarray(getattr(coo, attr), dtype=dtype)
                comm.Scatterv([send, counts, displs, mpitype], [recv, mpitype], root=root)
            else:
                comm.Scatterv(None, [recv, mpitype], root=root)
            out.append(recv)
        return cls(shape=shape, rows=out[0], cols=out[1], vals=out[2])


def _validated_coo(matrix: object) -> tuple[sp.coo_matrix | None, str | None]:
    """Convert ``matrix`` to COO and check it; returns (coo, None) or (None, problem)."""
    if matrix is None:
        return None, "CooShare.from_scipy: no matrix given on a rank that must provide it"
    try:
        coo = sp.coo_matrix(matrix)
    except Exception as exc:  # any conversion failure is an input problem
        return None, f"CooShare.from_scipy: cannot convert input to a sparse matrix: {exc}"
    if np.iscomplexobj(coo.data):
        return None, "CooShare.from_scipy: complex matrices are not supported"
    m, n = coo.shape
    if m < 0 or n < 0:
        return None, f"CooShare.from_scipy: negative shape {coo.shape}"
    if coo.nnz:
        if coo.row.min() < 0 or coo.row.max() >= m:
            return None, f"CooShare.from_scipy: row index out of range for shape {coo.shape}"
        if coo.col.min() < 0 or coo.col.max() >= n:
            return None, f"CooShare.from_scipy: column index out of range for shape {coo.shape}"
    return coo, None
