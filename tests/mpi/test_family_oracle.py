"""Every family, op, strategy and c against the serial scipy oracle, at this run's p.

The families come from the registry (tests/mpi/families.py). Each case builds the same global
problem on every rank (fixed seeds), distributes it, gathers the result on rank 0 and compares
it with scipy in float64 (tests/mpi/oracle.py), at awkward shapes: m != n, sizes that p and
the column blocks do not divide, empty rows, fewer rows than blocks, r at the family's minimum
and above it.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import (
    COMM,
    FAMILIES,
    FAMILY_C,
    FUSED,
    OPS,
    P,
    build,
    gathered,
    one_c,
    runs,
    scattered,
    width,
)
from oracle import check, problem

import distmm
from distmm.perf import costmodel

# m, n, r ("min": the family's minimum, else awkward), empty rows
SHAPES = [(37, 23, "min", False), (24, 24, "odd", True), (3, 11, "odd", False),
          (50, 50, "min", True), (1, 9, "odd", False)]


@pytest.mark.parametrize("name,c", FAMILY_C)
@pytest.mark.parametrize("m,n,rk,empty", SHAPES)
def test_kernels_match_scipy(name, c, m, n, rk, empty):
    r = width(name, c, rk)
    S, A, B = problem(m, n, r, seed=m * 7 + n, empty_rows=empty)
    obj = build(name, S, c, r, root=0)
    A_loc = obj.scatter("a", A if COMM.rank == 0 else None)
    B_loc = obj.scatter("b", B if COMM.rank == 0 else None)
    for op in OPS:
        check(op, gathered(obj, op, A_loc, B_loc), S, A, B, rtol=2e-4)


@pytest.mark.parametrize("name,c", FAMILY_C)
@pytest.mark.parametrize("m,n,rk,empty", SHAPES[:2] + [(29, 41, "odd", False)])
def test_fusedmm_matches_scipy(name, c, m, n, rk, empty):
    r = width(name, c, rk)
    S, A, B = problem(m, n, r, seed=m + n, empty_rows=empty)
    obj = build(name, S, c, r, root=0)
    A_loc = obj.scatter("a", A if COMM.rank == 0 else None)
    B_loc = obj.scatter("b", B if COMM.rank == 0 else None)
    for op in FUSED:
        for strategy in distmm.ALGORITHMS[name].strategies:
            check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=3e-4)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("permute", [True, False])
def test_float64_rank_orders_and_permutation(name, order, permute):
    c = one_c(name)
    r = width(name, c, "odd")
    S, A, B = problem(31, 26, r, seed=5)
    obj = build(name, S, c, r, dtype=np.float64, permute=permute, order=order)
    assert obj.stats.describe()["order"] == order
    A_loc, B_loc = scattered(obj, A, B)
    for op, strategy in runs(name):
        check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)


@pytest.mark.parametrize("name", FAMILIES)
def test_strategies_and_c_agree_to_rounding(name):
    """Every strategy and every c gives the same FusedMM, and "none" is SDDMM then SpMM."""
    cls = distmm.ALGORITHMS[name]
    cs = costmodel.valid_cs(name, P)
    r = max(width(name, c, "min") for c in cs) + 1
    S, A, B = problem(40, 36, r, seed=9)
    results = []
    for c in cs:
        obj = build(name, S, c, r, dtype=np.float64)
        A_loc, B_loc = scattered(obj, A, B)
        R = obj.sddmm(A_loc, B_loc)
        for fn, spmm, X in ((obj.fusedmm_a, obj.spmm_a, B_loc), (obj.fusedmm_b, obj.spmm_b,
                                                                 A_loc)):
            none = fn(A_loc, B_loc, "none")
            np.testing.assert_allclose(none, spmm(X, values=R), rtol=1e-12, atol=1e-12)
            for strategy in cls.strategies:
                np.testing.assert_allclose(fn(A_loc, B_loc, strategy), none, rtol=1e-12,
                                           atol=1e-12)
        results.append((obj.gather("a", obj.fusedmm_a(A_loc, B_loc)),
                        obj.gather("b", obj.fusedmm_b(A_loc, B_loc))))
    if COMM.rank == 0:
        for ga, gb in results[1:]:
            np.testing.assert_allclose(ga, results[0][0], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(gb, results[0][1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", FAMILIES)
def test_sddmm_output_feeds_spmm(name):
    c = costmodel.valid_cs(name, P)[0]
    r = width(name, c, "odd")
    S, A, B = problem(33, 27, r, seed=11)
    obj = build(name, S, c, r, dtype=np.float64)
    A_loc, B_loc = scattered(obj, A, B)
    R = obj.sddmm(A_loc, B_loc)
    check("fusedmm-a", obj.gather("a", obj.spmm_a(B_loc, values=R)), S, A, B, rtol=1e-10)
    check("fusedmm-b", obj.gather("b", obj.spmm_b(A_loc, values=R)), S, A, B, rtol=1e-10)
    # SDDMM with explicit values is SDDMM with S's own values, scaled
    R2 = obj.sddmm(A_loc, B_loc, values=2.0 * obj.values)
    np.testing.assert_allclose(R2, 2.0 * R, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", FAMILIES)
def test_empty_matrix_and_thin_shapes(name):
    cs = costmodel.valid_cs(name, P)
    c = cs[-1]
    r = max(width(name, k, "min") for k in (cs[0], cs[-1]))
    rng = np.random.default_rng(1)
    for m, n in ((8, 1), (13, 9), (1, 5), (1, 1)):
        S = sp.coo_matrix((m, n))
        A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
        obj = build(name, S, c, r)
        A_loc, B_loc = scattered(obj, A, B)
        for op, strategy in runs(name):
            check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-6)
    # one column of S, full of nonzeros
    S = sp.coo_matrix(np.ones((11, 1)))
    A, B = rng.standard_normal((11, r)), rng.standard_normal((1, r))
    obj = build(name, S, cs[0], r)
    A_loc, B_loc = scattered(obj, A, B)
    for op, strategy in runs(name):
        check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-5)


@pytest.mark.parametrize("name,c", FAMILY_C)
def test_dense_layout_and_values_cover_everything_once(name, c):
    """Every (row, column) of A and B is held by exactly one rank, scatter and gather are
    inverse, and the ranks' values cover S's nonzeros once (summing duplicates)."""
    m, n, r = 20, 17, width(name, c, "odd")
    S, A, B = problem(m, n, r, seed=2)
    dup = sp.coo_matrix((np.concatenate([S.data, S.data[:5]]),
                         (np.concatenate([S.row, S.row[:5]]),
                          np.concatenate([S.col, S.col[:5]]))), shape=S.shape)
    obj = build(name, dup, c, r, dtype=np.float64)
    d = obj.stats.describe()
    assert (d["algorithm"], d["c"], d["r"]) == (name, c, r)
    for side, rows, X in (("a", m, A), ("b", n, B)):
        seen = np.zeros((rows, r), dtype=int)
        for k in range(P):
            seen[np.ix_(obj.dense_rows(side, k), np.arange(r)[obj.dense_cols(side, k)])] += 1
        assert (seen == 1).all()
        back = obj.gather(side, obj.scatter(side, X if COMM.rank == 0 else None))
        if COMM.rank == 0:
            np.testing.assert_array_equal(back, X)
    assert obj.value_coordinates()[0].size == obj.values.size
    total = COMM.allreduce(obj.values.size)
    got = obj.gather_values()
    if COMM.rank == 0:
        ref = sp.csr_matrix(dup)
        ref.sum_duplicates()
        coo = ref.tocoo()
        assert total == coo.nnz
        order = np.lexsort((coo.col, coo.row))
        np.testing.assert_array_equal(got[0], coo.row[order])
        np.testing.assert_array_equal(got[1], coo.col[order])
        np.testing.assert_allclose(got[2], coo.data[order], rtol=1e-15)


REPLICATED = [(name, c) for name, c in FAMILY_C if c > 1]


@pytest.mark.skipif(not REPLICATED, reason="no family replicates at this p")
@pytest.mark.parametrize("name,c", REPLICATED)
def test_pairwise_replication_and_reduction_match_scipy(monkeypatch, name, c):
    """With every fiber all-gather and reduce-scatter moved as pairwise exchanges (the path of
    large blocks, forced here at any size), every op and strategy still matches scipy, also
    when called again, and the counted words equal those of MPI's collectives."""
    from distmm.core import comm as comm_mod

    r = width(name, c, "odd")
    S, A, B = problem(29, 41, r, seed=3, empty_rows=True)
    counted = {}
    for limit in (1 << 60, 0):
        monkeypatch.setattr(comm_mod, "PAIRWISE_BYTES", limit)
        obj = build(name, S, c, r, dtype=np.float64, root=0)
        A_loc, B_loc = scattered(obj, A, B)
        obj.stats.reset()
        for op, strategy in runs(name) * 2:  # twice: the sums overwrite scratch buffers
            check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
        counted[limit] = {ph: obj.stats.words(ph) for ph in ("replication", "reduction")}
        obj.close()
    assert counted[0] == counted[1 << 60]
    assert counted[0]["replication"] + counted[0]["reduction"] > 0
