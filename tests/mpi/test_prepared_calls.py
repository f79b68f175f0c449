"""Prepared kernel calls (PreparedCalls.run, the matrix's _kernels part): a loop that repeats a call
with the same operand objects reuses the node model's prepared calls, and must give bitwise the
results of a fresh object, keep the kernel statistics exact, and prepare again whenever what a
prepared call captured may have changed (S's values, a named vector, the plan state). In 1.5D dense
shifting with c = 1, a call plan's repeats (``S.plan``, distmm/algorithms/plan.py) replay their
kernels and shifts alone: the same results, the operands as they are at the call, never a stale
replay after a failed call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a, 19)]
REPEATS = 3


def _setup(algorithm, c, seed=3):
    S, A, B = problem(30, 27, 19, seed=seed)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, dtype=np.float64, root=None)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    return obj, S, A, B, A_loc, B_loc


class Plans:
    """Calls of one object through one call plan per (operation, strategy, width, values
    given, out= given), each call passing its operands to the plan (``plan(*dense, values=,
    out=)``), as a loop or distmm.torch keeps them; ``last`` is the plan of the last call."""

    def __init__(self, obj) -> None:
        self.obj, self.plans, self.last = obj, {}, None

    def __call__(self, op: str, *dense, strategy=None, values=None, out=None):
        key = (op, strategy, dense[0].shape[-1], values is None, out is None)
        plan = self.last = self.plans.get(key)
        if plan is None:
            kw = {} if strategy is None else {"strategy": strategy}
            plan = self.last = self.plans[key] = self.obj.plan(op, *dense, values=values,
                                                                out=out, **kw)
            return plan()
        return plan(*dense, values=values, out=out)


def _caller(obj, via):
    """``via`` (a :class:`Plans`), or plain method calls of ``obj`` with its signature."""
    if via is not None:
        return via

    def plain(op, *dense, strategy=None, **kw):
        return getattr(obj, op)(*dense, **kw, **({} if strategy is None else
                                                  {"strategy": strategy}))
    return plain


def _calls(obj, A_loc, B_loc, r, via=None):
    """(name, call) of every operation and strategy, each writing into its own out=: plain
    method calls, or through the plans of ``via``."""
    run = _caller(obj, via)
    out_a, out_b = obj.dense("a", r), obj.dense("b", r)
    vals = np.empty_like(obj.values)
    calls = [("sddmm", lambda: run("sddmm", A_loc, B_loc, out=vals)),
             ("spmm_a", lambda: run("spmm_a", B_loc, out=out_a)),
             ("spmm_b", lambda: run("spmm_b", A_loc, out=out_b))]
    for s in obj.strategies:
        calls.append((f"fusedmm_a {s}",
                      lambda s=s: run("fusedmm_a", A_loc, B_loc, strategy=s, out=out_a)))
        calls.append((f"fusedmm_b {s}",
                      lambda s=s: run("fusedmm_b", A_loc, B_loc, strategy=s, out=out_b)))
    return calls


def _kernel_counts(obj) -> dict:
    return {op: (st["calls"], st["flops"], st["bytes"])
            for op, st in obj.kernel.stats.as_dict().items()}


@pytest.mark.parametrize("algorithm,c", CASES)
def test_repeated_calls_match_a_fresh_object_bitwise(algorithm, c):
    """Every repeat equals, bit for bit, the first call of a fresh object, and the kernel
    statistics of n repeats are n times those of one call."""
    obj, _, _, _, A_loc, B_loc = _setup(algorithm, c)
    fresh_calls = {}
    for name, _ in _calls(obj, A_loc, B_loc, 19):
        fresh, _, _, _, fA, fB = _setup(algorithm, c)
        call = dict(_calls(fresh, fA, fB, 19))[name]
        call()  # builds what a first call builds (S^T, moved values)
        fresh.stats.reset()
        want = np.array(call(), copy=True)
        fresh_calls[name] = (want, _kernel_counts(fresh))
        fresh.close()
    for name, call in _calls(obj, A_loc, B_loc, 19):
        call()
        obj.stats.reset()
        for _ in range(REPEATS):
            got = call()
            np.testing.assert_array_equal(got, fresh_calls[name][0], err_msg=name)
        one = fresh_calls[name][1]
        assert _kernel_counts(obj) == {op: (REPEATS * k, REPEATS * f, REPEATS * b)
                                       for op, (k, f, b) in one.items()}, name
    obj.close()


def _new_values(obj):
    rows, cols = obj.value_coordinates()
    return np.sin(obj.row_perm[rows] + 2.0 * obj.col_perm[cols]) + 2.0


def _scipy_with(S, fn):
    coo = sp.coo_matrix(S)
    coo.sum_duplicates()
    return sp.coo_matrix((fn(coo.row, coo.col), (coo.row, coo.col)), shape=S.shape)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_set_values_between_repeats(algorithm, c):
    """New values of S between two calls with the same operand objects reach the second."""
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    S2 = _scipy_with(S, lambda i, j: np.sin(i + 2.0 * j) + 2.0)
    calls = _calls(obj, A_loc, B_loc, 19)
    for _, call in calls:
        call()
    obj.set_values(_new_values(obj))
    for name, call in calls:
        op = name.split()[0].replace("_", "-")
        res = call()
        got = obj.gather_values(res) if op == "sddmm" else obj.gather(op[-1], res)
        check(op, got, S2, A, B, rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_named_values_replaced_between_repeats(algorithm, c):
    """Registering a name again between two calls that pass the name: the second call runs
    with the new vector."""
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    out_a, out_b = obj.dense("a", 19), obj.dense("b", 19)
    obj.set_named_values("w", np.ones_like(obj.values))
    calls = [("spmm-a", lambda: obj.spmm_a(B_loc, values="w", out=out_a))]
    for s in obj.strategies:
        calls.append(("fusedmm-a", lambda s=s: obj.fusedmm_a(A_loc, B_loc, s, values="w",
                                                             out=out_a)))
        calls.append(("fusedmm-b", lambda s=s: obj.fusedmm_b(A_loc, B_loc, s, values="w",
                                                             out=out_b)))
    for _, call in calls:
        call()
    obj.set_named_values("w", _new_values(obj))
    S2 = _scipy_with(S, lambda i, j: np.sin(i + 2.0 * j) + 2.0)
    for op, call in calls:
        check(op, obj.gather(op[-1], call()), S2, A, B, rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES[:1] + [x for x in CASES
                                                      if x[0] == "15d-dense-shift"])
def test_prepared_again_when_the_plan_state_changes(algorithm, c, monkeypatch):
    """A repeat prepares nothing; a new plan state (numba.set_num_threads) prepares every
    kernel call again, and the results stay right; checks="always" keeps nothing."""
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    prepared = []
    real = obj.kernel.prepare
    monkeypatch.setattr(obj.kernel, "prepare",
                        lambda *a, **k: prepared.append(a[0]) or real(*a, **k))
    state = [obj.kernel.plan_state()]
    monkeypatch.setattr(obj.kernel, "plan_state", lambda: state[0])
    out = obj.dense("a", 19)
    obj.fusedmm_a(A_loc, B_loc, out=out)
    first = len(prepared)
    obj.fusedmm_a(A_loc, B_loc, out=out)
    repeat = len(prepared) - first
    state[0] = ("another thread count",)
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, out=out)), S, A, B,
          rtol=1e-10)
    again = len(prepared) - first - repeat
    if algorithm == "15d-dense-shift":  # the family whose loop keeps every step's call
        assert first > 0 and repeat == 0 and again == first
    obj.close()
    obj, *_ = _setup(algorithm, c)
    obj.checks = "always"
    out = obj.dense("a", 19)
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    obj.fusedmm_a(A_loc, B_loc, out=out)
    assert obj._kernels.prepared == {}
    obj.close()


def _no_out_calls(obj, A_loc, B_loc, via=None):
    """(name, call) of every operation and strategy without out=: each returns a new array
    (plain method calls, or through the plans of ``via``)."""
    run = _caller(obj, via)
    calls = [("sddmm", lambda: run("sddmm", A_loc, B_loc)),
             ("spmm_a", lambda: run("spmm_a", B_loc)), ("spmm_b", lambda: run("spmm_b", A_loc))]
    for s in obj.strategies:
        calls.append((f"fusedmm_a {s}", lambda s=s: run("fusedmm_a", A_loc, B_loc, strategy=s)))
        calls.append((f"fusedmm_b {s}", lambda s=s: run("fusedmm_b", A_loc, B_loc, strategy=s)))
    return calls


@pytest.mark.parametrize("algorithm,c", CASES)
def test_calls_without_out_reuse_prepared_calls_and_return_new_arrays(algorithm, c,
                                                                       monkeypatch):
    """A loop without out= gets a new result array from every call, every result bitwise
    the first, and an earlier result is never written again (no call is replayed into, or
    returns, the last call's array or a buffer the object reuses). Where the family keeps
    its kernel calls (1.5D dense shifting), the calls prepared for the first result serve the
    next ones (same shape, strides, dtype): nothing is prepared again."""
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    prepared = []
    real = obj.kernel.prepare
    monkeypatch.setattr(obj.kernel, "prepare",
                        lambda *a, **k: prepared.append(a[0]) or real(*a, **k))
    for name, call in _no_out_calls(obj, A_loc, B_loc):
        first = call()
        kept = np.array(first, copy=True)
        check(*_gathered(obj, name, first), S, A, B, rtol=1e-10)
        before = len(prepared)
        results = [call() for _ in range(3)]
        if algorithm == "15d-dense-shift":
            assert len(prepared) == before, name
        for res in results:
            assert not np.shares_memory(res, first), name
            np.testing.assert_array_equal(res, kept, err_msg=name)
        np.testing.assert_array_equal(first, kept, err_msg=name)
        assert not any(np.shares_memory(x, y) for i, x in enumerate(results)
                       for y in results[i + 1:]), name
    obj.close()


def test_numba_thread_count_between_repeats():
    """numba.set_num_threads between two repeats of a call: right results either way."""
    import numba

    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    out = obj.dense("a", 19)
    before = numba.get_num_threads()
    try:
        obj.spmm_a(B_loc, out=out)
        numba.set_num_threads(1 if before > 1 else before)
        check("spmm-a", obj.gather("a", obj.spmm_a(B_loc, out=out)), S, A, B, rtol=1e-10)
        assert obj._plan_state == numba.get_num_threads()
    finally:
        numba.set_num_threads(before)
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc, out=out)), S, A, B, rtol=1e-10)
    obj.close()


# ----------------------------------------------------------------------------- replays
# 1.5D dense shifting with c = 1 runs a call as q kernels on the caller's arrays and the shifts
# between its buffers (one kernel on one rank); from a plan's third call on the same operands it
# runs those steps alone (plan.py). Plain method calls only check and run (on one rank, a
# repeat of a one-kernel call runs that kernel: prepared.py).

def _count_loops(obj, monkeypatch) -> list[int]:
    """Counts the family loops run (DenseShift15D._propagate, or on one rank its single
    kernel step, _one_rank_step), in a one-item list."""
    count = [0]
    for name in ("_propagate", "_one_rank_step"):
        real = getattr(obj, name)

        def counted(*args, _real=real, **kwargs):
            count[0] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(obj, name, counted)
    return count


def _single_kernel(name: str) -> bool:
    """Whether the call is one loop of the family (the others, FusedMM's "none" and
    "reuse" strategies, are an SDDMM loop and an SpMM loop)."""
    return not name.startswith("fusedmm") or name.endswith("fusion")


def _gathered(obj, name, res):
    op = name.split()[0].replace("_", "-")
    return op, (obj.gather_values(res) if op == "sddmm" else obj.gather(op[-1], res))


def test_repeats_run_their_kernels_and_shifts_alone(monkeypatch):
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    loops = _count_loops(obj, monkeypatch)
    for name, call in _calls(obj, A_loc, B_loc, 19, Plans(obj)):
        loops[0] = 0
        for _ in range(4):
            check(*_gathered(obj, name, call()), S, A, B, rtol=1e-10)
        # the first call and the traced second run the family's loop(s); the rest replay
        assert loops[0] == (2 if _single_kernel(name) else 4), name
    # plain calls run the loop every time, except that on one rank a call that is one kernel
    # step runs, when repeated, that kernel alone (PreparedCalls.rerun): it still runs
    for name, call in _calls(obj, A_loc, B_loc, 19):
        loops[0] = 0
        kernels = sum(st["calls"] for st in obj.kernel.stats.as_dict().values())
        for _ in range(4):
            check(*_gathered(obj, name, call()), S, A, B, rtol=1e-10)
        kernels = sum(st["calls"] for st in obj.kernel.stats.as_dict().values()) - kernels
        if P == 1 and _single_kernel(name):
            assert (loops[0], kernels) == (1, 4), name
        else:
            assert loops[0] == 4 * (1 if _single_kernel(name) else 2), name
    obj.close()


@pytest.mark.parametrize("how", ["plan", "plain"])
def test_a_replay_reads_the_operands_as_they_are_now(how):
    """Operands changed in place between repeats, and S's values replaced, reach the
    repeated call; another out= buffer is written, not the last one (a plan's replays, and
    on one rank a plain repeat's kernel run alone)."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    run = _caller(obj, Plans(obj) if how == "plan" else None)
    out = obj.dense("a", 19)
    for _ in range(3):
        run("fusedmm_a", A_loc, B_loc, out=out)
    B_loc[...] *= 2.0
    check("fusedmm-a", obj.gather("a", run("fusedmm_a", A_loc, B_loc, out=out)), S, A, 2.0 * B,
          rtol=1e-10)
    obj.set_values(_new_values(obj))
    S2 = _scipy_with(S, lambda i, j: np.sin(i + 2.0 * j) + 2.0)
    for _ in range(3):
        check("spmm-a", obj.gather("a", run("spmm_a", B_loc, out=out)), S2, A, 2.0 * B,
              rtol=1e-10)
    kept = np.array(out, copy=True)
    other = obj.dense("a", 19)
    res = run("spmm_a", B_loc, out=other)
    assert res is other
    np.testing.assert_array_equal(out, kept)
    check("spmm-a", obj.gather("a", other), S2, A, 2.0 * B, rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("how", ["plan", "plain"])
def test_every_replay_reads_the_operands_as_they_are_now(how):
    """Every operation and strategy, with and without out=: after replays, operands scaled
    in place reach the next replay (the intermediates a call makes, such as FusedMM's SDDMM
    values, are written again by every replay)."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    ka = kb = 1.0
    via = Plans(obj) if how == "plan" else None
    for name, call in _calls(obj, A_loc, B_loc, 19, via) + _no_out_calls(obj, A_loc, B_loc, via):
        for _ in range(3):
            call()
        A_loc[...] *= 2.0
        B_loc[...] *= 1.5  # so that A B^T changes too
        ka, kb = 2.0 * ka, 1.5 * kb
        res = np.array(call(), copy=True) if name.startswith("sddmm") else call().copy()
        check(*_gathered(obj, name, res), S, ka * A, kb * B, rtol=1e-9)
    obj.close()


def test_a_plain_repeat_on_one_rank_runs_its_kernel_on_what_it_is_given_now():
    """On one rank a repeated call of one kernel step runs that kernel alone
    (PreparedCalls.rerun), and still: switching strategies in turns gives each its own
    result; blocks that own their data (a new view per call), S's values and a named vector
    replaced, and operands scaled in place all reach it; a call without out= returns a new
    array every time and never writes an earlier one; it keeps no operand alive; a plan made
    after it traces its kernel."""
    import gc
    import weakref
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    out = obj.dense("a", 19)
    for strategy in ("fusion", "none", "fusion", "reuse", "fusion") * 2:
        res = obj.fusedmm_a(A_loc, B_loc, strategy=strategy, out=out)
        assert res is out
        check("fusedmm-a", obj.gather("a", res), S, A, B, rtol=1e-10)
    # a call that is not one kernel step (strategy "none") after one that was: its repeat
    # runs its own loop, with its own values
    twos = _scipy_with(S, lambda i, j: 2.0 + 0.0 * i)
    obj.fusedmm_a(A_loc, B_loc, strategy="fusion", out=out)
    v2 = np.full_like(obj.values, 2.0)
    for _ in range(3):
        check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy="none",
                                                         values=v2, out=out)),
              twos, A, B, rtol=1e-10)
    Ac, Bc = A_loc.copy(), B_loc.copy()  # own their data: no view is kept for them
    for _ in range(3):
        check("fusedmm-a", obj.gather("a", obj.fusedmm_a(Ac, Bc, out=out)), S, A, B,
              rtol=1e-10)
    Bc *= 2.0
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(Ac, Bc, out=out)), S, A, 2.0 * B,
          rtol=1e-10)
    vals = np.empty_like(obj.values)
    for _ in range(3):
        obj.sddmm(A_loc, B_loc, out=vals)
    obj.set_values(_new_values(obj))
    S2 = _scipy_with(S, lambda i, j: np.sin(i + 2.0 * j) + 2.0)
    check("sddmm", obj.gather_values(obj.sddmm(A_loc, B_loc, out=vals)), S2, A, B, rtol=1e-10)
    obj.set_named_values("w", np.ones_like(obj.values))
    ones = _scipy_with(S, lambda i, j: 1.0 + 0.0 * i)
    for _ in range(3):
        check("spmm-b", obj.gather("b", obj.spmm_b(A_loc, values="w")), ones, A, B,
              rtol=1e-10)
    obj.set_named_values("w", 3.0 * np.ones_like(obj.values))
    first = obj.spmm_b(A_loc, values="w")
    kept = np.array(first, copy=True)
    check("spmm-b", obj.gather("b", first), ones.multiply(3.0).tocsr(), A, B, rtol=1e-10)
    A_loc *= 0.5
    again = obj.spmm_b(A_loc, values="w")
    assert not np.shares_memory(again, first)
    np.testing.assert_array_equal(first, kept)
    check("spmm-b", obj.gather("b", again), ones.multiply(3.0).tocsr(), 0.5 * A, B,
          rtol=1e-10)
    # nothing of a repeated call is kept alive by its kernel's record
    spare = obj.dense("a", 19)
    for _ in range(3):
        obj.spmm_a(B_loc, out=spare)
    gone = weakref.ref(spare)
    del spare
    gc.collect()
    assert gone() is None
    # a plan traces its kernel after plain repeats of its call, and replays it
    for _ in range(3):
        obj.spmm_a(B_loc, out=out)
    plan = obj.plan("spmm_a", B_loc, out=out)
    for _ in range(3):
        check("spmm-a", obj.gather("a", plan()), S2, 0.5 * A, B, rtol=1e-10)
    B_loc *= 3.0
    check("spmm-a", obj.gather("a", plan()), S2, A, 3.0 * B, rtol=1e-10)
    obj.close()


def test_an_operand_changed_in_layout_is_not_replayed():
    """The same array object with a new shape or dtype (set in place) is not the traced
    call's operand: the call is checked again and refused, not replayed through the old
    views."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    out = obj.dense("a", 19)
    plan = obj.plan("spmm_a", B_loc, out=out)
    for _ in range(3):
        plan(B_loc, out=out)
    assert plan.replaying
    rows = out.shape[0]
    out.shape = (rows * 19, 1)
    with pytest.raises(distmm.InputError):
        plan(B_loc, out=out)
    out.shape = (rows, 19)
    for _ in range(3):
        plan(B_loc, out=out)
    B_loc.dtype = np.int64  # same itemsize, same shape: only the dtype differs
    with pytest.raises(distmm.InputError, match="dtype"):
        plan(B_loc, out=out)
    B_loc.dtype = np.float64
    check("spmm-a", obj.gather("a", plan(B_loc, out=out)), S, A, B, rtol=1e-10)
    obj.close()


def test_a_block_assigned_to_is_checked_again():
    """A replay knows a typed block's layout by its token (DenseBlock.layout_token), not by
    reading shape, strides and dtype: any assignment to the block, a resize or a
    __setstate__ drops the token, so the next call checks the block again (and refuses it
    where it no longer fits) instead of replaying through the old views."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    run = Plans(obj)
    out = obj.dense("a", 19)

    def settle():  # the first call, the traced second, then replays
        for _ in range(3):
            run("spmm_a", B_loc, out=out)
        return B_loc.layout_token()

    token = settle()
    assert B_loc.layout_token() is token  # kept while nothing is assigned
    B_loc.side = "a"  # the wrong side for SpMMA's operand: only a full check can see it
    with pytest.raises(distmm.InputError, match="side"):
        run("spmm_a", B_loc, out=out)
    B_loc.side = "b"
    assert settle() is not token
    # an in-place strides assignment (deprecated by NumPy), even of the same strides
    token = B_loc.layout_token()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        B_loc.strides = B_loc.strides
    assert B_loc.layout_token() is not token
    check("spmm-a", obj.gather("a", run("spmm_a", B_loc, out=out)), S, A, B, rtol=1e-10)
    # resize in place: numpy refuses it for an operand the calls remember (a plan holds it,
    # the checks a weak reference), even without refcheck; a block nobody remembers loses
    # its token
    own = B_loc.copy()
    for _ in range(3):
        run("spmm_a", own, out=out)
    with pytest.raises(ValueError, match="resize"):
        own.resize((own.shape[0] + 1, 19), refcheck=False)
    spare = B_loc.copy()
    token = spare.layout_token()
    spare.resize((spare.shape[0] + 1, 19), refcheck=False)
    assert spare.layout_token() is not token
    # __setstate__ replaces the whole array in place
    state = B_loc.copy().view(np.ndarray).__reduce__()[2]
    token = settle()
    B_loc.__setstate__(state)
    assert B_loc.layout_token() is not token
    check("spmm-a", obj.gather("a", run("spmm_a", B_loc, out=out)), S, A, B, rtol=1e-10)
    obj.close()


def test_a_call_that_fails_leaves_no_replay(monkeypatch):
    """A call that remembers new operands and then fails must not leave the old replay to
    run for them: the next call with those operands writes its own out= buffer. (``other``
    is a plain array where the replay's ``out`` was a typed block, so that the failing call
    is not replayed with it swapped in, plan.py's CallPlan._swapped, but runs in full.)"""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    out, other = obj.dense("a", 19), np.asarray(obj.dense("a", 19))
    plan = obj.plan("spmm_a", B_loc, out=out)
    for _ in range(3):
        plan()
    real = obj._spmm_a

    def fails(*args, **kwargs):
        raise RuntimeError("planted failure")

    monkeypatch.setattr(obj, "_spmm_a", fails)
    with pytest.raises(RuntimeError, match="planted"):
        plan(B_loc, out=other)
    assert not plan.replaying
    monkeypatch.setattr(obj, "_spmm_a", real)
    before = np.array(out, copy=True)
    res = plan(B_loc, out=other)
    assert np.shares_memory(res, other)
    np.testing.assert_array_equal(out, before)
    check("spmm-a", obj.gather("a", res), S, A, B, rtol=1e-10)
    obj.close()


def test_a_replay_keeps_to_its_strategy_and_ends_with_close():
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    run = Plans(obj)
    out = obj.dense("a", 19)
    for strategy in ("fusion", "fusion", "fusion", "none", "fusion", "reuse", "fusion"):
        check("fusedmm-a", obj.gather("a", run("fusedmm_a", A_loc, B_loc, strategy=strategy,
                                               out=out)),
              S, A, B, rtol=1e-10)
    plans = list(run.plans.values())
    assert any(plan.replaying for plan in plans)
    obj.close()
    assert not any(plan.replaying for plan in plans)
    with pytest.raises(distmm.InputError):
        run("fusedmm_a", A_loc, B_loc, strategy="fusion", out=out)


def _words(obj) -> dict:
    return {ph: dict(c) for ph, c in obj.stats.counts.items() if ph != "distribute"}


def test_calls_without_out_are_replayed_into_new_arrays(monkeypatch):
    """Repeats of a one-kernel call without out= are replayed too: each writes and returns
    a new array while the caller holds the earlier ones, bitwise the full call's, with the
    full call's messages and kernel counts; a dropped last result is written again and
    returned by the next replay, and freed with the replays. SpMMB's result arrives by a
    shift at q > 1 and is then never replayed."""
    import gc
    import weakref

    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    loops = _count_loops(obj, monkeypatch)
    for name, call in _no_out_calls(obj, A_loc, B_loc, Plans(obj)):
        first = call()
        check(*_gathered(obj, name, first), S, A, B, rtol=1e-10)
        obj.stats.reset()
        loops[0] = 0
        second = call()  # in full, traced
        full_words, full_kernels = _words(obj), _kernel_counts(obj)
        results = []
        for _ in range(3):
            obj.stats.reset()
            results.append(call())
            assert _words(obj) == full_words, name
            assert _kernel_counts(obj) == full_kernels, name
        travels = name == "spmm_b" or name.endswith("reuse")  # the result is shifted
        replayed = P == 1 or not travels
        assert loops[0] == (1 if _single_kernel(name) else 2) * (1 if replayed else 4), name
        for res in results:
            assert type(res) is type(second), name
            np.testing.assert_array_equal(res, second, err_msg=name)
            assert not np.shares_memory(res, second) and not np.shares_memory(res, first)
            if name != "sddmm":
                assert res.side == second.side and res.global_shape == second.global_shape
        assert not any(np.shares_memory(x, y) for i, x in enumerate(results)
                       for y in results[i + 1:]), name
        last = weakref.ref(results[-1])
        del results, res
        again = call()
        assert (again is last()) == replayed, name
        np.testing.assert_array_equal(again, second, err_msg=name)
        del again
        obj.release_buffers()  # drops the plans' steps and the result kept for them
        gc.collect()
        assert last() is None, name
    obj.close()


def _holders():
    """Ways a caller keeps a result (or only its memory) alive."""
    holders = [("name", lambda x: x), ("view", lambda x: x[:1]),
               ("plain view", lambda x: x.view(np.ndarray)),
               ("base", lambda x: x.base if x.base is not None else x),
               ("memoryview", memoryview), ("asarray", np.asarray)]
    try:
        import torch
    except ImportError:
        return holders
    return holders + [("tensor", lambda x: torch.from_numpy(np.asarray(x)))]


def test_a_result_the_caller_still_holds_is_never_written_again():
    """A replay without out= writes the last result again only when nothing of the caller's
    refers to it: a name, a view, a plain view, its base, a memoryview, a plain array over
    it, a torch tensor over it (each held while the operands change between calls, so a
    result written again would change); dropped, it is written and returned again."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    for name, call in _no_out_calls(obj, A_loc, B_loc, Plans(obj)):
        if P > 1 and (name == "spmm_b" or name.endswith("reuse")):
            continue  # its result arrives by a shift: never replayed
        for _ in range(3):
            call()
        for how, hold in _holders():
            res = call()
            kept = hold(res)
            snapshot = np.array(np.asarray(kept), copy=True)
            del res
            A_loc *= 1.5
            B_loc *= 0.5
            nxt = call()
            np.testing.assert_array_equal(np.asarray(kept), snapshot, err_msg=f"{name}, {how}")
            assert not np.shares_memory(nxt, np.asarray(kept)), (name, how)
            del kept, nxt
        first = call()
        ident = id(first)
        del first
        assert id(call()) == ident, name  # nothing held: the same array, written again
    obj.close()


def test_a_kept_result_of_another_width_is_not_written():
    """After a loop without out= at one width has let its results go (the object keeps the
    last one), the same operations at another width return results of that width, right
    ones: a kept result is written again only by calls that make results like it."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    rng = np.random.default_rng(5)
    A7, B7 = rng.standard_normal((A.shape[0], 7)), rng.standard_normal((B.shape[0], 7))
    A7_loc, B7_loc = obj.scatter("a", A7, root=None), obj.scatter("b", B7, root=None)
    via = Plans(obj)
    wide, narrow = _no_out_calls(obj, A_loc, B_loc, via), _no_out_calls(obj, A7_loc, B7_loc, via)
    for (name, call), (_, call7) in zip(wide, narrow, strict=True):
        for _ in range(4):
            call()
        for _ in range(4):
            check(*_gathered(obj, name, call7()), S, A7, B7, rtol=1e-10)
        check(*_gathered(obj, name, call()), S, A, B, rtol=1e-10)
    obj.close()


def _op_call(run, name: str, A_now, B_now, **kw):
    """Operation ``name`` (as :func:`_calls` names them) on these operands, through ``run``
    (a :class:`Plans`)."""
    op, _, strategy = name.partition(" ")
    if op == "sddmm":
        return run("sddmm", A_now, B_now, **kw)
    if op == "spmm_a":
        return run("spmm_a", B_now, **kw)
    if op == "spmm_b":
        return run("spmm_b", A_now, **kw)
    return run(op, A_now, B_now, strategy=strategy, **kw)


def test_values_changed_in_place_reach_every_repeat():
    """Repeats that pass the same values array, changed in place between calls, compute with
    its contents at the call, in every operation and strategy. (A FusedMM strategy with a
    kernel on S^T moves the values into S^T's order at each call: such a call leaves no
    replay, which would run on the traced call's copy.)"""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    run = Plans(obj)
    for name, _ in _calls(obj, A_loc, B_loc, 19):
        v = np.array(obj.values)
        side = name.split()[0][-1]
        out = np.empty_like(v) if name == "sddmm" else obj.dense(side, 19)
        for k in range(4):
            res = _op_call(run, name, A_loc, B_loc, values=v, out=out)
            check(*_gathered(obj, name, res), S * 2.0**k, A, B, rtol=1e-9)
            v *= 2.0
    obj.close()


def _alike_call(obj, run, name: str, k: int, A_loc, B_loc, plain: bool, with_out: bool,
                with_values: bool):
    """Call ``k`` of a loop that passes new operands every time, laid out alike: copies of
    the blocks scaled by call (typed blocks, or plain arrays when ``plain``), a new ``out=``
    of the same kind when ``with_out`` and new values when ``with_values``. Returns the
    result and the (A, B, values) scales the oracle needs."""
    ka, kb, kv = 1.0 + k, 1.0 + 0.5 * k, 2.0 - 0.25 * k
    new = (lambda X: np.array(X)) if plain else (lambda X: X.copy())
    A_now, B_now = new(A_loc) * ka, new(B_loc) * kb
    kw = {}
    if with_values:
        kw["values"] = obj.values * kv
    op = name.split()[0]
    if with_out:
        if op == "sddmm":
            kw["out"] = np.empty_like(obj.values)
        else:
            kw["out"] = new(obj.dense("a" if op.endswith("_a") else "b", 19))
    res = _op_call(run, name, A_now, B_now, **kw)
    if with_out:
        assert np.shares_memory(res, kw["out"]), name
        if op != "sddmm":
            assert res.side == op[-1] and res.global_shape[1] == 19, name
    return res, (ka, kb, kv if with_values else 1.0)


@pytest.mark.parametrize("plain", [False, True], ids=["typed", "plain"])
@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out"])
def test_new_operands_laid_out_alike_are_replayed_with_them(monkeypatch, plain, with_out):
    """A loop that passes new arrays every call, laid out as the last call's (what a numpy
    loop that makes its operands, and every distmm.torch function, does): from the third
    call each plan call replays the traced steps with its own arrays swapped in (plan.py,
    CallPlan._swapped; at q > 1 the shifts send the new B), except where its result travels in
    a shift at q > 1. Every result is the oracle's for the operands of its own
    call (each call scales them differently, so a replay that read an earlier call's arrays
    fails), with the full call's messages and kernel counts, and the replay holds the last
    call's arrays only (an earlier one is freed once dropped)."""
    import gc
    import weakref

    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    loops = _count_loops(obj, monkeypatch)
    run = Plans(obj)
    gone = []  # (name, weak reference) of each case's replayed operands, replaced since
    for name, _ in _calls(obj, A_loc, B_loc, 19):
        for with_values in (False, True):
            loops[0] = 0
            words = kernels = None
            for k in range(5):
                obj.stats.reset()
                res, (ka, kb, kv) = _alike_call(obj, run, name, k, A_loc, B_loc, plain,
                                                with_out, with_values)
                S_now = S * kv
                check(*_gathered(obj, name, res), S_now, ka * A, kb * B, rtol=1e-9)
                if k == 1:
                    words, kernels = _words(obj), _kernel_counts(obj)
                elif k > 1:
                    assert _words(obj) == words, name
                    assert _kernel_counts(obj) == kernels, name
            per_call = 1 if _single_kernel(name) else 2
            # a FusedMM that runs a kernel on S^T (FusedMMA "reuse", FusedMMB "none" and
            # "fusion") moves given values into S^T's order in each call: never replayed
            moved = with_values and name.startswith("fusedmm") and (
                name.startswith("fusedmm_a") == name.endswith("reuse"))
            # at q > 1 the shifts send the new B; a result that travels in a shift (SpMMB's,
            # FusedMM's under "reuse") makes its out= unswappable there: run in full
            swapped = not moved and (P == 1 or not (name == "spmm_b" or name.endswith("reuse")))
            if moved:
                assert loops[0] == 5 * per_call, name
            elif swapped:  # a plan whose kernels were prepared by another's: traced at once
                assert per_call <= loops[0] <= 2 * per_call, (name, with_values)
            if swapped:
                assert run.last.replaying, name
            held = ([x for x in run.last.operands if isinstance(x, np.ndarray)]
                    if swapped else [])
            gone.extend((name, weakref.ref(x)) for x in held)
            del res, held
            _alike_call(obj, run, name, 5, A_loc, B_loc, plain, with_out, with_values)
    gc.collect()  # once: a typed block and its cached plain view refer to each other
    assert [name for name, ref in gone if ref() is not None] == []
    obj.close()


def _misaligned(X: np.ndarray) -> np.ndarray:
    """A copy of ``X`` whose data starts one byte past an aligned address."""
    buf = np.empty(X.nbytes + 1, np.uint8)
    Y = buf[1:].view(X.dtype).reshape(X.shape)
    Y[...] = X
    return Y


def test_an_operand_alike_but_for_its_alignment_is_prepared_for(monkeypatch):
    """A prepared kernel call runs the compiled code of its first call's argument types
    (NodeModel.prepare), alignment included: new plain operands alike in everything but
    alignment neither reuse the calls prepared for aligned ones nor are swapped into their
    replay. They are prepared for, and every result is the oracle's."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    prepared = []
    real = obj.kernel.prepare
    monkeypatch.setattr(obj.kernel, "prepare",
                        lambda *a, **k: prepared.append(a[0]) or real(*a, **k))
    A_np, B_np = A_loc.view(np.ndarray), B_loc.view(np.ndarray)
    run = Plans(obj)
    for name in ("spmm_a", "sddmm", "fusedmm_a fusion"):
        for _ in range(4):  # new aligned arrays: prepared once, then reused and replayed
            got = _op_call(run, name, A_np.copy(), B_np.copy())
            check(*_gathered(obj, name, got), S, A, B, rtol=1e-10)
        before = len(prepared)
        for _ in range(3):
            got = _op_call(run, name, _misaligned(A_np), _misaligned(B_np))
            check(*_gathered(obj, name, got), S, A, B, rtol=1e-10)
        assert len(prepared) > before, name
    obj.close()


def test_new_operands_in_turns_are_traced_only_while_it_pays(monkeypatch):
    """Two calls of one kind in turns on new arrays (FusedMM's backward in distmm.torch: an
    SDDMM of (G, B) and one of (A, B), each with new views), through one plan: each swaps its
    arrays into the other's replay (at q > 1 the shifts send the new B). Where an operand
    cannot be swapped (SpMMB's out= at q > 1, which a shift writes), calls on new ones stop
    being traced (a trace at q > 1 prepares every shift again) after the first."""
    from distmm.algorithms import plan as plan_module

    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    traced = [0]

    class Counted(plan_module.Tracer):
        __slots__ = ()

        def __init__(self, record: bool) -> None:
            super().__init__(record)
            traced[0] += record

    monkeypatch.setattr(plan_module, "Tracer", Counted)
    run = Plans(obj)
    full = _count_begins(obj, monkeypatch, ("sddmm",))
    v = np.array(obj.values)  # one array for every call, as the backward's ones
    G_loc = obj.scatter("a", 0.5 * A, root=None)
    for k in range(12):
        B_now = np.array(B_loc)
        first = run("sddmm", np.array(G_loc) * (k + 1), B_now, values=v)
        second = run("sddmm", np.array(A_loc), B_now, values=v)
        check("sddmm", obj.gather_values(first), S, 0.5 * (k + 1) * A, B, rtol=1e-9)
        check("sddmm", obj.gather_values(second), S, A, B, rtol=1e-9)
        if k == 3:
            full[0] = traced[0] = 0
    assert full[0] == 0  # all replayed
    if P > 1:
        full = _count_begins(obj, monkeypatch, ("spmm_b",))
        results = []
        for k in range(8):
            results.append(run("spmm_b", np.array(A_loc) * (k + 1),
                                   out=np.array(obj.dense("b", 19))))
            if k == 2:
                full[0] = traced[0] = 0
        assert traced[0] == 0 and full[0] == 5
        for k, res in enumerate(results):  # (gather's own calls are traced: after the loop)
            check("spmm-b", obj.gather("b", res), S, (k + 1) * A, B, rtol=1e-9)
    obj.close()


def test_an_alike_out_sharing_memory_with_an_input_is_refused():
    """A new out= laid out as the last call's but overlapping an input is not replayed with
    it swapped in: the call's checks refuse it, as they refuse it in any call."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    if obj.shape[0] != obj.shape[1]:
        obj.close()
        pytest.skip("needs A and out blocks of one shape")
    run = Plans(obj)
    for k in range(4):
        res, scales = _alike_call(obj, run, "fusedmm_a fusion", k, A_loc, B_loc, False, True,
                                  False)
    assert run.last.replaying
    A_now = A_loc.copy()
    with pytest.raises(distmm.InputError, match="shares memory"):
        run("fusedmm_a", A_now, B_loc.copy(), strategy="fusion", out=A_now)
    obj.close()


def test_a_replay_sends_what_the_full_call_sends():
    """Per call, a replayed call sends and receives the words and messages of the full call
    (the counts that the exact formulas are tested against), and times its shifts."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    for name, call in _calls(obj, A_loc, B_loc, 19, Plans(obj)):
        call()  # the first call of its kind: checked in full (an agreement, phase "other")
        obj.stats.reset()
        call()  # run in full and traced
        full = _words(obj)
        for _ in range(2):  # replayed
            obj.stats.reset()
            call()
            assert _words(obj) == full, name
        if P > 1:
            assert obj.stats.seconds["propagation"] > 0, name
    obj.close()


def _count_begins(obj, monkeypatch, kinds: tuple) -> list[int]:
    """Counts the calls of ``kinds`` run in full (DistributedMatrix._begin), in a one-item list."""
    count, real = [0], obj._begin

    def counted(kind, *args, **kwargs):  # kind: "spmm_a" or ("spmm_a", width) (_call_key)
        count[0] += (kind if isinstance(kind, str) else kind[0]) in kinds
        return real(kind, *args, **kwargs)

    monkeypatch.setattr(obj, "_begin", counted)
    return count


def test_ranks_need_not_agree_on_replaying(monkeypatch):
    """Through plans, rank 0 repeats its operands (and replays) while the other ranks pass a
    new out= block every time, a typed block and a plain array in turns, so that no call is
    laid out as the one before it (and each runs in full): the same messages flow, nothing
    waits, and every result is right. Then the same with rank 0 replaying new blocks swapped in."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    run = Plans(obj)
    full = _count_begins(obj, monkeypatch, ("fusedmm_a", "spmm_a"))
    out = obj.dense("a", 19)
    for k in range(5):
        full[0] = 0
        target = obj.dense("a", 19)
        if COMM.rank == 0:
            target = out
        elif k % 2:
            target = np.asarray(target)
        res = run("fusedmm_a", A_loc, B_loc, out=target)
        assert np.shares_memory(res, target)
        check("fusedmm-a", obj.gather("a", res), S, A, B, rtol=1e-10)
        if k >= 2:
            assert full[0] == (COMM.rank != 0)
    # without out=: rank 0 passes new copies of the blocks (replayed with them swapped in),
    # the others the same blocks and copies as plain arrays in turns
    for k in range(5):
        full[0] = 0
        B_now = B_loc.copy() if COMM.rank == 0 else (np.array(B_loc) if k % 2 else B_loc)
        res = run("spmm_a", B_now)
        check("spmm-a", obj.gather("a", res), S, A, B, rtol=1e-10)
        if k >= 2:
            assert full[0] == (COMM.rank != 0)  # at q > 1 the shifts send rank 0's new B
    obj.close()


# one c per family: the buffers are the family's, the release is the same code for every c
@pytest.mark.parametrize("algorithm,c", list({a: (a, c) for a, c in reversed(CASES)}.values()))
def test_release_buffers_frees_what_calls_keep(algorithm, c):
    """After calls at two widths, release_buffers lets the caller's dropped out= buffers go
    (no replay holds them), frees the scratch of both widths (the object holds what it held
    before its first call, plus what first calls build for good: S^T, moved values), and
    the next calls give bitwise the results they gave before."""
    import gc
    import weakref

    from distmm.core.memory import held_bytes

    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    before_calls = held_bytes(obj)
    wants = {}
    for r in (8, 19):
        A_r = obj.scatter("a", A[:, :r].copy(), root=None)
        B_r = obj.scatter("b", B[:, :r].copy(), root=None)
        for name, call in _calls(obj, A_r, B_r, r):
            for _ in range(3):
                res = call()
            wants[(r, name)] = np.array(res, copy=True)
    out = obj.dense("a", 19)
    for _ in range(3):
        obj.spmm_a(B_loc, out=out)
    gone = weakref.ref(out)
    used = held_bytes(obj)
    scratch = held_bytes(obj._kernels.scratch)  # nothing at p = 1 in a family that sends nothing
    obj.release_buffers()
    del out, res, call, A_r, B_r
    gc.collect()
    assert gone() is None
    # what stays beyond the blocks is what the first calls built for good: S^T and its
    # values (where a family stores them), never a buffer of a width
    built = held_bytes(obj) - before_calls
    assert 0 <= built < used - before_calls or scratch == 0
    fresh, *_ = _setup(algorithm, c)  # the same calls, once each
    for r in (8, 19):
        for _, call in _calls(fresh, fresh.scatter("a", A[:, :r].copy(), root=None),
                              fresh.scatter("b", B[:, :r].copy(), root=None), r):
            call()
    fresh.release_buffers()
    assert held_bytes(obj) == held_bytes(fresh)
    fresh.close()
    for r in (8, 19):
        A_r = obj.scatter("a", A[:, :r].copy(), root=None)
        B_r = obj.scatter("b", B[:, :r].copy(), root=None)
        for name, call in _calls(obj, A_r, B_r, r):
            np.testing.assert_array_equal(call(), wants[(r, name)], err_msg=f"{name} r={r}")
    obj.close()


def test_calls_at_widths_in_turns_each_keep_their_replay(monkeypatch):
    """The layers of a model call one operation at several widths in turns, each width
    through its own plan: after two calls of each width every call is replayed; the results
    are the oracle's and bitwise those of an object that sees each width alone, with the same
    counted words. Each plan holds its own operands only while it lives: a sweep over more
    widths keeps every width's plan replaying, and a dropped plan's operands are released."""
    import gc
    import weakref

    from distmm.core.memory import OPS

    obj, S, A, B, _, _ = _setup("15d-dense-shift", 1)
    ref = _setup("15d-dense-shift", 1)[0]
    via = Plans(obj)
    widths = (19, 8, 5)
    mine, alone, oracle = [], [], []
    for r in widths:
        Ar, Br = np.ascontiguousarray(A[:, :r]), np.ascontiguousarray(B[:, :r])
        oracle.append((Ar, Br))
        for o, calls, v in ((obj, mine, via), (ref, alone, None)):
            calls.append(_calls(o, o.scatter("a", Ar, root=None), o.scatter("b", Br, root=None),
                                r, v))
    full = _count_begins(obj, monkeypatch, OPS)
    names = [name for name, _ in mine[0]]
    for i, name in enumerate(names):
        for k in range(4):
            if k == 2:
                full[0] = 0
            for w in range(len(widths)):
                obj.stats.reset()
                got = mine[w][i][1]()
                ref.stats.reset()
                want = alone[w][i][1]()
                assert _words(obj) == _words(ref), (name, widths[w])
                assert np.array_equal(np.asarray(got), np.asarray(want)), (name, widths[w])
        assert full[0] == 0, name  # every call of the last two rounds replayed
        for w, (Ar, Br) in enumerate(oracle):
            check(*_gathered(obj, name, mine[w][i][1]()), S, Ar, Br, rtol=1e-10)
    kept = [key[2] for key, plan in via.plans.items() if key[0] == "spmm_a" and plan.replaying]
    assert sorted(kept) == sorted(widths)
    # more widths: each plan replays, and a plan let go releases what it held
    B6, out6 = obj.scatter("b", np.ascontiguousarray(B[:, :6]), root=None), obj.dense("a", 6)
    six = obj.plan("spmm_a", B6, out=out6)
    for _ in range(3):
        six()
    assert six.replaying
    held = [weakref.ref(B6), weakref.ref(out6)]
    del B6, out6
    narrow = []
    for r in (1, 2, 3, 4):
        Br, out = obj.scatter("b", np.ascontiguousarray(B[:, :r]), root=None), obj.dense("a", r)
        narrow.append(obj.plan("spmm_a", Br, out=out))
        for _ in range(3):
            narrow[-1]()
    assert six.replaying and all(plan.replaying for plan in narrow)
    gc.collect()
    assert [gone() is None for gone in held] == [False, False]  # six holds them
    del six
    gc.collect()
    assert [gone() is None for gone in held] == [True, True]
    obj.close()
    ref.close()
