"""1.5D dense shifting: every op and strategy against a serial scipy oracle, at this run's p.

Run under mpiexec at several rank counts by ./tasks test. Each case builds the same global
problem on every rank (fixed seeds), distributes it, gathers the result and compares it with
scipy in float64 on the gathered matrices.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm import costmodel
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CS = [c for c in (1, 2, 3, 4, 8) if P % c == 0]


SHAPES = [(37, 23, 5, False), (24, 24, 1, True), (3, 11, 17, False), (50, 50, 8, True)]


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("m,n,r,empty", SHAPES)
@pytest.mark.parametrize("op", ["sddmm", "spmm-a", "spmm-b"])
def test_kernels_match_scipy(c, m, n, r, empty, op):
    S, A, B = problem(m, n, r, seed=m * 7 + n, empty_rows=empty)
    obj = distmm.distribute(S if COMM.rank == 0 else None, COMM, c=c)
    check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=2e-4)


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("strategy", ["none", "reuse", "fusion"])
@pytest.mark.parametrize("op", ["fusedmm-a", "fusedmm-b"])
@pytest.mark.parametrize("m,n,r,empty", SHAPES[:2] + [(29, 41, 3, False)])
def test_fusedmm_matches_scipy(c, strategy, op, m, n, r, empty):
    S, A, B = problem(m, n, r, seed=m + n, empty_rows=empty)
    obj = distmm.distribute(S if COMM.rank == 0 else None, COMM, c=c)
    check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=3e-4)


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("permute", [True, False])
def test_float64_rank_orders_and_permutation(order, permute):
    S, A, B = problem(31, 31, 6, seed=5)
    c = CS[-1]
    obj = distmm.distribute(S, COMM, c=c, dtype=np.float64, permute=permute, order=order,
                            root=None)
    for op in ("sddmm", "fusedmm-a", "fusedmm-b"):
        check(op, run_and_gather(obj, op, A, B, "reuse"), S, A, B, rtol=1e-10)


def test_strategies_agree_to_rounding():
    S, A, B = problem(40, 40, 16, seed=9)
    obj = distmm.distribute(S, COMM, c=CS[-1], dtype=np.float64, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    outs = [obj.fusedmm_b(A_loc, B_loc, s) for s in ("none", "reuse", "fusion")]
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-12, atol=1e-12)


def test_empty_matrix_and_one_column():
    for m, n in ((8, 1), (13, 9)):
        S = sp.coo_matrix((m, n))
        rng = np.random.default_rng(1)
        A, B = rng.standard_normal((m, 3)), rng.standard_normal((n, 3))
        obj = distmm.distribute(S, COMM, c=CS[-1], root=None)
        for op in ("sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b"):
            check(op, run_and_gather(obj, op, A, B, "reuse"), S, A, B, rtol=1e-6)


def test_sddmm_output_feeds_spmm():
    S, A, B = problem(33, 27, 5, seed=11)
    obj = distmm.distribute(S, COMM, c=CS[-1], dtype=np.float64, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    R = obj.sddmm(A_loc, B_loc)
    out = obj.gather("a", obj.spmm_a(B_loc, values=R))
    check("fusedmm-a", out, S, A, B, rtol=1e-10)
    out = obj.gather("b", obj.spmm_b(A_loc, values=R))
    check("fusedmm-b", out, S, A, B, rtol=1e-10)


# ------------------------------------------------------------------ communication = model
@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("strategy", ["none", "reuse", "fusion"])
def test_fusedmm_words_equal_table3(c, strategy):
    n, r = 12 * P, 8
    S, A, B = problem(n, n, r, density=0.1, seed=2)
    obj = distmm.distribute(S, COMM, c=c, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    for fn in (obj.fusedmm_a, obj.fusedmm_b):
        fn(A_loc, B_loc, strategy)  # builds S^T if needed; counted under "distribute"
        obj.reset_stats()
        fn(A_loc, B_loc, strategy)
        exact = costmodel.exact("15d-dense-shift", "fusedmm_a", n, n, r, P, c, strategy)
        for phase, want in exact.items():
            for kind in ("words_sent", "words_received"):
                assert obj.stats.words(phase, kind) == want["words"], (phase, kind)
            for kind in ("messages_sent", "messages_received"):
                assert obj.stats.words(phase, kind) == want["messages"], (phase, kind)
        msgs, words = costmodel.table3("15d-dense-shift", strategy, n, r, P, c)
        counted = sum(obj.stats.words(ph) for ph in exact)
        counted_msgs = sum(obj.stats.words(ph, "messages_sent") for ph in exact)
        if c < P:
            assert counted == pytest.approx(words, rel=1e-12)
            assert counted_msgs == pytest.approx(msgs, rel=1e-12)
        else:  # c = p: one rank per layer, no shifts are sent (see costmodel)
            assert counted == pytest.approx(words - n * r * (2 if strategy != "fusion" else 1)
                                            / c, rel=1e-12)


@pytest.mark.parametrize("op", ["sddmm", "spmm_a", "spmm_b"])
def test_single_kernel_words(op):
    c = CS[-1]
    m, n, r = 6 * P, 9 * P, 3
    S, A, B = problem(m, n, r, seed=4)
    obj = distmm.distribute(S, COMM, c=c, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    obj.reset_stats()
    distmm.api.run_op(obj, op.replace("_", "-"), A_loc, B_loc)
    exact = costmodel.exact("15d-dense-shift", op, m, n, r, P, c)
    for phase, want in exact.items():
        assert obj.stats.words(phase) == want["words"]
        assert obj.stats.words(phase, "messages_sent") == want["messages"]


# ------------------------------------------------------------------ bad input, every rank
def test_bad_c_raises_everywhere():
    S, _, _ = problem(10, 10, 2)
    with pytest.raises(InputError, match="divisor"):
        distmm.distribute(S, COMM, c=P + 1, root=None)


def test_unknown_algorithm_and_strategy():
    S, A, B = problem(10, 10, 2)
    with pytest.raises(InputError, match="unknown algorithm"):
        distmm.distribute(S, COMM, algorithm="3d-magic", root=None)
    obj = distmm.distribute(S, COMM, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    with pytest.raises(InputError, match="strategy"):
        obj.fusedmm_a(A_loc, B_loc, "telepathy")


def test_global_shape_mismatch():
    S, A, B = problem(12, 7, 3)
    obj = distmm.distribute(S, COMM, root=None)
    with pytest.raises(InputError, match="rows, expected 7"):
        obj.scatter("b", A if COMM.rank == 0 else None)


def test_hand_made_share_is_checked_on_every_rank():
    last = COMM.size - 1
    rows = np.array([0, 1]) if COMM.rank != last else np.array([0, 7])
    share = distmm.CooShare((5, 5), rows, np.array([0, 1]), np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="outside its shape"):
        distmm.distribute(share, COMM)
    share = distmm.CooShare((5, 5), np.array([0, 1]), np.array([0, 1]),
                            np.array([1.0, np.inf if COMM.rank == last else 2.0]))
    with pytest.raises(InputError, match="NaN or infinite"):
        distmm.distribute(share, COMM)
