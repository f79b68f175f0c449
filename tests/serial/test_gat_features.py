"""GAT's products with sparse node features through the SpMM kernels (distmm.apps.gat_features)
against scipy: X W^T and X^T D at awkward shapes, with masked values, and which inputs take
the kernels at all."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.apps.gat_features import SparseFeatures


def _features(rows, cols, density, dtype, seed=0):
    dense = sp.random(rows, cols, density=density, random_state=seed, dtype=dtype).toarray()
    if rows > 1:
        dense[rows // 2] = 0  # a node without features
    return sp.csr_matrix(dense)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,cols,width", [(1, 1, 1), (7, 3, 5), (40, 113, 64), (0, 9, 4),
                                             (300, 1433, 24)])
def test_products_match_scipy(dtype, rows, cols, width):
    rng = np.random.default_rng(1)
    X = _features(rows, cols, 0.3, dtype)
    feats = SparseFeatures.of(X, dtype)
    assert feats is not None
    W = rng.standard_normal((width, cols)).astype(dtype)
    D = rng.standard_normal((rows, width)).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for values in (X.data, X.data * rng.random(X.nnz).astype(dtype)):  # stored, masked
        Xv = sp.csr_matrix((values, X.indices, X.indptr), shape=X.shape)
        for _ in range(2):  # the second call reuses the prepared kernels
            got = feats.times_t(values, W)
            assert got.shape == (rows, width) and got.dtype == dtype
            np.testing.assert_allclose(got, Xv @ W.T, **tol)
            got = feats.t_times(values, D)
            assert got.shape == (cols, width) and got.dtype == dtype
            np.testing.assert_allclose(got, Xv.T @ D, **tol)


def test_which_inputs_take_the_kernels():
    X = _features(20, 30, 0.2, np.float64)
    feats = SparseFeatures.of(X, np.float64)
    assert SparseFeatures.of(X, np.float64, feats) is feats  # the same matrix: kept
    assert SparseFeatures.of(X.copy(), np.float64, feats) is not feats  # another matrix
    assert SparseFeatures.of(X, np.float32) is None  # values of another dtype
    assert SparseFeatures.of(X.toarray(), np.float64) is None  # dense
    assert SparseFeatures.of(X.tocsc(), np.float64) is None  # another format
    unsorted = sp.csr_matrix((X.data[::-1].copy(), X.indices[::-1].copy(), X.indptr),
                             shape=X.shape)
    unsorted.has_sorted_indices = False
    assert SparseFeatures.of(unsorted, np.float64) is None  # not canonical
    X.indices = X.indices.copy()  # new structure arrays: built again
    assert SparseFeatures.of(X, np.float64, feats) is not feats


@pytest.mark.parametrize("sparse", [False, True])
def test_normalize_rows_scales_to_sum_one_and_refuses_rows_it_would_blow_up(sparse):
    """Rows scaled to sum 1 in the input's dtype and format, a zero row kept zero; rows whose
    sum is zero, negative or tiny against their absolute sum refused, named by node id."""
    from mpi4py import MPI

    from distmm.apps.gat_features import normalize_rows
    from distmm.errors import InputError

    X = np.array([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.5, 0.5]], dtype=np.float32)
    ids = np.array([7, 3, 11])
    got = normalize_rows(sp.csr_matrix(X) if sparse else X, ids, np.ones(3, bool),
                         MPI.COMM_SELF)
    dense = got.toarray() if sparse else got
    assert got.dtype == np.float32 and sp.issparse(got) == sparse
    np.testing.assert_allclose(dense, [[0.25, 0.75, 0], [0, 0, 0], [2 / 3, 1 / 6, 1 / 6]],
                               rtol=1e-7)
    bad = np.array([[1.0, -1.0], [1.0, 2.0], [0.5, -2.0], [1.0, -1.0 + 1e-9], [1.0, 1e-3]])
    with pytest.raises(InputError, match=r"^--normalize-features: 3 feature row\(s\) .* node"
                                         r"\(s\) 4, 20, 30;"):
        normalize_rows(sp.csr_matrix(bad) if sparse else bad, np.array([20, 5, 4, 30, 6]),
                       np.ones(5, bool), MPI.COMM_SELF)
    # a row not counted here (another rank of its row group counts it) is not reported twice
    normalize_rows(bad[:2], np.array([1, 2]), np.array([False, True]), MPI.COMM_SELF)
