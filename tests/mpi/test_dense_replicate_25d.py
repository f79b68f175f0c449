"""2.5D dense replicating: every op and strategy against a serial scipy oracle, at this run's p.

Run under mpiexec at several rank counts (./tasks test: 1 2 3 4 8). Each case builds the same
global problem on every rank (fixed seeds), distributes it on an s x s x c grid, gathers the
result and compares it with scipy in float64. Replication factors whose p/c is not a perfect
square (or that do not divide p) are skipped on every rank alike.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm.algorithms.dense_replicate_25d import DenseReplicate25D
from distmm.coo import CooShare
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
C_ALL = (1, 2, 3, 4, 8)


def valid(c: int) -> bool:
    return P % c == 0 and math.isqrt(P // c) ** 2 == P // c


CS = [c for c in C_ALL if valid(c)]
C_SHIFT = CS[0]  # the smallest valid c: the most ranks per layer, so shifts happen if they can


def need(c: int) -> int:
    """Skip (on every rank: it depends on p only) unless c fits; return s = sqrt(p/c)."""
    if not valid(c):
        pytest.skip(f"c={c} needs p/c to be a perfect square; p={P}")
    return math.isqrt(P // c)


def build(S, c: int, r: int, root: int | None = 0, **kw) -> DenseReplicate25D:
    share = CooShare.from_scipy(S if root is None or COMM.rank == root else None, COMM,
                                root=root)
    return DenseReplicate25D(share, COMM, c=c, r=r, **kw)


# r = None means the minimum the layout allows, r = s = sqrt(p/c); the others are awkward
# (not multiples of s, so the column blocks differ in width).
SHAPES = [(37, 23, None, False), (24, 24, 5, True), (3, 11, 7, False), (50, 50, 8, True)]


@pytest.mark.parametrize("c", C_ALL)
@pytest.mark.parametrize("m,n,r,empty", SHAPES)
@pytest.mark.parametrize("op", ["sddmm", "spmm-a", "spmm-b"])
def test_kernels_match_scipy(c, m, n, r, empty, op):
    s = need(c)
    r = s if r is None else r
    S, A, B = problem(m, n, r, seed=m * 7 + n, empty_rows=empty)
    obj = build(S, c, r)
    check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=2e-4)


@pytest.mark.parametrize("c", C_ALL)
@pytest.mark.parametrize("strategy", ["none", "reuse"])
@pytest.mark.parametrize("op", ["fusedmm-a", "fusedmm-b"])
@pytest.mark.parametrize("m,n,r,empty", SHAPES[:2] + [(29, 41, 3, False)])
def test_fusedmm_matches_scipy(c, strategy, op, m, n, r, empty):
    s = need(c)
    r = max(s, r) if r is not None else s
    S, A, B = problem(m, n, r, seed=m + n, empty_rows=empty)
    obj = build(S, c, r)
    check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=3e-4)


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("permute", [True, False])
def test_float64_rank_orders_and_permutation(order, permute):
    S, A, B = problem(31, 26, 6, seed=5)
    obj = build(S, C_SHIFT, 6, root=None, dtype=np.float64, permute=permute, order=order)
    for op in ("sddmm", "spmm-a", "spmm-b"):
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)
    for strategy in ("none", "reuse"):
        for op in ("fusedmm-a", "fusedmm-b"):
            check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=1e-10)


def test_strategies_agree_to_rounding():
    S, A, B = problem(40, 36, 16, seed=9)
    for c in CS:
        obj = build(S, c, 16, root=None, dtype=np.float64)
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        for fn in (obj.fusedmm_a, obj.fusedmm_b):
            none, reuse = fn(A_loc, B_loc, "none"), fn(A_loc, B_loc, "reuse")
            np.testing.assert_allclose(reuse, none, rtol=1e-12, atol=1e-12)


def test_empty_matrix_and_one_column():
    r = max(3, math.isqrt(P // C_SHIFT))
    rng = np.random.default_rng(1)
    for m, n in ((8, 1), (13, 9), (1, 5)):
        S = sp.coo_matrix((m, n))
        A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
        obj = build(S, C_SHIFT, r, root=None)
        for op in ("sddmm", "spmm-a", "spmm-b"):
            check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-6)
        for strategy in ("none", "reuse"):
            for op in ("fusedmm-a", "fusedmm-b"):
                check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=1e-6)
    # one column of S, full of nonzeros
    S = sp.coo_matrix(np.ones((11, 1)))
    A, B = rng.standard_normal((11, r)), rng.standard_normal((1, r))
    obj = build(S, C_SHIFT, r, root=None)
    for op in ("sddmm", "spmm-b", "fusedmm-a", "fusedmm-b"):
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-5)


def test_sddmm_output_feeds_spmm():
    S, A, B = problem(33, 27, 5, seed=11)
    obj = build(S, C_SHIFT, 5, root=None, dtype=np.float64)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    R = obj.sddmm(A_loc, B_loc)
    out = obj.gather("a", obj.spmm_a(B_loc, values=R))
    check("fusedmm-a", out, S, A, B, rtol=1e-10)
    out = obj.gather("b", obj.spmm_b(A_loc, values=R))
    check("fusedmm-b", out, S, A, B, rtol=1e-10)
    # SDDMM with explicit values equals SDDMM with S's own values scaled
    R2 = obj.sddmm(A_loc, B_loc, values=2.0 * obj.values)
    np.testing.assert_allclose(R2, 2.0 * R, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("c", C_ALL)
def test_layout_is_table2_with_skew(c):
    """A per Table II, B and S with Algorithm 2's skew; scatter/gather round trip."""
    s = need(c)
    m, n, r = 5 * s * c + 3, 4 * s * c + 1, s + 2
    S, A, B = problem(m, n, r, seed=7)
    obj = build(S, c, r, root=None, permute=False)
    g = obj.grid
    a_off = np.arange(s * c + 1) * m // (s * c)
    b_off = np.arange(s * c + 1) * n // (s * c)
    r_off = np.arange(s + 1) * r // s
    blk_a, blk_b = g.i * c + g.k, ((g.i + g.j) % s) * c + g.k
    np.testing.assert_array_equal(obj.dense_rows("a", COMM.rank),
                                  np.arange(a_off[blk_a], a_off[blk_a + 1]))
    np.testing.assert_array_equal(obj.dense_rows("b", COMM.rank),
                                  np.arange(b_off[blk_b], b_off[blk_b + 1]))
    cols = obj.dense_cols("a", COMM.rank)
    assert (cols.start, cols.stop) == (r_off[g.j], r_off[g.j + 1])
    rows, cols = obj.value_coordinates()
    assert np.all((rows >= a_off[g.i * c]) & (rows < a_off[g.i * c + c]))
    assert np.all((cols >= b_off[blk_b]) & (cols < b_off[blk_b + 1]))
    for side, X in (("a", A), ("b", B)):
        loc = obj.scatter(side, X if COMM.rank == 0 else None)
        back = obj.gather(side, loc)
        if COMM.rank == 0:
            np.testing.assert_array_equal(back, X.astype(np.float32))
    total = COMM.allreduce(obj.values.size)
    assert total == sp.csr_matrix(S).nnz
    desc = obj.describe()
    assert (desc["algorithm"], desc["c"], desc["s"], desc["r"]) == (
        "25d-dense-replicate", c, s, r)


