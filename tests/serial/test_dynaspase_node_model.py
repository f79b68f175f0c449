"""The Dynaspase node model: SpMM on the simulator (exact), counters, fallback, options."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.kernels import NODE_MODELS, make_node_model


def _block(m, n, density, seed, dtype):
    rng = np.random.default_rng(seed)
    S = sp.random(m, n, density=density, random_state=rng, format="lil")
    if m > 3:
        S[2, :] = 1.0  # one dense row
        S[m - 1, :] = 0.0  # an empty row
    return CSRBlock.from_scipy(S, dtype=dtype)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
@pytest.mark.parametrize("m,n,r", [(37, 29, 5), (1, 13, 1), (50, 64, 17)])
def test_spmm_exact(dtype, tol, m, n, r):
    model = make_node_model("dynaspase", n_max=8)
    S = _block(m, n, 0.15, m + n, dtype)
    rng = np.random.default_rng(1)
    vals = rng.uniform(-1, 1, S.nnz).astype(dtype)
    B = rng.uniform(-1, 1, (n, r)).astype(dtype)
    A = rng.uniform(-1, 1, (m, r)).astype(dtype)
    S64 = S.to_scipy(vals.astype(np.float64))
    out = np.ones((m, r), dtype=dtype)
    model.spmm_a(S, vals, B, out)
    np.testing.assert_allclose(out, 1 + S64 @ B, rtol=tol, atol=tol * max(1, n))
    out_b = np.zeros((n, r), dtype=dtype)
    model.spmm_b(S, vals, A, out_b)
    np.testing.assert_allclose(out_b, S64.T @ A, rtol=tol, atol=tol * max(1, m))
    stats = model.stats.as_dict()
    for op in ("spmm_a", "spmm_b"):
        assert stats[op]["fallback_calls"] == 0
        assert stats[op]["model_cycles"] > 0 and stats[op]["model_seconds"] > 0
        pairs = sum(stats[op][f"blocks_{k}"] for k in ("gemm", "spdmm", "spmm", "empty"))
        assert pairs > 0


def test_sddmm_and_fused_fall_back():
    model = make_node_model("dynaspase")
    S = _block(20, 15, 0.2, 3, np.float64)
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((20, 4)), rng.standard_normal((15, 4))
    out = np.zeros(S.nnz)
    model.sddmm(S, S.data, A, B, out)
    coo = S.to_scipy().tocoo()
    np.testing.assert_allclose(out, coo.data * np.einsum("ij,ij->i", A[coo.row], B[coo.col]))
    fused = np.zeros((20, 4))
    model.fusedmm_a(S, S.data, A, B, fused)
    stats = model.stats.as_dict()
    assert stats["sddmm"]["fallback_calls"] == 1 and stats["fusedmm_a"]["fallback_calls"] == 1


def test_options_and_bad_options():
    assert "dynaspase" in NODE_MODELS
    model = make_node_model("dynaspase", strategy="s2", p_sys=8)
    assert model.options()["strategy"] == "s2" and model.options()["p_sys"] == 8
    with pytest.raises(InputError):
        make_node_model("dynaspase", strategy="fastest")
    with pytest.raises(InputError):
        make_node_model("dynaspase", tile=3)


def test_bad_shapes():
    model = make_node_model("dynaspase")
    S = _block(10, 8, 0.3, 1, np.float64)
    with pytest.raises(ValueError, match="rows"):
        model.spmm_a(S, S.data, np.zeros((9, 2)), np.zeros((10, 2)))
    with pytest.raises(ValueError, match="dtype"):
        model.spmm_a(S, S.data, np.zeros((8, 2), np.float32), np.zeros((10, 2)))
    with pytest.raises(ValueError, match="vals"):
        model.spmm_b(S, S.data[:-1], np.zeros((10, 2)), np.zeros((8, 2)))
