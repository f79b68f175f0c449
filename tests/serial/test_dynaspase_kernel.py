"""The Dynaspase simulator's runtime: partitioning, profiling, K2P mapping, performance model,
scheduling, and the exactness of the simulated product (oracle: scipy in float64)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.sim.dynaspase import (
    DynaspaseConfig,
    KernelShape,
    choose_partition,
    num_tasks,
    simulate_kernel,
)
from distmm.sim.dynaspase.kernel import rowwise_work
from distmm.sim.dynaspase.partition import block_nnz
from distmm.sim.dynaspase.perfmodel import EMPTY, GEMM, SPDMM, SPMM, k2p

FAST_DDR = 1e9  # GB/s: transfers vanish, so cycles are Table IV compute only


def _sparse(m, n, density, seed):
    rng = np.random.default_rng(seed)
    return sp.random(m, n, density=density, format="csr", random_state=rng,
                     data_rvs=lambda k: rng.uniform(-1, 1, k))


def _adversarial():
    """(name, X) of awkward left operands, 23 x 19 (not divisible by any tile used)."""
    rng = np.random.default_rng(3)
    one_row = sp.lil_matrix((23, 19))
    one_row[7, :] = rng.uniform(-1, 1, 19)
    stored_zero = _sparse(23, 19, 0.2, 4)
    stored_zero.data[::3] = 0.0  # explicit zeros: profiled as zeros, still multiplied right
    return [("empty", sp.csr_matrix((23, 19))),
            ("dense", rng.uniform(-1, 1, (23, 19))),
            ("one dense row", sp.csr_matrix(one_row)),
            ("random", _sparse(23, 19, 0.1, 5)),
            ("stored zeros", stored_zero)]


@pytest.mark.parametrize("strategy", ["dynamic", "s1", "s2"])
@pytest.mark.parametrize("kind", ["aggregate", "update"])
def test_exact_against_scipy(strategy, kind):
    cfg = DynaspaseConfig(strategy=strategy, n_max=6)
    rng = np.random.default_rng(11)
    Y = rng.uniform(-1, 1, (19, 5))
    Y[6:12, :] = 0.0  # a band of empty Y blocks: skipped by Dynamic, not by S1/S2
    for name, X in _adversarial():
        for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-6)):
            Xd = X.astype(dtype)
            res = simulate_kernel(Xd, Y.astype(dtype), kind, cfg)
            ref = (sp.csr_matrix(X, dtype=np.float64) @ Y)
            assert res.result.dtype == dtype and res.result.shape == (23, 5)
            np.testing.assert_allclose(res.result, ref, rtol=tol, atol=tol, err_msg=name)


def test_exact_r1_sparse_y_and_one_row():
    cfg = DynaspaseConfig(n_max=4)
    X = _sparse(1, 13, 0.6, 1)
    Y = _sparse(13, 1, 0.5, 2)
    res = simulate_kernel(X, Y, "update", cfg)
    np.testing.assert_allclose(res.result, (X @ Y).toarray(), rtol=1e-12, atol=1e-12)
    assert res.result.shape == (1, 1)


def test_bad_input():
    with pytest.raises(ValueError, match="rows"):
        simulate_kernel(np.ones((3, 4)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="kind"):
        simulate_kernel(np.ones((3, 4)), np.ones((4, 2)), kind="combine")
    with pytest.raises(ValueError, match="2-D"):
        simulate_kernel(np.ones(3), np.ones((3, 2)))
    with pytest.raises(ValueError, match="N2 dividing N1"):
        simulate_kernel(np.ones((3, 4)), np.ones((4, 2)), partition=(6, 4))
    for bad in ({"p_sys": 0}, {"strategy": "s3"}, {"ddr_gbps": -1.0}, {"n1": 6, "n2": 4},
                {"eta": 1.5}, {"cache_operands": 1}):
        with pytest.raises(ValueError):
            DynaspaseConfig(**bad)


def test_block_profile_matches_brute_force():
    X = _sparse(29, 17, 0.3, 8)
    X.data[::4] = 0.0
    dense = X.toarray()
    for tr, tc in ((5, 4), (29, 17), (1, 3), (40, 40)):
        got = block_nnz(X, tr, tc)
        assert np.array_equal(got, block_nnz(dense, tr, tc))
        for bi, bj in itertools.product(range(got.shape[0]), range(got.shape[1])):
            block = dense[bi * tr:(bi + 1) * tr, bj * tc:(bj + 1) * tc]
            assert got[bi, bj] == np.count_nonzero(block)


def test_k2p_boundaries_of_table_iv():
    p = 16
    size = 64  # an 8 x 8 block: 1/2 is 32 nonzeros, 2/p = 1/8 is 8 nonzeros
    cases = [((32, 32), GEMM),      # a_min exactly 1/2
             ((31, 64), SPDMM),     # a_min just below 1/2, a_max >= 2/p
             ((64, 33), GEMM),      # just above 1/2
             ((8, 1), SPDMM),       # a_max exactly 2/p
             ((7, 7), SPMM),        # a_max just below 2/p
             ((1, 9), SPDMM),       # a_max just above 2/p
             ((0, 64), EMPTY), ((5, 0), EMPTY)]
    for (nx, ny), want in cases:
        assert int(k2p(nx, size, ny, size, p)) == want, (nx, ny)


def test_k2p_picks_the_cheapest_primitive_of_table_iv():
    p, m, n, d = 16, 8, 8, 8
    for nx, ny in itertools.product(range(1, 65), repeat=2):
        ax, ay = nx / (m * n), ny / (n * d)
        cost = {GEMM: m * n * d / p**2, SPDMM: min(ax, ay) * 2 * m * n * d / p**2,
                SPMM: ax * ay * m * n * d / p}
        chosen = int(k2p(nx, m * n, ny, n * d, p))
        assert cost[chosen] <= min(cost.values()) + 1e-12, (nx, ny, chosen)


def test_k2p_boundaries_through_the_simulator():
    """One 8 x 8 pair per kernel, densities placed exactly on Table IV's region borders."""
    cfg = DynaspaseConfig(n1=8, n2=8)

    def block(nnz):
        M = np.zeros(64)
        M[:nnz] = 1.0 + np.arange(nnz)
        return M.reshape(8, 8)

    for (nx, ny), want in (((32, 32), "gemm"), ((31, 40), "spdmm"), ((8, 1), "spdmm"),
                           ((7, 7), "spmm"), ((0, 20), "empty")):
        res = simulate_kernel(block(nx), block(ny), "update", cfg)
        assert res.counts[want] == 1, (nx, ny, res.counts)
        np.testing.assert_allclose(res.result, block(nx) @ block(ny))


