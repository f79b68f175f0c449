"""The serial GAT reference (tests/gat_reference.py) against finite differences, and against
torch_geometric's GATConv (forward, and backward through torch's autograd) when that is
installed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gat_reference import (
    cross_entropy,
    layer_backward,
    layer_forward,
    model_backward,
    model_forward,
    random_layers,
)

PARAMS = ("weight", "att_src", "att_dst", "bias")


def _graph(rng, n, density, self_loops=True, empty=()):
    A = rng.random((n, n)) < density
    if self_loops:
        np.fill_diagonal(A, True)
    for i in empty:
        A[i] = False
    dst, src = np.nonzero(A)
    return dst, src


def _masks(rng, n, sizes_in, nnz, heads, keep=0.6):
    xm = [(rng.random((n, f)) < keep) / keep for f in sizes_in]
    am = [(rng.random((nnz, h)) < keep) / keep for h in heads]
    return xm, am


@pytest.mark.parametrize("self_loops", [True, False])
def test_reference_gradients_match_finite_differences(self_loops):
    rng = np.random.default_rng(3)
    n, labels_n = 11, 3
    dst, src = _graph(rng, n, 0.3, self_loops, empty=(4,) if not self_loops else ())
    layers = random_layers(rng, [5, 3, labels_n], heads=[2, 3], concat=[True, False])
    xm, am = _masks(rng, n, [5, 6], dst.size, [2, 3])
    X = rng.standard_normal((n, 5))
    y = rng.integers(0, labels_n, n)
    nodes = np.array([0, 2, 4, 5, 9])

    def loss():
        logits, _ = model_forward(X, dst, src, layers, xm, am)
        return cross_entropy(logits, y, nodes)[0]

    logits, caches = model_forward(X, dst, src, layers, xm, am)
    assert np.isfinite(logits).all()
    _, dlog = cross_entropy(logits, y, nodes)
    grads = model_backward(dlog, dst, src, layers, caches)
    h = 1e-6
    for k, p in enumerate(layers):
        for name in PARAMS:
            P = p[name]
            fd = np.empty_like(P)
            for idx in np.ndindex(P.shape):
                old = P[idx]
                P[idx] = old + h
                up = loss()
                P[idx] = old - h
                down = loss()
                P[idx] = old
                fd[idx] = (up - down) / (2 * h)
            np.testing.assert_allclose(grads[k][name], fd, rtol=1e-6, atol=1e-8,
                                       err_msg=f"layer {k} {name}")


def test_reference_empty_row_gives_bias():
    rng = np.random.default_rng(0)
    dst, src = _graph(rng, 6, 0.5, self_loops=False, empty=(2,))
    (p,) = random_layers(rng, [4, 3], heads=[2], concat=[True])
    Y, _ = layer_forward(rng.standard_normal((6, 4)), dst, src, p)
    np.testing.assert_array_equal(Y[2], p["bias"])


def test_reference_matches_pyg_gatconv():
    torch = pytest.importorskip("torch")
    pyg = pytest.importorskip("torch_geometric.nn")
    rng = np.random.default_rng(1)
    n = 9
    dst, src = _graph(rng, n, 0.4, self_loops=False)
    for concat in (True, False):
        (p,) = random_layers(rng, [5, 4], heads=[3], concat=[concat])
        conv = pyg.GATConv(5, 4, heads=3, concat=concat, negative_slope=0.2,
                           add_self_loops=True).double()
        with torch.no_grad():
            conv.lin.weight.copy_(torch.from_numpy(p["weight"]))
            conv.att_src.copy_(torch.from_numpy(p["att_src"][None]))
            conv.att_dst.copy_(torch.from_numpy(p["att_dst"][None]))
            conv.bias.copy_(torch.from_numpy(p["bias"]))
        X = rng.standard_normal((n, 5))
        keep = src != dst
        edge_index = torch.from_numpy(np.stack([src[keep], dst[keep]]))
        Xt = torch.from_numpy(X).requires_grad_(True)
        out = conv(Xt, edge_index)
        dY = rng.standard_normal(tuple(out.shape))
        out.backward(torch.from_numpy(dY))
        loops = np.arange(n)
        d2 = np.concatenate([dst[keep], loops])
        s2 = np.concatenate([src[keep], loops])
        got, cache = layer_forward(X, d2, s2, p)
        np.testing.assert_allclose(got, out.detach().numpy(), rtol=1e-10, atol=1e-12)
        dX, grads = layer_backward(dY, d2, s2, p, cache)
        np.testing.assert_allclose(dX, Xt.grad.numpy(), rtol=1e-9, atol=1e-12)
        torch_grads = {"weight": conv.lin.weight.grad, "att_src": conv.att_src.grad[0],
                       "att_dst": conv.att_dst.grad[0], "bias": conv.bias.grad}
        for name, g in torch_grads.items():
            np.testing.assert_allclose(grads[name], g.numpy(), rtol=1e-9, atol=1e-12,
                                       err_msg=name)
