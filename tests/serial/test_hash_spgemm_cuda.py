"""The hash-spgemm GPU kernels (numba.cuda) in the CUDA simulator, on tiny matrices: the same
results as scipy, and the same bins and counters as the CPU path.

The simulator runs every GPU thread as a Python thread, so sizes, tables and blocks are tiny;
the small tables still send rows through shared- and global-memory tables, the symbolic
fallback (kernel8) and the per-row numeric tables.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels import make_node_model

TINY = {"sym_tables": [2, 4, 6, 8, 10, 12, 14, 16], "num_tables": [2, 4, 6, 8, 10, 12, 14],
        "cuda_block": 4}


def _rand(m, n, density, seed):
    rng = np.random.default_rng(seed)
    return sp.random(m, n, density=density, random_state=rng,
                     data_rvs=lambda k: rng.uniform(-1, 1, k), format="csr")


def _both(X, Y, dtype, **opts):
    Xb, Yb = CSRBlock.from_scipy(X, dtype), CSRBlock.from_scipy(Y, dtype)
    gpu = make_node_model("hash-spgemm", device="cuda", **opts)
    # the CPU path with hash tables only (no dense accumulator), so the counters compare
    cpu = make_node_model("hash-spgemm", dense_max_bytes=0,
                          **{k: v for k, v in opts.items() if k != "cuda_block"})
    C = gpu.spgemm(Xb, Yb)
    ref = (Xb.to_scipy().astype(np.float64) @ Yb.to_scipy().astype(np.float64)).tocsr()
    ref.sort_indices()
    np.testing.assert_array_equal(C.indptr, ref.indptr)
    np.testing.assert_array_equal(C.indices, ref.indices)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(C.data, ref.data, rtol=tol, atol=tol)
    assert C.data.dtype == dtype
    cpu.spgemm(Xb, Yb)
    g, c = gpu.stats.as_dict()["spgemm"], cpu.stats.as_dict()["spgemm"]
    # the same bins (the GPU's abort limit also leaves a slot per thread, so its symbolic
    # fallback may take more rows)
    for key in g:
        if key.endswith(("_one_bin", "_insertions", "nnz_c", "products")) or (
                "_bin" in key and key.endswith("_rows")):
            assert g[key] == c[key], key
    assert g["sym_probes"] >= g["sym_insertions"] and g["num_probes"] >= g["num_insertions"]
    assert g["sym_dense_rows"] == g["num_dense_rows"] == 0  # the GPU path always hashes
    return g


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cuda_tiny_tables_every_path(dtype):
    rng = np.random.default_rng(1)
    X = _rand(14, 30, 0.15, 2).tolil()
    X[3] = rng.uniform(0.5, 1, 30)  # one dense row: symbolic fallback, per-row numeric table
    X[5] = 0                        # an empty row
    st = _both(X.tocsr(), _rand(30, 25, 0.2, 3), dtype, **TINY)
    assert st["sym_fallback_rows"] >= 1 and st["num_bin7_rows"] >= 1
    assert st["sym_one_bin"] == 0


def test_cuda_default_tables_one_bin_and_rectangular():
    st = _both(_rand(6, 9, 0.3, 4), _rand(9, 5, 0.3, 5), np.float64, cuda_block=4)
    assert st["sym_one_bin"] == 1 and st["num_one_bin"] == 1


def test_cuda_empty_and_one_by_one():
    gpu = make_node_model("hash-spgemm", device="cuda", cuda_block=2)
    C = gpu.spgemm(CSRBlock.from_scipy(sp.csr_matrix((3, 4)), np.float64),
                   CSRBlock.from_scipy(sp.csr_matrix((4, 2)), np.float64))
    assert C.shape == (3, 2) and C.nnz == 0
    C = gpu.spgemm(CSRBlock.from_scipy(sp.csr_matrix([[3.0]]), np.float64),
                   CSRBlock.from_scipy(sp.csr_matrix([[-2.0]]), np.float64))
    np.testing.assert_array_equal(C.data, [-6.0])


def test_cuda_spmm_with_sparse_dense_operand():
    rng = np.random.default_rng(6)
    S = CSRBlock.from_scipy(_rand(8, 6, 0.4, 7), np.float64)
    B = rng.standard_normal((6, 3)) * (rng.random((6, 3)) < 0.4)
    out = np.ones((8, 3))
    make_node_model("hash-spgemm", device="cuda", cuda_block=2).spmm_a(S, S.data, B, out)
    np.testing.assert_allclose(out, 1 + S.to_scipy() @ B, rtol=1e-12, atol=1e-12)
