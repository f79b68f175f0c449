"""The checks policy: "always", "once" (default) and "off", in every family.

"once" runs the full validation and cross-rank agreement on the first call of each kind and no
collective after it when the blocks are typed (the "other" phase stays silent), while still
refusing, on every rank, a block of the wrong side or dtype; it no longer diagnoses a NaN that
appears later (the documented loss). "always" agrees on every call; "off" checks nothing. All
three give the same results.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a)]


def make(algorithm, c, checks):
    S, _, _ = problem(22, 18, 1, seed=5)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            checks=checks)
    r = obj.r_rule()[0] + 1
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((22, r)), rng.standard_normal((18, r))
    return obj, S, A, B, obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)


def other_words(obj, fn, calls=3):
    obj.stats.reset()
    for _ in range(calls):
        fn()
    return obj.stats.words("other"), obj.stats.words("other", "messages_sent")


@pytest.mark.parametrize("algorithm,c", CASES)
def test_once_agrees_on_the_first_call_only(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, "once")
    first = other_words(obj, lambda: obj.fusedmm_a(A_loc, B_loc), calls=1)
    later = other_words(obj, lambda: obj.fusedmm_a(A_loc, B_loc))
    assert first == ((P - 1, P - 1) if P > 1 else (0, 0))
    assert later == (0, 0)  # typed blocks: no collective at all after the first call
    # Plain arrays in a family that splits r: one all-gather of one integer per call.
    plain = other_words(obj, lambda: obj.fusedmm_a(np.asarray(A_loc), np.asarray(B_loc)))
    assert plain == ((3 * (P - 1), 3 * (P - 1)) if obj.splits_r and P > 1 else (0, 0))
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc)), S, A, B, rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_always_agrees_on_every_call_and_off_never(algorithm, c):
    results = {}
    for checks in ("always", "off"):
        obj, S, A, B, A_loc, B_loc = make(algorithm, c, checks)
        words = other_words(obj, lambda obj=obj, A_loc=A_loc: obj.spmm_b(A_loc))
        assert words == ((3 * (P - 1), 3 * (P - 1)) if checks == "always" and P > 1 else (0, 0))
        results[checks] = obj.gather("b", obj.spmm_b(A_loc))
        check("spmm-b", results[checks], S, A, B, rtol=1e-10)
        obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_cheap_checks_still_refuse_side_and_dtype_everywhere(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, "once")
    obj.spmm_a(B_loc)
    obj.sddmm(A_loc, B_loc)
    with pytest.raises(InputError, match="side-'a' block.*cheap local checks"):
        obj.spmm_a(A_loc)
    with pytest.raises(InputError, match="dtype"):
        obj.spmm_a(B_loc.astype(np.float32))
    strided = np.repeat(np.asarray(A_loc), 2, axis=1)[:, ::2]  # every rank has >= 2 rows
    with pytest.raises(InputError, match="C-contiguous"):
        obj.sddmm(strided, B_loc)
    with pytest.raises(InputError, match="values must be"):
        obj.spmm_a(B_loc, values=np.ones(obj.values.size + 1))
    obj.close()


def _read_only(X):
    X.flags.writeable = False
    return X


@pytest.mark.parametrize("checks", ["once", "always"])
@pytest.mark.parametrize("op", ["spmm_a", "sddmm", "fusedmm_a"])
@pytest.mark.parametrize("bad", ["read-only out", "strided values"])
def test_a_buffer_the_kernels_cannot_take_on_one_rank_is_refused_everywhere(checks, op, bad):
    """An out= buffer that is read-only, or a values array that is not contiguous, on one
    rank only is refused on every rank by the agreed checks (the first call under "once",
    every call under "always") with an InputError naming it, before any kernel runs (the
    node model's own check would fail that rank alone, inside the call); nothing is
    written. The same call with a good buffer then runs."""
    obj, S, A, B, A_loc, B_loc = make("15d-dense-shift", 1, checks)
    out = np.zeros(obj.values.size) if op == "sddmm" else obj.dense("a", A_loc.r)
    values = obj.values.copy()
    odd = COMM.rank == P - 1
    if bad == "read-only out" and odd:
        out.flags.writeable = False
    if bad == "strided values" and odd:
        values = np.repeat(values, 2)[::2]
    call = {"spmm_a": lambda: obj.spmm_a(B_loc, values=values, out=out),
            "sddmm": lambda: obj.sddmm(A_loc, B_loc, values=values, out=out),
            "fusedmm_a": lambda: obj.fusedmm_a(A_loc, B_loc, values=values, out=out)}[op]
    what = "out= is read-only" if bad == "read-only out" else "values must be C-contiguous"
    with pytest.raises(InputError, match=what + (f".*reported by rank {P - 1}" if P > 1
                                                 else "")):
        call()
    assert not np.asarray(out).any()
    assert sum(st["calls"] for st in obj.kernel.stats.as_dict().values()) == 0
    out.flags.writeable = True
    values = obj.values.copy()
    call()
    assert np.asarray(out).any()
    obj.close()


def _quick_cases(obj, A_loc, B_loc):
    """(label, dense, values, out, out_side, quick expected) for the quick path's test:
    well-formed calls it must take, and calls with one thing wrong that only the cheap
    checks may judge. The wrong ones are wrong on every rank (typed blocks: r is known
    locally, so no cheap check communicates)."""
    r = A_loc.r
    vals = obj.values.copy()
    outa, outv = obj.dense("a", r), np.empty(obj.values.size)
    whole = not obj.splits_r  # a plain array gives r only where blocks keep whole rows
    strided = np.repeat(np.asarray(A_loc), 2, axis=1)[:, ::2]  # every rank has >= 2 rows
    return [
        ("typed", (("b", B_loc, "B"),), None, None, None, True),
        ("typed, values and out", (("b", B_loc, "B"),), vals, outa, "a", True),
        ("sddmm into values", (("a", A_loc, "A"), ("b", B_loc, "B")), None, outv, "values",
         True),
        ("plain arrays", (("a", np.asarray(A_loc), "A"), ("b", np.asarray(B_loc), "B")), None,
         None, None, whole),
        ("wrong side", (("b", A_loc, "B"),), None, None, None, False),
        ("wrong dtype", (("b", B_loc.astype(np.float32), "B"),), None, None, None, False),
        ("not C-contiguous", (("a", strided, "A"), ("b", B_loc, "B")), None, None, None, False),
        ("values too long", (("b", B_loc, "B"),), np.ones(vals.size + 1), None, None, False),
        ("values of another dtype", (("b", B_loc, "B"),), vals.astype(np.float32), None, None,
         False),
        ("out of another width", (("b", B_loc, "B"),), None, obj.dense("a", r + 1), "a", False),
        ("out on the wrong side", (("b", B_loc, "B"),), None, obj.dense("b", r), "a", False),
        ("out is an input", (("a", A_loc, "A"), ("b", B_loc, "B")), None, A_loc, "a", False),
        ("out shares the values", (("b", B_loc, "B"),), vals, vals, "values", False),
        ("read-only out", (("b", B_loc, "B"),), None, _read_only(obj.dense("a", r)), "a",
         False),
        ("strided values", (("b", B_loc, "B"),), np.repeat(vals, 2)[::2], None, None, False),
        ("read-only sddmm out", (("a", A_loc, "A"), ("b", B_loc, "B")), None,
         _read_only(np.empty(obj.values.size)), "values", False),
    ] + ([  # a view of a block in another shape is a plain array, of width 1 here
        ("untyped view", (("b", B_loc.reshape(-1, 1)[:B_loc.shape[0]], "B"),), None, None,
         None, True)] if whole else [])


@pytest.mark.parametrize("algorithm,c", CASES)
def test_the_quick_path_agrees_with_the_cheap_checks(algorithm, c):
    """The quick path of a call with new operands (CallChecks.quick_r) gives the cheap checks'
    r where it answers, answers for the well-formed calls a loop makes, and leaves every call with
    something wrong to the cheap checks (which raise)."""
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, "once")
    for label, dense, values, out, out_side, quick in _quick_cases(obj, A_loc, B_loc):
        got = obj._calls.quick_r(dense, values, out, out_side)
        try:
            want = obj._calls.cheap_check(dense, values, out, out_side)
        except InputError:
            want = None
        assert (want is not None) == (label in ("typed", "typed, values and out",
                                                "sddmm into values", "plain arrays",
                                                "untyped view")), label
        assert got == (want if quick else None), label
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_repeated_operands_are_checked_once_and_changes_still_refused(algorithm, c):
    """A loop that passes the same buffers skips the cheap checks after the first of them
    (the operands are remembered); new or reshaped operands are checked again, and the results
    and counted words are those of a checked call."""
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, "once")
    out = obj.scatter("a", np.zeros((22, A.shape[1])), root=None)
    vals = obj.values.copy()
    words = other_words(obj, lambda: obj.spmm_a(B_loc, values=vals, out=out), calls=4)
    assert words == ((P - 1, P - 1) if P > 1 else (0, 0))  # the first call's agreement only
    assert obj._call_key("spmm_a", B_loc) in obj._calls.memo
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc, values=vals, out=out)), S, A, B,
          rtol=1e-10)
    with pytest.raises(InputError, match="values must be"):
        obj.spmm_a(B_loc, values=np.ones(vals.size + 1), out=out)
    with pytest.raises(InputError, match="dtype"):
        obj.spmm_a(B_loc, values=vals, out=out.astype(np.float32))
    shape = out.shape
    out.shape = (out.size,)  # the same object, reshaped in place: no longer 2-D
    with pytest.raises(InputError, match="2-D"):
        obj.spmm_a(B_loc, values=vals, out=out)
    out.shape = shape
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc, values=vals, out=out)), S, A, B,
          rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("checks", ["once", "always"])
def test_nan_after_the_first_call(checks):
    """A NaN appearing in a later iteration: "always" refuses it on every rank, "once" lets it
    through into the result (the loss the docstring names)."""
    algorithm, c = CASES[0]
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, checks)
    obj.spmm_b(A_loc)
    bad = A_loc.copy()
    bad[...] = np.nan
    if checks == "always":
        with pytest.raises(InputError, match="NaN"):
            obj.spmm_b(bad)
    else:
        out = obj.spmm_b(bad)
        assert COMM.allreduce(int(np.isnan(out).any())) > 0
    obj.close()


def test_unknown_policy_refused():
    S, _, _ = problem(6, 6, 1)
    with pytest.raises(InputError, match="checks must be one of"):
        distmm.distribute(S, COMM, root=None, checks="sometimes")
