"""Every permutation mode gives the oracle's results in every family (original order out)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm.core.operations import CLI_OPS
from distmm.perf import costmodel

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
    if getattr(obj, "partition", None) is not None:  # the sparsity-aware family's default
        assert permute == "auto" and algorithm == "15d-sparse-aware"
        expect = "partition"
    assert obj.stats.describe()["permute"] == expect
    for op in CLI_OPS:  # the command line's spellings
        check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_an_object_shares_its_layout(algorithm):
    """permute=<object>: a second matrix of the same shape takes the first's permutations
    (whatever its own nonzeros would choose), so dense blocks of one are blocks of the
    other; its results still match the oracle. Another shape is refused on every rank."""
    r = 9
    S, A, B = problem(23, 31, r, seed=4, empty_rows=True)
    T, _, _ = problem(23, 31, r, seed=8, empty_rows=False)
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), r)[-1]
    first = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                              permute="blocks", seed=5)
    second = distmm.distribute(T, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                               permute=first)
    assert np.array_equal(second.row_perm, first.row_perm)
    assert np.array_equal(second.col_perm, first.col_perm)
    for side in "ab":
        assert np.array_equal(second.local_rows(side), first.local_rows(side))
    for op in CLI_OPS:  # the command line's spellings
        check(op, run_and_gather(second, op, A, B), T, A, B, rtol=1e-10)
    U, _, _ = problem(24, 31, r, seed=8)
    with pytest.raises(distmm.InputError, match="layout can only be shared"):
        distmm.distribute(U, COMM, algorithm=algorithm, c=c, r=r, permute=first)
