"""2.5D sparse replicating: every op against a serial scipy oracle, at this run's p.

Run under mpiexec at several rank counts (1 2 3 4 8). Each case builds the same global problem
on every rank (fixed seeds), distributes it, gathers the result and compares it with scipy in
float64. Replication factors c are those for which p/c is a perfect square; r is taken at the
minimum the layout allows (sqrt(pc)) and at an awkward value that does not divide.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm import costmodel
from distmm.algorithms.sparse_replicate_25d import SparseReplicate25D
from distmm.coo import CooShare
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
NAME = SparseReplicate25D.name
CS = [c for c in (1, 2, 3, 4, 8) if P % c == 0 and math.isqrt(P // c) ** 2 == P // c]


def s_of(c: int) -> int:
    return math.isqrt(P // c)


def r_of(c: int, kind: str) -> int:
    """The smallest r the layout allows (one column per layer and grid column), or an
    awkward one that sqrt(pc) does not divide."""
    rmin = s_of(c) * c
    return rmin if kind == "min" else 2 * rmin + 3


def make(S, c, r, root=0, **kw) -> SparseReplicate25D:
    """Distribute S (held by ``root``, or by every rank with root=None)."""
    mine = S if root is None or COMM.rank == root else None
    if NAME in distmm.ALGORITHMS:  # once registered, go through the public entry point
        return distmm.distribute(mine, COMM, algorithm=NAME, c=c, r=r, root=root, **kw)
    return SparseReplicate25D(CooShare.from_scipy(mine, COMM, root=root), COMM, c=c, r=r, **kw)


# m, n, empty rows; (1, 9) has fewer rows than grid rows when s = 2
SHAPES = [(37, 23, False), (24, 24, True), (1, 9, False), (50, 50, True)]


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("rkind", ["min", "odd"])
@pytest.mark.parametrize("m,n,empty", SHAPES)
@pytest.mark.parametrize("op", ["sddmm", "spmm-a", "spmm-b"])
def test_kernels_match_scipy(c, rkind, m, n, empty, op):
    r = r_of(c, rkind)
    S, A, B = problem(m, n, r, seed=m * 7 + n, empty_rows=empty)
    obj = make(S, c, r)
    check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=2e-4)


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("rkind", ["min", "odd"])
@pytest.mark.parametrize("op", ["fusedmm-a", "fusedmm-b"])
@pytest.mark.parametrize("m,n,empty", SHAPES[:2] + [(29, 41, False)])
def test_fusedmm_matches_scipy(c, rkind, op, m, n, empty):
    r = r_of(c, rkind)
    S, A, B = problem(m, n, r, seed=m + n, empty_rows=empty)
    obj = make(S, c, r)
    check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=3e-4)


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("permute", [True, False])
def test_float64_rank_orders_and_permutation(order, permute):
    c = CS[-1]
    r = r_of(c, "odd")
    S, A, B = problem(31, 31, r, seed=5)
    obj = make(S, c, r, root=None, dtype=np.float64, permute=permute, order=order)
    assert obj.describe()["order"] == order
    for op in ("sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b"):
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)


def test_fusedmm_is_sddmm_then_spmm_and_independent_of_c():
    """The one strategy ("none") is exactly SDDMM followed by SpMM; every c agrees."""
    r = max(r_of(c, "min") for c in CS) + 1
    S, A, B = problem(40, 36, r, seed=9)
    results = []
    for c in CS:
        obj = make(S, c, r, root=None, dtype=np.float64)
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        R = obj.sddmm(A_loc, B_loc)
        fa, fb = obj.fusedmm_a(A_loc, B_loc), obj.fusedmm_b(A_loc, B_loc, "none")
        np.testing.assert_array_equal(fa, obj.spmm_a(B_loc, values=R))
        np.testing.assert_array_equal(fb, obj.spmm_b(A_loc, values=R))
        results.append((obj.gather("a", fa), obj.gather("b", fb)))
    if COMM.rank == 0:
        for ga, gb in results[1:]:
            np.testing.assert_allclose(ga, results[0][0], rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(gb, results[0][1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("c", CS)
def test_overlap_changes_no_result_and_no_count(c):
    r = r_of(c, "odd")
    S, A, B = problem(26, 31, r, seed=8)
    runs = []
    for overlap in (False, True):
        obj = make(S, c, r, root=None, overlap=overlap)
        assert obj.describe()["overlap"] is overlap
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        obj.reset_stats()
        outs = [call(obj, op, A_loc, B_loc) for op in OPS]
        runs.append((outs, {ph: dict(obj.stats.counts[ph]) for ph in
                            ("replication", "propagation", "reduction")}))
    for x, y in zip(runs[0][0], runs[1][0], strict=True):
        np.testing.assert_array_equal(x, y)
    assert runs[0][1] == runs[1][1]


def test_empty_matrix_and_thin_shapes():
    c = CS[-1]
    r = r_of(c, "min")
    for m, n in ((8, 1), (13, 9), (1, 1)):
        S = sp.coo_matrix((m, n))
        rng = np.random.default_rng(1)
        A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
        obj = make(S, c, r, root=None)
        for op in ("sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b"):
            check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-6)


def test_values_are_fiber_shares_and_duplicates_sum():
    """Each rank's value order is its 1/c share of its block: together they cover S once."""
    c = CS[-1]
    r = r_of(c, "min")
    S, _, _ = problem(21, 17, r, seed=12)
    dup = sp.coo_matrix((np.concatenate([S.data, S.data[:5]]),
                         (np.concatenate([S.row, S.row[:5]]),
                          np.concatenate([S.col, S.col[:5]]))), shape=S.shape)
    obj = make(dup, c, r, dtype=np.float64)
    share = obj.values.size
    assert share in (obj.block_nnz // c, -(-obj.block_nnz // c))
    assert obj.value_coordinates()[0].size == share
    total = COMM.allreduce(share)
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


def test_sddmm_output_feeds_spmm():
    c = CS[0]
    r = r_of(c, "odd")
    S, A, B = problem(33, 27, r, seed=11)
    obj = make(S, c, r, root=None, dtype=np.float64)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    R = obj.sddmm(A_loc, B_loc)
    check("fusedmm-a", obj.gather("a", obj.spmm_a(B_loc, values=R)), S, A, B, rtol=1e-10)
    check("fusedmm-b", obj.gather("b", obj.spmm_b(A_loc, values=R)), S, A, B, rtol=1e-10)


# ------------------------------------------------------------------ communication = model
OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def call(obj, op, A_loc, B_loc):
    return distmm.api.run_op(obj, op.replace("_", "-"), A_loc, B_loc, "none")


@pytest.mark.parametrize("c", CS)
def test_counted_words_equal_exact_on_every_rank(c):
    """Awkward sizes: each rank's counters equal exact_words at its own grid position."""
    m, n, r = 29, 19, r_of(c, "odd")
    S, A, B = problem(m, n, r, seed=4)
    obj = make(S, c, r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    g = obj.grid
    for op in OPS:
        obj.reset_stats()
        call(obj, op, A_loc, B_loc)
        exact = SparseReplicate25D.exact_words(op, m, n, r, P, c, block_nnz=obj.block_nnz,
                                               i=g.i, j=g.j, k=g.k)
        for phase, want in exact.items():
            assert obj.stats.words(phase) == want["words"], (op, phase)
            assert obj.stats.words(phase, "messages_sent") == want["messages"], (op, phase)
            assert obj.stats.words(phase, "messages_received") == want["messages"], (op, phase)


def uniform_blocks(c: int, b: int = 8, nnz_b: int = 24, seed: int = 2):
    """An n x n matrix (n = s b) whose s x s blocks share one pattern of nnz_b nonzeros, so
    every block has the same count and c divides it (with permute=False)."""
    s = s_of(c)
    rng = np.random.default_rng(seed)
    cells = rng.choice(b * b, size=nnz_b, replace=False)
    pattern = sp.coo_matrix((rng.uniform(0.5, 1.5, nnz_b), (cells // b, cells % b)),
                            shape=(b, b))
    return sp.coo_matrix(sp.kron(np.ones((s, s)), pattern)), s * b


@pytest.mark.parametrize("c", CS)
def test_fusedmm_words_equal_table3(c):
    S, n = uniform_blocks(c)
    s, nnz = s_of(c), S.nnz
    r = 2 * s * c
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    obj = make(S, c, r, root=None, permute=False)
    assert obj.block_nnz == nnz // (s * s) and obj.block_nnz % c == 0
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    # Table III, "2.5D Sparse Replicate, No Elision" (phi = nnz(S) / nr)
    phi = nnz / (n * r)
    paper_words = n * r / math.sqrt(P) * (4 / math.sqrt(c) + 3 * phi * (c - 1) / math.sqrt(P))
    paper_msgs = 4 * math.sqrt(P / c) + 3 * (c - 1)
    assert costmodel.table3(NAME, "none", n, r, P, c, phi) == pytest.approx(
        (paper_msgs, paper_words), rel=1e-12)
    # what this implementation saves (module docstring): the initial all-gather of S's values
    # ((c-1) nnz/p words, c-1 messages), and the 4 no-op shifts when a layer has one rank
    want_words = paper_words - (c - 1) * nnz / P - (4 * n * r / P if s == 1 else 0)
    want_msgs = paper_msgs - (c - 1) - (4 if s == 1 else 0)
    for op in ("fusedmm_a", "fusedmm_b"):
        obj.reset_stats()
        call(obj, op, A_loc, B_loc)
        exact = SparseReplicate25D.exact_words(op, n, n, r, P, c, nnz=nnz)
        for phase, want in exact.items():
            for kind in ("words_sent", "words_received"):
                assert obj.stats.words(phase, kind) == want["words"], (op, phase, kind)
            for kind in ("messages_sent", "messages_received"):
                assert obj.stats.words(phase, kind) == want["messages"], (op, phase, kind)
        counted = sum(obj.stats.words(ph) for ph in exact)
        counted_msgs = sum(obj.stats.words(ph, "messages_sent") for ph in exact)
        assert counted == pytest.approx(want_words, rel=1e-12)
        assert counted_msgs == pytest.approx(want_msgs, rel=1e-12)
        assert sum(want["words"] for want in exact.values()) == pytest.approx(want_words)


# ------------------------------------------------------------------ bad input, every rank
def test_bad_c_raises_everywhere():
    S, _, _ = problem(10, 10, 2)
    with pytest.raises(InputError, match="does not divide|divisor"):
        make(S, P + 1, 8, root=None)
    bad = [c for c in range(1, P + 1) if P % c == 0 and c not in CS]
    if not bad:
        pytest.skip(f"every divisor c of p={P} gives a square p/c")
    with pytest.raises(InputError, match="perfect square"):
        make(S, bad[0], 64, root=None)


def test_r_missing_or_too_small():
    S, _, _ = problem(10, 10, 2)
    c = CS[-1]
    obj = make(S, c, None, root=None)  # r is per call; a default is optional
    with pytest.raises(InputError, match="r=..."):
        obj.dense("a")
    obj.close()
    with pytest.raises(InputError, match=f"r >= {s_of(c) * c}"):
        make(S, c, s_of(c) * c - 1, root=None)
    with pytest.raises(InputError, match="integer"):
        make(S, c, 2.5, root=None)


def test_unknown_strategy_and_global_width():
    c = CS[-1]
    r = r_of(c, "min")
    S, A, B = problem(10, 10, r)
    obj = make(S, c, r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    for strategy in ("reuse", "fusion", "telepathy"):
        with pytest.raises(InputError, match="supports only none"):
            obj.fusedmm_a(A_loc, B_loc, strategy)
    wide = np.hstack([A, A])  # r is per call: a wider matrix scatters
    assert obj.scatter("a", wide if COMM.rank == 0 else None).r == 2 * r
    assert obj.scatter("a", wide, root=None).r == 2 * r
    if r > 1:
        with pytest.raises(InputError, match=f"r >= {r}"):
            obj.scatter("a", A[:, :r - 1], root=None)
    with pytest.raises(InputError, match="rows, expected 10"):
        obj.scatter("b", np.zeros((7, r)) if COMM.rank == 0 else None)


