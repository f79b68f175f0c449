"""close() and the context manager free every communicator a distributed object created.

Every family and valid c: after close the grid's sub-communicators and those the edge
primitives split (their row groups, kept in the object's ``_edges`` part) are MPI.COMM_NULL,
operations raise a clear InputError,
and 12 distribute/close cycles do not grow the set of live communicator handles (MPI reuses a
freed handle; leaked ones would each keep a handle of their own, 12 per kind, more than the
5 the test allows). The tuner closes the candidates it discards.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from oracle import problem

import distmm
from distmm.errors import InputError
from distmm.ops.groups import row_group
from distmm.perf.tuning import tune

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a)]
CYCLES = 12


def handles(obj) -> set[int]:
    """Fortran handles of the communicators an object owns (stable ids of live comms)."""
    return {comm.py2f() for comm in obj._grid_comms() + obj._edges.comms}


@pytest.mark.parametrize("algorithm,c", CASES)
def test_close_frees_grid_and_row_group_comms(algorithm, c):
    S, A, B = problem(12, 9, 1, seed=1)
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None) as obj:
        r = obj.r_rule()[0]
        X = obj.dense("b", r, fill=1.0)
        obj.spmm_a(X)
        row_group(obj, "a")  # the communicator the edge primitives split for the object
        extra = obj._edges.comms[0]
        comms = obj._grid_comms() + [extra]
        assert comms and all(sub != MPI.COMM_NULL for sub in comms)
        assert not obj.closed
    assert obj.closed
    assert all(sub == MPI.COMM_NULL for sub in comms)
    for call in (lambda: obj.spmm_a(X), lambda: obj.sddmm(X, X), lambda: obj.dense("a", r),
                 lambda: obj.scatter("a", np.ones((12, r)), root=None),
                 lambda: obj.as_operator(), lambda: obj.gather("b", X)):
        with pytest.raises(InputError, match="closed"):
            call()
    obj.close()  # closing twice does nothing
    assert COMM.allreduce(1) == P  # the caller's communicator is untouched


@pytest.mark.parametrize("algorithm,c", CASES)
def test_repeated_cycles_do_not_grow_live_handles(algorithm, c):
    S, _, _ = problem(10, 10, 1, seed=2)
    seen: set[int] = set()
    per_object = 0
    for _ in range(CYCLES):
        with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None) as obj:
            mine = handles(obj)
            per_object = len(obj._grid_comms())
            seen |= mine
    # Leaked communicators would give CYCLES * per_object distinct live handles.
    assert per_object >= 2
    assert len(seen) <= 5 * per_object < CYCLES * per_object


def test_tuner_closes_the_candidates_it_discards(monkeypatch):
    built = []
    real = distmm.api.distribute

    def recording(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(distmm.api, "distribute", recording)
    S, _, _ = problem(40, 40, 1, seed=3)
    share = distmm.api.as_coo_share(S, COMM, root=None)
    result = tune(share, COMM, 8, candidates_k=8, repeat=1)
    assert len(built) >= 2 and result.obj in built and not result.obj.closed
    assert all(obj.closed for obj in built if obj is not result.obj)
    result.obj.close()
