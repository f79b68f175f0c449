"""Typed distributed dense blocks: side, global shape and owner, in every family.

A block of the wrong side or of another distribution is refused on every rank (the square-S
2.5D case where an A-side and a B-side block have the same local shape, exactly); numpy
arithmetic keeps the type only where the result is still a block of the layout; mpi4py buffer
methods take blocks; ``out=`` buffers are validated and reused; the operator view.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.core.dense import DenseBlock
from distmm.errors import InputError
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a)]


def setup(algorithm, c, m=24, n=24, seed=0, checks="once", **kw):
    S, _, _ = problem(m, n, 1, seed=seed)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            checks=checks, **kw)
    r = obj.r_rule()[0] + 2
    rng = np.random.default_rng(seed + 1)
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    return obj, S, A, B, obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)


@pytest.mark.parametrize("checks", ["once", "always"])
@pytest.mark.parametrize("algorithm,c", CASES)
def test_wrong_side_refused_everywhere(algorithm, c, checks):
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c, checks=checks)
    obj.spmm_a(B_loc)  # the first call of each kind runs the full checks; then the cheap ones
    obj.fusedmm_a(A_loc, B_loc)
    for _ in range(2):
        with pytest.raises(InputError, match="side-'a' block"):
            obj.spmm_a(A_loc)
        with pytest.raises(InputError, match="side-'b' block"):
            obj.fusedmm_a(B_loc, B_loc)
        with pytest.raises(InputError, match="side-'a' block"):
            obj.sddmm(A_loc, A_loc)
    with pytest.raises(InputError, match="side"):
        obj.gather("b", A_loc)
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc)), S, A, B, rtol=1e-10)
    obj.close()


def test_square_25d_a_and_b_blocks_have_one_shape_but_are_told_apart():
    """The case the plain arrays could not catch: 2.5D dense replicating, square S, with every
    row block the same size, so an A-side and a B-side block have the same local shape."""
    algorithm = "25d-dense-replicate"
    c = costmodel.valid_cs(algorithm, P)[0]
    s = math.isqrt(P // c)
    n = 6 * s * c
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c, m=n, n=n, seed=3)
    assert A_loc.shape == B_loc.shape
    differ = COMM.allreduce(int(not np.array_equal(obj.dense_rows("a", COMM.rank),
                                                   obj.dense_rows("b", COMM.rank))))
    assert differ > 0 or s == 1  # with s > 1 they hold different rows on some rank
    # As plain arrays the confusion goes through unnoticed (a wrong result when they differ);
    # as typed blocks it is refused on every rank.
    obj.spmm_a(np.asarray(A_loc))
    with pytest.raises(InputError, match="side-'a' block .* needs a side-'b' block"):
        obj.spmm_a(A_loc)
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc)), S, A, B, rtol=1e-10)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_blocks_of_another_distribution_refused(algorithm, c):
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c)
    other, *_ = setup(algorithm, c, seed=0, permute=True)  # same layout: accepted
    other2 = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                               seed=5)  # another permutation: another layout
    check("spmm-a", other.gather("a", other.spmm_a(B_loc)), S, A, B, rtol=1e-10)
    if m_rows_differ(obj, other2):
        with pytest.raises(InputError, match="another distributed object"):
            other2.spmm_a(B_loc)
    for o in (obj, other, other2):
        o.close()


def m_rows_differ(a, b) -> bool:
    """Whether two objects' B-side layouts differ on any rank (collective)."""
    same = np.array_equal(a.local_rows("b"), b.local_rows("b"))
    return bool(COMM.allreduce(int(not same)))


