"""Every permutation mode gives the oracle's results in every family (original order out)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm import costmodel

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("permute", ["auto", "blocks", "random", "none"])
@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_results_do_not_depend_on_the_permutation(algorithm, permute):
    r = 9
    S, A, B = problem(23, 31, r, seed=4, empty_rows=True)
    cs = costmodel.valid_cs(algorithm, COMM.Get_size(), r)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=cs[-1], r=r, dtype=np.float64,
                            permute=permute, seed=5)
    expect = "none" if permute == "auto" and COMM.Get_size() == 1 else (
        "blocks" if permute == "auto" else permute)
    assert obj.describe()["permute"] == expect
    for op in distmm.OPS:
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)
