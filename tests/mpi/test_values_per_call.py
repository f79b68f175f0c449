"""Per-call and named edge values for every operation, family and strategy.

A vector passed as ``values=`` must give the oracle's result for S with those values while S's
own values stay as they were; a vector registered by name reaches a stored S^T once, and
alternating between named vectors (ALS: ratings, then ones) moves no further words.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD


def other_values(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.cos(3.0 * rows - cols) + 1.5


def moved_words(obj) -> int:
    """This rank's nonzeros whose owner in S^T's layout is another rank: the words one move of
    values into S^T's order sends (0 for a family that stores one orientation)."""
    if not hasattr(obj, "_owner"):
        return 0
    rows, cols = obj.value_coordinates()
    return int(np.count_nonzero(obj._owner("b", rows, cols) != obj.rank))


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_values_per_call_and_by_name(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    r = 11
    S, A, B = problem(26, 19, r, seed=8, empty_rows=True)
    S = sp.csr_matrix(S)
    S.sum_duplicates()
    coo = S.tocoo()
    S2 = sp.coo_matrix((other_values(coo.row, coo.col), (coo.row, coo.col)), shape=S.shape)
    for c in grid_cs(algorithm, r):
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None)
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        rows, cols = obj.value_coordinates()
        v2 = other_values(obj.row_perm[rows], obj.col_perm[cols])
        own = obj.values.copy()
        obj.set_named_values("other", v2)
        for strategy in cls.strategies:
            for vals in (v2, "other"):
                check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy,
                                                                 values=vals)),
                      S2, A, B, rtol=1e-10)
                check("fusedmm-b", obj.gather("b", obj.fusedmm_b(A_loc, B_loc, strategy,
                                                                 values=vals)),
                      S2, A, B, rtol=1e-10)
            # S's own values are untouched by either
            check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy)),
                  S, A, B, rtol=1e-10)
        np.testing.assert_array_equal(obj.values, own)
        check("sddmm", obj.gather_values(obj.sddmm(A_loc, B_loc, values="other")), S2, A, B,
              rtol=1e-10)
        check("spmm-a", obj.gather("a", obj.spmm_a(B_loc, values="other")), S2, A, B,
              rtol=1e-10)
        check("spmm-b", obj.gather("b", obj.spmm_b(A_loc, values="other")), S2, A, B,
              rtol=1e-10)


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_named_vectors_move_once_arrays_every_call(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    r = 8
    S, A, B = problem(24, 24, r, seed=9)
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), r)[0]
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                            root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    ones = np.ones_like(obj.values)
    obj.set_named_values("ratings", obj.values)
    obj.set_named_values("ones", ones)
    strategy = cls.strategies[-1]
    obj.fusedmm_a(A_loc, B_loc, strategy)  # builds S^T where the strategy uses it
    obj.stats.reset()
    for name in ("ratings", "ones"):  # first use: moved once each, where S^T is used
        obj.fusedmm_a(A_loc, B_loc, strategy, values=name)
    uses_st = algorithm != "25d-sparse-replicate" and strategy == "reuse"
    per_move = moved_words(obj) if uses_st else 0
    assert obj.stats.words("values") == 2 * per_move
    obj.stats.reset()
    for _ in range(3):
        for name in ("ratings", "ones"):
            obj.fusedmm_a(A_loc, B_loc, strategy, values=name)
    assert obj.stats.words("values") == 0
    obj.stats.reset()
    obj.fusedmm_a(A_loc, B_loc, strategy, values=ones)
    obj.fusedmm_a(A_loc, B_loc, strategy, values=ones)
    assert obj.stats.words("values") == 2 * per_move


def test_unknown_name_is_refused_everywhere():
    S, A, B = problem(10, 10, 4, seed=1)
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    with pytest.raises(distmm.InputError, match="no value vector named 'x'"):
        obj.fusedmm_a(A_loc, B_loc, values="x")
    with pytest.raises(distmm.InputError, match="values must be a 1-D array"):
        obj.set_named_values("bad", np.ones(obj.values.size + 1))
