"""distmm.torch.graph: node tensors (scatter, local, gather, and the refusal of tensors in the
wrong layout at every p), edge tensors between edge_index order and value order (gradients
included), the graph's options against PyG's gcn_norm semantics computed here with numpy, and
the reductions ``graph.sum`` / ``graph.mean`` that make a global loss."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")

from mpi4py import MPI  # noqa: E402

import distmm.torch as dt  # noqa: E402

COMM = MPI.COMM_WORLD
N = 19


def edges(duplicates: bool = False):
    """Random directed edges with a self-loop at node 2 and, optionally, duplicated edges."""
    rng = np.random.default_rng(4)
    ei = np.unique(rng.integers(0, N, (2, 60)), axis=1)
    ei = ei[:, ei[0] != ei[1]]
    ei = np.concatenate([ei, [[2], [2]]], axis=1)
    if duplicates:
        ei = np.concatenate([ei, ei[:, ::7]], axis=1)
    return torch.from_numpy(ei), torch.from_numpy(rng.uniform(0.5, 2.0, ei.shape[1]))


def dense(ei, w, n=N):
    """The dense S (rows targets, columns sources; duplicates summed)."""
    S = np.zeros((n, n))
    np.add.at(S, (ei[1].numpy(), ei[0].numpy()), w.numpy())
    return S


def test_scatter_local_gather_round_trip():
    ei, _ = edges()
    g = dt.graph(ei, N, COMM)
    assert g.counts.sum() == N and np.array_equal(np.sort(np.concatenate(
        COMM.allgather(g.nodes))), np.arange(N))
    X = torch.arange(N * 3, dtype=torch.float64).reshape(N, 3)
    y = torch.arange(N) % 4
    mask = torch.arange(N) % 3 == 0
    for T in (X, y, mask):
        mine = g.scatter(T if COMM.rank == 0 else None)
        assert isinstance(mine, dt.NodeTensor) and mine.dtype == T.dtype
        torch.testing.assert_close(mine.as_subclass(torch.Tensor), T[torch.from_numpy(g.nodes)])
        torch.testing.assert_close(g.local(T).as_subclass(torch.Tensor),
                                   mine.as_subclass(torch.Tensor))
        back = g.gather(mine, root=0)
        if COMM.rank == 0:
            torch.testing.assert_close(back, T)
        else:
            assert back is None
        torch.testing.assert_close(g.gather(mine, root=None), T)


@pytest.mark.parametrize("case", ["global", "plain-local", "columns"])
def test_layers_refuse_node_tensors_in_the_wrong_layout_at_every_p(case):
    """A global tensor where this rank's rows belong is refused at every p, p = 1 included
    (where it has the right shape), on every rank; so is a plain tensor of the right rows
    that did not come from the graph, and a tensor of the wrong width."""
    ei, _ = edges()
    g = dt.graph(ei, N, COMM)
    conv = dt.nn.GCNConv(4, 2)
    X = torch.randn(N, 4)
    conv(g.local(X), g)  # a first call passes: the refusal below is on a later call
    x = {"global": X, "plain-local": X[torch.from_numpy(g.nodes)],
         "columns": g.local(torch.randn(N, 5))}[case]
    match = {"global": "graph.scatter|rows", "plain-local": "graph.local",
             "columns": "shape"}[case]
    with pytest.raises(dt.InputError, match=match):
        conv(x, g)


def test_a_problem_on_one_rank_is_raised_on_every_rank_after_the_first_call():
    """After a first good call, one rank's wrong tensor raises on all ranks (no hang)."""
    ei, _ = edges()
    g = dt.graph(ei, N, COMM)
    conv = dt.nn.GATConv(4, 2, heads=2)
    x = g.local(torch.randn(N, 4))
    conv(x, g)
    bad = x if COMM.rank != COMM.size - 1 else torch.randn(g.num_local, 4)
    with pytest.raises(dt.InputError, match="rank"):
        conv(bad, g)
    # the functions too: a wrong dtype on one rank, after a first good call
    S = g.obj(torch.float64)
    B = torch.zeros(g.num_local, 3, dtype=torch.float64)
    dt.spmm_a(S, B)
    B2 = B if COMM.rank != 0 else B.float()
    with pytest.raises(dt.InputError, match="dtype"):
        dt.spmm_a(S, B2)


