"""New values of S without redistributing: every family, every valid c, every operation.

The transposed copy of S (where a family keeps one) is built before the values change, so the
test proves the new values reach it too.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm

COMM = MPI.COMM_WORLD


def new_values(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return np.sin(rows + 2.0 * cols) + 2.0


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_set_values_reaches_every_copy_of_s(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    r = 19  # at least one column per rank of a layer for every family up to p = 8; awkward
    S, A, B = problem(30, 27, r, seed=3)
    S2 = sp.csr_matrix(S)
    S2.sum_duplicates()
    coo = S2.tocoo()
    S2 = sp.coo_matrix((new_values(coo.row, coo.col), (coo.row, coo.col)), shape=S.shape)
    for c in grid_cs(algorithm, r):
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None)
        A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
        for strategy in cls.strategies:  # builds every copy of S the family keeps
            obj.fusedmm_a(A_loc, B_loc, strategy)
            obj.fusedmm_b(A_loc, B_loc, strategy)
        rows, cols = obj.value_coordinates()
        obj.set_values(new_values(obj.row_perm[rows], obj.col_perm[cols]))
        for strategy in cls.strategies:
            check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy)), S2, A,
                  B, rtol=1e-10)
            check("fusedmm-b", obj.gather("b", obj.fusedmm_b(A_loc, B_loc, strategy)), S2, A,
                  B, rtol=1e-10)
        check("sddmm", obj.gather_values(obj.sddmm(A_loc, B_loc)), S2, A, B, rtol=1e-10)
        check("spmm-a", obj.gather("a", obj.spmm_a(B_loc)), S2, A, B, rtol=1e-10)
        check("spmm-b", obj.gather("b", obj.spmm_b(A_loc)), S2, A, B, rtol=1e-10)
