"""distmm.torch.nn's GCNConv, GATConv and SAGEConv against PyTorch Geometric's layers of the same
names as the oracle: the same weights (``load_state_dict`` of the PyG layer's), the same
graph, the whole graph on every rank for PyG and this rank's nodes for distmm; outputs, input
gradients and parameter gradients (summed over the ranks) compared, float32 to 1e-5 and
float64 to 1e-12, at every rank count the run has (1, 2, 3, 4).

The graph is small and awkward: nodes without in-edges, an isolated node, existing self-loops
(one with a weight), weighted edges, a node count no rank count divides.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")
pyg_nn = pytest.importorskip("torch_geometric.nn",
                             reason="the PyG comparisons need torch_geometric "
                                    "(./tasks install installs it)")

from mpi4py import MPI  # noqa: E402

import distmm.torch as dt  # noqa: E402

COMM = MPI.COMM_WORLD
N, IN, OUT = 29, 6, 5


def edges(seed: int = 0, duplicates: bool = False):
    """(edge_index, edge_weight): random directed edges, self-loops at nodes 3 and 7 (weight
    2.5 at 7), no in-edges at node 11, node 17 isolated; coalesced unless ``duplicates``."""
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, N, (2, 110))
    ei = ei[:, (ei[1] != 11) & (ei[0] != 17) & (ei[1] != 17) & (ei[0] != ei[1])]
    ei = np.unique(ei, axis=1)
    ei = np.concatenate([ei, [[3, 7], [3, 7]]], axis=1)
    if duplicates:
        ei = np.concatenate([ei, ei[:, :5]], axis=1)
    w = rng.uniform(0.5, 2.0, ei.shape[1])
    w[ei.shape[1] - 1 if not duplicates else ei.shape[1] - 6] = 2.5
    return torch.from_numpy(ei), torch.from_numpy(w)


LAYERS = {
    "gcn": (lambda: pyg_nn.GCNConv(IN, OUT), lambda: dt.nn.GCNConv(IN, OUT), True),
    "gcn-no-loops": (lambda: pyg_nn.GCNConv(IN, OUT, add_self_loops=False),
                     lambda: dt.nn.GCNConv(IN, OUT, add_self_loops=False), True),
    "gcn-raw": (lambda: pyg_nn.GCNConv(IN, OUT, normalize=False),
                lambda: dt.nn.GCNConv(IN, OUT, normalize=False), True),
    "gat-3-heads": (lambda: pyg_nn.GATConv(IN, OUT, heads=3),
                    lambda: dt.nn.GATConv(IN, OUT, heads=3), False),
    "gat-mean": (lambda: pyg_nn.GATConv(IN, OUT, heads=2, concat=False, negative_slope=0.1),
                 lambda: dt.nn.GATConv(IN, OUT, heads=2, concat=False, negative_slope=0.1),
                 False),
    "gat-1-head": (lambda: pyg_nn.GATConv(IN, OUT, heads=1),
                   lambda: dt.nn.GATConv(IN, OUT, heads=1), False),
    "gat-no-loops": (lambda: pyg_nn.GATConv(IN, OUT, heads=2, add_self_loops=False),
                     lambda: dt.nn.GATConv(IN, OUT, heads=2, add_self_loops=False), False),
    "sage": (lambda: pyg_nn.SAGEConv(IN, OUT), lambda: dt.nn.SAGEConv(IN, OUT), False),
    "sage-widening": (lambda: pyg_nn.SAGEConv(IN, 2 * IN, normalize=True),
                      lambda: dt.nn.SAGEConv(IN, 2 * IN, normalize=True), False),
}


def summed(t):
    """A tensor summed over the ranks (a copy)."""
    out = t.detach().clone().contiguous()
    COMM.Allreduce(MPI.IN_PLACE, out.numpy(), op=MPI.SUM)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_equals_pyg(name, dtype):
    make_ref, make_mine, weighted = LAYERS[name]
    ei, w = edges(seed=1)
    torch.manual_seed(3)
    ref = make_ref().to(dtype)
    mine = make_mine().to(dtype)
    mine.load_state_dict(ref.state_dict())
    g = dt.graph(ei, N, COMM, edge_weight=w if weighted else None)
    x = torch.randn(N, IN, dtype=dtype, requires_grad=True)
    G = torch.randn(N, mine.out_channels * getattr(mine, "heads", 1)
                    if getattr(mine, "concat", False) else mine.out_channels, dtype=dtype)
    want = ref(x, ei, w.to(dtype)) if weighted else ref(x, ei)
    want_grads = torch.autograd.grad((want * G).sum(), [x] + list(ref.parameters()))
    x2 = x.detach().clone().requires_grad_()
    got = mine(g.local(x2), g)
    assert isinstance(got, dt.NodeTensor)
    got_grads = torch.autograd.grad((got * g.local(G)).sum(), [x2] + list(mine.parameters()))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12,
                                                                        atol=1e-12)
    torch.testing.assert_close(g.gather(got, root=None).as_subclass(torch.Tensor),
                               want.detach(), **tol)
    names = ["x"] + [k for k, _ in ref.named_parameters()]
    mine_names = ["x"] + [k for k, _ in mine.named_parameters()]
    assert names == mine_names
    for k, a, b in zip(names, got_grads, want_grads, strict=True):
        torch.testing.assert_close(summed(a), b, **tol, msg=lambda m, k=k: f"{k}: {m}")


def test_gat_attention_dropout():
    """Dropout on the attention: in training with dropout 0.5 the output differs from the
    evaluation's (which equals PyG's), and with a fixed seed it is reproducible."""
    ei, _ = edges(seed=2)
    torch.manual_seed(0)
    ref = pyg_nn.GATConv(IN, OUT, heads=2, dropout=0.5)
    mine = dt.nn.GATConv(IN, OUT, heads=2, dropout=0.5)
    mine.load_state_dict(ref.state_dict())
    g = dt.graph(ei, N, COMM)
    x = torch.randn(N, IN)
    mine.eval()
    ref.eval()
    torch.testing.assert_close(g.gather(mine(g.local(x), g), root=None).as_subclass(
        torch.Tensor), ref(x, ei).detach(), rtol=1e-5, atol=1e-5)
    mine.train()
    torch.manual_seed(COMM.rank)
    a = mine(g.local(x), g).detach()
    torch.manual_seed(COMM.rank)
    b = mine(g.local(x), g).detach()
    torch.testing.assert_close(a, b)
    diff = summed((a - mine.eval()(g.local(x), g).detach()).abs().sum().reshape(1))
    assert float(diff[0]) > 0


def test_gat_refuses_duplicate_edges_everywhere():
    ei, _ = edges(seed=3, duplicates=True)
    torch.manual_seed(6)
    g = dt.graph(ei, N, COMM)
    conv = dt.nn.GATConv(IN, OUT, heads=2)
    with pytest.raises(dt.InputError, match="duplicate edges"):
        conv(g.local(torch.randn(N, IN)), g)
    # GCN and SAGE sum duplicates, as PyG's message passing does
    ref = pyg_nn.GCNConv(IN, OUT)
    mine = dt.nn.GCNConv(IN, OUT)
    mine.load_state_dict(ref.state_dict())
    x = torch.randn(N, IN)
    torch.testing.assert_close(g.gather(mine(g.local(x), g), root=None).as_subclass(
        torch.Tensor), ref(x, ei).detach(), rtol=1e-5, atol=1e-5)


def test_two_layer_model_state_dict_and_training_step():
    """A PyG two-layer GCN's state_dict loads into the same model built from distmm's layers
    (wrapped in DataParallel), and one Adam step on the global mean loss gives the same
    parameters as PyG's step on the whole graph."""
    ei, _ = edges(seed=4)

    def model(conv):
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1, self.conv2 = conv(IN, 8), conv(8, 3)

            def forward(self, x, e):
                return self.conv2(torch.relu(self.conv1(x, e)), e)
        return Net()

    torch.manual_seed(5)
    ref, mine = model(pyg_nn.GCNConv), model(dt.nn.GCNConv)
    mine.load_state_dict(ref.state_dict())
    mine = dt.nn.DataParallel(mine, COMM)
    g = dt.graph(ei, N, COMM)
    x, y = torch.randn(N, IN), torch.randint(0, 3, (N,))
    mask = torch.arange(N) % 3 != 1
    opts = [torch.optim.Adam(m.parameters(), lr=0.1) for m in (ref, mine)]
    loss_ref = torch.nn.functional.cross_entropy(ref(x, ei)[mask], y[mask])
    out = mine(g.local(x), g)
    ml = g.local(mask)
    loss = g.mean(torch.nn.functional.cross_entropy(out[ml], g.local(y)[ml],
                                                    reduction="none"))
    torch.testing.assert_close(loss.detach().as_subclass(torch.Tensor), loss_ref.detach(),
                               rtol=1e-5, atol=1e-6)
    loss_ref.backward()
    loss.backward()
    for o in opts:
        o.step()
    for (k, a), (_, b) in zip(ref.named_parameters(), mine.module.named_parameters(),
                              strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("name", ["gcn", "gat-3-heads", "sage", "sage-widening"])
def test_constant_sparse_input_reused_equals_pyg(name, monkeypatch):
    """A layer called again on the same mostly-zero input takes its product with the weights
    in a kept sparse form (GCNConv, GATConv, SAGEConv): outputs and parameter gradients still
    equal PyG's, float64 to 1e-12, on each of three calls; an in-place change of the input is
    seen (the version counter), and the kept form follows it."""
    import distmm.torch.nn as dnn
    make_ref, make_mine, weighted = LAYERS[name]
    ei, w = edges(seed=2)
    torch.manual_seed(5)
    ref, mine = make_ref().double(), make_mine().double()
    mine.load_state_dict(ref.state_dict())
    g = dt.graph(ei, N, COMM, edge_weight=w if weighted else None)
    X = torch.randn(N, IN, dtype=torch.float64) * (torch.rand(N, IN) < 0.1)
    monkeypatch.setattr(dnn, "SPARSE_INPUT_DENSITY", 0.5)  # every rank's few rows qualify
    x = g.local(X)
    taken = []
    original = dnn.InputForm.sparse_of

    def spy(self, t):
        form = original(self, t)
        taken.append(form is not None)
        return form

    monkeypatch.setattr(dnn.InputForm, "sparse_of", spy)
    for step in range(3):
        if step == 2:
            X[0, 0] += 1.0
            x[:] = g.local(X)  # in place: the kept form must follow
        want = ref(X, ei, w.double()) if weighted else ref(X, ei)
        want_grads = torch.autograd.grad(want.pow(2).sum(), list(ref.parameters()))
        got = mine(x, g)
        got_grads = torch.autograd.grad(g.sum(got.pow(2).sum()), list(mine.parameters()))
        torch.testing.assert_close(g.gather(got, root=None).as_subclass(torch.Tensor),
                                   want.detach(), rtol=1e-12, atol=1e-12)
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(summed(a), b, rtol=1e-12, atol=1e-12)
    k = len(taken) // 3  # products per call: the first dense, then sparse; after the
    assert not taken[0] and all(taken[k:2 * k]) and not taken[2 * k]  # change dense again


def _families():
    """(algorithm, c, permute) the graph supports, at this run's rank count."""
    cases = [("15d-dense-shift", 2, "auto"), ("15d-sparse-aware", 1, "auto"),
             ("15d-sparse-aware", 2, "random"), ("15d-sparse-aware", 1, "kahip")]
    return [pytest.param(*case, id="-".join(map(str, case))) for case in cases]


@pytest.mark.parametrize("algorithm, c, permute", _families())
def test_layers_equal_pyg_on_every_supported_family(algorithm, c, permute):
    """GCNConv, GATConv (3 heads: the multi-value SpMM on the family's own blocks, a
    partition's parts included) and SAGEConv on each family graph() supports, with replication
    and with a partitioner's order: outputs and gradients equal PyG's, float64 to 1e-12."""
    if COMM.size % c:
        pytest.skip(f"c = {c} needs a rank count it divides")
    if permute == "kahip":
        pytest.importorskip("kahip", reason="the partitioner is the 'partition' extra")
    ei, w = edges(seed=4)
    g = dt.graph(ei, N, COMM, edge_weight=w, algorithm=algorithm, c=c, permute=permute)
    assert g.obj(torch.float64).name == algorithm
    torch.manual_seed(7)
    X = torch.randn(N, IN, dtype=torch.float64)
    for name in ("gcn", "gat-3-heads", "sage"):
        make_ref, make_mine, weighted = LAYERS[name]
        ref, mine = make_ref().double(), make_mine().double()
        mine.load_state_dict(ref.state_dict())
        want = ref(X, ei, w) if weighted else ref(X, ei)
        want_grads = torch.autograd.grad(want.pow(2).sum(), list(ref.parameters()))
        got = mine(g.local(X), g)
        got_grads = torch.autograd.grad(g.sum(got.pow(2).sum()), list(mine.parameters()))
        torch.testing.assert_close(g.gather(got, root=None).as_subclass(torch.Tensor),
                                   want.detach(), rtol=1e-12, atol=1e-12)
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(summed(a), b, rtol=1e-12, atol=1e-12)