def test_numpy_semantics_of_blocks():
    algorithm, c = CASES[0]
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c)
    for res in (A_loc + A_loc, 2 * A_loc, np.exp(A_loc), A_loc.copy(), -A_loc):
        assert isinstance(res, DenseBlock) and res.side == "a" and res.owner is obj
        assert res.global_shape == A_loc.global_shape
    X = A_loc.copy()
    X[...] = 0
    same = X
    X += 1.0  # in place: the same object, still typed (as numpy returns out=)
    assert X is same and isinstance(X, DenseBlock) and X.side == "a" and np.all(X == 1.0)
    assert type(np.concatenate([A_loc, A_loc])) is np.ndarray
    # Reductions and reshaping give plain arrays / scalars: no stale side.
    total = np.sum(A_loc)
    assert not isinstance(total, DenseBlock) and np.ndim(total) == 0
    for res in (A_loc.sum(axis=0), A_loc[:, :1], A_loc.T, A_loc[0], A_loc @ np.ones(A.shape[1]),
                np.asarray(A_loc)):
        assert not isinstance(res, DenseBlock) or not res.typed
        assert type(res) is np.ndarray
    assert float(COMM.allreduce(float(np.sum(A_loc)))) == pytest.approx(float(A.sum()))
    with pytest.raises(InputError, match="combine"):
        A_loc + B_loc
    # mpi4py buffer methods take blocks (upper-case, no pickle).
    Y = obj.dense("a", A_loc.r)
    COMM.Allreduce(A_loc, Y, op=MPI.SUM)
    np.testing.assert_allclose(np.asarray(Y), COMM.allreduce(np.asarray(A_loc)))
    assert isinstance(Y, DenseBlock) and Y.side == "a"
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_out_buffers_reused_and_validated(algorithm, c):
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c, m=19, n=26, seed=8)
    r = A_loc.r
    out_a, out_b = obj.dense("a", r), obj.dense("b", r)
    vals = np.empty_like(obj.values)
    for _ in range(2):  # reused across calls; the result is the buffer itself
        for strategy in obj.strategies:
            assert obj.fusedmm_a(A_loc, B_loc, strategy, out=out_a) is out_a
            check("fusedmm-a", obj.gather("a", out_a), S, A, B, rtol=1e-10)
            assert obj.fusedmm_b(A_loc, B_loc, strategy, out=out_b) is out_b
            check("fusedmm-b", obj.gather("b", out_b), S, A, B, rtol=1e-10)
        assert obj.spmm_a(B_loc, out=out_a) is out_a
        check("spmm-a", obj.gather("a", out_a), S, A, B, rtol=1e-10)
        assert obj.spmm_b(A_loc, out=out_b) is out_b
        check("spmm-b", obj.gather("b", out_b), S, A, B, rtol=1e-10)
        assert obj.sddmm(A_loc, B_loc, out=vals) is vals
        check("sddmm", obj.gather_values(vals), S, A, B, rtol=1e-10)
    plain = np.zeros(out_a.shape)
    res = obj.spmm_a(B_loc, out=plain)
    assert res.side == "a" and np.shares_memory(res, plain)
    with pytest.raises(InputError, match="out=.*side-'b' block"):
        obj.spmm_a(B_loc, out=out_b)
    with pytest.raises(InputError, match="out=.*dtype"):
        obj.spmm_b(A_loc, out=np.zeros(out_b.shape, dtype=np.float32))
    with pytest.raises(InputError, match="out= shares memory"):
        obj.fusedmm_a(A_loc, B_loc, out=A_loc)
    with pytest.raises(InputError, match="out= values"):
        obj.sddmm(A_loc, B_loc, out=np.zeros(obj.values.size + 1))
    wider = obj.dense("a", r + 1)
    with pytest.raises(InputError, match="widths r|disagree on r|columns"):
        obj.spmm_a(B_loc, out=wider)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_operator_view(algorithm, c):
    obj, S, A, B, A_loc, B_loc = setup(algorithm, c, m=21, n=17, seed=2)
    op = obj.as_operator()
    assert op.shape == (21, 17) and op.dtype == np.float64
    assert op.T.shape == op.H.shape == (17, 21) and op.T.T.shape == op.shape
    check("spmm-a", obj.gather("a", op.matvec(B_loc)), S, A, B, rtol=1e-10)
    check("spmm-a", obj.gather("a", op @ B_loc), S, A, B, rtol=1e-10)
    check("spmm-b", obj.gather("b", op.rmatvec(A_loc)), S, A, B, rtol=1e-10)
    check("spmm-b", obj.gather("b", op.T.matvec(A_loc)), S, A, B, rtol=1e-10)
    check("spmm-a", obj.gather("a", op.H.rmatvec(B_loc)), S, A, B, rtol=1e-10)
    # Pinned values: the operator of 2 S.
    op2 = obj.as_operator(values=2.0 * obj.values)
    got = obj.gather("a", op2.matvec(B_loc))
    if COMM.rank == 0:
        np.testing.assert_allclose(got, 2.0 * (sp.csr_matrix(S) @ B), rtol=1e-10, atol=1e-10)
    with pytest.raises(InputError, match="side"):
        op.matvec(A_loc)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_conjugate_gradient_with_the_operator_view(algorithm, c):
    """docs/api.md's CG on (S^T S + lam I) X = S^T Y, against a dense serial solve."""
    m, n, lam = 26, 18, 0.5
    S, _, _ = problem(m, n, 1, seed=9)
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None,
                           dtype=np.float64) as obj:
        k = obj.r_rule()[0]
        Yg = np.random.default_rng(4).standard_normal((m, k))
        Y = obj.scatter("a", Yg, root=None)
        op = obj.as_operator()

        def normal(X):
            return op.rmatvec(op.matvec(X)) + lam * X

        def dot(X, Z):
            return COMM.allreduce(np.einsum("ij,ij->j", X, Z))

        X = obj.dense("b", k)
        R = op.rmatvec(Y) - normal(X)
        P_ = R.copy()
        rs = dot(R, R)
        for _ in range(n + 5):
            Q = normal(P_)
            alpha = rs / dot(P_, Q)
            X += alpha * P_
            R -= alpha * Q
            rs_new = dot(R, R)
            if rs_new.max() < 1e-26:
                break
            P_ = R + (rs_new / rs) * P_
            rs = rs_new
        assert isinstance(X, DenseBlock) and X.side == "b"
        got = obj.gather("b", X)
        if COMM.rank == 0:
            Sd = sp.csr_matrix(S).toarray()
            ref = np.linalg.solve(Sd.T @ Sd + lam * np.eye(n), Sd.T @ Yg)
            np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-9)
