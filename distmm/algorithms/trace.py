"""Tracing one call of a plan: the local kernels and shifts it ran, and where its operands
and result stand in them.

A :class:`~distmm.algorithms.plan.CallPlan` runs its first calls in full. Where the family
allows it (:meth:`DistributedMatrix._replayable`: 1.5D dense shifting with c = 1 and no
overlap, whose whole call is local kernels on the caller's arrays and cyclic shifts between
the object's buffers), such a full call is traced: the plan sets a :class:`Tracer` on the
matrix (``S._tracer``) for that call only, the kernels (:meth:`~distmm.algorithms.prepared.
PreparedCalls.run`) and the family's shifts (``S._traced_shift``) note themselves in it, and a
family step that does anything else (moves or copies the caller's data) stops it
(``S._not_replayable``). Plain calls run with no tracer. The functions below read a finished
trace: where a new result array (:func:`fresh_steps`) or new operands (:func:`swap_slots`)
go in the steps, and how to put them there (:func:`filled`).
"""

from __future__ import annotations

import numpy as np

from distmm.core.aligned import padding
from distmm.core.dense import DenseBlock
from distmm.kernels.numba_util import prepared_layout


class Tracer:
    """The steps of one traced call, in order; set on the matrix only during that call.

    Each step is (reused, run, args, timed, touched): whether a kernel's prepared call was
    kept from an earlier call (a shift's always is), the callable and its arguments, whether
    it is a kernel (its seconds go to "compute") or a shift, and the arrays it touches.
    ``steps`` is None when the call is not recorded (``record`` false: the plan only marks
    its full call, so that the prepared kernel calls key it as a repeated call) or when a
    step showed it cannot be replayed (``broken``)."""

    __slots__ = ("steps", "broken")

    def __init__(self, record: bool) -> None:
        self.steps: list | None = [] if record else None
        self.broken = False

    def kernel(self, reused: bool, run, args: tuple) -> None:
        """Note one local kernel: its prepared call ``run`` and arguments. Not collective."""
        if self.steps is not None:
            self.steps.append((reused, run, args, True, args))

    def shift(self, comm, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int,
              source: int) -> None:
        """Note one cyclic shift (``comm.shift`` with these arguments), kept as
        :meth:`~distmm.core.comm.CountingComm.prepared_shift`. Not collective."""
        if self.steps is not None:
            self.steps.append((True, comm.prepared_shift(sendbuf, recvbuf, dest, source),
                               (sendbuf, recvbuf), False, (sendbuf, recvbuf)))

    def not_replayable(self) -> None:
        """The call does work besides its kernels and shifts: nothing of it is kept."""
        self.steps = None
        self.broken = True

    def replayable(self) -> bool:
        """Whether the finished trace can be run again alone: it has a kernel, and every
        kernel ran through a prepared call kept from an earlier call."""
        steps = self.steps
        return bool(steps) and any(s[3] for s in steps) and all(s[0] for s in steps)


def run_steps(stats, steps: tuple) -> None:
    """Run kept steps (callable, arguments, timed): each kernel's prepared call (its seconds
    added to ``stats``' "compute") and each shift, in order. Collective where they shift."""
    seconds = stats.seconds
    for fn, args, timed in steps:
        if timed:
            seconds["compute"] += fn(*args)
        else:
            fn(*args)


def filled(steps: tuple, placed) -> tuple:
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


def fresh_steps(trace: list, result) -> tuple | None:
    """(steps, None, fresh) of a traced call without ``out=`` whose new ``result`` array
    (a typed block's or a values array's) stands in the kernels' arguments only, with those
    places emptied; None if it cannot be replayed so (the result is a shift's buffer).

    ``fresh`` is (slots, shape, dtype, aligned, block): each slot (step, argument, None for
    the array itself or (start, stop) for a slice of a 1-D result), how to make the array
    again, and (side, global shape) to type it as a block (None for a values array)."""
    block = None
    if isinstance(result, DenseBlock):
        block = (result.side, result.global_shape)
        result = result.base
    if type(result) is not np.ndarray or not result.flags.c_contiguous or result.ndim > 2:
        return None
    start = address(result)
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
                lo = (address(x) - start) // size
                slots.append((i, j, (lo, lo + x.size)))
            else:
                return None
            args[j] = None
        steps.append((fn, tuple(args), timed))
    if not slots:
        return None
    aligned = padding(result.base) > 0 if result.base is not None else False
    return tuple(steps), None, (tuple(slots), result.shape, result.dtype, aligned, block)


def swap_slots(trace: list, held: tuple, result, has_out: bool) -> tuple | None:
    """Where a replay may put new operands in place of the traced call's (``held``, in the
    public method's order, ``out`` last): (slots, wrap), or None if no operand may be swapped
    (two operands share memory, so a place would belong to both).

    ``slots[k]`` is None where operand k cannot be swapped (absent; received by a shift, or
    sent by one through a view other than the array itself; read by the kernels through a
    view other than the array itself or, for a 1-D array, a slice of it), else (places,
    layout, typed): each place (step, argument, None or (start, stop) of a slice; a
    shift's place is its send buffer), the operand's
    :func:`~distmm.kernels.numba_util.prepared_layout`, and (side, global shape) for a typed
    block (None for a plain array). ``wrap`` types a new ``out`` as the full call returns it:
    None where the result is ``out`` itself, (side, global shape) where it is a typed block
    over ``out``'s memory. See :meth:`CallPlan._swapped`."""
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
                and address(result) == address(out)):
            wrap = (result.side, result.global_shape)
        else:
            slots[-1] = None
    if all(x is None for x in slots):
        return None
    return tuple(slots), wrap


def _places(trace: list, obj) -> tuple | None:
    """For :func:`swap_slots`: operand ``obj``'s places in the traced steps, with its
    layout and typed-block side; None if it cannot be swapped."""
    if obj is None:
        return None
    typed = None
    if type(obj) is DenseBlock:
        if obj.side is None:
            return None
        typed = (obj.side, obj.global_shape)
    elif type(obj) is not np.ndarray:
        return None
    start = address(obj)
    places = []
    for i, (*_, timed, touched) in enumerate(trace):
        for j, x in enumerate(touched):
            if not isinstance(x, np.ndarray) or not np.may_share_memory(x, obj):
                continue
            exact = x.shape == obj.shape and x.strides == obj.strides and address(x) == start
            if not timed:  # a shift: (sendbuf, recvbuf)
                if j != 0 or not exact:
                    return None  # written by a shift, or sent in part
                places.append((i, j, None))
            elif exact:
                places.append((i, j, None))
            elif (obj.ndim == 1 and x.ndim == 1 and x.strides == obj.strides
                  and obj.flags.c_contiguous):
                lo, rem = divmod(address(x) - start, obj.itemsize)
                if rem or lo < 0 or lo + x.size > obj.size:
                    return None  # overlaps it without being a slice of it
                places.append((i, j, (lo, lo + x.size)))
            else:
                return None
    if not places:
        return None  # the kernels do not read it as it is: never swapped
    return tuple(places), prepared_layout(obj), typed


def address(x: np.ndarray) -> int:
    """The address of ``x``'s first element."""
    return x.__array_interface__["data"][0]


__all__ = ["Tracer", "filled", "fresh_steps", "run_steps", "swap_slots"]
