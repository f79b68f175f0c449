"""distmm.torch's additive SDDMM and edge softmax: forward against numpy on the global matrix,
backward by torch.autograd.gradcheck in float64, on every family (c = 1 and the deepest valid
replication), one head and several.

Global inputs perturbed identically on every rank (tests/mpi/torch_global.py) keep the ranks'
collective calls in step. Per-node arrays are replicated over row groups in the column-split
families; the gradcheck covers that convention (each replica gets the full gradient).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")

from torch_global import (  # noqa: E402
    COMM,
    GlobalLayout,
    configs,
    full_jacobian,
    global_tensor,
    problem,
    width,
)

import distmm  # noqa: E402
import distmm.torch as dt  # noqa: E402

M, N = 8, 7
R = width()
S = problem(M, N, seed=7)
CONFIGS = configs(R)


def softmax_reference(lay: GlobalLayout, e: np.ndarray, dim: str) -> np.ndarray:
    """Softmax of (nnz, h) scores over each row (column) of S, by plain loops."""
    key = lay.rows if dim == "row" else lay.cols
    out = np.empty_like(e)
    for k in np.unique(key):
        sel = key == k
        x = np.exp(e[sel] - e[sel].max(axis=0))
        out[sel] = x / x.sum(axis=0)
    return out


@pytest.mark.parametrize("h", [None, 2], ids=["1-D", "2-heads"])
@pytest.mark.parametrize("algorithm,c", CONFIGS)
def test_sddmm_add(algorithm, c, h):
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=R, dtype=np.float64,
                            root=None)
    lay = GlobalLayout(obj, S, R)
    shape_u = (M,) if h is None else (M, h)
    shape_w = (N,) if h is None else (N, h)
    u, w = global_tensor(shape_u, seed=1), global_tensor(shape_w, seed=2)

    def f(u, w):
        e = dt.sddmm_add(obj, lay.extract(u, "nodes", "a", h), lay.extract(w, "nodes", "b", h))
        return lay.gather(e, "edges", h=h)

    ref = u.detach().numpy()[lay.rows] + w.detach().numpy()[lay.cols]
    np.testing.assert_allclose(f(u, w).detach().numpy(), ref, rtol=1e-14, atol=1e-14)
    assert torch.autograd.gradcheck(f, (u, w), eps=1e-6, atol=1e-7, rtol=1e-6,
                                    fast_mode=not full_jacobian((algorithm, c), CONFIGS[0]))


@pytest.mark.parametrize("dim", ["row", "col"])
@pytest.mark.parametrize("h", [None, 2], ids=["1-D", "2-heads"])
@pytest.mark.parametrize("algorithm,c", CONFIGS)
def test_edge_softmax(algorithm, c, h, dim):
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=R, dtype=np.float64,
                            root=None)
    lay = GlobalLayout(obj, S, R)
    e = global_tensor((lay.nnz,) if h is None else (lay.nnz, h), seed=3)

    def f(e):
        alpha = dt.edge_softmax(obj, lay.extract(e, "edges", h=h), dim)
        return lay.gather(alpha, "edges", h=h)

    e2 = e.detach().numpy().reshape(lay.nnz, -1)
    ref = softmax_reference(lay, e2, dim).reshape(e.shape)
    np.testing.assert_allclose(f(e).detach().numpy(), ref, rtol=1e-13, atol=1e-14)
    assert torch.autograd.gradcheck(f, (e,), eps=1e-6, atol=1e-7, rtol=1e-6,
                                    fast_mode=not full_jacobian((algorithm, c), CONFIGS[0]))


def test_gat_score_chain_matches_dense_torch():
    """LeakyReLU(u_i + w_j) -> row softmax -> SpMMA with the attention as values: the
    distributed chain's output and input gradients equal plain torch on dense matrices."""
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    lay = GlobalLayout(obj, S, R)
    u, w = global_tensor((M,), seed=4), global_tensor((N,), seed=5)
    Z = global_tensor((N, R), seed=6)

    def chain(u, w, Z):
        e = dt.sddmm_add(obj, lay.extract(u, "nodes", "a"), lay.extract(w, "nodes", "b"))
        alpha = dt.edge_softmax(obj, torch.nn.functional.leaky_relu(e, 0.2))
        out = dt.spmm_a(obj, lay.extract(Z, "dense", "b"), alpha)
        return lay.gather(out, "dense", "a")

    rows = torch.from_numpy(lay.rows.astype(np.int64))
    cols = torch.from_numpy(lay.cols.astype(np.int64))

    def dense(u, w, Z):
        scores = torch.full((M, N), -torch.inf, dtype=torch.float64)
        scores[rows, cols] = torch.nn.functional.leaky_relu(u[rows] + w[cols], 0.2)
        att = torch.softmax(scores, dim=1).nan_to_num(0.0)  # empty rows: all -inf
        return att @ Z

    G = global_tensor((M, R), seed=7).detach()
    got = torch.autograd.grad(chain(u, w, Z), (u, w, Z), G)
    want = torch.autograd.grad(dense(u, w, Z), (u, w, Z), G)
    torch.testing.assert_close(chain(u, w, Z), dense(u, w, Z), rtol=1e-12, atol=1e-12)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
