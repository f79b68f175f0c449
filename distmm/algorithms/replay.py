"""Replaying a call that repeats the last call of its kind, when that call was one kernel.

A training loop calls one operation many times with the same operand objects and an ``out=``
buffer. Where the family's whole call is then a single local kernel on the caller's own arrays
(1.5D dense shifting on one rank: no replication, no shift, no reduction, nothing copied;
:meth:`DistributedAlgorithm._replayable`), the second such call is traced: if it ran exactly
one kernel, through a prepared call kept from the call before
(:meth:`DistributedAlgorithm._run_kernel`), the prepared call and its arguments are kept, and
every later call that passes the very same operands (:meth:`CallChecks._recall`: the same
objects, shapes, strides and dtypes), the same strategy and the same node-model plan state
runs that prepared call directly, skipping the family's loop. Its result is bitwise the same
and its statistics are the same (the kernel's own seconds in "compute", the node model's
per-operation counts).

A kept replay holds its arguments (views of the operands) until the next call of its kind
that cannot be replayed, :meth:`~DistributedAlgorithm.set_values`, a change of named vectors
or :meth:`~DistributedAlgorithm.close`. Only under ``checks="once"`` (the default): a call
under ``"always"`` is checked in full every time, and one under ``"off"`` is not remembered.
"""

from __future__ import annotations

import numpy as np


class CallReplay:
    """Mixin of :class:`~distmm.algorithms.base.DistributedAlgorithm`: replayed calls.

    Uses the object's ``checks``, ``kernel``, ``stats``, ``_plan_state``, ``_memo`` and
    :meth:`_recall` (calls.py), and the family hook :meth:`_replayable`."""

    def _replayable(self) -> bool:
        """Whether a call with an ``out=`` buffer is one local kernel on the caller's arrays
        and nothing else, so that a repeat may run that kernel alone. Families override it."""
        return False

    def _replay(self, kind: str, dense: tuple, values: np.ndarray | None,
                out: np.ndarray | None, extra=None):
        """The result of running the kept kernel of ``kind`` again, or None when this call
        is not a repeat of the traced one (then the caller runs the call in full). Not
        collective: a replay happens only on one rank grids."""
        kept = self._replays.get(kind)
        if kept is None or kept[0] != extra:
            return None
        if self._recall(kind, dense, values, out) is None:
            return None
        if self.kernel.plan_state() != self._plan_state:
            return None
        _, run, args, result = kept
        self.stats.seconds["compute"] += run(*args)
        return result

    def _start_trace(self, kind: str) -> None:
        """Begin tracing the kernels of a call of ``kind`` that is not replayed (called by
        ``_begin``, before the call remembers its operands): its replay is dropped first, so
        that a call that fails before :meth:`_keep_replay` leaves none behind."""
        self._replays.pop(kind, None)
        self._trace = [] if self.checks == "once" and self._replayable() else None

    def _traced(self, hit: bool, run, args: tuple) -> None:
        """Note one kernel of the traced call (the caller checks that a call is traced):
        whether its prepared call was kept from the call before (``hit``), the call and its
        arguments."""
        self._trace.append((hit, run, args))

    def _keep_replay(self, kind: str, result, extra=None) -> None:
        """After a call of ``kind``: keep it for replay if it was one kept kernel and its
        operands are remembered (:meth:`_remember`), else forget any replay of ``kind``."""
        trace, self._trace = self._trace, None
        if trace is not None and len(trace) == 1 and trace[0][0] and kind in self._memo:
            self._replays[kind] = (extra, trace[0][1], trace[0][2], result)
        else:
            self._replays.pop(kind, None)

    def _forget_replays(self) -> None:
        """Drop every kept replay. Not collective."""
        self._replays.clear()
        self._trace = None
