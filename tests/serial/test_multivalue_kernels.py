"""The multi-value SpMM kernels (distmm.kernels.multivalue) against scipy, one product per
head: both sides, accumulate and write, a block cut from a longer value array (offset), empty
rows and columns, an empty block, one head, many heads, F = 1, float32 and float64; the
call is recorded in the node model's statistics; bad operands raise ValueError. The head
segment kernels (a column slice of the heads' columns, cut where heads begin) against the
slice of the per-head products, and the slice's partial dot products per head."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels import make_node_model
from distmm.kernels.multivalue import (
    head_segments,
    sddmm_multi_reference,
    sddmm_segments_block,
    spmm_multi_block,
    spmm_multi_reference,
    spmm_segments_block,
)

CASES = [  # m, n, heads, F, density
    (7, 5, 1, 1, 0.5),
    (12, 9, 4, 3, 0.3),
    (5, 14, 8, 1, 0.4),
    (16, 16, 3, 16, 0.2),
    (4, 3, 2, 2, 0.0),
]


@pytest.mark.parametrize("m,n,H,F,density", CASES)
@pytest.mark.parametrize("op", ["spmm_multi_a", "spmm_multi_b"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("accumulate", [True, False])
def test_equals_one_spmm_per_head(m, n, H, F, density, op, dtype, accumulate):
    rng = np.random.default_rng(m * 31 + H)
    A = (rng.random((m, n)) < density).astype(float)
    A[0] = 0.0    # an empty row
    A[:, -1] = 0.0    # an empty column
    S = CSRBlock.from_scipy(sp.csr_matrix(A), dtype)
    off = 3
    V = rng.standard_normal((H, S.nnz + off + 2)).astype(dtype)
    rows_x, rows_out = (n, m) if op == "spmm_multi_a" else (m, n)
    X = rng.standard_normal((rows_x, H * F)).astype(dtype)
    out0 = rng.standard_normal((rows_out, H * F)).astype(dtype)
    out = out0.copy()
    model = make_node_model("reference")
    spmm_multi_block(model, op, S, V, off, X, out, H, accumulate)
    want = spmm_multi_reference(S, np.ascontiguousarray(V[:, off:off + S.nnz]), X, H,
                                transpose=op == "spmm_multi_b")
    if accumulate:
        want = want + out0
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    assert model.stats.ops[op].calls == 1
    assert model.stats.ops[op].flops == 2.0 * S.nnz * H * F


def test_bad_operands():
    S = CSRBlock.from_scipy(sp.csr_matrix(np.ones((3, 4))), np.float64)
    V = np.ones((2, 12))
    X = np.ones((4, 6))
    out = np.zeros((3, 6))
    with pytest.raises(ValueError, match="heads"):
        spmm_multi_block(None, "spmm_multi_a", S, V, 0, np.ones((4, 5)), np.zeros((3, 5)), 2)
    with pytest.raises(ValueError, match="V has shape"):
        spmm_multi_block(None, "spmm_multi_a", S, V, 1, X, out, 2)
    with pytest.raises(ValueError, match="C-contiguous"):
        spmm_multi_block(None, "spmm_multi_a", S, V.astype(np.float32), 0, X, out, 2)
    with pytest.raises(ValueError, match="do not fit"):
        spmm_multi_block(None, "spmm_multi_b", S, V, 0, X, out, 2)


@pytest.mark.parametrize("m,n,H,F,density", CASES)
@pytest.mark.parametrize("lo,hi", [(0, None), (1, 4), (2, 3), (3, None)])
@pytest.mark.parametrize("op", ["spmm_multi_a", "spmm_multi_b"])
@pytest.mark.parametrize("accumulate", [True, False])
def test_segments_equal_the_heads_columns(m, n, H, F, density, lo, hi, op, accumulate):
    """A column slice lo .. hi - 1 of the width H F operands (starting or ending inside a
    head, or inside one head only), cut into head segments: the slice of the per-head
    products, whatever heads it meets."""
    r = H * F
    hi = r if hi is None else min(hi, r)
    lo = min(lo, hi - 1)
    rng = np.random.default_rng(m * 7 + F)
    A = (rng.random((m, n)) < density).astype(float)
    A[0] = 0.0
    S = CSRBlock.from_scipy(sp.csr_matrix(A), np.float64)
    V = rng.standard_normal((H, S.nnz))
    rows_x, rows_out = (n, m) if op == "spmm_multi_a" else (m, n)
    X = rng.standard_normal((rows_x, r))
    want = spmm_multi_reference(S, V, X, H, transpose=op == "spmm_multi_b")[:, lo:hi]
    seg_head, seg_lo = head_segments(lo, hi, F)
    assert seg_lo[-1] == hi - lo and set(seg_head) == set(range(lo // F, (hi - 1) // F + 1))
    out0 = rng.standard_normal((rows_out, hi - lo))
    out = out0.copy()
    model = make_node_model("reference")
    spmm_segments_block(model, op, S, V, 0, np.ascontiguousarray(X[:, lo:hi]), out, seg_head,
                        seg_lo, accumulate)
    np.testing.assert_allclose(out, want + (out0 if accumulate else 0), rtol=1e-12,
                               atol=1e-12)
    assert model.stats.ops[op].calls == 1


@pytest.mark.parametrize("m,n,H,F,density", CASES)
@pytest.mark.parametrize("lo,hi", [(0, None), (1, 4), (2, 3), (3, None)])
@pytest.mark.parametrize("accumulate", [True, False])
def test_sddmm_segments_are_the_slices_partial_dot_products(m, n, H, F, density, lo, hi,
                                                            accumulate):
    r = H * F
    hi = r if hi is None else min(hi, r)
    lo = min(lo, hi - 1)
    rng = np.random.default_rng(n * 5 + H)
    A = (rng.random((m, n)) < density).astype(float)
    S = CSRBlock.from_scipy(sp.csr_matrix(A), np.float64)
    Xa, Xb = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    keep = np.zeros(r)
    keep[lo:hi] = 1.0   # the slice's columns only, every head
    want = sddmm_multi_reference(S, np.ones(S.nnz), Xa * keep, Xb, H)
    out0 = rng.standard_normal((S.nnz, H))
    out = out0.copy()
    seg_head, seg_lo = head_segments(lo, hi, F)
    model = make_node_model("reference")
    sddmm_segments_block(model, S, np.ascontiguousarray(Xa[:, lo:hi]),
                         np.ascontiguousarray(Xb[:, lo:hi]), out, seg_head, seg_lo,
                         accumulate)
    np.testing.assert_allclose(out, want + (out0 if accumulate else 0), rtol=1e-12,
                               atol=1e-12)


def test_segments_refused():
    S = CSRBlock.from_scipy(sp.csr_matrix(np.eye(3)), np.float64)
    X, out, V = np.ones((3, 4)), np.zeros((3, 4)), np.ones((2, 3))
    with pytest.raises(ValueError, match="segments"):
        spmm_segments_block(None, "spmm_multi_a", S, V, 0, X, out, np.array([0, 2]),
                            np.array([0, 2, 4]))
    with pytest.raises(ValueError, match="segments"):
        spmm_segments_block(None, "spmm_multi_a", S, V, 0, X, out, np.array([0]),
                            np.array([0, 3]))
