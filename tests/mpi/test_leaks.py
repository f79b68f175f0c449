"""No leaks over long runs: repeated FusedMM calls and repeated distribute/close cycles.

Resident memory is read from /proc/self/statm (Linux) after a warm-up (numba compilation,
the first calls' caches, MPI's internal pools) and must grow by less than 5% over the rest of
the run, on every rank. Communicators: MPICH gives a process at most 2048 communicator ids, so
the cycle test, which creates more sub-communicators than that in total (every family at its
largest c, 200 times), can only pass if close() frees them; it also checks that the handles it
sees stay few (MPI reuses a freed handle) and that each object's sub-communicators are
MPI.COMM_NULL after close.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from mpi4py import MPI
from oracle import problem

import distmm
from distmm.algorithms import base
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
GROWTH = 1.05

if not os.path.exists("/proc/self/statm"):
    pytest.skip("resident memory is read from /proc/self/statm (Linux only)",
                allow_module_level=True)


def resident_bytes() -> int:
    """This process's resident set size, after a garbage collection."""
    gc.collect()
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def assert_no_growth(before: int, after: int, what: str) -> None:
    """Every rank's growth is under 5% (checked on every rank, with every rank's numbers)."""
    ratios = COMM.allgather(after / before)
    assert max(ratios) < GROWTH, (f"{what}: resident memory grew by "
                                  + ", ".join(f"{100 * (x - 1):.1f}%" for x in ratios)
                                  + " (per rank)")


@pytest.fixture
def untracked():
    """Stop the harness recording objects during the test (a list of 800 closed objects
    would itself grow memory); this test closes every object it builds."""
    made = base._TRACKED
    base.track_objects(None)
    yield
    base.track_objects(made)


# (family, options, calls): the overlapped shifts (non-blocking requests) run fewer calls, as
# each call is slower there on an oversubscribed machine (polling for the requests).
FUSED = [("15d-dense-shift", {}, 1000), ("15d-dense-shift", {"overlap": True}, 300),
         ("15d-sparse-shift", {}, 1000), ("25d-dense-replicate", {}, 1000),
         ("25d-sparse-replicate", {}, 1000)]


@pytest.mark.parametrize("algorithm,extra,calls", FUSED,
                         ids=[a + ("-overlap" if e else "") for a, e, _ in FUSED])
def test_thousand_fusedmm_calls_do_not_grow_memory(algorithm, extra, calls):
    cs = costmodel.valid_cs(algorithm, P)
    if not cs:
        pytest.skip(f"{algorithm} has no valid c at p={P}")
    c = cs[-1]
    S, A, B = problem(37, 29, 8, seed=3)
    warm = calls // 10
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                           **extra) as obj:
        A_loc = obj.scatter("a", A, root=None)
        B_loc = obj.scatter("b", B, root=None)
        strategy = obj.strategies[-1]
        first = obj.fusedmm_a(A_loc, B_loc, strategy=strategy)
        for _ in range(warm - 1):
            obj.fusedmm_a(A_loc, B_loc, strategy=strategy)
        before = resident_bytes()
        for _ in range(calls - warm):
            out = obj.fusedmm_a(A_loc, B_loc, strategy=strategy)
        after = resident_bytes()
        # The thousandth call still computes what the first did (nothing accumulated).
        np.testing.assert_array_equal(out, first)
        full = obj.gather("a", out)
    assert_no_growth(before, after, f"{calls} FusedMM calls of {algorithm} c={c}")
    if COMM.rank == 0:
        R = S.multiply(A @ B.T).tocsr()
        np.testing.assert_allclose(full, R @ B, rtol=1e-10, atol=1e-12)


def test_two_hundred_distribute_close_cycles(untracked):
    """200 cycles over every family (at its largest valid c, which has the most grid
    communicators): more communicators in total than MPICH's 2048 ids at p > 1, so only
    freeing lets this finish."""
    cases = [(a, costmodel.valid_cs(a, P)[-1]) for a in distmm.ALGORITHMS
             if costmodel.valid_cs(a, P)]
    S, _, _ = problem(23, 17, 1, seed=4)
    cycles, warm = 200, 20
    created = 0
    handles: set[int] = set()
    before = 0
    for cycle in range(cycles):
        if cycle == warm:
            before = resident_bytes()
        for algorithm, c in cases:
            obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None,
                                    dtype=np.float64)
            comms = obj._grid_comms()
            created += len(comms)
            handles |= {sub.py2f() for sub in comms}
            obj.close()
            assert all(sub == MPI.COMM_NULL for sub in comms)
            assert all(sub == MPI.COMM_NULL for sub in obj._grid_comms())
    after = resident_bytes()
    if P > 1:
        # Each cycle made at least 2 sub-communicators per object: beyond MPICH's ids.
        assert created > 2048
    # Freed handles are reused: the distinct handles seen stay those of one cycle or so.
    per_cycle = created // cycles
    assert len(handles) <= 2 * per_cycle + 8, (len(handles), per_cycle)
    assert_no_growth(before, after, f"{cycles} distribute/close cycles")
    assert COMM.allreduce(1) == P  # COMM_WORLD is untouched
