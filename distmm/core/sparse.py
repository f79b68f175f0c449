"""Local sparse blocks: CSR structure kept apart from the values that flow through the kernels.

The distributed algorithms call the same sparsity pattern many times with new values (SDDMM
output fed into SpMM, new edge weights in a training loop), so a block stores its structure once
and every kernel takes the values as a separate array aligned with ``indices``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

INDEX_DTYPE = np.int32
INDPTR_DTYPE = np.int64


@dataclass
class CSRBlock:
    """The structure of one local sparse block in CSR form, with its values.

    ``shape`` is (rows, cols) in local indices; ``indptr`` has rows + 1 int64 entries;
    ``indices`` holds int32 column indices, sorted within each row, with no duplicates;
    ``data`` holds the block's current values (float32 or float64), aligned with ``indices``.
    The transposed structure is built on first use and cached (:meth:`transpose`).
    """

    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    _transpose: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @classmethod
    def from_coo(
        cls,
        rows: np.ndarray,
        cols: np.ndarray,
        vals: np.ndarray,
        shape: tuple[int, int],
        dtype: np.dtype | type = np.float32,
    ) -> CSRBlock:
        """Build a block from local COO triples, summing duplicate coordinates.

        Not collective. ``rows`` and ``cols`` are local indices inside ``shape``. Duplicates are
        summed in float64 before the cast to ``dtype``, so the result does not depend on the
        order in which duplicates arrive.
        """
        nrows, ncols = int(shape[0]), int(shape[1])
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        order, unique_start = sorted_unique_coo(rows, cols, ncols)
        rows_s = rows[order]
        cols_s = cols[order]
        summed = np.add.reduceat(vals[order], unique_start) if order.size else vals[:0]
        urows = rows_s[unique_start]
        ucols = cols_s[unique_start]
        indptr = np.zeros(nrows + 1, dtype=INDPTR_DTYPE)
        np.cumsum(np.bincount(urows, minlength=nrows), out=indptr[1:])
        return cls(
            shape=(nrows, ncols),
            indptr=indptr,
            indices=ucols.astype(INDEX_DTYPE),
            data=summed.astype(dtype),
        )

    @classmethod
    def from_scipy(cls, matrix: sp.spmatrix | sp.sparray, dtype=np.float32) -> CSRBlock:
        """Build a block from any scipy sparse matrix (duplicates summed). Not collective."""
        coo = sp.coo_matrix(matrix)
        return cls.from_coo(coo.row, coo.col, coo.data, coo.shape, dtype)

    def row_ids(self) -> np.ndarray:
        """The local row index of every stored nonzero (length nnz, int64)."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    def transpose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The structure of the transpose: ``(indptr_t, indices_t, perm)``, cached.

        ``indptr_t`` has cols + 1 entries, ``indices_t`` the row index of each entry of the
        transpose, and ``perm`` maps positions of the transpose to positions of this block, so
        ``values[perm]`` are the values of the transposed block for any ``values`` aligned with
        this block. Not collective.
        """
        if self._transpose is None:
            rows = self.row_ids()
            perm = np.lexsort((rows, self.indices)).astype(np.int64)
            indptr_t = np.zeros(self.shape[1] + 1, dtype=INDPTR_DTYPE)
            np.cumsum(np.bincount(self.indices, minlength=self.shape[1]), out=indptr_t[1:])
            self._transpose = (indptr_t, rows[perm].astype(INDEX_DTYPE), perm)
        return self._transpose

    def to_scipy(self, values: np.ndarray | None = None) -> sp.csr_matrix:
        """This block as a scipy CSR matrix, with ``values`` in place of ``data`` if given."""
        vals = self.data if values is None else values
        return sp.csr_matrix((vals, self.indices, self.indptr), shape=self.shape)


def sorted_unique_coo(
    rows: np.ndarray, cols: np.ndarray, ncols: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sort COO coordinates by (row, col) and find where each distinct coordinate starts.

    Returns ``(order, starts)``: ``rows[order], cols[order]`` are sorted, and ``starts`` are the
    positions in that sorted order where a new (row, col) begins. Not collective.
    """
    key = rows.astype(np.int64) * np.int64(max(ncols, 1)) + cols.astype(np.int64)
    order = np.argsort(key, kind="stable")
    if order.size == 0:
        return order, np.zeros(0, dtype=np.int64)
    skey = key[order]
    starts = np.flatnonzero(np.concatenate(([True], skey[1:] != skey[:-1])))
    return order, starts
