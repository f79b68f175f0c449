"""1.5D sparse shifting: every op and strategy against a serial scipy oracle, at this run's p.

Run under mpiexec at several rank counts by ./tasks test. Each case builds the same global
problem on every rank (fixed seeds), distributes it, gathers the result and compares it with
scipy in float64 on the gathered matrices. The counted words and messages are held to the
class's exact formulas and to the paper's Table III.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from oracle import check, problem, run_and_gather

from distmm.algorithms.sparse_shift_15d import SparseShift15D
from distmm.coo import CooShare
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CS = [c for c in (1, 2, 3, 4, 8) if P % c == 0]
PHASES = ("replication", "propagation", "reduction")


def build(S, c, r, root=0, **kw):
    share = CooShare.from_scipy(S if root is None or COMM.rank == root else None, COMM,
                                root=root)
    return SparseShift15D(share, COMM, c=c, r=r, **kw)


def width(c, kind):
    """r for a test: the layout's minimum (p/c), or an awkward width p/c does not divide."""
    q = P // c
    return q if kind == "min" else 2 * q + 1


SHAPES = [(37, 23, "min", False), (24, 24, "awkward", True), (3, 11, "awkward", False),
          (50, 50, "min", True)]


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("m,n,rk,empty", SHAPES)
@pytest.mark.parametrize("op", ["sddmm", "spmm-a", "spmm-b"])
def test_kernels_match_scipy(c, m, n, rk, empty, op):
    r = width(c, rk)
    S, A, B = problem(m, n, r, seed=m * 7 + n, empty_rows=empty)
    obj = build(S, c, r)
    check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=2e-4)


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("strategy", ["none", "reuse"])
@pytest.mark.parametrize("op", ["fusedmm-a", "fusedmm-b"])
@pytest.mark.parametrize("m,n,rk,empty", SHAPES[:2] + [(29, 41, "awkward", False)])
def test_fusedmm_matches_scipy(c, strategy, op, m, n, rk, empty):
    r = width(c, rk)
    S, A, B = problem(m, n, r, seed=m + n, empty_rows=empty)
    obj = build(S, c, r)
    check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=3e-4)


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("permute", [True, False])
def test_float64_rank_orders_and_permutation(order, permute):
    c = CS[len(CS) // 2]
    r = width(c, "awkward")
    S, A, B = problem(31, 26, r, seed=5)
    obj = build(S, c, r, root=None, dtype=np.float64, permute=permute, order=order)
    for op in ("sddmm", "spmm-a", "spmm-b"):
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)
    for strategy in ("none", "reuse"):
        for op in ("fusedmm-a", "fusedmm-b"):
            check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=1e-10)


@pytest.mark.parametrize("c", CS)
def test_strategies_agree_to_rounding(c):
    r = width(c, "awkward")
    S, A, B = problem(40, 36, r, seed=9)
    obj = build(S, c, r, root=None, dtype=np.float64)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    for fn in (obj.fusedmm_a, obj.fusedmm_b):
        none, reuse = fn(A_loc, B_loc, "none"), fn(A_loc, B_loc, "reuse")
        np.testing.assert_allclose(reuse, none, rtol=1e-12, atol=1e-12)


def test_empty_matrix_and_one_column():
    c = CS[-1]
    r = width(c, "min")
    for m, n in ((8, 1), (13, 9), (1, 5)):
        S = sp.coo_matrix((m, n))
        rng = np.random.default_rng(1)
        A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
        obj = build(S, c, r, root=None)
        for op in ("sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b"):
            check(op, run_and_gather(obj, op, A, B, "reuse"), S, A, B, rtol=1e-6)