# ------------------------------------------------------------------ communication = model
def balanced(c, s, t=6, r_per=4, seed=2):
    """m = n = s*c*t, r = s*r_per, and every S block of every orientation with equal nnz."""
    rng = np.random.default_rng(seed)
    pattern = sp.random(t, t, density=0.3, random_state=rng, format="csr")
    pattern.data[:] = rng.uniform(0.5, 1.5, pattern.nnz)
    S = sp.kron(sp.csr_matrix(np.ones((s * c, s * c))), pattern, format="coo")
    n, r = s * c * t, s * r_per
    return S, rng.standard_normal((n, r)), rng.standard_normal((n, r)), n, r


def table3_25d_dense_replicate(n, r, p, c, nnz, strategy):
    """Paper Table III, row "2.5D Dense Replicate, Repl. Reuse": (messages, words), m = n.

    "none" is not a row of Table III; as in section V-A it adds the second fiber collective
    (the reduce-scatter of A): c - 1 messages, nr (c - 1) / p words (the cost whose minimum is
    Table IV's c = (p (1 + 3 phi)^2 / 4)^(1/3))."""
    phi = nnz / (n * r)
    msgs = 4 * math.sqrt(p / c) + (c - 1)
    words = n * r / math.sqrt(p * c) * (6 * phi + 2 + c ** 1.5 / math.sqrt(p)
                                        - math.sqrt(c) / math.sqrt(p))
    if strategy == "none":
        msgs += c - 1
        words += n * r * (c - 1) / p
    return msgs, words


def assert_counts(obj, exact):
    for phase, want in exact.items():
        for kind in ("words_sent", "words_received"):
            assert obj.stats.words(phase, kind) == want["words"], (phase, kind)
        for kind in ("messages_sent", "messages_received"):
            assert obj.stats.words(phase, kind) == want["messages"], (phase, kind)


