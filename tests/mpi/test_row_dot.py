"""Row-wise dot products of two distributed dense blocks: every family, every valid c.

Oracle: every rank checks its local rows against the global matrices' rows directly
(``obj.local_rows`` maps them to original rows). Counted words equal
:func:`distmm.ops.rowwise.row_dot_words` exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from oracle import problem

import distmm
from distmm.ops.rowwise import PHASE, row_dot, row_dot_words

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("shape", [(30, 27), (5, 41)])
@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_row_dot_matches_global_rows(algorithm, shape):
    """The values prove the groups right: a wrong group sums the wrong column pieces."""
    m, n = shape
    r = 17
    S, _, _ = problem(m, n, r, seed=5)
    rng = np.random.default_rng(1)
    pairs = {"a": (rng.standard_normal((m, r)), rng.standard_normal((m, r))),
             "b": (rng.standard_normal((n, r)), rng.standard_normal((n, r)))}
    for c in grid_cs(algorithm, r):
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None)
        for side, (Xg, Yg) in pairs.items():
            X_loc = obj.scatter(side, Xg, root=None)
            Y_loc = obj.scatter(side, Yg, root=None)
            obj.stats.reset()
            got = row_dot(obj, side, X_loc, Y_loc)
            rows = obj.local_rows(side)
            np.testing.assert_allclose(got, np.einsum("ij,ij->i", Xg[rows], Yg[rows]),
                                       rtol=1e-12, atol=1e-12)
            words = row_dot_words(obj, side, obj.rank)
            assert obj.stats.words(PHASE) == words
            assert obj.stats.words(PHASE, "words_received") == words
            if algorithm == "15d-dense-shift":
                assert words == 0  # whole rows on every rank: nothing to combine


def test_row_dot_refuses_mismatched_blocks():
    S, X, _ = problem(12, 12, 4, seed=2)
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    X_loc = obj.scatter("a", X, root=None)
    with pytest.raises(distmm.InputError, match="row_dot needs"):
        row_dot(obj, "a", X_loc, X_loc[:, :2])