@pytest.mark.parametrize("m,k,n,kind", [(2708, 2708, 16, "aggregate"), (2708, 1433, 16, "update"),
                                        (1000, 700, 7, "update"), (333, 333, 129, "aggregate"),
                                        (100, 50, 1, "aggregate")])
def test_partition_gives_enough_tasks(m, k, n, kind):
    cfg = DynaspaseConfig()
    shape = KernelShape(kind, m, k, n)
    n1, n2 = choose_partition([shape], cfg)
    assert n1 % n2 == 0 and 1 <= n2 <= n1 <= cfg.max_partition
    target = cfg.eta * cfg.n_cc
    assert num_tasks(shape, n1, n2) >= target
    # maximal: the next larger side along the constrained axis would give too few tasks
    if kind == "update" and n2 < cfg.max_partition:
        assert num_tasks(shape, n2 + 1, n2 + 1) < target
    res = simulate_kernel(sp.random(m, k, density=0.01, random_state=1, format="csr"),
                          np.ones((k, n)), kind, cfg)
    assert res.tasks == num_tasks(shape, n1, n2)


def test_partition_of_a_whole_model_satisfies_every_kernel():
    cfg = DynaspaseConfig()
    shapes = [KernelShape("update", 2708, 1433, 16), KernelShape("aggregate", 2708, 2708, 16),
              KernelShape("update", 2708, 16, 7), KernelShape("aggregate", 2708, 2708, 7)]
    n1, n2 = choose_partition(shapes, cfg)
    assert n1 % n2 == 0
    assert all(num_tasks(s, n1, n2) >= cfg.eta * cfg.n_cc for s in shapes)