@pytest.mark.parametrize("c", C_ALL)
@pytest.mark.parametrize("strategy", ["none", "reuse"])
def test_fusedmm_words_equal_exact_and_table3(c, strategy):
    s = need(c)
    S, A, B, n, r = balanced(c, s)
    nnz = S.nnz
    obj = build(S, c, r, root=None, permute=False)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    for op, fn in (("fusedmm_a", obj.fusedmm_a), ("fusedmm_b", obj.fusedmm_b)):
        fn(A_loc, B_loc, strategy)  # builds S^T if needed; counted under "distribute"
        obj.reset_stats()
        fn(A_loc, B_loc, strategy)
        z = obj.shifted_nnz(op, strategy)
        assert z == (s * nnz // P if s > 1 else 0)
        exact = DenseReplicate25D.exact_words(op, n, n, r, P, c, strategy, shifted_nnz=z)
        assert exact == DenseReplicate25D.exact_words(op, n, n, r, P, c, strategy, nnz=nnz)
        assert_counts(obj, exact)
        msgs, words = table3_25d_dense_replicate(n, r, P, c, nnz, strategy)
        counted = sum(obj.stats.words(ph) for ph in exact)
        counted_msgs = sum(obj.stats.words(ph, "messages_sent") for ph in exact)
        if s > 1:
            assert counted == pytest.approx(words, rel=1e-12)
            assert counted_msgs == pytest.approx(msgs, rel=1e-12)
        else:  # c = p: one rank per layer, the 4 sqrt(p/c) shifts are not sent
            phi = nnz / (n * r)
            assert counted == pytest.approx(words - n * r / math.sqrt(P * c) * (6 * phi + 2),
                                            rel=1e-12, abs=1e-9)
            assert counted_msgs == msgs - 4


@pytest.mark.parametrize("c", C_ALL)
@pytest.mark.parametrize("op,strategy", [("sddmm", "none"), ("spmm_a", "none"),
                                         ("spmm_b", "none"), ("fusedmm_a", "none"),
                                         ("fusedmm_a", "reuse"), ("fusedmm_b", "none"),
                                         ("fusedmm_b", "reuse")])
def test_every_op_words_equal_exact_unbalanced(c, op, strategy):
    """m != n, a random S (blocks of different nnz): exact_words with this rank's shifted nnz."""
    s = need(c)
    m, n, r = 3 * s * c, 5 * s * c, 3 * s
    S, A, B = problem(m, n, r, density=0.3, seed=4)
    obj = build(S, c, r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    z = obj.shifted_nnz(op, strategy)  # builds S^T if needed
    obj.reset_stats()
    distmm.api.run_op(obj, op.replace("_", "-"), A_loc, B_loc, strategy)
    assert_counts(obj, DenseReplicate25D.exact_words(op, m, n, r, P, c, strategy,
                                                     shifted_nnz=z))
    assert obj.stats.words("distribute") == 0


# ------------------------------------------------------------------ bad input, every rank
def test_bad_grid_parameters_raise_everywhere():
    S, _, _ = problem(10, 10, 2)
    share = CooShare.from_scipy(S, COMM, root=None)
    with pytest.raises(InputError, match="does not divide"):
        DenseReplicate25D(share, COMM, c=P + 1, r=8)
    with pytest.raises(InputError, match="integer >= 1"):
        DenseReplicate25D(share, COMM, c=0, r=8)
    not_square = [c for c in range(1, P + 1) if P % c == 0 and not valid(c)]
    for c in not_square:
        with pytest.raises(InputError, match="perfect square"):
            DenseReplicate25D(share, COMM, c=c, r=8)
    with pytest.raises(InputError, match="rank order"):
        DenseReplicate25D(share, COMM, c=C_SHIFT, r=8, order="diagonal")


def test_bad_r_raises_everywhere():
    S, _, _ = problem(10, 10, 2)
    share = CooShare.from_scipy(S, COMM, root=None)
    s = math.isqrt(P // C_SHIFT)
    obj = DenseReplicate25D(share, COMM, c=C_SHIFT)  # r is per call; a default is optional
    with pytest.raises(InputError, match="r=..."):
        obj.dense("b")
    obj.close()
    with pytest.raises(InputError, match=f"r >= {s}"):
        DenseReplicate25D(share, COMM, c=C_SHIFT, r=s - 1)
    with pytest.raises(InputError, match="must be an integer"):
        DenseReplicate25D(share, COMM, c=C_SHIFT, r=4.5)


def test_unknown_and_impossible_strategies():
    S, A, B = problem(10, 10, 4)
    obj = build(S, C_SHIFT, 4, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    with pytest.raises(InputError, match="local kernel fusion is not possible"):
        obj.fusedmm_a(A_loc, B_loc, "fusion")
    with pytest.raises(InputError, match="strategy"):
        obj.fusedmm_b(A_loc, B_loc, "telepathy")
    with pytest.raises(InputError, match="unknown op"):
        DenseReplicate25D.exact_words("spgemm", 8, 8, 4, P, C_SHIFT)
    assert DenseReplicate25D.strategies == ("none", "reuse")


def test_global_width_and_shape_mismatch():
    S, A, B = problem(12, 7, 4)
    obj = build(S, C_SHIFT, 4, root=None)
    # r is per call: other widths scatter, as long as r >= s.
    assert obj.scatter("a", A[:, :3] if COMM.rank == 0 else None).r == 3
    assert obj.scatter("b", np.ones((7, 5)), root=None).r == 5
    s = math.isqrt(P // C_SHIFT)
    if s > 1:
        with pytest.raises(InputError, match=f"r >= {s}"):
            obj.scatter("b", np.ones((7, s - 1)), root=None)
    with pytest.raises(InputError, match="rows, expected 7"):
        obj.scatter("b", A if COMM.rank == 0 else None)
