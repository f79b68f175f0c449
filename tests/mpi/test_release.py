"""A distributed matrix lets its memory go when the user lets it go, and close() empties it.

Every family and valid c. With Python's cycle collector off, an object that was built, called
(every operation and FusedMM strategy, with and without ``out=``, a plan, named values, edge
primitives, gather and scatter) and then dropped with ``del`` must give back every numpy array
it made: numpy's allocations traced by tracemalloc (its own domain) return to what they were
before it was built, and weak references to its arrays (S's values, the permutations, a
kept buffer) are dead. An independent measure of the same claim: no reference cycle holds
it (the collector, run afterwards, finds nothing of distmm's). A closed object that is still
referred to holds no numpy memory either, and its later use is a clear InputError.
"""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np
import pytest
from mpi4py import MPI
from oracle import problem

import distmm
from distmm.algorithms import base
from distmm.errors import InputError
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in costmodel.valid_cs(a, P)]
DOMAIN = np.lib.tracemalloc_domain


def numpy_bytes() -> int:
    """Bytes of numpy's live allocations (its tracemalloc domain). Not collective."""
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.DomainFilter(True, DOMAIN)])
    return sum(t.size for t in snap.traces)


def exercise(S, A, B) -> list:
    """Calls on ``S`` that make it build and keep what it keeps between calls; returns weak
    references to some of the arrays it holds. Collective."""
    r = A.r  # the global width (a family may split it across ranks)
    out_a, out_v = S.dense("a", r), np.empty_like(S.values)
    for _ in range(2):
        S.sddmm(A, B)
        S.sddmm(A, B, out=out_v)
        S.spmm_a(B, out=out_a)
        S.spmm_b(A)
        for strategy in S.strategies:
            S.fusedmm_a(A, B, strategy)
            S.fusedmm_b(A, B, strategy)
    S.set_named_values("ones", np.ones_like(S.values))
    S.spmm_a(B, values="ones")
    S.fusedmm_b(A, B, values="ones")
    step = S.plan("spmm_a", B, out=out_a)
    step()
    step()
    del step
    S.row_sum(S.values)
    S.edge_softmax(S.sddmm(A, B))
    S.gather("a", S.scatter("a", np.ones((S.shape[0], r)), root=None))
    return [weakref.ref(x) for x in (S.values, S.row_perm, S.col_inv)]


def build(algorithm: str, c: int):
    M, _, _ = problem(40, 33, 1, seed=3)
    S = distmm.distribute(M, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64)
    r = max(4, S.r_rule()[0])
    A = S.dense("a", r, fill=distmm.hashed_normal(0, 1.0))
    B = S.dense("b", r, fill=distmm.hashed_normal(1, 1.0))
    return S, A, B


def warmed(algorithm: str, c: int) -> int:
    """Numpy's traced bytes after one object of the family was built, exercised and closed
    (compiled kernels, first-use caches and MPI's buffers then exist), with tracemalloc
    started after it (tracing would only slow the warm-up: what it leaves is in the baseline
    either way): the baseline."""
    S, A, B = build(algorithm, c)
    exercise(S, A, B)
    S.close()
    del S, A, B
    gc.collect()
    tracemalloc.start()
    return numpy_bytes()


@pytest.fixture
def collector_off():
    """The cycle collector off for the test (restored after; :func:`warmed` starts
    tracemalloc, stopped after), and the harness's list of objects to close off (it would
    hold them; these tests free what they build)."""
    made = base._TRACKED
    base.track_objects(None)
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        tracemalloc.stop()
        gc.enable()
        base.track_objects(made)


def _distmm_garbage() -> list[str]:
    """Names of distmm objects that only the cycle collector would free (it runs here)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        names = sorted({type(o).__qualname__ for o in gc.garbage
                        if type(o).__module__.startswith("distmm")})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return names


@pytest.mark.parametrize("algorithm,c", CASES)
def test_del_frees_every_array_without_the_cycle_collector(algorithm, c, collector_off):
    before = warmed(algorithm, c)
    S, A, B = build(algorithm, c)
    refs = exercise(S, A, B)
    comms = S._grid_comms()
    held = numpy_bytes() - before
    assert held > 0 and all(ref() is not None for ref in refs)
    del S, A, B
    left = numpy_bytes() - before
    alive = [k for k, ref in enumerate(refs) if ref() is not None]
    garbage = _distmm_garbage()
    for sub in comms:  # del frees no communicator (close does): free them for the next test
        if sub != MPI.COMM_NULL:
            sub.Free()
    assert alive == [], f"arrays {alive} of the dropped object are still alive"
    assert left == 0, f"{left} of {held} bytes of numpy memory still held after del"
    assert garbage == [], f"distmm objects in reference cycles: {garbage}"


@pytest.mark.parametrize("algorithm,c", CASES)
def test_close_releases_every_array_and_later_use_is_a_clear_error(algorithm, c,
                                                                   collector_off):
    before = warmed(algorithm, c)
    S, A, B = build(algorithm, c)
    refs = exercise(S, A, B)
    described = S.stats.describe()
    del A, B
    S.close()
    left = numpy_bytes() - before
    alive = [k for k, ref in enumerate(refs) if ref() is not None]
    assert alive == [], f"arrays {alive} are still alive in the closed object"
    assert left == 0, f"the closed object still holds {left} bytes of numpy memory"
    assert S.closed and S.shape == (40, 33) and S.stats.describe() == described
    for use in (lambda: S.values, lambda: S.row_perm, lambda: S.spmm_a(np.ones((1, 4))),
                lambda: S.local_rows("a"), lambda: S.dense("a", 4),
                lambda: S.stats.memory_model(r=4), lambda: S.row_sum(np.ones(3))):
        with pytest.raises(InputError, match="closed"):
            use()
    S.close()  # closing twice does nothing
    assert _distmm_garbage() == []
