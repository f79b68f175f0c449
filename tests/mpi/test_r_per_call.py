"""r is a property of each call, in every family: one placed S serves several widths.

Every family and every replication factor valid at this run's p: S is distributed without r,
then used at two different widths (and back), every operation checked against scipy; the words
a call sends equal those of an object built for that width; widths below the family's minimum
are refused on every rank; ``S.dense`` with a hashed fill gives the same matrix at every p.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.core.dense import hashed_normal
from distmm.core.layout import block_offsets
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a)]
OPS = ("sddmm", "spmm-a", "spmm-b")


def widths(obj) -> tuple[int, int]:
    """The family's minimum r, and an awkward larger one its column blocks do not divide."""
    low = obj.r_rule()[0]
    return low, 2 * low + 3


def run_all(obj, S, A, B, rtol):
    """Every op and FusedMM strategy at A's width, against scipy."""
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    assert A_loc.r == A.shape[1] and B_loc.side == "b"
    check("sddmm", obj.gather_values(obj.sddmm(A_loc, B_loc)), S, A, B, rtol)
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc)), S, A, B, rtol)
    check("spmm-b", obj.gather("b", obj.spmm_b(A_loc)), S, A, B, rtol)
    for strategy in obj.strategies:
        check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy)), S, A, B,
              rtol)
        check("fusedmm-b", obj.gather("b", obj.fusedmm_b(A_loc, B_loc, strategy)), S, A, B,
              rtol)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_two_widths_on_one_object(algorithm, c):
    S, _, _ = problem(29, 23, 1, seed=4, empty_rows=True)
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None,
                           dtype=np.float64) as obj:
        assert obj.r is None
        r1, r2 = widths(obj)
        rng = np.random.default_rng(7)
        data = {r: (rng.standard_normal((29, r)), rng.standard_normal((23, r))) for r in (r1, r2)}
        for r in (r1, r2, r1):  # back to the first width: per-r caches must not go stale
            run_all(obj, S, *data[r], rtol=1e-10)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_words_equal_an_object_built_for_that_width(algorithm, c):
    """A call at width r sends exactly what it sent when r was fixed at construction."""
    S, A, B = problem(30, 30, 1, seed=2)
    free = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None)
    r1, r2 = widths(free)
    fixed = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r2, root=None)
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((30, r2)), rng.standard_normal((30, r2))
    A1, B1 = A[:, :r1], B[:, :r1]
    free.fusedmm_a(free.scatter("a", A1, root=None), free.scatter("b", B1, root=None))
    counts = []
    for obj in (free, fixed):
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        obj.fusedmm_b(A_loc, B_loc)  # builds S^T where a strategy needs it
        obj.stats.reset()
        obj.fusedmm_a(A_loc, B_loc)
        obj.fusedmm_b(A_loc, B_loc)
        obj.spmm_a(B_loc)
        counts.append({ph: obj.stats.words(ph) for ph in ("replication", "propagation",
                                                            "reduction")})
    assert counts[0] == counts[1]
    free.close()
    fixed.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_too_small_r_refused_everywhere(algorithm, c):
    S, A, B = problem(20, 20, 1, seed=1)
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None) as obj:
        low = obj.r_rule()[0]
        if low == 1:
            with pytest.raises(InputError, match="too small"):
                obj.dense("a", 0)
            return
        with pytest.raises(InputError, match=f"r >= {low}"):
            obj.dense("a", low - 1)
        with pytest.raises(InputError, match=f"r >= {low}"):
            obj.scatter("b", np.ones((20, low - 1)), root=None)
        with pytest.raises(InputError, match=f"r >= {low}"):
            distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=low - 1, root=None)
        # Plain arrays shaped as a width low-1 layout would give them (some ranks get no
        # column at all): the call learns r = low - 1 from the widths and refuses it.
        co = block_offsets(low - 1, obj._col_blocks())
        b = obj._col_block(COMM.rank)
        w = int(co[b + 1] - co[b])
        A_loc = np.ones((obj.local_shape("a", low)[0], w), dtype=obj.dtype)
        B_loc = np.ones((obj.local_shape("b", low)[0], w), dtype=obj.dtype)
        with pytest.raises(InputError, match=f"r >= {low}"):
            obj.fusedmm_a(A_loc, B_loc)
        # Refused calls leave the object usable.
        out = obj.spmm_a(obj.dense("b", low, fill=1.0))
        assert out.side == "a" and out.r == low


@pytest.mark.parametrize("algorithm,c", CASES)
def test_dense_fill_is_the_same_matrix_at_every_p(algorithm, c):
    m, n = 17, 12
    S, _, _ = problem(m, n, 1, seed=6)
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None,
                           dtype=np.float64) as obj:
        r = widths(obj)[1]
        fill = hashed_normal(seed=11, scale=0.5)
        X = obj.dense("a", r, fill=fill)
        Y = obj.dense("b", r, fill=2.5)
        assert (X.side, X.global_shape, Y.side, Y.global_shape) == ("a", (m, r), "b", (n, r))
        full_x, full_y = obj.gather("a", X), obj.gather("b", Y)
        if COMM.rank == 0:
            # The serial oracle: the fill evaluated on the whole matrix, no p involved.
            np.testing.assert_array_equal(full_x, fill(np.arange(m), np.arange(r)))
            np.testing.assert_array_equal(full_y, np.full((n, r), 2.5))
        # Default r from construction.
        with distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, root=None) as obj2:
            assert obj2.dense("b").global_shape == (n, r)


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_dense_fill_runs_on_bounded_runs_of_rows(chunk, monkeypatch):
    """The fill sees at most max(chunk, one row) entries a call and the block equals the
    whole-matrix fill's rows (what happens to an operand of millions of rows, at any size)."""
    import distmm.algorithms.dense_io as dense_io

    monkeypatch.setattr(dense_io, "FILL_CHUNK", chunk)
    m, n, r = 23, 12, 4
    S, _, _ = problem(m, n, 1, seed=6)
    fill = hashed_normal(seed=2)
    seen = []

    def recording(rows, cols):
        seen.append((rows.size, cols.size))
        return fill(rows, cols)

    with distmm.distribute(S, COMM, root=None, dtype=np.float64) as obj:
        X = obj.dense("a", r, fill=recording)
        want = fill(obj.local_rows("a"), np.arange(r)[obj.dense_cols("a", COMM.rank, r)])
        np.testing.assert_array_equal(X, want)
        assert sum(k for k, _ in seen) == X.shape[0]
        assert all(k * w <= max(chunk, w) for k, w in seen), seen
        bad = lambda rows, cols: np.zeros((rows.size + 1, cols.size))  # noqa: E731
        with pytest.raises(InputError, match="fill returned shape"):
            obj.dense("a", r, fill=bad)


def test_hashed_normal_looks_normal():
    """Mean and spread of the hashed fill (not collective; the same on every rank)."""
    x = hashed_normal(seed=3)(np.arange(400), np.arange(50))
    assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02
    assert not np.array_equal(x, hashed_normal(seed=4)(np.arange(400), np.arange(50)))
