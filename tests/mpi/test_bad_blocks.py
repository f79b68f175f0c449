"""A bad dense block or values array on one rank only: every family raises the same
InputError on every rank before communicating, and stays usable afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.errors import InputError
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
LAST = COMM.Get_size() - 1


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_wrong_block_on_one_rank_raises_everywhere(algorithm):
    r = 8
    S, A, B = problem(20, 20, r)
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), r)[-1]
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    bad = np.hstack([A_loc, A_loc[:, :1]]) if COMM.rank == LAST else A_loc
    with pytest.raises(InputError, match="disagree on r|different widths|columns on this rank"):
        obj.fusedmm_a(bad, B_loc)
    bad = np.vstack([A_loc, A_loc[:1]]) if COMM.rank == LAST else A_loc
    with pytest.raises(InputError, match="rows on this rank"):
        obj.sddmm(bad, B_loc)
    nan = A_loc.copy()
    if COMM.rank == LAST and nan.size:
        nan[0, 0] = np.nan
    if COMM.allreduce(nan.size if COMM.rank == LAST else 1, op=MPI.MIN):
        with pytest.raises(InputError, match="NaN"):
            obj.spmm_b(nan)
    with pytest.raises(InputError, match="dtype"):
        obj.spmm_a(B_loc.astype(np.float64))
    longer = np.append(obj.values, np.ones(1, obj.values.dtype)) if COMM.rank == LAST \
        else obj.values
    with pytest.raises(InputError, match="values must be"):
        obj.spmm_a(B_loc, values=longer)
    # The object still works after the refused calls.
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc)), S, A, B, rtol=3e-4)