def test_schedule_keeps_every_core_busy():
    cfg = DynaspaseConfig(n_max=5)
    rng = np.random.default_rng(2)
    X = sp.random(61, 47, density=0.15, random_state=rng, format="lil")
    X[3, :] = 1.0  # one dense row: one heavy row of tasks
    X = X.tocsr()
    res = simulate_kernel(X, rng.uniform(size=(47, 13)), "aggregate", cfg)
    s = res.schedule
    dur = s.end - s.start
    assert res.tasks >= cfg.eta * cfg.n_cc
    assert np.all(np.diff(s.start) >= 0)  # tasks handed out in IR order
    for c in range(cfg.n_cc):
        mine = np.flatnonzero(s.core == c)
        assert mine.size and s.start[mine[0]] == 0
        assert np.array_equal(s.start[mine[1:]], s.end[mine[:-1]])  # back to back: never idle
        assert res.core_busy[c] == dur[mine].sum()
        # no core idles while tasks remain: every core works until the last task is handed out
        assert s.end[mine[-1]] >= s.start.max()
    total = dur.sum()
    assert max(total / cfg.n_cc, dur.max()) <= res.cycles <= total / cfg.n_cc + dur.max()


def _compute_only(strategy):
    return DynaspaseConfig(strategy=strategy, ddr_gbps=FAST_DDR, n_max=32)


def test_strategies_on_crafted_updates():
    rng = np.random.default_rng(5)
    W = rng.uniform(0.5, 1, (64, 64))
    dense_H = rng.uniform(0.5, 1, (128, 64))
    run = {s: simulate_kernel(dense_H, W, "update", _compute_only(s)) for s in
           ("dynamic", "s1", "s2")}
    # dense features: GEMM (Dynamic, S1) at p^2 MACs/cycle beats S2's SpDMM at p^2/2
    assert run["dynamic"].counts["gemm"] > 0
    assert sum(run["dynamic"].counts.values()) == run["dynamic"].counts["gemm"]
    assert run["dynamic"].schedule.compute_cycles == run["s1"].schedule.compute_cycles
    assert run["s2"].schedule.compute_cycles > 1.9 * run["dynamic"].schedule.compute_cycles
    sparse_H = _sparse(128, 64, 0.02, 6)
    W_pruned = W.copy()
    W_pruned[:32] = 0.0  # half of the weight blocks empty: only Dynamic skips them
    run = {s: simulate_kernel(sparse_H, W_pruned, "update", _compute_only(s), (16, 16))
           for s in ("dynamic", "s1", "s2")}
    # 2 of the 4 block rows of W are empty: at least half of Dynamic's pairs are skipped
    assert 2 * run["dynamic"].counts["empty"] >= sum(run["dynamic"].counts.values())
    assert run["s1"].counts["empty"] == 0 and run["s2"].counts["empty"] == 0
    assert run["s1"].cycles > 10 * run["dynamic"].cycles  # GEMM ignores H's sparsity
    assert run["s2"].cycles > run["dynamic"].cycles
    for r in run.values():
        np.testing.assert_allclose(r.result, sparse_H @ W_pruned, rtol=1e-12)


def test_strategies_on_crafted_aggregate():
    A = _sparse(256, 256, 0.01, 7)
    H = _sparse(256, 64, 0.03, 8).toarray()  # both below 2/p: SPMM wins
    run = {s: simulate_kernel(A, H, "aggregate", _compute_only(s)) for s in
           ("dynamic", "s1", "s2")}
    assert run["dynamic"].counts["spmm"] > 0 and run["dynamic"].counts["spdmm"] == 0
    assert run["s1"].counts["spdmm"] > 0
    assert run["s1"].cycles == run["s2"].cycles  # the same SpDMM with A sparse
    assert run["dynamic"].cycles < run["s1"].cycles