def test_sddmm_output_feeds_spmm():
    c = CS[-1]
    r = width(c, "awkward")
    S, A, B = problem(33, 27, r, seed=11)
    obj = build(S, c, r, root=None, dtype=np.float64)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    R = obj.sddmm(A_loc, B_loc)
    out = obj.gather("a", obj.spmm_a(B_loc, values=R))
    check("fusedmm-a", out, S, A, B, rtol=1e-10)
    out = obj.gather("b", obj.spmm_b(A_loc, values=R))
    check("fusedmm-b", out, S, A, B, rtol=1e-10)


def test_describe_and_dense_layout():
    c = CS[-1]
    r = width(c, "awkward")
    S, _, _ = problem(20, 17, r, seed=2)
    obj = build(S, c, r, root=None)
    d = obj.describe()
    assert (d["algorithm"], d["c"], d["r"]) == ("15d-sparse-shift", c, r)
    # Every (row, column) of A and of B is held by exactly one rank.
    for side, rows in (("a", 20), ("b", 17)):
        seen = np.zeros((rows, r), dtype=int)
        for k in range(P):
            seen[np.ix_(obj.dense_rows(side, k), np.arange(r)[obj.dense_cols(side, k)])] += 1
        assert (seen == 1).all()


# ------------------------------------------------------------------ communication = model
OPS = [("sddmm", None), ("spmm_a", None), ("spmm_b", None),
       ("fusedmm_a", "none"), ("fusedmm_a", "reuse"), ("fusedmm_b", "none"),
       ("fusedmm_b", "reuse")]


def call(obj, op, strategy, A_loc, B_loc):
    if op == "sddmm":
        return obj.sddmm(A_loc, B_loc)
    if op == "spmm_a":
        return obj.spmm_a(B_loc)
    if op == "spmm_b":
        return obj.spmm_b(A_loc)
    return getattr(obj, op)(A_loc, B_loc, strategy)


