"""Call plans: one operation of a distributed matrix, made once, called in a loop.

``step = S.plan("fusedmm_a", A, B, out=Y)`` fixes an operation, its operands and options
(``values``, FusedMM's ``strategy``). ``step()`` runs it on the operands it holds;
``step(A2, B2, out=Y2)`` (any of them: dense operands all or none, ``values=``, ``out=``) on
new ones, which the plan then holds. :meth:`DistributedMatrix.bind` makes the same object
and requires ``out=``. Plain method calls (``S.fusedmm_a(A, B, out=Y)``) only check and run;
a plan is where a loop's repeats get cheaper:

- In every family a plan's calls go through the method, whose checks of a repeat on the
  very same operands are cheap (:meth:`CallChecks.recall`), and whose prepared kernel calls
  the plan's operand sets get by id (several plans of one operation in turns each find
  theirs: :meth:`~distmm.algorithms.prepared.PreparedCalls.run`).
- Where the family's whole call is a fixed sequence of local kernels on the caller's arrays
  and cyclic shifts between the object's buffers (:meth:`DistributedMatrix._replayable`:
  1.5D dense shifting with c = 1 and no overlap, under ``checks="once"``), the plan's full
  calls are traced (:mod:`.trace`), and once every kernel of one ran through a kept prepared
  call (from the plan's second call on), its steps are kept: ``step()`` then runs those steps
  alone, without the checks or the family's loop, and ``step(new...)`` runs them with the new
  operands put in their predecessors' places where the new ones are laid out alike (same
  type, shape, strides, dtype, alignment and writeability; a typed block of this matrix on
  the same side), else runs in full and traces again. A replay's result is bitwise the full
  call's, it sends the same messages in the same order and counts the same statistics.

A plan without ``out=`` returns a new array per call; its replay makes it as the full call
does, or writes again the result the plan returned last when nothing of the caller's refers
to it any more (:attr:`CallPlan.reuse_results`), so a loop that lets each result go writes
one array. Where such a result travels in a shift (SpMMB's at q > 1, FusedMM's "reuse"), the
plan runs in full. An operand that a shift writes, or that the kernels read through another
view, is never swapped: new ones in its place run in full (and, once that is known, are not
traced: a trace at q > 1 prepares its shifts again).

The matrix keeps a weak set of its plans: :meth:`~DistributedMatrix.set_values`, a change of
named vectors, :meth:`~DistributedMatrix.release_buffers`, a change of the node model's plan
state and :meth:`~DistributedMatrix.close` drop every plan's kept steps (the next call runs in
full). The caller promises that between ``step()`` calls the held operands keep their shapes,
dtypes and memory layout (their contents may change): they are not looked at again. Ranks need
not agree on replaying: a replay makes the very MPI calls of the full call, and a full call
after the first checks of an operation makes no other.
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from distmm.algorithms.calls import same_layout
from distmm.algorithms.trace import Tracer, filled, fresh_steps, run_steps, swap_slots
from distmm.core.aligned import aligned_empty
from distmm.core.dense import DenseBlock
from distmm.core.operations import op_name
from distmm.errors import InputError
from distmm.kernels.numba_util import prepared_layout

# the dense operands each operation takes, in the method's order
DENSE_OPERANDS = {"sddmm": 2, "spmm_a": 1, "spmm_b": 1, "fusedmm_a": 2, "fusedmm_b": 2}
_SAME = object()  # an argument a plan's call leaves as it was


def make_plan(mat, op: str, operands: tuple, out, options: dict, verb: str = "plan"):
    """A :class:`CallPlan` of ``mat``'s operation ``op`` on ``operands`` (``S.plan``,
    ``S.bind``); ``verb`` names the caller in messages.

    Parameters
    ----------
    mat : DistributedMatrix
        The matrix whose operation the plan calls.
    op : {"sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"}
        The operation (the command line's spelling, ``"fusedmm-a"``, is accepted too).
    operands : tuple
        Its dense operands, as the method takes them (``B`` for spmm_a, ``A`` for spmm_b,
        ``A, B`` for sddmm and FusedMM).
    out : DenseBlock or ndarray, optional
        The result buffer (None: each call returns a new array).
    options : dict
        The method's other keywords (``values``, FusedMM's ``strategy``).

    Making a plan is not collective (its first call checks the operands, on every rank);
    calling it is collective, like the method. Where the family allows it (1.5D dense
    shifting with c = 1 and no overlap, under ``checks="once"``) a plan's repeats run the
    traced steps of its call alone, skipping the checks and the family's loop; elsewhere it
    calls the method, whose checks of a repeat are cheap. Between calls the held operands'
    contents may change, their shapes, dtypes and memory layout must not."""
    mat._require_open()
    try:
        op = op_name(op)
    except InputError as e:
        raise InputError(f"{verb}: {e}") from None
    options = dict(options)
    operands = tuple(operands)
    want = DENSE_OPERANDS[op]
    if op.startswith("fusedmm") and len(operands) == want + 1 and "strategy" not in options:
        options["strategy"] = operands[-1]  # the method's positional strategy
        operands = operands[:-1]
    allowed = {"values", "strategy"} if op.startswith("fusedmm") else {"values"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InputError(f"{verb}: {op} takes no option {', '.join(unknown)} (it takes "
                         f"{', '.join(sorted(allowed))} and out=)")
    if len(operands) != want:
        raise InputError(f"{verb}: {op} takes {want} dense operand{'s' * (want > 1)}, "
                         f"got {len(operands)}")
    return CallPlan(mat, op, operands, out, options)


class CallPlan:
    """One operation of a distributed matrix on operands of one layout (:func:`make_plan`,
    ``S.plan``, ``S.bind``). Calling it is collective, like the method it stands for: every
    rank calls it, in the same order as its other collective calls."""

    # Whether a replay without out= may write again the result the caller let go
    # (_into_new): only where sys.getrefcount counts every reference (CPython with its
    # GIL; free-threaded CPython defers and splits counts, PyPy has none).
    reuse_results = (sys.implementation.name == "cpython"
                     and getattr(sys, "_is_gil_enabled", lambda: True)())

    __slots__ = ("_mat", "op", "_dense", "_values", "_out", "_options", "_kept", "_spare",
                 "_blocked", "__weakref__")

    def __init__(self, mat, op: str, dense: tuple, out, options: dict) -> None:
        self._mat, self.op = mat, op
        self._values = options.pop("values", None)
        self._options = options
        self._dense, self._out = dense, out
        # the kept steps: (held operands, steps, result, fresh, swaps), or None
        # held: per operand in the method's order, values and out last, (object, shape,
        # strides, dtype, typed block's layout token, weak reference: _held) or None;
        # fresh: how a call without out= makes its result (trace.fresh_steps); swaps: where
        # new operands go (trace.swap_slots)
        self._kept = None
        # the last result a replay without out= made, to write again once the caller holds
        # it no more (_into_new)
        self._spare = None
        # bit k set where operand k cannot be swapped into the kept steps (-1: none can):
        # new operands there are run in full without a trace
        self._blocked = 0
        mat._plans.add(self)

    # ----------------------------------------------------------------- what it holds
    @property
    def matrix(self):
        """The distributed matrix the plan runs on."""
        return self._mat

    @property
    def replaying(self) -> bool:
        """Whether the next call on the held operands runs kept steps alone."""
        return self._kept is not None

    @property
    def operands(self) -> tuple:
        """The operands the plan holds: the dense ones, then ``values`` and ``out``."""
        return (*self._dense, self._values, self._out)

    def forget(self) -> None:
        """Drop the kept steps and result (the matrix calls it on the events that may make
        them stale); the next call runs in full. Not collective."""
        self._kept = self._spare = None
        self._blocked = 0

    # ----------------------------------------------------------------- calls
    def __call__(self, *dense, values=_SAME, out=_SAME):
        """Run the operation: on the held operands (no arguments), or on new ones (the
        dense operands all or none, ``values=``, ``out=``), which the plan holds from then
        on. Returns what the method returns. Collective."""
        kept = self._kept
        if not dense and values is _SAME and out is _SAME:
            if kept is not None and self._mat.kernel.plan_state() == self._mat._plan_state:
                _, steps, result, fresh, _ = kept
                if fresh is not None:
                    return self._into_new(steps, fresh)
                run_steps(self._mat.stats, steps)
                return result
            return self._full(self._dense, self._values, self._out)
        if dense and len(dense) != len(self._dense):
            raise InputError(f"this plan of {self.op} takes {len(self._dense)} dense "
                             f"operand(s), got {len(dense)}")
        dense = dense or self._dense
        values = self._values if values is _SAME else values
        out = self._out if out is _SAME else out
        if kept is not None:
            done = self._swapped(kept, dense, values, out)
            if done is not None:
                return done
        return self._full(dense, values, out)

    def _full(self, dense: tuple, values, out):
        """The method's call, traced where a repeat may replay it; keeps its steps where
        they can run alone. Collective."""
        mat = self._mat
        resolved = mat._named_or(values)
        changed = self._changed((*dense, resolved, out))
        record = (mat.checks == "once" and not changed & self._blocked
                  and mat._replayable())
        self._kept = None  # a call that fails leaves nothing to replay
        tracer = Tracer(record)
        mat._tracer = tracer
        try:
            result = getattr(mat, self.op)(*dense, values=values, out=out, **self._options)
        finally:
            mat._tracer = None
        self._dense, self._values, self._out = dense, values, out
        if tracer.broken:
            self._blocked = -1
        elif tracer.replayable():
            self._keep(tracer.steps, (*dense, resolved, out), result)
        return result

    def _changed(self, operands: tuple) -> int:
        """Bit k set where ``operands[k]`` is not the held one; where one is laid out
        otherwise, what the plan learnt of the old layout (``_blocked``) is dropped."""
        held = (*self._dense, self._mat._named_or(self._values), self._out)
        mask = 0
        for k, (X, H) in enumerate(zip(operands, held, strict=True)):
            if X is H:
                continue
            mask |= 1 << k
            if (X is None or H is None or type(X) is not type(H) or X.shape != H.shape
                    or X.strides != H.strides or X.dtype != H.dtype):
                self._blocked = 0
        return mask

    def _keep(self, steps: list, operands: tuple, result) -> None:
        """Keep a traced call's steps (with a call without out=, where its new result
        stands) and where new operands would go. Not collective."""
        has_out = operands[-1] is not None
        kept = ((tuple(step[1:4] for step in steps), result, None) if has_out
                else fresh_steps(steps, result))
        if kept is None:  # the new result travels in a shift: never replayed
            self._blocked = -1
            return
        held = tuple(None if X is None else _held(X) for X in operands)
        swaps = swap_slots(steps, held, result, has_out)
        self._kept = (held, *kept, swaps)
        self._blocked = sum(1 << k for k, h in enumerate(held)
                            if h is not None and (swaps is None or swaps[0][k] is None))

    def _swapped(self, kept: tuple, dense: tuple, values, out):
        """The kept steps run with new operands in their predecessors' places, or None
        when the new ones are not laid out alike (then the call runs in full).

        A new operand must be what the held one was: a plain array, or a typed block of
        this matrix of the same side and global shape, of the same shape, strides, dtype,
        alignment and writeability (the prepared kernel calls' compiled code takes arrays
        of exactly these types), and ``out`` must share no memory with the inputs; an
        operand that a shift sends whole (B at q > 1) is sent from the new array. The plan
        then holds the new operands and steps, so no earlier operand is kept alive.
        Collective where the steps shift."""
        held, steps, result, fresh, swaps = kept
        if swaps is None:
            return None
        slots, wrap = swaps
        mat = self._mat
        operands = (*dense, mat._named_or(values), out)
        now = list(held)
        new = []
        for k, h in enumerate(held):
            X = operands[k]
            if h is None:
                if X is not None:
                    return None
                continue
            obj, shape, strides, dtype, token, _ = h
            if X is obj:
                if not same_layout(X, h):
                    return None
                continue
            like = slots[k]
            if like is None:
                return None
            if type(X) is not type(obj) or prepared_layout(X) != like[1]:
                return None
            if like[2] is not None:  # a typed block: this matrix's, on the traced side
                meta = X.__dict__
                if (meta["owner"] is not mat or (meta["side"], meta["global_shape"]) != like[2]
                        or meta["_block_shape"] != shape):
                    return None
                token = X.layout_token()
                plain = X.view(np.ndarray)
            else:
                plain = X
            now[k] = (X, shape, strides, dtype, token, weakref.ref(X))
            new.append((like[0], plain))
        if out is not None:
            for X in operands[:-1]:
                if X is not None and np.may_share_memory(out, X):
                    return None
        if mat.kernel.plan_state() != mat._plan_state:
            return None
        steps = filled(steps, new)
        if fresh is None and held[-1] is not None and out is not held[-1][0]:
            result = out if wrap is None else DenseBlock(out, wrap[0], wrap[1], mat)
        self._kept = (tuple(now), steps, result, fresh, swaps)
        self._dense, self._values, self._out = dense, values, out
        if fresh is not None:
            return self._into_new(steps, fresh)
        run_steps(mat.stats, steps)
        return result

    def _into_new(self, steps: tuple, fresh: tuple):
        """Run kept steps of a call without ``out=`` with a result array (made as the full
        call makes it) in the places the traced call's result had, and return it as the
        full call returns it. Collective where the steps shift.

        The array is new, or the one the plan returned last if nothing outside the plan
        refers to it any more (no name, view, buffer export or tensor of the caller's:
        :func:`_unreferenced`): a loop that lets each result go writes one array again and
        again, as with ``out=``; a result the caller keeps is never written again."""
        mat = self._mat
        spare = self._spare
        if spare is not None and _unreferenced(spare):
            if spare[2] is not steps:  # other operands swapped in, or traced again
                if spare[5] != fresh[1:]:  # a result of another shape, type or side
                    spare = None
                else:
                    spare[2], spare[3] = steps, filled(steps, ((fresh[0], spare[1]),))
            if spare is not None:
                run_steps(mat.stats, spare[3])
                return spare[0]
        slots, shape, dtype, aligned, block = fresh
        new = aligned_empty(shape, dtype) if aligned else np.empty(shape, dtype)
        placed = filled(steps, ((slots, new),))
        run_steps(mat.stats, placed)
        result = new if block is None else DenseBlock(new, block[0], block[1], mat)
        if not self.reuse_results:
            return result
        # (result, the plain array, the steps it was placed in, those steps with it, the
        # reference counts of result and its bases while only this list refers to them, how
        # the result is made: shape, dtype, alignment, block)
        spare = [result, new, steps, placed, None, fresh[1:]]
        del result, new, placed
        spare[4] = _ref_counts(spare[0])
        self._spare = spare
        return spare[0]

    def __repr__(self) -> str:
        return f"CallPlan({self.op}, replaying={self._kept is not None})"


def _held(X: np.ndarray) -> tuple:
    """What kept steps hold of one operand: the object, its shape, strides, dtype, a typed
    block's layout token (:meth:`~distmm.core.dense.DenseBlock.layout_token`) and a weak
    reference to it, for which numpy refuses to resize it in place (``resize(...,
    refcheck=False)`` would leave the steps' views on freed memory)."""
    token = X.layout_token() if isinstance(X, DenseBlock) else None
    return X, X.shape, X.strides, X.dtype, token, weakref.ref(X)


def _ref_counts(result: np.ndarray) -> tuple[int, ...]:
    """The reference counts of ``result`` and of each array under it (its ``base`` chain).

    Every view, buffer export (memoryview, torch.from_numpy) or name of the caller's holds a
    reference to one of these objects, so counts equal to those taken while only the plan
    held them prove the caller holds none."""
    counts = []
    x = result
    while x is not None:
        counts.append(sys.getrefcount(x))
        x = x.base if isinstance(x, np.ndarray) else None
    return tuple(counts)


def _unreferenced(spare: list) -> bool:
    """Whether the kept result ``spare[0]`` has no reference besides the plan's own."""
    return _ref_counts(spare[0]) == spare[4]


__all__ = ["CallPlan", "make_plan"]
