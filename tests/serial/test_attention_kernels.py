"""The compiled multi-head attention kernels (distmm.kernels.attention) against their numpy
references, and the references' backward against central finite differences (float64), at
awkward shapes: rows without entries, columns without entries, an empty block, one head,
many heads, F = 1; the forward state carried across several column blocks (the rescaling
when a later block raises a row's maximum)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels.attention import (
    attention_backward_block,
    attention_forward_block,
    backward_reference,
    forward_reference,
)

SLOPE = 0.2


def _case(m, n, H, F, density, seed, empty_rows=(), dtype=np.float64):
    rng = np.random.default_rng(seed)
    A = (rng.random((m, n)) < density).astype(float)
    A[list(empty_rows)] = 0.0
    S = CSRBlock.from_scipy(sp.csr_matrix(A), dtype)
    s_dst = (rng.standard_normal((m, H)) * 3).astype(dtype)
    s_src = (rng.standard_normal((n, H)) * 3).astype(dtype)
    Z = rng.standard_normal((n, H, F)).astype(dtype)
    return rng, S, s_dst, s_src, Z


def _column_blocks(S: CSRBlock, cuts):
    """S split into column blocks at ``cuts`` (the blocks the distributed loop meets)."""
    M = S.to_scipy().tocsc()
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        out.append((lo, hi, CSRBlock.from_scipy(M[:, lo:hi].tocsr(), S.dtype)))
    return out


def _kernel_forward(S, s_dst, s_src, Z, cuts, scale_blocks=None):
    m, H = s_dst.shape
    F = Z.shape[2]
    dt = Z.dtype
    mx = np.full((m, H), -np.inf, dtype=dt)
    ls = np.zeros((m, H), dtype=dt)
    acc = np.zeros((m, H * F), dtype=dt)
    for k, (lo, hi, blk) in enumerate(_column_blocks(S, cuts)):
        Y = np.ascontiguousarray(np.concatenate([Z[lo:hi].reshape(hi - lo, H * F),
                                                 s_src[lo:hi]], axis=1))
        sc = None if scale_blocks is None else scale_blocks[k]
        attention_forward_block(blk, s_dst, Y, H, F, SLOPE, mx, ls, acc, sc)
    out = np.zeros((m, H, F), dtype=dt)
    np.divide(acc.reshape(m, H, F), ls[..., None], out=out, where=ls[..., None] > 0)
    with np.errstate(divide="ignore"):
        L = mx + np.log(ls)
    return out, L


def _block_scales(S, cuts, scale):
    """The dropout factors (value order of S) in each column block's value order."""
    rows = S.row_ids()
    res = []
    for lo, hi, blk in _column_blocks(S, cuts):
        sel = (S.indices >= lo) & (S.indices < hi)
        # within a row the block keeps S's column order, so the selection is in block order
        res.append(np.ascontiguousarray(scale[sel]))
        assert np.array_equal(rows[sel], blk.row_ids())
    return res


SHAPES = [  # m, n, H, F, density, empty rows
    (9, 7, 1, 1, 0.5, (0, 4)),
    (13, 17, 3, 5, 0.4, (2,)),
    (6, 11, 8, 2, 0.6, ()),
    (20, 9, 4, 16, 0.3, (19,)),
]


