"""Replaying a call that repeats the last call of its kind: its kernels and shifts alone.

A training loop calls one operation many times with the same operand objects and an ``out=``
buffer. Where the family's whole call is then a fixed sequence of local kernels on the
caller's arrays and cyclic shifts between the object's buffers (1.5D dense shifting with
c = 1 and no overlap: nothing replicated, reduced or copied; on one rank a single kernel;
:meth:`DistributedAlgorithm._replayable`), the second such call is traced (only a call that
passes the very operands of the call before, or a bound call's, is traced: a loop on new
operands builds no replay it would not use): if every kernel ran
through a prepared call kept from the call before (:meth:`DistributedAlgorithm._run_kernel`),
the steps (each kernel's prepared call and arguments, each shift's buffers and partners) are
kept, and every later call that passes the very same operands, unchanged (as
:meth:`CallChecks._recall` checks them: the same objects, plain arrays with the same shapes,
strides and dtypes, typed blocks with the same layout token, which any assignment to the
block drops: :meth:`~distmm.core.dense.DenseBlock.layout_token`), the same strategy and the
same node-model plan state runs those steps directly, skipping the checks and the family's
loop. Its result is bitwise the same, it sends the same messages in the same order, and its
statistics are the same (the kernels' own seconds in "compute", the node model's
per-operation counts, every shift counted and timed in "propagation").

Ranks need not agree on replaying: a rank that replays makes the very MPI calls that the full
call would make, and the full call of a kind after its first makes no other (its cheap checks
are local in the families that replay). A call without ``out=`` writes a new array: it is
never traced, so never replayed (its kernels still reuse the prepared calls of the call
before, which serve any result array of the same shape and layout).

A bound call (:meth:`CallReplay.bind`, :class:`BoundCall`) fixes one operation's operands for a
loop: once its own call has left a replay, the bound call keeps that replay itself, and its
repeats run the kept steps without comparing the operands again (the caller promises that
their shapes, dtypes and layout stay as they are) while the plan state is unchanged. Calls
of the same operation on other operands in between (another bound call, a method call) do not
take it away: each bound call has its own, so several bound calls of one operation (the heads
of a multi-head attention layer, say) all replay.

The object's replay of a kind holds its arguments (views of the operands and buffers) until
the next call of its kind that cannot be replayed; every replay, the bound calls' included, is
dropped by :meth:`~DistributedAlgorithm.set_values`, a change of named vectors,
:meth:`~DistributedAlgorithm.release_buffers`, a change of the plan state and
:meth:`~DistributedAlgorithm.close`. Only under ``checks="once"`` (the default): a call under
``"always"`` is checked in full every time, and one under ``"off"`` is not remembered.
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms.calls import unchanged
from distmm.core.memory import OPS
from distmm.errors import InputError


class CallReplay:
    """Mixin of :class:`~distmm.algorithms.base.DistributedAlgorithm`: replayed calls.

    Uses the object's ``checks``, ``kernel``, ``stats``, ``_plan_state``, ``_memo`` and
    :meth:`_recall` (calls.py), and the family hook :meth:`_replayable`."""

    # set while a bound call makes its method call in full (BoundCall.__call__)
    _binding = False

    def _replayable(self) -> bool:
        """Whether a call with an ``out=`` buffer is local kernels on the caller's arrays and
        shifts between the object's buffers and nothing else, always the same steps for the
        same operands, so that a repeat may run those steps alone. Families override it."""
        return False

    def _replay(self, kind: str, operands: tuple, extra=None):
        """The result of running the kept steps of ``kind`` again, or None when this call is
        not a repeat of the traced one (then the caller runs the call in full). Collective
        where the steps shift (over the layer, as the full call).

        ``operands`` are the call's dense operands in the public method's order, then its
        values (None or an array) and its ``out``. A repeat passes the very objects of the
        traced call, unchanged (as :meth:`_recall` checks them),
        under the same ``extra`` (FusedMM's strategy) and node-model plan state."""
        kept = self._replays.get(kind)
        if kept is None:
            return None
        held, ext, steps, result = kept
        if ext != extra:
            return None
        # Written out (with an index, cheaper than zip): a training loop pays for this on
        # every call, and it is most of what a replayed call does besides its kernels. A typed
        # block's layout is checked by its token (DenseBlock.layout_token): one attribute
        # read, where shape, strides and dtype are three, two of them new tuples each time.
        i = 0
        for h in held:
            X = operands[i]
            i += 1
            if h is None:
                if X is not None:
                    return None
                continue
            obj, shape, strides, dtype, token = h
            if X is not obj:
                return None
            if token is not None:
                if X._layout is not token:
                    return None
            elif (X.shape != shape or X.strides != strides
                  or (X.dtype is not dtype and X.dtype != dtype)):
                return None
        if self.kernel.plan_state() != self._plan_state:
            return None
        self._run_steps(steps)
        return result

    def _run_steps(self, steps: tuple) -> None:
        """Run a kept replay's steps: each kernel's prepared call (its seconds added to
        "compute") and each shift, in order. Collective where the steps shift."""
        seconds = self.stats.seconds
        for fn, args, timed in steps:
            if timed:
                seconds["compute"] += fn(*args)
            else:
                fn(*args)

    def bind(self, op: str, *operands, out, **options) -> BoundCall:
        """``op``'s call on fixed operands, as a callable for a loop: ``call()`` is
        ``getattr(S, op)(*operands, out=out, **options)``, minus the checks of a repeat.

        Parameters
        ----------
        op : {"sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"}
            The operation.
        *operands
            Its dense operands, as the method takes them (``B`` for spmm_a, ``A, B`` for
            sddmm and FusedMM).
        out : DenseBlock or ndarray
            The result buffer, written by every call (required: a bound call never allocates).
        **options
            The method's other keywords (``values``, FusedMM's ``strategy``).

        Returns
        -------
        BoundCall
            ``call()`` returns the result (``out``). Collective, like the method: every rank
            of the object calls it, in the same order as its other collective calls.

        Where the method's repeated call is replayed (replay.py: 1.5D dense shifting with
        c = 1 and no overlap, under ``checks="once"``), the bound call keeps the replay its
        own call left, and its repeats run the kept steps without comparing its operands with
        the traced ones, as long as the node model's plan state is unchanged and no
        :meth:`set_values`, named-vector change, :meth:`release_buffers` or :meth:`close`
        dropped the object's replays. Other calls of ``op`` on other operands in between do
        not matter. Otherwise, and in every other family, it makes the method call in full,
        checks included. The kept replay holds views of the operands and of the object's
        buffers until it is dropped or the bound call is. The operands' contents may change between
        calls; their shapes, dtypes and memory layout must not (they are not looked at again;
        an array reshaped in place would be read with its old shape). Not collective (binding
        only remembers the arguments; the first call checks them, on every rank).
        """
        self._require_open()
        method = getattr(self, op, None) if op in OPS else None
        if method is None:
            raise InputError(f"bind: unknown operation {op!r}; choose one of {', '.join(OPS)}")
        if out is None:
            raise InputError("bind needs out=: a bound call writes the same buffer every time")
        call = BoundCall(self, op, method, operands, dict(options, out=out))
        self._bound_calls.add(call)
        return call

    def _start_trace(self, kind: str) -> None:
        """Start a call of ``kind`` that is not replayed (called by ``_begin``, before its
        checks): its replay is dropped, so that a call that fails before
        :meth:`_keep_replay` leaves none behind, and nothing is traced yet
        (:meth:`_trace_if_repeated` decides)."""
        self._replays.pop(kind, None)
        self._trace = None

    def _trace_if_repeated(self, has_out: bool, repeat: bool) -> None:
        """Trace the steps of the call that ``_begin`` just checked if a repeat of it may be
        replayed: it passes the very operands of the last call of its kind (``repeat``:
        :meth:`_recall` knew them) or is a bound call's (:meth:`BoundCall.__call__`, whose
        next calls take its replay whatever other calls come between). A loop that passes
        new operands every time builds no replay it would never use. A call without an
        ``out=`` buffer (``has_out`` false) is not traced: its result is a new array, and a
        replay would write the last call's array again (where the new array only receives a
        shift, as SpMMB's result does at q > 1, every kernel is a kept call)."""
        if ((repeat or self._binding) and has_out and self.checks == "once"
                and self._replayable()):
            self._trace = []

    def _traced(self, hit: bool, run, args: tuple) -> None:
        """Note one kernel of the traced call (the caller checks that a call is traced):
        whether its prepared call was kept from the call before (``hit``), the call and its
        arguments."""
        self._trace.append((hit, run, args, True))

    def _traced_shift(self, comm, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int,
                      source: int) -> None:
        """Note one cyclic shift of the traced call (``comm.shift`` with these arguments, kept
        as :meth:`~distmm.core.comm.CountingComm.prepared_shift`), if the call is traced."""
        if self._trace is not None:
            self._trace.append((True, comm.prepared_shift(sendbuf, recvbuf, dest, source), (),
                                False))

    def _keep_replay(self, kind: str, result, extra=None) -> None:
        """After a call of ``kind``: keep its steps for replay if every kernel was a kept
        prepared call and its operands are remembered (:meth:`_remember`), else forget any
        replay of ``kind``.

        The replay holds the operand objects themselves (it holds views of their data in its
        steps' arguments already, so this keeps no more memory alive), so that a repeat is
        recognised by identity without dereferencing the memo's weak references."""
        trace, self._trace = self._trace, None
        memo = self._memo.get(kind)
        held = None
        if (trace and memo is not None and any(timed for *_, timed in trace)
                and all(hit for hit, *_ in trace)):
            held = tuple(None if h is None else _held_operand(h) for h in memo[1])
        if held is not None and all(h is None or h[0] is not None for h in held):
            steps = tuple((fn, args, timed) for _, fn, args, timed in trace)
            self._replays[kind] = (held, extra, steps, result)
        else:
            self._replays.pop(kind, None)

    def _forget_replays(self) -> None:
        """Drop every kept replay, the bound calls' included. Not collective."""
        self._replays.clear()
        self._trace = None
        for call in self._bound_calls:
            call._kept = None


def _held_operand(held: tuple) -> tuple:
    """What a replay keeps of one operand that the call's checks remembered
    (:meth:`CallChecks._remember`: a weak reference, shape, strides, dtype and a typed block's
    layout token): the same with the object itself in the reference's place, None if it is
    gone or no longer as it was checked (:func:`~distmm.algorithms.calls.unchanged`)."""
    X = held[0]()
    return (X if X is not None and unchanged(X, held) else None, *held[1:])


class BoundCall:
    """One operation of a distributed object on fixed operands (:meth:`CallReplay.bind`).

    ``call()`` is collective, like the method it stands for."""

    __slots__ = ("_obj", "_kind", "_method", "_args", "_kwargs", "_kept", "__weakref__")

    def __init__(self, obj, kind: str, method, args: tuple, kwargs: dict) -> None:
        self._obj, self._kind, self._method = obj, kind, method
        self._args, self._kwargs = args, kwargs
        # the replay this call's last full call left, if any: its own, until the object
        # drops every replay (CallReplay._forget_replays)
        self._kept = None

    def __call__(self):
        obj = self._obj
        kept = self._kept
        if kept is not None and obj.kernel.plan_state() == obj._plan_state:
            obj._run_steps(kept[2])
            return kept[3]
        obj._binding = True  # trace this call even if another's operands came before
        try:
            result = self._method(*self._args, **self._kwargs)
        finally:
            obj._binding = False
        # after this call the object keeps no replay of the kind, or one of these operands
        self._kept = obj._replays.get(self._kind)
        return result

    def __repr__(self) -> str:
        return f"BoundCall({self._kind}, replaying={self._kept is not None})"
