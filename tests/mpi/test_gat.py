"""Distributed GAT (distmm.apps.gat) against the serial float64 reference (tests/gat_reference.py):
forward, backward, loss, with dropout, at every c that divides p, permutation on and off, with
and without self-loops (a node without in-edges then); the edge primitives' word counts against
their formulas; a directional finite difference on the distributed loss itself."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from distmm.apps.gat import (
    ATTENTION,
    DistGAT,
    Dropout,
    cross_entropy,
    distribute_graph,
    feature_mask,
    keep_scale,
    uniform_hash,
)
from distmm.apps.gat_edges import edge_words
from distmm.apps.gat_model import PARAMS, GATLayer, GATModel
from distmm.errors import InputError
from tests import gat_reference as ref

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CS = [c for c in (1, 2, 3, 4, 8) if P % c == 0]
N, FIN, CLASSES = 13, 5, 3


def _problem(self_loops: bool, seed: int = 5):
    rng = np.random.default_rng(seed)
    A = (rng.random((N, N)) < 0.25).astype(float)
    A[3] = 0.0                      # node 3 has no in-edges (unless self-loops are added)
    A[7, 7] = 1.0                   # an existing self-loop, removed and re-added like GATConv
    X = rng.standard_normal((N, FIN))
    X[rng.random((N, FIN)) < 0.3] = 0.0
    y = rng.integers(0, CLASSES, N)
    layers = ref.random_layers(rng, [FIN, 2, CLASSES], heads=[3, 2], concat=[True, False])
    pat = A != 0
    np.fill_diagonal(pat, self_loops)
    dst, src = np.nonzero(pat)
    return sp.csr_matrix(A), X, y, layers, dst, src


def _model(layers) -> GATModel:
    return GATModel([GATLayer(**{k: np.array(p[k]) for k in PARAMS}, concat=p["concat"],
                              negative_slope=p["negative_slope"]) for p in layers])


def _ref_masks(X, layers, dst, src, drop: Dropout):
    xm, am = [], []
    ids = np.arange(N)
    for k, p in enumerate(layers):
        width = p["weight"].shape[1]
        xm.append(feature_mask(np.ones((N, width)), ids, drop.features, drop.seed, drop.step,
                               k, np.float64))
        H = p["heads"]
        keys = (dst * N + src)[:, None] * H + np.arange(H)[None, :]
        am.append(keep_scale(uniform_hash(keys, drop.seed, drop.step, k, ATTENTION),
                             drop.attention, np.float64))
    return xm, am


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("permute", [True, False])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_gat_matches_reference(c, permute, self_loops, dropout):
    A, X, y, layers, dst, src = _problem(self_loops)
    obj = distribute_graph(A, COMM, add_self_loops=self_loops, c=c, dtype=np.float64,
                           permute=permute, seed=2)
    gat = DistGAT(obj, _model(layers))
    drop = Dropout(dropout, dropout, seed=11, step=4) if dropout else None
    X_loc = X[gat.nodes]
    if dropout:
        X_loc = sp.csr_matrix(X_loc)    # sparse input: masks on stored entries only
    logits, caches = gat.forward(X_loc, drop)
    train = np.zeros(N, bool)
    train[[0, 2, 3, 5, 8, 12]] = True
    loss, dlog = cross_entropy(logits, y[gat.nodes], train[gat.nodes], int(train.sum()))
    grads = gat.backward(dlog, caches)
    total = np.zeros(1)
    COMM.Allreduce(np.array([loss]), total)

    xm, am = _ref_masks(X, layers, dst, src, drop) if dropout else (None, None)
    want, rc = ref.model_forward(X, dst, src, layers, xm, am)
    want_loss, want_d = ref.cross_entropy(want, y, np.flatnonzero(train))
    want_grads = ref.model_backward(want_d, dst, src, layers, rc)
    got = obj.gather("a", logits, root=0)
    if COMM.rank == 0:
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    assert abs(total[0] - want_loss) < 1e-12
    for k in range(len(layers)):
        for name in PARAMS:
            np.testing.assert_allclose(grads[k][name], want_grads[k][name], rtol=1e-9,
                                       atol=1e-12, err_msg=f"layer {k} {name}")
    if not self_loops:  # node 3 has no in-edges: output is the bias alone
        row = np.flatnonzero(gat.nodes == 3)
        if row.size and not dropout:
            np.testing.assert_allclose(logits[row[0]], layers[1]["bias"], atol=1e-14)


@pytest.mark.parametrize("c", CS)
def test_edge_words_match_counts(c):
    A, X, *_ = _problem(True)
    obj = distribute_graph(A, COMM, c=c, dtype=np.float64, seed=1)
    gat = DistGAT(obj, _model(_problem(True)[3]))
    E = gat.edges
    rng = np.random.default_rng(COMM.rank)
    h = 3
    calls = {"expand_rows": lambda: E.expand_rows(rng.random((gat.nodes.size, h))),
             "expand_cols": lambda: E.expand_cols(rng.random((gat.nodes.size, h))),
             "reduce_rows": lambda: E.reduce_rows(rng.random((E.nnz, h)), "max"),
             "reduce_cols": lambda: E.reduce_cols(rng.random((E.nnz, h)), "sum")}
    for op, call in calls.items():
        obj.reset_stats()
        call()
        phase = "edge_expand" if op.startswith("expand") else "edge_reduce"
        assert obj.stats.words(phase) == edge_words(obj, op, h, COMM.rank), op
        assert obj.stats.words() == obj.stats.words(phase)


def test_edge_reductions_match_scipy():
    A, *_ = _problem(False)
    obj = distribute_graph(A, COMM, add_self_loops=False, c=CS[-1], dtype=np.float64, seed=3)
    E = DistGAT(obj, _model(_problem(False)[3])).edges
    rows, cols = obj.value_coordinates()
    key = (obj.row_perm[rows] * 31 + obj.col_perm[cols]).astype(float)
    vals = np.stack([np.sin(key), np.cos(key)], axis=1)
    nodes = obj.local_rows("a")
    Sg = sp.csr_matrix(A != 0, dtype=float)
    Sg.setdiag(0)
    Sg.eliminate_zeros()
    I, J = Sg.nonzero()
    gv = np.stack([np.sin(I * 31.0 + J), np.cos(I * 31.0 + J)], axis=1)
    for which, idx in (("rows", I), ("cols", J)):
        want_sum = np.zeros((N, 2))
        np.add.at(want_sum, idx, gv)
        want_max = np.full((N, 2), -np.inf)
        np.maximum.at(want_max, idx, gv)
        want_max[np.isneginf(want_max)] = 0.0     # documented: empty row/column -> 0
        red = E.reduce_rows if which == "rows" else E.reduce_cols
        np.testing.assert_allclose(red(vals, "sum"), want_sum[nodes], atol=1e-14)
        np.testing.assert_array_equal(red(vals, "max"), want_max[nodes])
    x = np.stack([nodes * 1.0, -nodes * 2.0], axis=1)
    np.testing.assert_array_equal(E.expand_rows(x)[:, 0], obj.row_perm[rows])
    np.testing.assert_array_equal(E.expand_cols(x)[:, 1], -2.0 * obj.col_perm[cols])


def test_distributed_gradient_directional_finite_difference():
    A, X, y, layers, *_ = _problem(True, seed=9)
    obj = distribute_graph(A, COMM, c=CS[-1], dtype=np.float64, seed=4)
    model = _model(layers)
    gat = DistGAT(obj, model)
    drop = Dropout(0.3, 0.3, seed=1, step=2)
    train = np.arange(N) % 2 == 0

    def loss() -> float:
        logits, caches = gat.forward(X[gat.nodes], drop)
        val, d = cross_entropy(logits, y[gat.nodes], train[gat.nodes], int(train.sum()))
        out = np.zeros(1)
        COMM.Allreduce(np.array([val]), out)
        return out[0], d, caches

    _, d, caches = loss()
    grads = gat.backward(d, caches)
    rng = np.random.default_rng(0)   # same direction on every rank
    dirs = [{k: rng.standard_normal(la.arrays()[k].shape) for k in PARAMS}
            for la in model.layers]
    slope = sum(float((g[k] * dd[k]).sum())
                for g, dd in zip(grads, dirs, strict=True) for k in PARAMS)
    h = 1e-6
    vals = []
    for sign in (1, -1):
        for la, dd in zip(model.layers, dirs, strict=True):
            for k in PARAMS:
                getattr(la, k)[...] += sign * h * dd[k]
        vals.append(loss()[0])
        for la, dd in zip(model.layers, dirs, strict=True):
            for k in PARAMS:
                getattr(la, k)[...] -= sign * h * dd[k]
    assert abs((vals[0] - vals[1]) / (2 * h) - slope) < 1e-6 * max(1.0, abs(slope))


def test_gat_refuses_other_families_and_rectangular():
    A, *_ = _problem(True)
    with pytest.raises(InputError, match="15d-dense-shift only"):
        distribute_graph(A, COMM, algorithm="25d-dense-replicate")
    R = sp.random(5, 7, density=0.5, format="csr", random_state=0)
    with pytest.raises(InputError, match="square"):
        distribute_graph(R if COMM.rank == 0 else None, COMM)
