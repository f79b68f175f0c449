"""Random sequences of calls on one distributed object, each result checked against scipy.

The object keeps state between calls: remembered checks, prepared kernel calls (reused for
alike arrays), call plans with their traced and replayed steps, moved copies of named value
vectors, S^T. Each piece
has its own targeted test (test_prepared_calls.py, test_values_per_call.py, test_set_values.py,
test_r_per_call.py); this one interleaves them as a training loop or a user's session might:
every operation and strategy, with and without ``out=``, as plain calls or through a plan
per call kind (``S.plan``) that is given the operands of each call, the same or new operand objects,
operands changed in place, two widths, S's own values, a named vector, a vector per call, S's
values replaced and a name registered again, and the check policy switched. Every rank draws
the same sequence (one seed per case). After every call the result is gathered and compared
with scipy on the values in force, and every earlier result that no later call was allowed
to write (a returned new array, an ``out=`` buffer not passed since) must be unchanged: a
replay or a kept call that wrote the wrong array, or ran on stale operands or values, fails
here.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.algorithms import plan as plan_module

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
M, N, R = 30, 27, 19
WIDTHS = (R, 9)
STEPS = 25
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a, min(WIDTHS))]
OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def _value_fn(k: int):
    """The k-th family of edge values, as a function of global coordinates (k = 0: S's own,
    handled by the caller)."""
    return lambda i, j: np.sin(k * i + 2.0 * j + 0.3 * k) + 2.0 + 0.1 * k


class Session:
    """One distributed object, the global operands its local blocks hold, and the oracle's view
    of every value vector; draws and runs random calls."""

    def __init__(self, algorithm: str, c: int, seed: int, widths: tuple = WIDTHS) -> None:
        self.rng = np.random.default_rng(seed)  # the same draws on every rank
        self.S, _, _ = problem(M, N, R, seed=seed)
        coo = sp.coo_matrix(self.S)
        coo.sum_duplicates()
        self.coo = coo
        self.obj = distmm.distribute(self.S, COMM, algorithm=algorithm, c=c,
                                     dtype=np.float64, root=None)
        rows, cols = self.obj.value_coordinates()
        # global coordinates of this rank's values, in value order
        self.gi, self.gj = self.obj.row_perm[rows], self.obj.col_perm[cols]
        self.s_fn = None  # None: S's own values; else a function of global coordinates
        self.named_fn = None  # the function registered as "w", once registered
        self.widths = [r for r in widths if r >= self.obj.r_rule()[0]]
        self.ops = {r: self._new_operands(r) for r in self.widths}
        self.buffers = {}  # (kind, r, slot) -> out= buffer
        self.kept = []  # (array, its expected content, buffer key or None)
        self.value_k = 0
        self.recent = []  # the last few calls drawn, repeated at random
        self.plans = {}  # call kind -> its plan (calls drawn as planned)
        self.replayed = 0  # plan calls that ran kept steps (counted by the test's patch)

    # -------------------------------------------------------------------- operands
    def _new_operands(self, r: int):
        A = self.rng.standard_normal((M, r))
        B = self.rng.standard_normal((N, r))
        return [A, B, self.obj.scatter("a", A, root=None), self.obj.scatter("b", B, root=None)]

    def _matrix(self, fn) -> sp.coo_matrix:
        """S's pattern with values ``fn`` (None: S's own values)."""
        if fn is None:
            return self.coo
        return sp.coo_matrix((fn(self.coo.row, self.coo.col), (self.coo.row, self.coo.col)),
                             shape=self.S.shape)

    def _buffer(self, kind: str, r: int, slot: int) -> np.ndarray:
        key = (kind, r, slot)
        if key not in self.buffers:
            if kind == "values":
                self.buffers[key] = np.empty_like(self.obj.values)
            else:
                self.buffers[key] = self.obj.dense(kind, r)
        return self.buffers[key]

    # -------------------------------------------------------------------- one step
    def change_state(self) -> str:
        """Sometimes change something between calls; returns what (for failure messages)."""
        u = self.rng.random()
        r = self.widths[self.rng.integers(len(self.widths))]
        A, B, A_loc, B_loc = self.ops[r]
        if u < 0.05:
            self.ops[r] = self._new_operands(r)
            return f"new operand objects r={r}"
        if u < 0.10:
            f = 1.0 + self.rng.random()
            A *= f
            A_loc[...] *= f
            return f"A scaled in place r={r}"
        if u < 0.15:
            f = 1.0 + self.rng.random()
            B *= f
            B_loc[...] *= f
            return f"B scaled in place r={r}"
        if u < 0.19:
            self.value_k += 1
            self.s_fn = _value_fn(self.value_k)
            self.obj.set_values(self.s_fn(self.gi, self.gj))
            return "set_values"
        if u < 0.23:
            self.value_k += 1
            self.named_fn = _value_fn(self.value_k)
            self.obj.set_named_values("w", self.named_fn(self.gi, self.gj))
            return "set_named_values w"
        if u < 0.26:
            policy = ("once", "always", "off")[self.rng.integers(3)]
            self.obj.checks = policy
            return f"checks={policy}"
        return "nothing"

    def _draw(self) -> tuple:
        """A new call: (op, r, strategy, values, fn, out key)."""
        obj, rng = self.obj, self.rng
        op = OPS[rng.integers(len(OPS))]
        r = self.widths[rng.integers(len(self.widths))]
        strategy = None
        if op.startswith("fusedmm"):
            strategy = obj.strategies[rng.integers(len(obj.strategies))]
        u = rng.random()
        if u < 0.5 or (u < 0.7 and self.named_fn is None):
            values, fn = None, "S"
        elif u < 0.7:
            values, fn = "w", "w"
        else:
            self.value_k += 1
            fn = _value_fn(self.value_k)
            values = fn(self.gi, self.gj)
        kind = "values" if op == "sddmm" else op[-1]
        u = rng.random()
        key = None if u < 0.3 else (kind, r, int(u < 0.85))
        planned = bool(rng.random() < 0.6)
        return op, r, strategy, values, fn, key, planned

    def call(self) -> str:
        """Run one call 1-4 times in a row (half the time a call made before, as loops do),
        checking each result and the results it must not have touched."""
        if self.recent and self.rng.random() < 0.5:
            spec = self.recent[self.rng.integers(len(self.recent))]
        else:
            spec = self._draw()
            self.recent = (self.recent + [spec])[-4:]
        what = ""
        for _ in range(self.rng.integers(1, 5)):  # a loop repeats its call
            what = self._run(spec)
        return what

    def _run(self, spec: tuple) -> str:
        obj = self.obj
        op, r, strategy, values, fn, key, planned = spec
        fn = {"S": self.s_fn, "w": self.named_fn}.get(fn, fn) if isinstance(fn, str) else fn
        A, B, A_loc, B_loc = self.ops[r]
        kind = "values" if op == "sddmm" else op[-1]
        out = None if key is None else self._buffer(*key)
        what = (f"{op} r={r} strategy={strategy} values="
                f"{'array' if isinstance(values, np.ndarray) else values} "
                f"out={'new' if key is None else key} checks={obj.checks} "
                f"{'planned' if planned else 'plain'}")
        dense = {"sddmm": (A_loc, B_loc), "spmm_a": (B_loc,), "spmm_b": (A_loc,),
                 "fusedmm_a": (A_loc, B_loc), "fusedmm_b": (A_loc, B_loc)}[op]
        options = {} if strategy is None else {"strategy": strategy}
        if not planned:
            res = getattr(obj, op)(*dense, values=values, out=out, **options)
        else:  # one plan per kind of call, given this call's operands
            kind_key = (op, r, strategy, isinstance(values, np.ndarray) or values, key)
            plan = self.plans.get(kind_key)
            if plan is None:
                plan = self.plans[kind_key] = obj.plan(op, *dense, values=values, out=out,
                                                       **options)
                res = plan()
            else:
                res = plan(*dense, values=values, out=out)
        if out is not None:
            assert res is out, what
        else:  # a new array: no earlier result, no buffer the caller holds
            assert not any(np.shares_memory(res, x) for x, _, _ in self.kept), what
            assert not any(np.shares_memory(res, x) for x in self.buffers.values()), what
        got = obj.gather_values(res) if op == "sddmm" else obj.gather(kind, res)
        check(op.replace("_", "-"), got, self._matrix(fn), A, B, rtol=1e-10)
        # earlier results this call could not write must be as they were
        for arr, want, k in self.kept:
            if k != key:
                np.testing.assert_array_equal(arr, want, err_msg=f"after {what}: an earlier "
                                              f"result ({k or 'returned array'}) changed")
        self.kept = [x for x in self.kept if x[2] is None or x[2] != key]
        self.kept.append((res, np.array(res, copy=True), key))
        if len(self.kept) > 12:
            self.kept.pop(0)
        return what


def _run(s: Session, seed: int, steps: int) -> None:
    """``steps`` random steps of session ``s`` (a change of state, then a call), the last few
    named in a failure; the object is closed after them."""
    history = []
    try:
        for _ in range(steps):
            history.append(s.change_state())
            history.append(s.call())
    except AssertionError as e:
        raise AssertionError(f"{e}\nsequence (seed {seed}):\n  "
                             + "\n  ".join(history[-12:])) from None
    finally:
        s.obj.close()


def _count_replays(s: Session, monkeypatch) -> None:
    """Count the plan calls of ``s`` that ran kept steps (plan.run_steps) in s.replayed."""
    real = plan_module.run_steps

    def counted(stats, steps):
        s.replayed += stats is s.obj.stats
        real(stats, steps)

    monkeypatch.setattr(plan_module, "run_steps", counted)


@pytest.mark.parametrize("algorithm,c", CASES)
def test_random_call_sequences_match_scipy(algorithm, c, monkeypatch):
    seed = 1000 + 17 * list(distmm.ALGORITHMS).index(algorithm) + c
    s = Session(algorithm, c, seed)
    _count_replays(s, monkeypatch)
    _run(s, seed, STEPS)
    if algorithm == "15d-dense-shift" and c == 1:
        # the family whose calls replay: the sequence must have exercised replays
        assert s.replayed > 0


@pytest.mark.parametrize("seed", [7, 8])
def test_random_call_sequences_at_more_widths_match_scipy(seed, monkeypatch):
    """Calls at six widths in 1.5D dense shifting, many kinds of call each with its plan:
    plans replay, their kept steps are dropped (new values of S, a name registered again, a
    new plan state) and traced again, and every result is still scipy's, with no earlier
    result written."""
    s = Session("15d-dense-shift", 1, seed, widths=(R, 9, 7, 5, 4, 3))
    _count_replays(s, monkeypatch)
    dropped, forget = [], plan_module.CallPlan.forget

    def counted(plan):
        dropped.append(plan.replaying)
        forget(plan)

    monkeypatch.setattr(plan_module.CallPlan, "forget", counted)
    _run(s, seed, 4 * STEPS)
    assert s.replayed > 0
    assert any(dropped)  # some plan's kept steps were dropped