@pytest.mark.parametrize("m,n,H,F,density,empty", SHAPES)
@pytest.mark.parametrize("dropout", [False, True])
def test_forward_kernel_equals_reference(m, n, H, F, density, empty, dropout):
    rng, S, s_dst, s_src, Z = _case(m, n, H, F, density, 1, empty)
    scale = (rng.random((S.nnz, H)) > 0.4) * 2.5 if dropout else None
    cuts = [0, n // 3, n // 3, n]   # one empty column block in the middle
    want, L_want = forward_reference(S, s_dst, s_src, Z, SLOPE, scale)
    got, L = _kernel_forward(S, s_dst, s_src, Z, cuts,
                             None if scale is None else _block_scales(S, cuts, scale))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(L, L_want, rtol=1e-12)
    assert np.all(got[list(empty)] == 0)


def test_forward_rescales_when_a_later_block_raises_the_maximum():
    # row 0's scores rise from block to block, so every block after the first rescales
    S = CSRBlock.from_scipy(sp.csr_matrix(np.ones((1, 6))), np.float64)
    s_dst = np.zeros((1, 2))
    s_src = np.array([[1.0, 50.0], [2.0, 40.0], [30.0, 1.0], [40.0, 2.0], [60.0, 0.0],
                      [70.0, -5.0]])
    Z = np.arange(12, dtype=float).reshape(6, 2, 1)
    want, _ = forward_reference(S, s_dst, s_src, Z, SLOPE)
    got, _ = _kernel_forward(S, s_dst, s_src, Z, [0, 2, 4, 6])
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_forward_kernel_dtypes(dtype, tol):
    _, S, s_dst, s_src, Z = _case(15, 15, 4, 8, 0.3, 5, (3,), dtype)
    got, _ = _kernel_forward(S, s_dst, s_src, Z, [0, 7, 15])
    assert got.dtype == dtype
    want, _ = forward_reference(S, s_dst.astype(float), s_src.astype(float), Z.astype(float),
                                SLOPE)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_empty_block_changes_nothing():
    S = CSRBlock.from_scipy(sp.csr_matrix((4, 3)), np.float64)
    m = np.full((4, 2), -np.inf)
    ls = np.zeros((4, 2))
    acc = np.zeros((4, 2))
    attention_forward_block(S, np.zeros((4, 2)), np.zeros((3, 4)), 2, 1, SLOPE, m, ls, acc)
    G = np.zeros((3, 4))
    d = np.zeros((4, 2))
    attention_backward_block(S, np.zeros((4, 5)), np.zeros((3, 4)), 2, 1, SLOPE, G, d)
    assert np.isneginf(m).all() and not ls.any() and not acc.any() and not G.any()


def _kernel_backward(S, s_dst, s_src, Z, L, out, dout, cuts, scale_blocks=None):
    m, H = s_dst.shape
    n, _, F = Z.shape
    t = np.einsum("nhf,nhf->nh", dout, out)
    XR = np.ascontiguousarray(np.concatenate([dout.reshape(m, H * F), t, L, s_dst], axis=1))
    dZ = np.zeros((n, H, F))
    d_src = np.zeros((n, H))
    d_dst = np.zeros((m, H))
    for k, (lo, hi, blk) in enumerate(_column_blocks(S, cuts)):
        Y = np.ascontiguousarray(np.concatenate([Z[lo:hi].reshape(hi - lo, H * F),
                                                 s_src[lo:hi]], axis=1))
        G = np.zeros_like(Y)
        sc = None if scale_blocks is None else scale_blocks[k]
        attention_backward_block(blk, XR, Y, H, F, SLOPE, G, d_dst, sc)
        dZ[lo:hi] += G[:, :H * F].reshape(hi - lo, H, F)
        d_src[lo:hi] += G[:, H * F:]
    return dZ, d_dst, d_src


@pytest.mark.parametrize("m,n,H,F,density,empty", SHAPES)
@pytest.mark.parametrize("dropout", [False, True])
def test_backward_kernel_equals_reference(m, n, H, F, density, empty, dropout):
    rng, S, s_dst, s_src, Z = _case(m, n, H, F, density, 2, empty)
    scale = (rng.random((S.nnz, H)) > 0.4) * 2.5 if dropout else None
    out, L = forward_reference(S, s_dst, s_src, Z, SLOPE, scale)
    dout = rng.standard_normal(out.shape)
    want = backward_reference(S, s_dst, s_src, Z, L, out, dout, SLOPE, scale)
    cuts = [0, 1, n // 2, n]
    got = _kernel_backward(S, s_dst, s_src, Z, L, out, dout, cuts,
                           None if scale is None else _block_scales(S, cuts, scale))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("dropout", [False, True])
def test_backward_against_finite_differences(dropout):
    rng, S, s_dst, s_src, Z = _case(8, 10, 3, 2, 0.45, 7, (5,))
    scale = (rng.random((S.nnz, 3)) > 0.3) * 1.5 if dropout else None
    W = rng.standard_normal((8, 3, 2))

    def loss(a, b, z):
        return float((forward_reference(S, a, b, z, SLOPE, scale)[0] * W).sum())

    out, L = forward_reference(S, s_dst, s_src, Z, SLOPE, scale)
    dZ, d_dst, d_src = _kernel_backward(S, s_dst, s_src, Z, L, out, W, [0, 4, 10],
                                        None if scale is None else
                                        _block_scales(S, [0, 4, 10], scale))
    eps = 1e-6
    for arr, grad, which in ((s_dst, d_dst, 0), (s_src, d_src, 1), (Z, dZ, 2)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            args = [s_dst.copy(), s_src.copy(), Z.copy()]
            args[which][idx] += eps
            up = loss(*args)
            args[which][idx] -= 2 * eps
            fd[idx] = (up - loss(*args)) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
