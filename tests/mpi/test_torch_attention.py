"""distmm.torch.attention (GATConv's attention and aggregation as one autograd Function, with a
hand-written backward) against finite differences in float64, with and without dropout, on
both of graph()'s families; and its one-rank compiled passes (distmm.torch.local_attention)
against the distributed steps on the same inputs. The layer's values against PyG's GATConv
are in test_torch_layers.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")

from mpi4py import MPI  # noqa: E402

import distmm.torch as dt  # noqa: E402
from distmm.torch import attention, local_attention  # noqa: E402

COMM = MPI.COMM_WORLD
N = 19


def edges():
    """Random directed edges, a self-loop at node 2, no in-edges at node 5 (an empty row of
    S without self-loops)."""
    rng = np.random.default_rng(4)
    ei = np.unique(rng.integers(0, N, (2, 70)), axis=1)
    ei = ei[:, (ei[0] != ei[1]) & (ei[1] != 5)]
    return torch.from_numpy(np.concatenate([ei, [[2], [2]]], axis=1))


class Replicated(torch.autograd.Function):
    """A parameter every rank holds: the identity, whose gradient is summed over the ranks
    (each rank's attention sees only its own nodes' terms)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, G):
        total = G.contiguous().clone()
        COMM.Allreduce(MPI.IN_PLACE, total.numpy(), op=MPI.SUM)
        return total


@pytest.mark.parametrize("algorithm", ["15d-dense-shift", "15d-sparse-aware"])
@pytest.mark.parametrize("heads, drop, pattern", [(3, 0.0, "base"), (1, 0.0, "loops"),
                                                  (2, 0.4, "loops")])
def test_attention_gradcheck(algorithm, heads, drop, pattern):
    """The Jacobians of z, att_src and att_dst (global tensors every rank perturbs alike):
    whole for 1.5D dense shifting's three-head case, and as random projections (gradcheck's
    fast mode, a few collective calls instead of two per input entry) for the sparse-aware
    family, the self-loops and dropout; with dropout the mask is drawn from the same seed on
    every call."""
    from torch_global import GlobalLayout, global_tensor
    g = dt.graph(edges(), N, COMM, algorithm=algorithm)
    obj = g.obj(torch.float64, pattern)
    pat = g.pattern(pattern)
    S = sp.coo_matrix((np.ones(pat.keys.size), (pat.rows, pat.cols)), shape=(N, N))
    C = 2
    lay = GlobalLayout(obj, S, heads * C)
    Z = global_tensor((N, heads * C), seed=7)
    a_src, a_dst = global_tensor((heads, C), seed=8), global_tensor((heads, C), seed=9)

    def f(Z, a_src, a_dst):
        torch.manual_seed(11 + COMM.rank)
        z = lay.extract(Z, "dense", "b").reshape(-1, heads, C)
        y = attention.attend(obj, z, Replicated.apply(a_src), Replicated.apply(a_dst), 0.2,
                             drop)
        return lay.gather(y.reshape(-1, heads * C), "dense", "a")

    assert torch.autograd.gradcheck(f, (Z, a_src, a_dst), eps=1e-6, atol=1e-7, rtol=1e-6,
                                    fast_mode=(algorithm, pattern) != ("15d-dense-shift", "base"))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("drop", [0.0, 0.5])
def test_one_rank_passes_equal_the_distributed_steps(monkeypatch, dtype, tol, drop):
    """The compiled one-rank passes (taken at p = 1) and the distributed calls (forced here)
    give the same output and gradients on the same inputs and dropout mask."""
    g = dt.graph(edges(), N, COMM)
    rng = np.random.default_rng(COMM.rank)
    H, C = 3, 4
    z = torch.tensor(rng.standard_normal((g.num_local, H, C)), dtype=dtype, requires_grad=True)
    a_src = torch.tensor(rng.standard_normal((H, C)), dtype=dtype, requires_grad=True)
    a_dst = torch.tensor(rng.standard_normal((H, C)), dtype=dtype, requires_grad=True)
    G = torch.tensor(rng.standard_normal((g.num_local, H, C)), dtype=dtype)
    if COMM.Get_size() == 1:  # the compiled passes are what the first round runs
        assert local_attention.csr_of(g.obj(dtype, "base")) is not None
    results = []
    for forced in (False, True):
        if forced:
            monkeypatch.setattr(local_attention, "csr_of", lambda obj: None)
        for pattern in ("base", "loops"):
            torch.manual_seed(3)
            y = attention.attend(g.obj(dtype, pattern), z, a_src, a_dst, 0.2, drop)
            results.append([y.detach()] + list(torch.autograd.grad((y * G).sum(),
                                                                   [z, a_src, a_dst])))
    for got, want in zip(results[:2], results[2:], strict=True):
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)