@pytest.mark.parametrize("duplicates", [False, True], ids=["coalesced", "duplicates"])
def test_edge_maps_both_ways_with_gradients(duplicates):
    ei, w = edges(duplicates)
    g = dt.graph(ei, N, COMM, edge_weight=w)
    S = g.obj(torch.float64)
    wt = w.clone().requires_grad_()
    v = g.to_values(wt)
    # oracle: the values at this rank's coordinates of the dense S (duplicates summed)
    rows, cols = S.value_coordinates()
    D = dense(ei, w)
    np.testing.assert_allclose(v.detach().numpy(), D[S.row_perm[rows], S.col_perm[cols]],
                               rtol=1e-14)
    torch.testing.assert_close(v.detach(), g.values("weight", torch.float64))
    c = torch.from_numpy(np.random.default_rng(COMM.rank).uniform(1, 2, v.shape[0]))
    back = g.to_edges(v * c)  # every rank: each edge's nonzero value times its c
    # an oracle for `back`: the coordinates' c gathered on every rank
    key = (S.row_perm[rows] * N + S.col_perm[cols]).astype(np.int64)
    keys = np.concatenate(COMM.allgather(key))
    cs = np.concatenate(COMM.allgather(c.numpy()))
    cmap = dict(zip(keys.tolist(), cs.tolist(), strict=True))
    e_keys = (ei[1] * N + ei[0]).numpy()
    want_c = np.array([cmap[k] for k in e_keys.tolist()])
    want = D[ei[1].numpy(), ei[0].numpy()] * want_c
    np.testing.assert_allclose(back.detach().numpy(), want, rtol=1e-14)
    # gradients: the global loss is the sum of the ranks' (back * G_rank).sum()
    G = torch.from_numpy(np.random.default_rng(10 + COMM.rank).standard_normal(back.shape[0]))
    (back * G).sum().backward()
    grad = wt.grad.clone()
    COMM.Allreduce(MPI.IN_PLACE, grad.numpy(), op=MPI.SUM)
    Gsum = G.clone()
    COMM.Allreduce(MPI.IN_PLACE, Gsum.numpy(), op=MPI.SUM)
    # d/dw_e of sum_f Gsum_f * c(f) * sum_{e' ~ f} w_e' = sum over edges f sharing e's pair
    same = e_keys[:, None] == e_keys[None, :]
    np.testing.assert_allclose(grad.numpy(), same @ (Gsum.numpy() * want_c), rtol=1e-12)


@pytest.mark.parametrize("loops,normalize", [(True, False), (True, True), (False, True)])
def test_graph_options_equal_gcn_norm(loops, normalize):
    """add_self_loops (PyG's add_remaining_self_loops: node 2's loop keeps its weight) and
    normalize (D^-1/2 A D^-1/2, weighted in-degree), checked through one SpMM against numpy."""
    ei, w = edges()
    g = dt.graph(ei, N, COMM, edge_weight=w, add_self_loops=loops, normalize=normalize)
    A = dense(ei, w)
    if loops:
        diag = np.ones(N)
        diag[2] = A[2, 2]
        np.fill_diagonal(A, diag)
    if normalize:
        deg = A.sum(axis=1)
        dis = np.where(deg > 0, deg ** -0.5, 0.0)
        A = dis[:, None] * A * dis[None, :]
    X = np.random.default_rng(0).standard_normal((N, 3))
    S = g.obj(torch.float64)
    Y = dt.spmm_a(S, torch.from_numpy(X[g.nodes]), g.values("weight", torch.float64))
    np.testing.assert_allclose(Y.numpy(), (A @ X)[g.nodes], rtol=1e-12, atol=1e-14)
    assert g.normalized == normalize


def test_global_mean_and_sum():
    ei, _ = edges()
    g = dt.graph(ei, N, COMM)
    x = torch.arange(float(COMM.rank + 1), requires_grad=True)  # rank k holds k + 1 entries
    m = g.mean(x)
    total = sum(k * (k + 1) / 2 for k in range(COMM.size))
    count = sum(k + 1 for k in range(COMM.size))
    assert float(m.detach()) == pytest.approx(total / count)
    m.backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 1.0 / count))


