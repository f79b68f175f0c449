"""The fused online-softmax attention (DenseShift15D.fused_attention) equals the unfused GAT layer's
SDDMM -> edge softmax -> SpMM (itself checked against the serial reference in test_gat.py), at
every c dividing p, with and without self-loops (rows without nonzeros), with attention dropout,
float64 and float32; its words per phase equal fused_attention_words."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from distmm.algorithms.dense_shift_15d import fused_attention_words
from distmm.apps.gat import DistGAT, Dropout, distribute_graph
from distmm.apps.gat_model import GATModel

COMM = MPI.COMM_WORLD
CS = [c for c in (1, 2, 3, 4, 8) if COMM.size % c == 0]
N, FIN = 19, 4


def _graph(seed=0):
    rng = np.random.default_rng(seed)
    A = (rng.random((N, N)) < 0.3).astype(float)
    A[[2, 11]] = 0.0    # rows without in-edges when self-loops are off
    X = rng.standard_normal((N, FIN)) * 3.0   # large scores: the rescaling matters
    return sp.csr_matrix(A), X


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_fused_equals_unfused(c, self_loops, dtype, dropout):
    A, X = _graph()
    obj = distribute_graph(A, COMM, add_self_loops=self_loops, c=c, dtype=dtype, seed=3)
    model = GATModel.init(FIN, 3, 4, 2, layers=1, out_heads=4, seed=1, dtype=dtype)
    layer = model.layers[0]
    gat = DistGAT(obj, model)
    drop = Dropout(0.0, dropout, seed=2, step=1) if dropout else None
    _, cache = gat.layer_forward(0, layer, X[gat.nodes].astype(dtype), drop)
    Z = cache["Z"]
    n, H, F = Z.shape
    s_src = np.einsum("nhf,hf->nh", Z, layer.att_src)
    s_dst = np.einsum("nhf,hf->nh", Z, layer.att_dst)
    obj.stats.reset()
    got = obj.fused_attention(s_dst, s_src, Z.reshape(n, H * F), layer.negative_slope,
                              edge_scale=cache["amask"])
    want = fused_attention_words(obj, H, F, COMM.rank)
    for phase, words in want.items():
        assert obj.stats.words(phase) == words, phase
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, cache["out"], rtol=tol, atol=tol)
    assert np.isfinite(got).all()
