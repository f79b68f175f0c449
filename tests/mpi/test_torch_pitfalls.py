"""The pitfalls a distmm.torch user must not meet silently: a double backward (refused with a
clear error), torch.compile of a model using the layers (runs, equals eager), float16 /
bfloat16 inputs (computed in float32, returned in the input's dtype), torch's thread count
(follows distmm's per-rank share unless the user chose), and the PyG example ports run
end to end on a small synthetic graph."""

from __future__ import annotations

import gzip
import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")

from mpi4py import MPI  # noqa: E402

import distmm.torch as dt  # noqa: E402

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
N = 17
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def small_graph():
    rng = np.random.default_rng(2)
    ei = np.unique(rng.integers(0, N, (2, 50)), axis=1)
    return torch.from_numpy(ei[:, ei[0] != ei[1]])


def test_double_backward_is_refused_clearly():
    """distmm's backward passes cannot be differentiated again: a backward with
    create_graph=True through them raises on every rank (each rank runs the same backward),
    instead of dropping distmm's part of the second derivative; without it, as before."""
    g = dt.graph(small_graph(), N, COMM)
    S = g.obj(torch.float64)
    B = torch.randn(g.num_local, 3, dtype=torch.float64, requires_grad=True)
    v = g.values("weight", torch.float64).clone().requires_grad_()
    y = dt.spmm_a(S, B, v)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(y.sum(), (B, v), create_graph=True)
    torch.autograd.grad(dt.spmm_a(S, B, v).sum(), (B, v))
    conv = dt.nn.GATConv(3, 2, heads=2).double()
    x = g.local(torch.randn(N, 3, dtype=torch.float64)).requires_grad_()
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(conv(x, g).pow(2).sum(), x, create_graph=True)


@pytest.mark.parametrize("backend", [
    # inductor differs from aot_eager only in the code it generates for the local regions
    # between the layers (the same graph breaks and AOT backward, which meet the layers'
    # collectives, run at every count under aot_eager); that code is each process's own
    # (every rank compiles its shapes alone), and its compile costs seconds a rank: one rank
    pytest.param("inductor", marks=pytest.mark.skipif(P != 1, reason=(
        "inductor's local code at p = 1; the graph breaks under aot_eager"))),
    "aot_eager", "eager"])
def test_torch_compile_runs_a_model_with_the_layers(backend):
    """torch.compile of a GCN + GAT model: the layers are graph breaks, the code around them
    is compiled; forward and gradients equal the eager model's. The backends docs/torch.md
    names: inductor (the default) and eager as they are; aot_eager with torch's first-call
    custom-op aliasing check off (that debugging check refuses every tensor subclass, the
    layers' NodeTensor included, with "Multiple dispatch failed")."""
    import contextlib

    import torch._functorch.config as functorch_config
    g = dt.graph(small_graph(), N, COMM)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = dt.nn.GCNConv(5, 8)
            self.conv2 = dt.nn.GATConv(8, 3, heads=2)

        def forward(self, x, graph):
            return self.conv2(torch.relu(self.conv1(x, graph)), graph)

    torch.manual_seed(0)
    net = Net()
    x = g.local(torch.randn(N, 5))
    compiled = torch.compile(net, backend=backend)
    with (functorch_config.patch(check_custom_op_aliasing=False) if backend == "aot_eager"
          else contextlib.nullcontext()):
        out_c = compiled(x, g)
    out_c.pow(2).sum().backward()
    grads_c = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    out_e = net(x, g)
    out_e.pow(2).sum().backward()
    torch.testing.assert_close(out_c.detach().as_subclass(torch.Tensor),
                               out_e.detach().as_subclass(torch.Tensor), rtol=1e-5, atol=1e-6)
    for a, b in zip(grads_c, [p.grad for p in net.parameters()], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("low", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_low_precision_is_computed_in_float32(low):
    g = dt.graph(small_graph(), N, COMM)
    torch.manual_seed(1)
    for conv in (dt.nn.GCNConv(4, 3), dt.nn.GATConv(4, 3, heads=2), dt.nn.SAGEConv(4, 3)):
        x = torch.randn(N, 4).to(low)
        ref = conv(g.local(x.float()), g)
        x_low = g.local(x).requires_grad_()
        out = conv(x_low, g)
        assert out.dtype == low
        torch.testing.assert_close(out.float().as_subclass(torch.Tensor),
                                   ref.to(low).float().detach().as_subclass(torch.Tensor))
        out.float().sum().backward()
        assert x_low.grad.dtype == low


def test_torch_threads_follow_distmm_unless_the_user_chose():
    from distmm.kernels import threads
    dt.graph(small_graph(), N, COMM)
    if "OMP_NUM_THREADS" in os.environ:
        pytest.skip("OMP_NUM_THREADS is set: the user's choice is kept")
    assert torch.get_num_threads() == threads.STATE["threads"]
    torch.set_num_threads(1 + threads.STATE["threads"])  # the user's own choice is kept
    try:
        dt.graph(small_graph(), N, COMM)
        assert torch.get_num_threads() == 1 + threads.STATE["threads"]
    finally:
        torch.set_num_threads(threads.STATE["threads"])


def write_planetoid_like(folder: Path, n: int = 90, classes: int = 3, features: int = 12):
    """Synthetic files in the examples' format: a symmetric graph whose classes are
    clusters, binary features correlated with the class."""
    rng = np.random.default_rng(0)
    y = np.arange(n) % classes
    rows, cols = rng.integers(0, n, 600), rng.integers(0, n, 600)
    keep = (y[rows] == y[cols]) | (rng.random(600) < 0.2)
    A = sp.coo_matrix((np.ones(keep.sum()), (rows[keep], cols[keep])), shape=(n, n))
    A = ((A + A.T) > 0).astype(np.float64).tocoo()
    X = (rng.random((n, features)) < 0.15) | (np.arange(features)[None, :] % classes
                                             == y[:, None])
    with gzip.open(folder / "cora-adjacency.mtx.gz", "wb") as fh:
        scipy.io.mmwrite(fh, A)
    with gzip.open(folder / "cora-features.mtx.gz", "wb") as fh:
        scipy.io.mmwrite(fh, sp.coo_matrix(X.astype(np.float64)))
    np.savetxt(folder / "cora-labels.txt", y, fmt="%d")


@pytest.mark.parametrize("example", ["gcn.py", "gat.py"])
def test_example_ports_train(example, shared_tmp, monkeypatch, capsys):
    """The ports of PyG's examples run on every rank and learn the synthetic classes."""
    if COMM.rank == 0:
        write_planetoid_like(shared_tmp)
    COMM.Barrier()
    monkeypatch.setattr(sys, "argv", [example, "--data", str(shared_tmp), "--epochs", "40"])
    from distmm.torch import datasets

    monkeypatch.setattr(datasets, "planetoid_files", _small_split(datasets.planetoid_files))
    runpy.run_path(str(EXAMPLES / example), run_name="__main__")
    out = capsys.readouterr().out
    if COMM.rank == 0:
        last = [line for line in out.splitlines() if line.startswith("Epoch: 040")][0]
        assert float(last.split("Train: ")[1].split(",")[0]) > 0.6, out


def _small_split(load):
    def small(*args, **kwargs):
        return load(*args, per_class=8, val=20, test=30)
    return small
