"""Bound calls (``S.bind``: a call plan with out=, distmm/algorithms/plan.py): a callable for
one operation on fixed operands, which repeats the method's call without checking the operands
again where the family replays, and makes the method call in full everywhere else.

Against the method itself (checked against scipy in test_prepared_calls.py and the family
oracle tests): bitwise the same results and the same counted words and messages, every family
and valid c, every operation and FusedMM strategy; and against scipy where the operands, S's
values or the object's other calls change between two bound calls."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import check
from test_prepared_calls import CASES, _setup  # the same problem and family cases

import distmm
from distmm.errors import DistmmError, InputError

REPEATS = 4


def _cases(obj, A_loc, B_loc, r=19):
    """(name, op, operands, options, out) of every operation and strategy."""
    out_a, out_b, vals = obj.dense("a", r), obj.dense("b", r), np.empty_like(obj.values)
    cases = [("sddmm", "sddmm", (A_loc, B_loc), {}, vals),
             ("spmm_a", "spmm_a", (B_loc,), {}, out_a),
             ("spmm_b", "spmm_b", (A_loc,), {}, out_b)]
    for s in obj.strategies:
        cases.append((f"fusedmm_a {s}", "fusedmm_a", (A_loc, B_loc), {"strategy": s}, out_a))
        cases.append((f"fusedmm_b {s}", "fusedmm_b", (A_loc, B_loc), {"strategy": s}, out_b))
    return cases


def _counts(obj) -> dict:
    """Words and messages per phase, and kernel calls, flops and bytes per operation."""
    comm = {ph: dict(c) for ph, c in obj.stats.counts.items() if any(c.values())}
    kern = {op: (st["calls"], st["flops"], st["bytes"])
            for op, st in obj.kernel.stats.as_dict().items()}
    return {"comm": comm, "kernel": kern}


def _gathered(obj, op, res):
    return obj.gather_values(res) if op == "sddmm" else obj.gather(op[-1], res)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_bound_calls_match_the_method_bitwise_and_count_the_same(algorithm, c):
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    for name, op, operands, options, out in _cases(obj, A_loc, B_loc):
        method = getattr(obj, op)
        method(*operands, out=out, **options)
        obj.stats.reset()
        for _ in range(REPEATS):
            want = np.array(method(*operands, out=out, **options), copy=True)
        by_method = _counts(obj)
        call = obj.bind(op, *operands, out=out, **options)
        obj.stats.reset()
        for _ in range(REPEATS):
            out[...] = np.nan  # every call writes the whole result
            got = call()
            assert got is out or (isinstance(got, distmm.DenseBlock) and got.base is out
                                  or np.shares_memory(got, out)), name
            np.testing.assert_array_equal(got, want, err_msg=name)
        assert _counts(obj) == by_method, name
        check(op.replace("_", "-"), _gathered(obj, op, got), S, A, B, rtol=1e-10)
    obj.close()


def test_repeats_skip_the_checks_and_the_loop(monkeypatch):
    """In the family that replays (1.5D dense shifting, c = 1), a bound call's repeats neither
    check operands (the method's _begin) nor run the family's loop, for every call that
    the method replays (one kernel per step: not FusedMM's "none" and "reuse", whose SDDMM
    result feeds a second loop)."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    for name, op, operands, options, out in _cases(obj, A_loc, B_loc):
        if options.get("strategy") in ("none", "reuse"):
            continue
        call = obj.bind(op, *operands, out=out, **options)
        for _ in range(3):  # the first call, the traced second, then a replay
            call()
        with monkeypatch.context() as m:
            def refuse(*args, name=name, **kwargs):
                raise AssertionError(f"{name}: a repeat of a bound call went through "
                                     "the method")

            m.setattr(obj, "_begin", refuse)
            m.setattr(obj, "_propagate", refuse)
            m.setattr(obj, "_one_rank_step", refuse)  # the loop on one rank
            res = call()
        check(op.replace("_", "-"), _gathered(obj, op, res), S, A, B, rtol=1e-10)
    obj.close()


def test_bound_calls_of_one_operation_on_other_operands_each_replay(monkeypatch):
    """Two bound calls of one operation on different operands (and a method call of it on
    a third set) made in turns: each bound call keeps its own replay, so after their first
    calls neither goes through the method again; every result is right. release_buffers
    and set_values drop the bound calls' replays (their next calls run the family's loop)."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    B2 = B + 1.0
    B2_loc = obj.scatter("b", B2, root=None)
    out1, out2, out3 = obj.dense("a", 19), obj.dense("a", 19), obj.dense("a", 19)
    first = obj.bind("fusedmm_a", A_loc, B_loc, out=out1)
    second = obj.bind("fusedmm_a", A_loc, B2_loc, out=out2)
    for _ in range(3):  # the first calls, the traced seconds, then replays
        first()
        second()
        obj.fusedmm_a(A_loc, B_loc, out=out3)
    loops = []
    with monkeypatch.context() as m:
        def refuse(*args, **kwargs):
            raise AssertionError("a repeat of a bound call went through the method")

        m.setattr(obj, "_begin", refuse)
        m.setattr(obj, "_propagate", refuse)
        m.setattr(obj, "_one_rank_step", refuse)  # the loop on one rank
        for _ in range(2):
            res1, res2 = first(), second()
    check("fusedmm-a", obj.gather("a", res1), S, A, B, rtol=1e-10)
    check("fusedmm-a", obj.gather("a", res2), S, A, B2, rtol=1e-10)
    for loop in ("_propagate", "_one_rank_step"):  # the family's loop (on one rank: its step)
        real = getattr(obj, loop)
        monkeypatch.setattr(obj, loop, lambda *a, _f=real, **k: loops.append(1) or _f(*a, **k))
    obj.release_buffers()
    check("fusedmm-a", obj.gather("a", first()), S, A, B, rtol=1e-10)
    assert loops, "release_buffers left a bound call's replay"
    for _ in range(2):
        second()
    del loops[:]
    obj.set_values(obj.values * 2.0)
    check("fusedmm-a", obj.gather("a", second()), 2.0 * S, A, B2, rtol=1e-10)
    assert loops, "set_values left a bound call's replay"
    obj.close()


def test_more_operand_sets_than_kept_by_id_all_replay(monkeypatch):
    """More bound calls of one operation in turns than a kernel keeps operand sets by id
    (prepared.PREPARED_SOURCES): each still keeps a replay of its own, and every result is
    right."""
    from distmm.algorithms.prepared import PREPARED_SOURCES

    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    k = PREPARED_SOURCES + 3
    Bs = [B + j for j in range(k)]
    calls = [obj.bind("spmm_a", obj.scatter("b", Bj, root=None), out=obj.dense("a", 19))
             for Bj in Bs]
    for _ in range(3):
        for call in calls:
            call()

    def refuse(*args, **kwargs):
        raise AssertionError("a repeat of a bound call went through the family's loop")

    monkeypatch.setattr(obj, "_propagate", refuse)
    monkeypatch.setattr(obj, "_one_rank_step", refuse)  # the loop on one rank
    for call, Bj in zip(calls, Bs, strict=True):
        check("spmm-a", obj.gather("a", call()), S, A, Bj, rtol=1e-10)
    obj.close()


def test_bound_calls_of_two_widths_in_turns_each_replay(monkeypatch):
    """Bound calls of one operation at two widths made in turns (the layers of a GAT): the
    prepared kernel calls are kept per width, so neither width's calls replace the other's
    and both bound calls replay; every result is right."""
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    A7, B7 = np.ascontiguousarray(A[:, :7]), np.ascontiguousarray(B[:, :7] - 0.5)
    A7_loc, B7_loc = obj.scatter("a", A7, root=None), obj.scatter("b", B7, root=None)
    wide = obj.bind("spmm_a", B_loc, out=obj.dense("a", 19))
    narrow = obj.bind("sddmm", A7_loc, B7_loc, out=np.empty_like(obj.values))
    narrow_spmm = obj.bind("spmm_a", B7_loc, out=obj.dense("a", 7))
    for _ in range(3):
        wide(), narrow(), narrow_spmm()
    with monkeypatch.context() as m:
        def refuse(*args, **kwargs):
            raise AssertionError("a repeat of a bound call went through the method")

        m.setattr(obj, "_begin", refuse)
        m.setattr(obj, "_propagate", refuse)
        m.setattr(obj, "_one_rank_step", refuse)  # the loop on one rank
        res = [wide(), narrow(), narrow_spmm()]
    check("spmm-a", obj.gather("a", res[0]), S, None, B, rtol=1e-10)
    check("sddmm", obj.gather_values(res[1]), S, A7, B7, rtol=1e-10)
    check("spmm-a", obj.gather("a", res[2]), S, None, B7, rtol=1e-10)
    obj.close()


@pytest.mark.parametrize("algorithm,c", CASES)
def test_changes_between_bound_calls_reach_the_next(algorithm, c):
    """New operand contents, new values of S, a call of the same operation on other operands
    in between, a new numba plan state: each bound call still computes the right result."""
    obj, S, A, B, A_loc, B_loc = _setup(algorithm, c)
    out, other = obj.dense("a", 19), obj.dense("a", 19)
    call = obj.bind("fusedmm_a", A_loc, B_loc, out=out)
    for _ in range(3):
        call()
    A_loc[...] *= 2.0  # in place: the same object, new contents
    check("fusedmm-a", obj.gather("a", call()), S, 2.0 * A, B, rtol=1e-10)
    A_loc[...] /= 2.0
    B2_loc = obj.scatter("b", B + 1.0, root=None)
    for _ in range(3):
        obj.fusedmm_a(A_loc, B2_loc, out=other)  # the object's replay is now for B2
    check("fusedmm-a", obj.gather("a", call()), S, A, B, rtol=1e-10)
    check("fusedmm-a", obj.gather("a", other), S, A, B + 1.0, rtol=1e-10)
    rows, cols = obj.value_coordinates()
    obj.set_values(np.sin(obj.row_perm[rows] + 2.0 * obj.col_perm[cols]) + 2.0)
    got = obj.gather("a", call())
    S2 = S.tocoo()
    S2.sum_duplicates()
    S2.data = np.sin(S2.row + 2.0 * S2.col) + 2.0
    check("fusedmm-a", got, S2.tocsr(), A, B, rtol=1e-10)
    obj._plan_state = ("a plan state that no longer holds",)
    check("fusedmm-a", obj.gather("a", call()), S2.tocsr(), A, B, rtol=1e-10)
    obj.close()
    with pytest.raises(DistmmError):
        call()


def test_bind_refuses_unknown_operations_and_a_missing_out():
    obj, S, A, B, A_loc, B_loc = _setup("15d-dense-shift", 1)
    with pytest.raises(InputError, match="unknown operation 'gather'"):
        obj.bind("gather", A_loc, out=obj.dense("a", 19))
    with pytest.raises(InputError, match="needs out="):
        obj.bind("spmm_a", B_loc, out=None)
    # a bad operand is refused by the first call, as the method refuses it, on every rank
    call = obj.bind("spmm_a", A_loc, out=obj.dense("a", 19))
    with pytest.raises(InputError):
        call()
    obj.close()
    with pytest.raises(DistmmError):
        obj.bind("spmm_a", B_loc, out=np.empty((3, 19)))
