"""A GAT layer's products with sparse node features, through distmm's own SpMM kernels.

The first layer of a GAT on a citation graph multiplies the node features (sparse bag-of-words
rows, scipy CSR) by the weights: ``Z = X W^T`` in the forward pass and ``X^T dZ`` for the
weight gradient. scipy runs both on one thread (and ``X @ W.T`` on a transposed, strided
operand); the reference node model's SpMM kernels (:mod:`distmm.kernels.reference`) run them on
the rank's numba threads. The feature structure is read once; every product takes the values
as they are then (the stored values, or those times a dropout mask).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from distmm.core.aligned import aligned_empty
from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.kernels.numba_util import prepared_layout
from distmm.kernels.reference import ReferenceModel


class SparseFeatures:
    """One rank's sparse node features as a node-model block. Not collective.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix or csr_array
        The rank's feature rows, in canonical form (sorted column indices, no duplicates),
        its values in the model's dtype (see :meth:`of`).
    """

    def __init__(self, X) -> None:
        self.source = X
        self._structure = (X.indptr, X.indices, X.shape)
        self.block = CSRBlock(shape=(int(X.shape[0]), int(X.shape[1])),
                              indptr=X.indptr.astype(INDPTR_DTYPE),
                              indices=X.indices.astype(INDEX_DTYPE),
                              data=X.data)
        self.dtype = X.data.dtype
        self.model = ReferenceModel()
        self._runs: dict[tuple, object] = {}

    @classmethod
    def of(cls, X, dtype, kept: SparseFeatures | None = None) -> SparseFeatures | None:
        """``X`` as features for the kernels (``kept`` itself if it was made from this very
        matrix and its structure arrays are the same objects), or None where ``X`` is not a
        canonical CSR matrix of ``dtype`` (dense features, other formats and dtypes keep
        numpy's and scipy's products)."""
        if not sp.issparse(X) or X.format != "csr" or X.dtype != np.dtype(dtype):
            return None
        if kept is not None and kept.source is X and kept._structure[0] is X.indptr \
                and kept._structure[1] is X.indices and kept._structure[2] == X.shape:
            return kept
        if not X.has_canonical_format:
            return None
        return cls(X)

    def times_t(self, values: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``X(values) @ W^T``, shape (rows, W.shape[0]): ``values`` aligned with X's stored
        entries, ``W`` (out, features) as a layer's weight."""
        Wt = np.ascontiguousarray(W.T, dtype=self.dtype)
        out = aligned_empty((self.block.shape[0], Wt.shape[1]), self.dtype)
        return self._run("spmm_a", values, Wt, out)

    def t_times(self, values: np.ndarray, D: np.ndarray) -> np.ndarray:
        """``X(values)^T @ D``, shape (features, D.shape[1]): ``D`` (rows, width)."""
        D = np.ascontiguousarray(D, dtype=self.dtype)
        out = aligned_empty((self.block.shape[1], D.shape[1]), self.dtype)
        return self._run("spmm_b", values, D, out)

    def _run(self, op: str, values: np.ndarray, D: np.ndarray, out: np.ndarray) -> np.ndarray:
        """One kernel call, its preparation kept per operation, plan state and the layouts of
        ``D`` and ``values`` (:func:`~distmm.kernels.numba_util.prepared_layout`: a prepared
        call runs its first call's compiled code); later calls pass new arrays."""
        values = np.ascontiguousarray(values, dtype=self.dtype)
        key = (op, self.model.plan_state(), prepared_layout(D), prepared_layout(values))
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self.model.prepare(op, self.block, values, D, None, out,
                                                      accumulate=False)
        run(values, D, out)
        return out
