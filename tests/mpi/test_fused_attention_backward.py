"""DenseShift15D.fused_attention (forward, with its statistics) and
fused_attention_backward against the serial numpy references of distmm.kernels.attention
on the whole graph (themselves checked against finite differences in
tests/serial/test_attention_kernels.py), at every c dividing p, with rows without
nonzeros, attention dropout factors, one head and several, F = 1; the backward's words per
phase equal fused_attention_backward_words."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI

from distmm.algorithms.dense_shift_15d import fused_attention_backward_words
from distmm.apps.gat import distribute_graph, graph_share
from distmm.core.coo import CooShare
from distmm.core.sparse import CSRBlock
from distmm.kernels.attention import backward_reference, forward_reference

COMM = MPI.COMM_WORLD
CS = grid_cs("15d-dense-shift")  # distribute_graph's family; tests/mpi/families.py
N = 23
SLOPE = 0.2


def _global(self_loops: bool):
    rng = np.random.default_rng(4)
    A = (rng.random((N, N)) < 0.25).astype(float)
    A[[3, 17]] = 0.0    # rows without in-edges when self-loops are off
    share = graph_share(CooShare((N, N), *sp.coo_matrix(A).nonzero(), np.ones(int(A.sum()))),
                        self_loops, comm=MPI.COMM_SELF)
    G = sp.csr_matrix((np.ones(share.rows.size), (share.rows, share.cols)), shape=(N, N))
    G.sum_duplicates()
    return A, CSRBlock.from_scipy(G, np.float64)


def _scale(rows, cols, H):
    """Dropout-like factors, a function of the original (row, col, head)."""
    h = np.arange(H)[None, :]
    return np.where((rows[:, None] * 7 + cols[:, None] * 13 + h * 5) % 3 == 0, 0.0, 1.5)


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("H,F", [(1, 1), (3, 4)])
@pytest.mark.parametrize("dropout", [False, True])
def test_fused_forward_and_backward_equal_reference(c, self_loops, H, F, dropout):
    A, Sg = _global(self_loops)
    obj = distribute_graph(sp.csr_matrix(A), COMM, add_self_loops=self_loops, c=c,
                           dtype=np.float64, seed=5)
    rng = np.random.default_rng(9)
    s_dst_g = rng.standard_normal((N, H)) * 3
    s_src_g = rng.standard_normal((N, H)) * 3
    Z_g = rng.standard_normal((N, H, F))
    dout_g = rng.standard_normal((N, H, F))
    scale_g = _scale(Sg.row_ids(), Sg.indices.astype(np.int64), H) if dropout else None
    scale = None
    if dropout:
        r, cc = obj.value_coordinates()
        scale = _scale(obj.row_perm[r], obj.col_perm[cc], H)
    nodes = obj.local_rows("a")
    out_g, L_g = forward_reference(Sg, s_dst_g, s_src_g, Z_g, SLOPE, scale_g)
    want = backward_reference(Sg, s_dst_g, s_src_g, Z_g, L_g, out_g, dout_g, SLOPE, scale_g)
    s_dst, s_src = s_dst_g[nodes], s_src_g[nodes]
    Z = np.ascontiguousarray(Z_g[nodes].reshape(nodes.size, H * F))
    out, L = obj.fused_attention(s_dst, s_src, Z, SLOPE, edge_scale=scale, return_stats=True)
    np.testing.assert_allclose(out, out_g[nodes], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(L, L_g[nodes], rtol=1e-12)
    obj.stats.reset()
    got = obj.fused_attention_backward(s_dst, s_src, Z, out, L, dout_g[nodes], SLOPE,
                                       edge_scale=scale)
    for phase, words in fused_attention_backward_words(obj, H, F, COMM.rank).items():
        assert obj.stats.words(phase) == words, phase
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w[nodes], rtol=1e-10, atol=1e-11)
    obj.close()


@pytest.mark.parametrize("c", CS)
def test_fused_float32(c):
    A, Sg = _global(True)
    obj = distribute_graph(sp.csr_matrix(A), COMM, c=c, dtype=np.float32, seed=5)
    rng = np.random.default_rng(1)
    H, F = 4, 8
    s_dst_g, s_src_g = rng.standard_normal((N, H)), rng.standard_normal((N, H))
    Z_g, dout_g = rng.standard_normal((N, H, F)), rng.standard_normal((N, H, F))
    out_g, L_g = forward_reference(Sg, s_dst_g, s_src_g, Z_g, SLOPE)
    want = backward_reference(Sg, s_dst_g, s_src_g, Z_g, L_g, out_g, dout_g, SLOPE)
    nodes = obj.local_rows("a")
    f32 = [np.ascontiguousarray(x[nodes], dtype=np.float32) for x in (s_dst_g, s_src_g)]
    Z = np.ascontiguousarray(Z_g[nodes].reshape(nodes.size, H * F), dtype=np.float32)
    out, L = obj.fused_attention(*f32, Z, SLOPE, return_stats=True)
    assert out.dtype == np.float32 and L.dtype == np.float32
    np.testing.assert_allclose(out, out_g[nodes], rtol=1e-4, atol=1e-5)
    got = obj.fused_attention_backward(*f32, Z, out, L, dout_g[nodes].astype(np.float32),
                                       SLOPE)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w[nodes], rtol=1e-3, atol=1e-4)
    obj.close()


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_fused_gat_training_equals_unfused(c, self_loops, dropout):
    """A whole two-layer model (heads concatenated, then averaged): the fused forward and
    backward give the unfused layer's logits and every parameter's gradient."""
    from distmm.apps.gat import DistGAT, Dropout, cross_entropy
    from distmm.apps.gat_model import GATModel

    A, _ = _global(self_loops)
    obj = distribute_graph(sp.csr_matrix(A), COMM, add_self_loops=self_loops, c=c,
                           dtype=np.float64, seed=7)
    model = GATModel.init(5, 3, 4, 3, out_heads=2, layers=2, seed=2, dtype=np.float64)
    X = np.random.default_rng(3).standard_normal((N, 5))
    labels = np.arange(N) % 3
    drop = Dropout(dropout, dropout, seed=1, step=2) if dropout else None
    res = []
    for fused in (False, True):
        gat = DistGAT(obj, model, fused=fused)
        logits, caches = gat.forward(X[gat.nodes], drop)
        _, d = cross_entropy(logits, labels[gat.nodes], np.ones(gat.nodes.size, bool), N)
        res.append((logits, gat.backward(d, caches)))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-11, atol=1e-12)
    for g_fused, g_unfused in zip(res[1][1], res[0][1], strict=True):
        for name in g_unfused:
            np.testing.assert_allclose(g_fused[name], g_unfused[name], rtol=1e-9, atol=1e-11,
                                       err_msg=name)
    obj.close()