def test_dynamic_never_computes_more_than_static():
    for seed, (dx, dy) in enumerate([(0.01, 0.05), (0.3, 0.9), (0.7, 0.6), (0.05, 1.0)]):
        X, Y = _sparse(90, 70, dx, seed), _sparse(70, 40, dy, seed + 50).toarray()
        for kind in ("aggregate", "update"):
            c = {s: simulate_kernel(X, Y, kind, _compute_only(s)).schedule.compute_cycles
                 for s in ("dynamic", "s1", "s2")}
            # mode-switch cycles aside, Dynamic's per-pair minimum cannot lose
            assert c["dynamic"] <= min(c["s1"], c["s2"]) + 2 * 7 * 40, (kind, dx, dy, c)


def test_memory_bound_when_ddr_is_slow():
    X = _sparse(64, 64, 0.5, 9)
    Y = np.ones((64, 64))
    fast = simulate_kernel(X, Y, "aggregate", DynaspaseConfig(ddr_gbps=FAST_DDR))
    slow = simulate_kernel(X, Y, "aggregate", DynaspaseConfig(ddr_gbps=0.01))
    assert slow.cycles > 100 * fast.cycles
    # the transfers cannot be hidden: the makespan is at least the cores' share of them
    assert slow.cycles >= slow.schedule.transfer_cycles / 7


def test_rowwise_spmm_work_matches_brute_force():
    X = _sparse(37, 29, 0.2, 12)
    Y = _sparse(29, 11, 0.3, 13)
    tm, tk, tn = 8, 6, 4
    got = rowwise_work(X, Y, tm, tk, tn)
    Xd, Yd = X.toarray(), Y.toarray()
    want = np.zeros_like(got)
    for r, c in zip(*np.nonzero(Xd), strict=True):
        for j in range(got.shape[2]):
            want[r // tm, c // tk, j] += np.count_nonzero(Yd[c, j * tn:(j + 1) * tn])
    assert np.array_equal(got, want)
    assert np.array_equal(rowwise_work(Xd, Yd, tm, tk, tn), want)


def test_rowwise_cost_sees_clustered_nonzeros():
    """100 nonzeros in 4 columns of X meeting 4 rows of Y with 25 each: both densities are
    below 2/p (SPMM), Table IV expects 100 * 100 / (32 * 16) = 20 cycles, the row-wise
    products are 100 * 25 = 2500, i.e. 157 cycles."""
    X = np.zeros((32, 32))
    idx = np.arange(100)
    X[idx % 32, idx // 32] = 1.0  # columns 0..3, filled column by column
    Y = np.zeros((32, 32))
    Y[:4, :25] = 1.0
    fast = {"ddr_gbps": FAST_DDR, "n1": 32, "n2": 32}
    table = simulate_kernel(X, Y, "update", DynaspaseConfig(**fast))
    rowwise = simulate_kernel(X, Y, "update", DynaspaseConfig(spmm_cost="rowwise", **fast))
    assert table.counts["spmm"] == rowwise.counts["spmm"] == 1
    switch = 1  # the first pair sets the execution mode
    assert table.schedule.compute_cycles == 20 + switch
    assert rowwise.schedule.compute_cycles == 157 + switch
    np.testing.assert_array_equal(rowwise.result, X @ Y)


def test_empty_dimensions():
    for shape_x, shape_y in (((0, 5), (5, 3)), ((4, 0), (0, 3)), ((4, 5), (5, 0))):
        res = simulate_kernel(np.zeros(shape_x), np.zeros(shape_y), "aggregate",
                              DynaspaseConfig(spmm_cost="rowwise"))
        assert res.result.shape == (shape_x[0], shape_y[1])
        assert sum(res.counts.values()) == 0  # no block pairs
        # no work but the (empty or zero) output blocks written back
        assert res.schedule.compute_cycles == 0
