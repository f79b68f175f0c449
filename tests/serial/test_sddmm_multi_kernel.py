"""The multi-head SDDMM kernel (distmm.kernels.multivalue.sddmm_multi_block and prepare_sddmm_multi
on every node model, as the families' prepared calls run it) against a numpy oracle written
here, one dot product per entry and head: empty rows and columns, an empty block, one head, many
heads, F = 1 and widths the kernels specialise, float32 and float64; recorded in the node
model's statistics; bad operands raise ValueError."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels import make_node_model
from distmm.kernels.multivalue import prepare_sddmm_multi, sddmm_multi_block, sddmm_multi_reference

CASES = [  # m, n, heads, F, density
    (7, 5, 1, 1, 0.5),
    (12, 9, 3, 5, 0.3),
    (5, 14, 8, 1, 0.4),
    (16, 16, 3, 8, 0.2),
    (9, 11, 8, 5, 0.35),
    (4, 3, 2, 2, 0.0),
]


def _oracle(A_dense, vals, A, B, heads):
    """Loops over the entries in row-major order (CSR order) and heads."""
    F = A.shape[1] // heads
    rows, cols = np.nonzero(A_dense)
    out = np.empty((rows.size, heads))
    for t, (i, j) in enumerate(zip(rows, cols, strict=True)):
        for h in range(heads):
            out[t, h] = vals[t] * float(np.dot(A[i, h * F:(h + 1) * F].astype(np.float64),
                                               B[j, h * F:(h + 1) * F].astype(np.float64)))
    return out


@pytest.mark.parametrize("m,n,H,F,density", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("model_name", ["reference", "sputnik"])
def test_equals_one_sddmm_per_head(m, n, H, F, density, dtype, model_name):
    rng = np.random.default_rng(m * 31 + H)
    D = (rng.random((m, n)) < density).astype(float)
    D[0] = 0.0    # an empty row
    D[:, -1] = 0.0    # an empty column
    S = CSRBlock.from_scipy(sp.csr_matrix(D), dtype)
    vals = rng.standard_normal(S.nnz).astype(dtype)
    A = rng.standard_normal((m, H * F)).astype(dtype)
    B = rng.standard_normal((n, H * F)).astype(dtype)
    out = np.full((S.nnz, H), np.nan, dtype=dtype)
    model = make_node_model(model_name)
    # prepared on the node model, as the families' loops prepare it (algorithms/prepared.py)
    run = prepare_sddmm_multi(model, S, vals, A, B, out)
    run(vals, A, B, out)
    want = _oracle(D, vals, A, B, H)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(sddmm_multi_reference(S, vals, A, B, H), want, rtol=tol,
                               atol=tol)
    st = model.stats.ops["sddmm_multi" if H > 1 else "sddmm"]   # one head: the model's own
    assert st.calls == 1 and st.flops == 2.0 * S.nnz * H * F
    # the direct entry writes the same
    out2 = np.zeros_like(out)
    sddmm_multi_block(None, S, vals, A, B, out2)
    np.testing.assert_array_equal(out2, out)


def test_bad_operands():
    S = CSRBlock.from_scipy(sp.csr_matrix(np.ones((3, 4))), np.float64)
    vals = np.ones(12)
    A, B = np.ones((3, 6)), np.ones((4, 6))
    with pytest.raises(ValueError, match="heads"):
        sddmm_multi_block(None, S, vals, A[:, :5].copy(), B[:, :5].copy(), np.zeros((12, 2)))
    with pytest.raises(ValueError, match="do not fit"):
        sddmm_multi_block(None, S, vals, A, np.ones((3, 6)), np.zeros((12, 2)))
    with pytest.raises(ValueError, match="do not fit"):
        sddmm_multi_block(None, S, vals, A, B, np.zeros((11, 2)))
    with pytest.raises(ValueError, match="float64"):
        sddmm_multi_block(None, S, vals, A.astype(np.float32), B, np.zeros((12, 2)))
