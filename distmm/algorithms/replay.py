"""Replaying a call that repeats the last call of its kind: its kernels and shifts alone.

A training loop calls one operation many times with the same operand objects, often with an
``out=`` buffer. Where the family's whole call is then a fixed sequence of local kernels on
the caller's arrays and cyclic shifts between the object's buffers (1.5D dense shifting with
c = 1 and no overlap: nothing replicated, reduced or copied; on one rank a single kernel;
:meth:`DistributedMatrix._replayable`), the second such call is traced (only a call that
passes the very operands of the call before, or a bound call's, is traced: a loop on new
operands builds no replay it would not use): if every kernel ran through a prepared call
kept from an earlier call (:meth:`DistributedMatrix._run_kernel`),
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
are local in the families that replay). An array the call makes for itself in between (the
SDDMM values of FusedMM's "none" strategy) is the traced call's own in every replay: each
replay writes it before reading it. A call without ``out=`` returns a new array every time:
its replay makes one as the full call does and puts it where the traced call's result stood
in the kernels' arguments (its result is then never held by the replay). Where that result
travels in a shift instead (SpMMB's at q > 1, and FusedMM's "reuse" strategy there), such a
call is not replayed.

A bound call (:meth:`CallReplay.bind`, :class:`BoundCall`) fixes one operation's operands for a
loop: once its own call has left a replay, the bound call keeps that replay itself, and its
repeats run the kept steps without comparing the operands again (the caller promises that
their shapes, dtypes and layout stay as they are) while the plan state is unchanged. Calls
of the same operation on other operands in between (another bound call, a method call) do not
take it away: each bound call has its own, so several bound calls of one operation (the heads
of a multi-head attention layer, say) all replay.

A call's kind is its key (:meth:`~distmm.algorithms.base.DistributedMatrix._call_key`):
the operation and the width of its first dense operand where the family keeps whole rows
(the only family that replays), so that the layers of a model, calling one operation at
several widths in turns, each keep their remembered operands and replay; elsewhere the
operation. A call looks first at its operation's newest replay (``_newest``), at no cost
for the key, and at its own width's only when that is not it (:meth:`_replay_other`).
The object's replay of a kind holds its arguments (views of the operands and buffers)
until the next call of its kind that cannot be replayed, or until the replays of
:attr:`CallReplay.replay_widths` newer widths of its operation are kept (:meth:`_keep_widths`);
every replay, the bound calls' included, is dropped by :meth:`~DistributedMatrix.set_values`,
a change of named vectors, :meth:`~DistributedMatrix.release_buffers`, a change of the
plan state and :meth:`~DistributedMatrix.close`. Only under ``checks="once"`` (the
default): a call under ``"always"`` is checked in full every time, and one under ``"off"`` is
not remembered.
"""

from __future__ import annotations

import sys

import numpy as np

from distmm.algorithms.calls import key_op, remembered, same_layout, unchanged
from distmm.core.aligned import aligned_empty, padding
from distmm.core.dense import DenseBlock
from distmm.core.operations import op_name
from distmm.errors import InputError
from distmm.kernels.numba_util import prepared_layout