def test_bad_graphs_are_refused_everywhere():
    ei, _ = edges()
    with pytest.raises(dt.InputError, match="outside"):
        dt.graph(ei, 5, COMM)
    with pytest.raises(dt.InputError, match=r"\(2, E\)"):
        dt.graph(ei.T, N, COMM)
    mine = ei if COMM.rank == 0 else ei[:, :-1]
    if COMM.size > 1:
        with pytest.raises(dt.InputError, match="edges|checksum"):
            dt.graph(mine, N, COMM)
    for family in ("15d-sparse-shift", "25d-dense-replicate", "25d-sparse-replicate"):
        with pytest.raises(dt.InputError, match="15d-dense-shift or 15d-sparse-aware, not"):
            dt.graph(ei, N, COMM, algorithm=family)
    if COMM.size > 1:
        with pytest.raises(dt.InputError, match="algorithm"):
            dt.graph(ei, N, COMM, algorithm="15d-sparse-aware" if COMM.rank else
                     "15d-dense-shift")


@pytest.mark.parametrize("algorithm", ["15d-dense-shift", "15d-sparse-aware"])
def test_spmm_heads_gradcheck(algorithm):
    """distmm.torch.heads.spmm_heads (the multi-value SpMM and its backward) against finite
    differences in float64 (full Jacobians), on global tensors every rank perturbs alike, and
    its values against a dense numpy reference, on both of graph()'s families."""
    import scipy.sparse as sp
    from torch_global import GlobalLayout, global_tensor

    from distmm.torch.heads import spmm_heads
    ei, _ = edges()
    g = dt.graph(ei, N, COMM, algorithm=algorithm)
    pat = g.pattern("base")
    S = sp.coo_matrix((np.ones(pat.keys.size), (pat.rows, pat.cols)), shape=(N, N))
    obj = g.obj(torch.float64)
    h, F = 3, 2
    lay = GlobalLayout(obj, S, h * F)
    alpha, Z = global_tensor((lay.nnz, h), seed=5), global_tensor((N, h * F), seed=6)

    def f(alpha, Z):
        z = lay.extract(Z, "dense", "b").reshape(-1, h, F)
        y = spmm_heads(g, "base", lay.extract(alpha, "edges", h=h), z)
        return lay.gather(y.reshape(-1, h * F), "dense", "a")

    a, Zn = alpha.detach().numpy(), Z.detach().numpy().reshape(N, h, F)
    want = np.stack([sp.csr_matrix((a[:, k], (lay.rows, lay.cols)), shape=(N, N)) @ Zn[:, k]
                     for k in range(h)], axis=1).reshape(N, h * F)
    np.testing.assert_allclose(f(alpha, Z).detach().numpy(), want, rtol=1e-13, atol=1e-13)
    assert torch.autograd.gradcheck(f, (alpha, Z), eps=1e-6, atol=1e-7, rtol=1e-6)


def test_spmm_heads_is_one_call_equal_to_one_spmm_per_head():
    """graph.spmm_heads: all heads in one distributed SpMM; values and gradients equal one
    dt.spmm_a per head (float64)."""
    ei, _ = edges()
    g = dt.graph(ei, N, COMM)
    S = g.obj(torch.float64)
    h, F = 3, 4
    rng = np.random.default_rng(COMM.rank)
    alpha = torch.from_numpy(rng.uniform(0.1, 1, (S.values.shape[0], h))).requires_grad_()
    z = torch.from_numpy(rng.standard_normal((g.num_local, h, F))).requires_grad_()
    got = g.spmm_heads(alpha, z)
    want = torch.stack([dt.spmm_a(S, z[:, k].contiguous(), alpha[:, k].contiguous())
                        for k in range(h)], dim=1)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    G = torch.from_numpy(rng.standard_normal(got.shape))
    a = torch.autograd.grad((got * G).sum(), (alpha, z))
    b = torch.autograd.grad((want * G).sum(), (alpha, z))
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-13)