@pytest.mark.parametrize("c", CS)
def test_counted_words_equal_exact_formula(c):
    """Every op and strategy, every phase, every rank, on an unbalanced random S."""
    m, n, r = 6 * P, 9 * P, 2 * P
    S, A, B = problem(m, n, r, density=0.15, seed=4)
    obj = build(S, c, r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    layer_nnz = {"a": obj.shifted_nnz("a"), "b": obj.shifted_nnz("b")}  # builds S^T
    for op, strategy in OPS:
        obj.reset_stats()
        call(obj, op, strategy, A_loc, B_loc)
        exact = SparseShift15D.exact_words(op, m, n, r, P, c, strategy or "none",
                                           layer_nnz=layer_nnz)
        for phase in PHASES:
            want = exact[phase]
            for kind in ("words_sent", "words_received"):
                assert obj.stats.words(phase, kind) == want["words"], (op, strategy, phase)
            for kind in ("messages_sent", "messages_received"):
                assert obj.stats.words(phase, kind) == want["messages"], (op, strategy, phase)


def circulant(n, diagonals=(0, 1, 5)):
    """Every row and every column holds len(diagonals) nonzeros, so every row block and column
    block of S holds the same number: the shifted blocks are exactly nnz/p each."""
    i = np.arange(n)
    rows = np.concatenate([i for _ in diagonals])
    cols = np.concatenate([(i + d) % n for d in diagonals])
    return sp.coo_matrix((np.linspace(0.5, 1.5, rows.size), (rows, cols)), shape=(n, n))


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("strategy", ["none", "reuse"])
def test_fusedmm_words_equal_table3(c, strategy):
    n, r = 12 * P, 2 * P
    S = circulant(n)
    nnz = S.nnz
    phi = nnz / (n * r)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    obj = build(S, c, r, root=None, permute=False)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    repl = 1 if strategy == "reuse" else 2
    # Paper Table III, "1.5D Sparse Shift, Repl. Reuse": 2p/c + (c - 1) messages and
    # nr (6 phi / c + (c - 1) / p) words; without elision the second kernel's all-gather or
    # reduce-scatter is paid again (section IV-B).
    msgs = 2 * P / c + repl * (c - 1)
    words = n * r * (6 * phi / c + repl * (c - 1) / P)
    if c == P:  # one rank per layer: the shifts are local and send nothing (see module doc)
        msgs, words = msgs - 2 * P / c, words - n * r * 6 * phi / c
    for fn in (obj.fusedmm_a, obj.fusedmm_b):
        fn(A_loc, B_loc, strategy)  # builds S^T if needed; counted under "distribute"
        obj.reset_stats()
        fn(A_loc, B_loc, strategy)
        exact = SparseShift15D.exact_words(fn.__name__, n, n, r, P, c, strategy, nnz=nnz)
        for phase in PHASES:
            assert obj.stats.words(phase) == exact[phase]["words"], phase
            assert obj.stats.words(phase, "messages_sent") == exact[phase]["messages"], phase
        counted = sum(obj.stats.words(ph) for ph in PHASES)
        counted_msgs = sum(obj.stats.words(ph, "messages_sent") for ph in PHASES)
        assert counted == pytest.approx(words, rel=1e-12)
        assert counted_msgs == pytest.approx(msgs, rel=1e-12)


def test_table4_best_c():
    # Table IV: c = sqrt(6 p phi) minimises nr(6 phi / c + (c - 1) / p); with p = 64 and
    # phi = 1/6 that is c = 8, a divisor of p, so the exact model must pick it too.
    p, n, r = 64, 6400, 64
    nnz = n * r / 6
    assert SparseShift15D.table4_best_c("reuse", p, nnz / (n * r)) == pytest.approx(8.0)
    assert SparseShift15D.best_c(n, n, r, p, nnz) == 8
    # A very sparse S makes replication worthless: c = 1 (Table IV's c < 1 case).
    assert SparseShift15D.best_c(n, n, r, p, 10) == 1


# ------------------------------------------------------------------ bad input, every rank
def test_default_r_optional_but_large_enough():
    """r at construction is only a default width: optional, but refused when too small."""
    S, _, _ = problem(10, 10, 2)
    obj = build(S, CS[0], None, root=None)
    assert obj.r is None and obj.r_rule()[0] == P // CS[0]
    with pytest.raises(InputError, match="pass r|r=..."):
        obj.dense("a")
    obj.close()
    with pytest.raises(InputError, match="too small"):
        build(S, 1, P - 1, root=None)
    with pytest.raises(InputError, match="integer"):
        build(S, 1, 2.5, root=None)


def test_bad_c_and_order_raise_everywhere():
    S, _, _ = problem(10, 10, 2)
    with pytest.raises(InputError, match="does not divide"):
        build(S, P + 1, 4 * P, root=None)
    with pytest.raises(InputError, match="integer >= 1"):
        build(S, 0, 4 * P, root=None)
    with pytest.raises(InputError, match="rank order"):
        build(S, 1, 4 * P, root=None, order="diagonal")


def test_fusion_and_unknown_strategy_refused():
    r = width(1, "min")
    S, A, B = problem(10, 10, r)
    obj = build(S, 1, r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    for strategy in ("fusion", "telepathy"):
        with pytest.raises(InputError, match="strategy"):
            obj.fusedmm_a(A_loc, B_loc, strategy)
    assert SparseShift15D.strategies == ("none", "reuse")


def test_global_shape_and_width_mismatch():
    r = width(1, "awkward")
    S, A, B = problem(12, 7, r)
    obj = build(S, 1, r, root=None)
    with pytest.raises(InputError, match="rows, expected 7"):
        obj.scatter("b", A if COMM.rank == 0 else None)
    # r is per call: another width scatters, and one below p/c is refused everywhere.
    assert obj.scatter("a", np.zeros((12, r + 1)) if COMM.rank == 0 else None).r == r + 1
    if P > 1:
        with pytest.raises(InputError, match="too small"):
            obj.scatter("a", np.zeros((12, P - 1)) if COMM.rank == 0 else None)