class CallReplay:
    """Mixin of :class:`~distmm.algorithms.base.DistributedMatrix`: replayed calls.

    Uses the object's ``checks``, ``kernel``, ``stats``, ``_plan_state``, ``_memo`` and
    :meth:`_recall` (calls.py), and the family hook :meth:`_replayable`."""

    # The widths of one operation whose replays an object keeps at a time (_keep_widths): the
    # layers of a model, each with its width, all replay.
    replay_widths = 4
    # Whether a replay without out= may write again the result the caller let go
    # (_replay_into_new): only where sys.getrefcount counts every reference (CPython with its
    # GIL; free-threaded CPython defers and splits counts, PyPy has none).
    reuse_results = (sys.implementation.name == "cpython"
                     and getattr(sys, "_is_gil_enabled", lambda: True)())
    # set while a bound call makes its method call in full (BoundCall.__call__)
    _binding = False
    # whether the call being traced has an out= buffer (_trace_if_repeated)
    _trace_out = True

    def _replayable(self) -> bool:
        """Whether a call is local kernels on the caller's arrays (and its result) and shifts
        between the object's buffers and nothing else, always the same steps for the same
        operands, so that a repeat may run those steps alone. Families override it."""
        return False

    def _replay(self, op: str, operands: tuple, extra=None):
        """The result of running the kept steps of a call of operation ``op`` again, or None
        when this call is not a repeat of a traced one (then the caller runs the call in
        full). Collective where the steps shift (over the layer, as the full call).

        ``operands`` are the call's dense operands in the public method's order, then its
        values (None or an array) and its ``out``. A repeat passes the very objects of the
        traced call, unchanged (as :meth:`_recall` checks them),
        under the same ``extra`` (FusedMM's strategy) and node-model plan state. The newest
        replay of ``op`` is tried first, with no key to work out (a loop at one width pays
        nothing for the others); a call at another width looks for its own
        (:meth:`_replay_other`)."""
        kept = self._newest.get(op)
        if kept is None:
            return self._replay_other(op, None, operands, extra) if self._replays else None
        held, ext, steps, result, fresh, swaps, key = kept
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
                return self._replay_other(op, kept, operands, extra)
            if token is not None:
                if X._layout is not token:
                    return None
            elif (X.shape != shape or X.strides != strides
                  or (X.dtype is not dtype and X.dtype != dtype)):
                return None
        if self.kernel.plan_state() != self._plan_state:
            return None
        if fresh is not None:
            return self._replay_into_new(key, steps, fresh)
        self._run_steps(steps)
        return result

    def _replay_other(self, op: str, kept: tuple | None, operands: tuple, extra):
        """:meth:`_replay` for a call that does not pass the operands of ``op``'s newest
        replay ``kept`` (or finds none): with new operands of that replay's key (its width),
        :meth:`_replay_alike`; at another width, that width's own replay, which becomes the
        newest; else None. Collective where the steps shift."""
        key = self._call_key(op, operands[0])
        if kept is not None and key == kept[6]:
            return self._replay_alike(key, kept, operands)
        other = self._replays.get(key)
        if other is None or other is kept:
            return None
        self._newest[op] = other
        return self._replay(op, operands, extra)

    def _replay_alike(self, kind: str, kept: tuple, operands: tuple):
        """:meth:`_replay` for a call that passes new operand objects laid out as the traced
        call's: the kept steps with each new operand in the places its predecessor had in the
        kernels' arguments, or None when this call is not such a call (then it runs in full).

        A new operand must be what the traced one was: a plain array, or a typed block of this
        object of the same side and global shape, of the same shape, strides, dtype,
        alignment and writeability, and ``out`` must share no memory with the inputs: then it
        passes the cheap checks, and the prepared kernel calls serve it (:meth:`_run_kernel`),
        whose compiled code takes arrays of exactly these types; an operand
        that a shift sends whole (B at q > 1) is sent from the new array. An operand that a
        shift writes, or that a shift sends or the kernels read through a view other than
        itself (or a slice of a values array), is never swapped (``swaps``,
        :func:`_swap_slots`). The kept replay then holds the new operands and steps in place
        of the old ones, so that the next call on the same objects is an ordinary repeat and
        no earlier operand is kept alive. Collective where the steps shift."""
        held, ext, steps, result, fresh, swaps, _ = kept  # its key is kind
        if swaps is None:
            self._swap_failed.add(kind)
            return None
        slots, wrap = swaps
        now = list(held)
        new = []
        for k, h in enumerate(held):
            X = operands[k]
            if h is None:
                if X is not None:
                    return None
                continue
            obj, shape, strides, dtype, token = h
            if X is obj:
                if not same_layout(X, h):
                    return None
                continue
            like = slots[k]
            if like is None:  # written by a shift, say: noted for the checks (_begin)
                self._swap_failed.add(kind)
                return None
            if type(X) is not type(obj) or prepared_layout(X) != like[1]:
                return None
            if like[2] is not None:  # a typed block: this object's, on the traced side
                meta = X.__dict__
                if (meta["owner"] is not self or (meta["side"], meta["global_shape"]) != like[2]
                        or meta["_block_shape"] != shape):
                    return None
                token = X.layout_token()
                plain = X.view(np.ndarray)
            else:
                plain = X
            now[k] = (X, shape, strides, dtype, token)
            new.append((like[0], plain))
        out = operands[-1]
        if out is not None:
            for X in operands[:-1]:
                if X is not None and np.may_share_memory(out, X):
                    return None
        if self.kernel.plan_state() != self._plan_state:
            return None
        # the checks remember the new operands, as a full call's would (_recall, _like_last)
        memo = self._memo.get(kind)
        if memo is not None:
            ops = list(memo[1])
            for k, h in enumerate(now):
                if h is not held[k]:
                    ops[k] = remembered(h[0])
            self._memo[kind] = (memo[0], tuple(ops))
        steps = _filled(steps, new)
        self._swap_failed.discard(kind)
        if fresh is None and held[-1] is not None and out is not held[-1][0]:
            result = out if wrap is None else DenseBlock(out, wrap[0], wrap[1], self)
        self._replays[kind] = self._newest[key_op(kind)] = (tuple(now), ext, steps, result,
                                                            fresh, swaps, kind)
        if fresh is not None:
            return self._replay_into_new(kind, steps, fresh)
        self._run_steps(steps)
        return result

    def _replay_into_new(self, kind: str, steps: tuple, fresh: tuple):
        """Run a kept replay of a call without ``out=``: its steps with a result array (made
        as the full call makes it) in the places the traced call's result had, and that array
        returned as the full call returns it. Collective where the steps shift.

        The array is new, or the one the last such call of ``kind`` returned if nothing
        outside the object refers to it any more (no name, view, buffer export or tensor of
        the caller's: :func:`_unreferenced`); the object keeps that last result for this
        (``_spare``, dropped with the replays). A loop that lets each result go then writes
        one array again and again, as with ``out=``, instead of allocating and faulting in a
        new one per call; a result the caller keeps is never written again."""
        spare = self._spare.get(kind)
        if spare is not None and _unreferenced(spare):
            if spare[2] is not steps:  # other operands swapped in, or another call traced
                if spare[5] != fresh[1:]:  # a result of another shape, type or side
                    spare = None
                else:
                    spare[2], spare[3] = steps, _filled(steps, ((fresh[0], spare[1]),))
            if spare is not None:
                self._run_steps(spare[3])
                return spare[0]
        slots, shape, dtype, aligned, block = fresh
        new = aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
        filled = _filled(steps, ((slots, new),))
        self._run_steps(filled)
        result = new if block is None else DenseBlock(new, block[0], block[1], self)
        if not self.reuse_results:
            return result
        # (result, the plain array, the steps it was placed in, those steps with it, the
        # reference counts of result and its bases while only this list refers to them, how
        # the result is made: shape, dtype, alignment, block)
        spare = [result, new, steps, filled, None, fresh[1:]]
        del result, new, filled
        spare[4] = _ref_counts(spare[0])
        self._spare[kind] = spare
        return spare[0]

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
            The operation (the command line's spelling, ``"fusedmm-a"``, is accepted too).
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
        try:
            op = op_name(op)
        except InputError as e:
            raise InputError(f"bind: {e}") from None
        method = getattr(self, op)
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
        self._drop_replay(kind)
        self._trace = None

    def _trace_if_repeated(self, has_out: bool, repeat: bool) -> None:
        """Trace the steps of the call that ``_begin`` just checked if a repeat of it may be
        replayed (``repeat``): it passes the very operands of the last call of its kind
        (:meth:`_recall` knew them) or is a bound call's (:meth:`BoundCall.__call__`, whose
        next calls take its replay whatever other calls come between). A loop that passes
        new operands every time builds no replay it would never use. A call without an
        ``out=`` buffer (``has_out`` false) is traced too: its replay makes a new result
        array each time (:meth:`_keep_replay`)."""
        self._trace_out = has_out
        if repeat and self.checks == "once" and self._replayable():
            self._trace = []

    def _not_replayable(self) -> None:
        """Called by a family during a call that does work besides its kernels and shifts
        (moves or copies the caller's data): the call is not traced, so it leaves no replay
        (:meth:`_keep_replay`). Not collective."""
        self._trace = None
        self._swap_blocked[self._kind] = -1  # every position

    def _traced(self, reused: bool, run, args: tuple) -> None:
        """Note one kernel of the traced call (the caller checks that a call is traced):
        whether its prepared call was kept from an earlier call (``reused``), the call and
        its arguments."""
        self._trace.append((reused, run, args, True, args))

    def _traced_shift(self, comm, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int,
                      source: int) -> None:
        """Note one cyclic shift of the traced call (``comm.shift`` with these arguments, kept
        as :meth:`~distmm.core.comm.CountingComm.prepared_shift`), if the call is traced."""
        if self._trace is not None:
            self._trace.append((True, comm.prepared_shift(sendbuf, recvbuf, dest, source),
                                (sendbuf, recvbuf), False, (sendbuf, recvbuf)))

    def _keep_replay(self, kind: str, result, extra=None) -> None:
        """After a call of ``kind``: keep its steps for replay if every kernel was a kept
        prepared call and its operands are remembered (:meth:`_remember`), else forget any
        replay of ``kind``.

        The replay holds the operand objects themselves (it holds views of their data in its
        steps' arguments already, so this keeps no more memory alive), so that a repeat is
        recognised by identity without dereferencing the memo's weak references.

        A call without ``out=`` made its result array itself: its replay keeps where that
        array (or a slice of it, an SDDMM block's values) stood in the kernels' arguments,
        and holds neither it nor the result, so each replay writes and returns a new array
        and no earlier result is written again. Such a call is kept only where the result is
        the kernels' output alone (not a shift's buffer: SpMMB's result at q > 1 arrives by
        a shift, and is then never replayed)."""
        trace, self._trace = self._trace, None
        memo = self._memo.get(kind)
        kept = None
        if (trace and memo is not None and any(step[3] for step in trace)
                and all(step[0] for step in trace)):
            kept = ((tuple(step[1:4] for step in trace), result, None) if self._trace_out
                    else _fresh_steps(trace, result))
            if kept is None:  # the new result travels in a shift: never replayed
                self._swap_blocked[kind] = -1
        if kept is not None:
            held = tuple(None if h is None else _held_operand(h) for h in memo[1])
            if all(h is None or h[0] is not None for h in held):
                swaps = _swap_slots(trace, held, result, self._trace_out)
                new = (held, extra, *kept, swaps, kind)
                self._replays.pop(kind, None)  # (re)inserted last: the newest of its operation
                self._replays[kind] = self._newest[key_op(kind)] = new
                if kind.__class__ is tuple:
                    self._keep_widths(kind[0])
                # where a new operand cannot be swapped in, tracing its calls gains nothing
                self._swap_blocked[kind] = sum(
                    1 << k for k, h in enumerate(held)
                    if h is not None and (swaps is None or swaps[0][k] is None))
                return
        self._drop_replay(kind)

    def _drop_replay(self, key) -> None:
        """Drop the kept replay of call key ``key``, if any (and as its operation's newest).
        Not collective."""
        kept = self._replays.pop(key, None)
        if kept is not None and self._newest.get(key_op(key)) is kept:
            del self._newest[key_op(key)]

    def _keep_widths(self, op: str) -> None:
        """Keep the replays of at most :attr:`replay_widths` widths of ``op`` (the newest;
        calls keyed by width: ``_call_key``): each holds its operands and its width's buffers,
        and a loop over many widths (a sweep of r) would otherwise keep them all alive. The
        dropped widths' remembered operands, result and swap notes go with them. Not
        collective."""
        keys = [k for k in self._replays if k.__class__ is tuple and k[0] == op]
        for old in keys[:-self.replay_widths]:
            self._forget_key(old)

    def _forget_key(self, key) -> None:
        """Drop everything kept under one call key: its replay, result, remembered operands
        and swap notes. Not collective."""
        self._drop_replay(key)
        self._spare.pop(key, None)
        self._memo.pop(key, None)
        self._last_new.pop(key, None)
        self._swap_blocked.pop(key, None)
        self._swap_failed.discard(key)

    def _forget_replays(self) -> None:
        """Drop every kept replay, the bound calls' included, and the results kept for
        replays without ``out=``. Not collective."""
        self._replays.clear()
        self._newest.clear()
        self._spare.clear()
        self._trace = None
        self._swap_blocked.clear()
        self._swap_failed.clear()
        for call in self._bound_calls:
            call._kept = None


def _ref_counts(result: np.ndarray) -> tuple[int, ...]:
    """The reference counts of ``result`` and of each array under it (its ``base`` chain).

    Every view, buffer export (memoryview, torch.from_numpy) or name of the caller's holds a
    reference to one of these objects, so counts equal to those taken while only the object
    held them prove the caller holds none."""
    counts = []
    x = result
    while x is not None:
        counts.append(sys.getrefcount(x))
        x = x.base if isinstance(x, np.ndarray) else None
    return tuple(counts)


def _unreferenced(spare: list) -> bool:
    """Whether the kept result ``spare[0]`` has no reference besides the object's own."""
    return _ref_counts(spare[0]) == spare[4]


def _filled(steps: tuple, placed) -> tuple:
    """``steps`` with arrays put in their places: ``placed`` holds (places, array) pairs,
    each place (step, argument, None for the array itself or (start, stop) for a slice of a
    1-D one): a new result in its slots, new operands in their predecessors' places."""
    steps = list(steps)
    for places, array in placed:
        for i, j, part in places:
            fn, args, timed = steps[i]
            args = list(args)
            args[j] = array if part is None else array[part[0]:part[1]]
            steps[i] = (fn, tuple(args), timed)
    return tuple(steps)


def _fresh_steps(trace: list, result) -> tuple | None:
    """(steps, None, fresh) of a traced call without ``out=`` whose new ``result`` array
    (a typed block's or a values array's) stands in the kernels' arguments only, with those
    places emptied; None if it cannot be replayed so.

    ``fresh`` is (slots, shape, dtype, aligned, block): each slot (step, argument, None for
    the array itself or (start, stop) for a slice of a 1-D result), how to make the array
    again, and (side, global shape) to type it as a block (None for a values array)."""
    block = None
    if isinstance(result, DenseBlock):
        block = (result.side, result.global_shape)
        result = result.base
    if type(result) is not np.ndarray or not result.flags.c_contiguous or result.ndim > 2:
        return None
    start = _address(result)
    size = result.itemsize
    slots, steps = [], []
    for i, (_, fn, args, timed, touched) in enumerate(trace):
        args = list(args)
        for j, x in enumerate(touched):
            if not isinstance(x, np.ndarray) or not np.may_share_memory(x, result):
                continue
            if not timed:
                return None  # the result is a shift's buffer
            if x is result:
                slots.append((i, j, None))
            elif result.ndim == 1 and x.ndim == 1 and x.base is result and x.flags.c_contiguous:
                lo = (_address(x) - start) // size
                slots.append((i, j, (lo, lo + x.size)))
            else:
                return None
            args[j] = None
        steps.append((fn, tuple(args), timed))
    if not slots:
        return None
    aligned = padding(result.base) > 0 if result.base is not None else False
    return tuple(steps), None, (tuple(slots), result.shape, result.dtype, aligned, block)


def _swap_slots(trace: list, held: tuple, result, has_out: bool) -> tuple | None:
    """Where a replay may put new operands in place of the traced call's (``held``, in the
    public method's order, ``out`` last): (slots, wrap), or None if no operand may be swapped
    (two operands share memory, so a place would belong to both).

    ``slots[k]`` is None where operand k cannot be swapped (absent; received by a shift, or
    sent by one through a view other than the array itself; read by the kernels through a
    view other than the array itself or, for a 1-D array, a slice of it), else (places,
    layout, typed): each place (step, argument, None or (start, stop) of a slice; a
    shift's place is its send buffer), the operand's
    :func:`~distmm.kernels.numba_util.prepared_layout`, and (side, global shape) for a typed
    block (None for a plain array).
    ``wrap`` types a new ``out`` as the full call
    returns it: None where the result is ``out`` itself, (side, global shape) where it is a
    typed block over ``out``'s memory. See :meth:`CallReplay._replay_alike`."""
    objs = [None if h is None else h[0] for h in held]
    present = [x for x in objs if x is not None]
    for a in range(len(present)):
        for b in range(a):
            if np.may_share_memory(present[a], present[b]):
                return None
    slots = [_places(trace, obj) for obj in objs]
    wrap = None
    out = objs[-1] if has_out else None
    if out is not None and slots[-1] is not None and result is not out:
        if (isinstance(result, DenseBlock) and result.shape == out.shape
                and _address(result) == _address(out)):
            wrap = (result.side, result.global_shape)
        else:
            slots[-1] = None
    if all(x is None for x in slots):
        return None
    return tuple(slots), wrap


def _places(trace: list, obj) -> tuple | None:
    """For :func:`_swap_slots`: operand ``obj``'s places in the traced steps, with its
    writeability and typed-block layout; None if it cannot be swapped."""
    if obj is None:
        return None
    typed = None
    if type(obj) is DenseBlock:
        if obj.side is None:
            return None
        typed = (obj.side, obj.global_shape)
    elif type(obj) is not np.ndarray:
        return None
    start = _address(obj)
    places = []
    for i, (*_, timed, touched) in enumerate(trace):
        for j, x in enumerate(touched):
            if not isinstance(x, np.ndarray) or not np.may_share_memory(x, obj):
                continue
            exact = x.shape == obj.shape and x.strides == obj.strides and _address(x) == start
            if not timed:  # a shift: (sendbuf, recvbuf)
                if j != 0 or not exact:
                    return None  # written by a shift, or sent in part
                places.append((i, j, None))
            elif exact:
                places.append((i, j, None))
            elif (obj.ndim == 1 and x.ndim == 1 and x.strides == obj.strides
                  and obj.flags.c_contiguous):
                lo, rem = divmod(_address(x) - start, obj.itemsize)
                if rem or lo < 0 or lo + x.size > obj.size:
                    return None  # overlaps it without being a slice of it
                places.append((i, j, (lo, lo + x.size)))
            else:
                return None
    if not places:
        return None  # the kernels do not read it as it is: never swapped
    return tuple(places), prepared_layout(obj), typed


def _address(x: np.ndarray) -> int:
    """The address of ``x``'s first element."""
    return x.__array_interface__["data"][0]


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

    __slots__ = ("_obj", "_kind", "_key", "_method", "_args", "_kwargs", "_kept",
                 "__weakref__")

    def __init__(self, obj, kind: str, method, args: tuple, kwargs: dict) -> None:
        self._obj, self._kind, self._method = obj, kind, method
        # where the method's call keeps its replay (its first dense operand's width)
        self._key = obj._call_key(kind, args[0] if args else None)
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
        self._kept = obj._replays.get(self._key)
        return result

    def __repr__(self) -> str:
        return f"BoundCall({self._kind}, replaying={self._kept is not None})"
