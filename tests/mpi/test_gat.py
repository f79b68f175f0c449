"""Distributed GAT (distmm.apps.gat) against the serial float64 reference (tests/gat_reference.py):
forward, backward, loss, with dropout, on every family at every valid c, permutation on and off,
with and without self-loops (a node without in-edges then); the packed gradient all-reduce's
words against its formula, and the whole-row layer's all-gathers and transfers
(distmm.apps.gat_layout) against theirs, per family; a directional finite difference on the
distributed loss itself; non-square graphs refused."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import FAMILY_C, grid_cs
from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
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
from distmm.apps.gat_model import PARAMS, GATLayer, GATModel
from distmm.errors import InputError
from tests import gat_reference as ref

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
# 1.5D dense shifting's c, and every family's (FAMILY_C), that this p adds to the grid shapes
# of the smaller rank counts (tests/mpi/families.py)
CS = grid_cs("15d-dense-shift")
OTHER_CS = [(name, c) for name, c in FAMILY_C if name != "15d-dense-shift"]
N, FIN, CLASSES = 13, 5, 3


def _problem(self_loops: bool, seed: int = 5, heads: tuple[int, int] = (3, 2)):
    rng = np.random.default_rng(seed)
    A = (rng.random((N, N)) < 0.25).astype(float)
    A[3] = 0.0                      # node 3 has no in-edges (unless self-loops are added)
    A[7, 7] = 1.0                   # an existing self-loop, removed and re-added like GATConv
    X = rng.standard_normal((N, FIN))
    X[rng.random((N, FIN)) < 0.3] = 0.0
    y = rng.integers(0, CLASSES, N)
    layers = ref.random_layers(rng, [FIN, 2, CLASSES], heads=list(heads), concat=[True, False])
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


def _check_against_reference(family, c, permute, self_loops, dropout):
    A, X, y, layers, dst, src = _problem(self_loops)
    obj = distribute_graph(A, COMM, add_self_loops=self_loops, c=c, dtype=np.float64,
                           permute=permute, seed=2, algorithm=family)
    gat = DistGAT(obj, _model(layers))
    drop = Dropout(dropout, dropout, seed=11, step=4) if dropout else None
    X_loc = X[gat.input_nodes]
    if dropout:
        X_loc = sp.csr_matrix(X_loc)    # sparse input: masks on stored entries only
    logits, caches = gat.forward(X_loc, drop)
    train = np.zeros(N, bool)
    train[[0, 2, 3, 5, 8, 12]] = True
    loss, dlog = gat.loss(logits, y[gat.nodes], train[gat.nodes], int(train.sum()))
    grads = gat.backward(dlog, caches)
    total = np.zeros(1)
    COMM.Allreduce(np.array([loss]), total)

    xm, am = _ref_masks(X, layers, dst, src, drop) if dropout else (None, None)
    want, rc = ref.model_forward(X, dst, src, layers, xm, am)
    want_loss, want_d = ref.cross_entropy(want, y, np.flatnonzero(train))
    want_grads = ref.model_backward(want_d, dst, src, layers, rc)
    got = gat.gather(logits, root=0)
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
    obj.close()


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("permute", ["random", "blocks", "none"])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_gat_matches_reference(c, permute, self_loops, dropout):
    _check_against_reference("15d-dense-shift", c, permute, self_loops, dropout)


@pytest.mark.parametrize("family,c", OTHER_CS)
@pytest.mark.parametrize("self_loops,dropout", [(True, 0.0), (False, 0.5)])
def test_gat_on_every_family_matches_reference(family, c, self_loops, dropout):
    """The other families, at every valid c: the same logits, loss and gradients as the
    reference (and so as the 1.5D dense-shifting run, which the test above checks)."""
    _check_against_reference(family, c, "random", self_loops, dropout)


@pytest.mark.parametrize("family,c", FAMILY_C)
def test_layout_words_per_phase(family, c):
    """One training step's words in the whole-row layer's phases equal their formulas: the
    row-group all-gathers of the SpMM outputs (forward, A side) and of the S^T outputs
    (backward, B side), :meth:`NodeLayout.allgather_words`, and the A/B transfers, per
    family in closed form (docs/gat.md): none in the 1.5D families; in 2.5D dense
    replicating rank (i, j, k) receives its block's rows where j != 0, in 2.5D sparse
    replicating where i != j. The weight gradient all-reduce keeps its words."""
    A, X, y, layers, *_ = _problem(True)
    obj = distribute_graph(A, COMM, c=c, dtype=np.float64, seed=1, algorithm=family)
    gat = DistGAT(obj, _model(layers))
    lay = gat.layout
    obj.stats.reset()
    logits, caches = gat.forward(X[gat.input_nodes], None)
    gat.backward(np.ones_like(logits), caches)
    want_sent = want_recv = 0
    for la in gat.model.layers:
        for side in ("a", "b"):
            w = lay.allgather_words(side, la.heads, la.out_channels)
            want_sent += w["words_sent"]
            want_recv += w["words_received"]
    assert obj.stats.words("gat_allgather") == want_sent
    assert obj.stats.words("gat_allgather", "words_received") == want_recv
    # transfers of one step: forward s_dst (H per row, to A) per layer and the hidden
    # output (width, to B); backward d_dst (H, to B) per layer and d X of the output layer's
    # input (width, to A)
    L = gat.model.layers
    moved = {"a": sum(la.heads for la in L) + sum(la.width for la in L[:-1]),
             "b": sum(la.heads for la in L) + sum(la.width for la in L[:-1])}
    rows = {side: obj.dense_rows(side, COMM.rank).size for side in "ab"}
    if family == "25d-dense-replicate":
        moves = obj.grid.position(COMM.rank)[1] != 0
    elif family == "25d-sparse-replicate":
        i, j, _ = obj.grid.position(COMM.rank)
        moves = i != j
    else:
        moves = False
    recv = sum(rows[side] * moved[side] for side in "ab") if moves else 0
    assert obj.stats.words("gat_transfer", "words_received") == recv
    mine = sum(lay.transfer_words(side, moved[side])["words_sent"] for side in "ab")
    assert obj.stats.words("gat_transfer") == mine
    total = np.zeros(2, dtype=np.int64)
    COMM.Allreduce(np.array([obj.stats.words("gat_transfer"),
                             obj.stats.words("gat_transfer", "words_received")]), total)
    assert total[0] == total[1]
    assert obj.stats.words("gat_weights") == gat.gradient_words(COMM.rank)
    obj.close()


@pytest.mark.parametrize("family,c,heads",
                         [("15d-dense-shift", c, (3, 2)) for c in CS]
                         + [("15d-dense-shift", 1, (12, 9))]
                         + [(f, c, (3, 2)) for f, c in FAMILY_C
                            if ALGORITHMS[f].splits_r])
def test_repeated_steps_make_one_call_per_kind_and_match_the_reference(family, c, heads):
    """Training steps in a row (forward with dropout, backward, inference forward): every
    step's logits and gradients match the serial reference, and every head is in one
    multi-value or multi-head call of each kind on every family: one pass each, no
    single-value SpMM or SDDMM and no fallback (per-head) call."""
    A, X, y, layers, dst, src = _problem(True, heads=heads)
    obj = distribute_graph(A, COMM, algorithm=family, c=c, dtype=np.float64, seed=2)
    gat = DistGAT(obj, _model(layers))
    X_loc = X[gat.input_nodes]
    train = np.zeros(N, bool)
    train[[0, 2, 5, 8, 12]] = True
    for step in range(4):
        drop = Dropout(0.4, 0.3, seed=3, step=step)
        obj.kernel.stats.reset()
        logits, caches = gat.forward(X_loc, drop)
        loss, dlog = cross_entropy(logits, y[gat.nodes], train[gat.nodes], int(train.sum()))
        grads = gat.backward(dlog, caches)
        plain = gat.forward(X_loc, None)[0]
        ops = obj.kernel.stats.ops
        # 1.5D sparse shifting runs its S^T blocks' steps as spmm_multi_a (they travel
        # transposed); a one-rank layer's dense-shift SDDMM of one head is the model's own
        assert ops["spmm_multi_a"].calls > 0 and ops["sddmm_multi"].calls > 0
        assert all(ops[k].calls == 0 for k in ("spmm_a", "spmm_b") if k in ops)
        assert all(ops[k].fallback_calls == 0
                   for k in ("spmm_multi_a", "spmm_multi_b", "sddmm_multi"))
        xm, am = _ref_masks(X, layers, dst, src, drop)
        want, rc = ref.model_forward(X, dst, src, layers, xm, am)
        want_d = ref.cross_entropy(want, y, np.flatnonzero(train))[1]
        want_grads = ref.model_backward(want_d, dst, src, layers, rc)
        got, got_plain = gat.gather(logits), gat.gather(plain)
        if COMM.rank == 0:
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
            np.testing.assert_allclose(got_plain, ref.model_forward(X, dst, src, layers)[0],
                                       rtol=1e-11, atol=1e-12)
        for k in range(len(layers)):
            for name in PARAMS:
                np.testing.assert_allclose(grads[k][name], want_grads[k][name], rtol=1e-9,
                                           atol=1e-12, err_msg=f"step {step} layer {k} {name}")
    obj.close()


@pytest.mark.parametrize("c", CS)
def test_gradient_allreduce_words(c):
    A, X, y, layers, *_ = _problem(True)
    obj = distribute_graph(A, COMM, c=c, dtype=np.float64, seed=1)
    gat = DistGAT(obj, _model(layers))
    logits, caches = gat.forward(X[gat.nodes], None)
    obj.stats.reset()
    gat.backward(np.ones_like(logits), caches)
    assert obj.stats.words("gat_weights") == gat.gradient_words(COMM.rank)
    assert obj.stats.words("gat_weights", "words_received") == gat.gradient_words(COMM.rank)


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


def test_gat_refuses_rectangular_and_fused_off_dense_shift():
    A, *_ = _problem(True)
    obj = distribute_graph(A, COMM, algorithm="15d-sparse-shift")
    with pytest.raises(InputError, match="15d-dense-shift only"):
        DistGAT(obj, _model(_problem(True)[3]), fused=True)
    obj.close()
    R = sp.random(5, 7, density=0.5, format="csr", random_state=0)
    with pytest.raises(InputError, match="square"):
        distribute_graph(R if COMM.rank == 0 else None, COMM)


@pytest.mark.parametrize("family,c", FAMILY_C)
def test_layout_moves_rows_and_matches_the_closed_forms(family, c):
    """On a graph whose blocks are balanced (48 nodes), the whole-row transfer delivers every
    rank its other side's node rows (node ids as values), and the mean words per rank of the
    row-group all-gather (every rank's :meth:`NodeLayout.allgather_words`) and of the transfer
    (counted) equal the closed forms documented beside Table III."""
    from distmm.apps.gat_layout import allgather_model_words, transfer_model_words

    n, H, F, w = 48, 2, 24, 5
    rng = np.random.default_rng(3)
    A = sp.csr_matrix((rng.random((n, n)) < 0.1).astype(float))
    obj = distribute_graph(A, COMM, c=c, seed=0, algorithm=family, permute="none")
    gat = DistGAT(obj, _model(_problem(True)[3]))
    lay = gat.layout
    for side in ("a", "b"):
        mean = np.mean([lay.allgather_words(side, H, F, k)["words_sent"] for k in range(P)])
        assert mean == pytest.approx(allgather_model_words(family, n, P, c, H, F))
    for to, src_nodes, dst_nodes in (("a", gat.input_nodes, gat.nodes),
                                     ("b", gat.nodes, gat.input_nodes)):
        obj.stats.reset()
        vals = np.repeat(src_nodes[:, None].astype(np.float64), w, axis=1)
        moved = lay.transfer(vals, to)
        np.testing.assert_array_equal(moved[:, 0], dst_nodes)
        sent = COMM.allreduce(obj.stats.words("gat_transfer"))
        assert sent / P == pytest.approx(transfer_model_words(family, n, P, c, w))
        assert obj.stats.words("gat_transfer") == lay.transfer_words(to, w)["words_sent"]
    obj.close()
