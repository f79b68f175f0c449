"""X^T Y and A <-> B transfers of distributed dense blocks: every family, every valid c.

Oracles: numpy's X.T @ Y on the global matrices; for transfers, the block that scatter gives
the destination side (exact equality). Words: xty against :func:`xty_words`; transfers against
an element-by-element count of what leaves each rank, against the closed form
:func:`transfer_words`, and, summed over ranks, against each family's total (module docstring
of distmm.ops.transfer).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from ops_oracle import counted, edge_problem, objects

import distmm
from distmm.core.layout import block_offsets
from distmm.ops.holders import column_range
from distmm.ops.transfer import PHASE as TRANSFER
from distmm.ops.transfer import transfer, transfer_words
from distmm.ops.xty import PHASE as XTY
from distmm.ops.xty import xty, xty_words

COMM = MPI.COMM_WORLD
R = 8


@pytest.mark.parametrize("shape", [(13, 10), (5, 3)])
def test_xty_matches_global_product(shape):
    m, n = shape
    S = edge_problem(m, n, seed=11)
    rng = np.random.default_rng(2)
    for obj in objects(S, r=R):
        for side, rows in (("a", m), ("b", n)):
            # 1.5D dense shifting takes any widths per call; the others are distributed for R.
            r2 = 5 if obj.r is None else R
            X, Y = rng.standard_normal((rows, R)), rng.standard_normal((rows, r2))
            X_loc, Y_loc = obj.scatter(side, X, root=None), obj.scatter(side, Y, root=None)
            obj.stats.reset()
            got = xty(obj, X_loc, Y_loc, side=side)
            np.testing.assert_allclose(got, X.T @ Y, rtol=1e-12, atol=1e-12)
            assert counted(obj, XTY) == xty_words(obj, side, obj.rank, R, r2)


def test_xty_refuses_mixed_sides_and_widths():
    S = edge_problem(9, 6, seed=12)
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    A = obj.scatter("a", np.ones((9, 3)), root=None)
    B = obj.scatter("b", np.ones((6, 3)), root=None)
    if COMM.allreduce(int(A.shape != B.shape)):  # B's block has the wrong rows somewhere
        with pytest.raises(distmm.InputError, match="block of a matrix"):
            xty(obj, np.asarray(A), np.asarray(B), side="a")
    with pytest.raises(distmm.InputError, match="side="):
        xty(obj, np.asarray(A), np.asarray(A))
    if getattr(A, "side", None) is not None:  # typed blocks (distmm.core.dense.DenseBlock)
        assert np.array_equal(xty(obj, A, A), np.full((3, 3), 9.0))  # side read from A
        with pytest.raises(distmm.InputError, match="different sides"):
            xty(obj, A, B)


def moved_elements(obj, to_side: str, r: int) -> int:
    """Elements of this rank's source block held by another rank in the destination layout."""
    src = "b" if to_side == "a" else "a"
    mine = {(int(x), c) for x in obj.dense_rows(src, obj.rank)
            for c in column_range(obj, src, obj.rank, r)}
    stay = {(int(x), c) for x in obj.dense_rows(to_side, obj.rank)
            for c in column_range(obj, to_side, obj.rank, r)}
    return len(mine - stay)


def family_total(obj, m: int, r: int) -> int:
    """Words all ranks send in one transfer, per family (square S)."""
    if obj.name.startswith("15d"):
        return 0
    s = math.isqrt(obj.p // obj.c)
    if obj.name == "25d-dense-replicate":
        return m * (r - int(block_offsets(r, s)[1]))
    assert s == 1 or r % (s * obj.c) == 0
    return m * r * (s - 1) // s


@pytest.mark.parametrize("n", [11, 5])
def test_transfer_between_sides(n):
    S = edge_problem(n, n, seed=13)
    X = np.random.default_rng(3).standard_normal((n, R))
    for obj in objects(S, r=R):
        a_block, b_block = obj.scatter("a", X, root=None), obj.scatter("b", X, root=None)
        for to_side, block, expect in (("a", b_block, a_block), ("b", a_block, b_block)):
            for _ in range(2):  # the second call reuses the plan
                obj.stats.reset()
                got = transfer(obj, block, to_side)
                np.testing.assert_array_equal(got, expect)
                words = counted(obj, TRANSFER)
                assert words == transfer_words(obj, to_side, R, obj.rank)
                assert words["words_sent"] == moved_elements(obj, to_side, R)
                assert COMM.allreduce(words["words_sent"]) == family_total(obj, n, R)


def test_transfer_refuses_rectangular_s_and_wrong_blocks():
    obj = distmm.distribute(edge_problem(7, 9, seed=14), COMM, dtype=np.float64, root=None)
    B = obj.scatter("b", np.ones((9, 2)), root=None)
    with pytest.raises(distmm.InputError, match="square"):
        transfer(obj, B, "a")
    sq = distmm.distribute(edge_problem(9, 9, seed=14), COMM, dtype=np.float64, root=None)
    A = sq.scatter("a", np.ones((9, 2)), root=None)
    with pytest.raises(distmm.InputError, match="dtype"):
        transfer(sq, A.astype(np.float32), "b")
    with pytest.raises(distmm.InputError, match="to_side"):
        transfer(sq, A, "c")
    if getattr(A, "side", None) is not None:  # typed blocks know they are A-side
        with pytest.raises(distmm.InputError, match="different sides"):
            transfer(sq, A, "a")


def test_plain_blocks_of_a_width_given_per_call():
    """Objects distributed without r (where the family allows it) and plain-array blocks: the
    primitives find r from the blocks (summing a row group's column pieces where r is split)."""
    n, r = 10, 8
    S = edge_problem(n, n, seed=16)
    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    for algorithm in distmm.ALGORITHMS:
        for c in grid_cs(algorithm, r):
            try:
                obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, dtype=np.float64,
                                        root=None)
            except distmm.InputError:
                continue  # a family that needs r at construction (the same on every rank)
            X_loc = np.asarray(obj.scatter("b", X, root=None))
            Y_loc = np.asarray(obj.scatter("b", Y, root=None))
            np.testing.assert_allclose(xty(obj, X_loc, Y_loc, side="b"), X.T @ Y, rtol=1e-12,
                                       atol=1e-12)
            np.testing.assert_array_equal(transfer(obj, X_loc, "a"),
                                          obj.scatter("a", X, root=None))
