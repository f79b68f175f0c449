"""Prepared local kernel calls and scratch buffers kept by a distributed matrix between calls.

:class:`PreparedCalls` is the matrix's ``_kernels`` part. Its state is ``scratch`` (role,
shape, dtype -> buffer) and ``prepared`` (call key -> the prepared kernel calls by their
sources' ids), both dropped by ``release_buffers`` and ``close``. The family loops reach it
as the matrix's ``_kernels`` part (``S._kernels.buffer``, ``S._kernels.run``).
"""

from __future__ import annotations

import weakref
from operator import call as _call

import numpy as np

from distmm.core.aligned import aligned_empty
from distmm.kernels.multivalue import prepare_sddmm_multi
from distmm.kernels.numba_util import prepared_layout

# How many sets of sources one prepared kernel call remembers by id (PreparedCalls.run): the
# operand sets of one operation that a loop can use in turns and have their kernel found by
# one dict access (the others compare layouts first; every one of them still replays).
PREPARED_SOURCES = 8


def _no_operand() -> None:
    """Stands for the weak reference of an absent operand (it is None again)."""
    return None


def _source_refs(sources: tuple, evict=None) -> tuple:
    """What :meth:`PreparedCalls.run` keeps of a prepared call's sources: a weak reference
    to each (calling ``evict`` when its source goes) and its
    :func:`~distmm.kernels.numba_util.prepared_layout`."""
    return tuple((_no_operand, None) if x is None else (weakref.ref(x, evict), prepared_layout(x))
                 for x in sources)


def _evictor(calls: weakref.ref, key: tuple, ids: tuple):
    """The weak references' callback of the entry ``ids`` under ``key``: drops the entry as
    soon as one of its sources goes, so that an entry found by the sources' ids holds those
    very objects (an id is reused only after its object is gone); the key's last entry stays,
    under no ids, for the sources alike that :meth:`PreparedCalls.run` compares. Holds the
    matrix's part weakly and the entry not at all: a callback that held the entries would
    make a reference cycle keeping the prepared call, and S's blocks with it, alive until
    the cycle collector ran."""
    def evict(ref: weakref.ref) -> None:
        part = calls()
        entries = None if part is None else part.prepared.get(key)
        kept = None if entries is None else entries.get(ids)
        if kept is not None and any(held is ref for held, _ in kept[0]):
            del entries[ids]
            if not entries:  # the key's prepared call still serves sources alike (run)
                entries[None] = kept  # under no ids: found by none
    return evict


def _alike(x: np.ndarray | None, like: tuple | None) -> bool:
    """Whether ``x`` may stand in for the source a call was prepared with (``like``: its
    :func:`~distmm.kernels.numba_util.prepared_layout`; None: there was none): views cut
    from it the same way pass the same operand checks and have the same numba types (the
    prepared call runs the compiled code of its first call's types)."""
    if x is None or like is None:
        return x is None and like is None
    return isinstance(x, np.ndarray) and prepared_layout(x) == like


class PreparedCalls:
    """The prepared kernel calls and scratch buffers of one distributed matrix (its
    ``_kernels`` part): ``scratch`` (role, shape, dtype -> buffer) and ``prepared`` (call key
    -> {the sources' ids: (the sources, weakly, with their layouts; the prepared call)},
    oldest first). Holds the matrix weakly (the matrix holds this part) and reads its node
    model, ``checks``, ``stats``, ``_repeat`` (whether the call under way repeats its
    operands or is a plan's), ``_tracer`` and ``_plans``."""

    def __init__(self, mat) -> None:
        self._mat = weakref.ref(mat)
        self.dtype = mat.dtype
        self.scratch: dict[tuple, np.ndarray] = {}
        self.prepared: dict[tuple, dict] = {}
        # operation -> (the prepared call that its last call ran as its only kernel, weak
        # references to that call's operands): what a repeat of that call runs (rerun)
        self.only_steps: dict[str, tuple] = {}

    def buffer(self, role: str, shape: tuple[int, ...], dtype=None) -> np.ndarray:
        """A scratch array kept on the object between calls (one per role, shape, dtype).

        Only for buffers that never leave the call: their contents are overwritten by the
        next call that uses the same role."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        key = (role, tuple(map(int, shape)), dtype)
        buf = self.scratch.get(key)
        if buf is None:
            buf = self.scratch[key] = aligned_empty(key[1], dtype)
        return buf

    def run(self, key: tuple | None, sources: tuple, op: str, S, vals: np.ndarray,
            X: np.ndarray, Y: np.ndarray | None, out: np.ndarray,
            accumulate: bool = True):
        """Run one local kernel; its own seconds (not this wrapper's) make the "compute" phase.
        Returns the prepared call that ran it.

        The node model prepares the call once (:meth:`NodeModel.prepare`: operand checks,
        flop and byte counts, the kernel's plan), and the prepared call is kept under ``key``
        (the call kind, and the loop's step within it). The operands are views that the loop
        cuts the same way from ``sources`` for the same key, so a kept call serves again
        while every source is an array of the same shape, strides, dtype and writability as
        the one it was prepared with (then the checks would pass again and the plan is the
        same): the very same objects, or new ones such as the new result array of each call
        without ``out=`` or an intermediate array made per call. A plan's traced call (plan.py,
        trace.py) notes whether each kernel was such a kept call; the plan's replay keeps
        running the traced call's own intermediates, and writes a call without ``out=`` into a
        new array. The key remembers the last ``PREPARED_SOURCES``
        sets of sources it served, so that calls on several sets of operands made in turns
        (plans per attention head) find theirs by id.
        ``key=None`` prepares every time. Kept calls are dropped when S's values or a named
        vector are replaced, when the node model's plan state (the numba thread count) changes
        (:meth:`_begin`), on :meth:`close`, and never kept under ``checks="always"``. The
        sources are held weakly: a kept call keeps no array alive.

        The entries of a key are found by the sources' ids (an entry goes with any of its
        sources, so an id found is its object's; only the shapes are compared, as an array
        can be reshaped in place): a call whose result is a new array each
        time (no ``out=``, the PyTorch functions) misses every entry, and comparing its
        sources with each entry in turn was a good part of such a call on a small graph."""
        mat = self._mat()
        entries = self.prepared.get(key) if key is not None else None
        kept = None
        ids = tuple(map(id, sources))
        if entries is not None:
            kept = entries.get(ids)
            if kept is not None:
                # an entry is dropped when one of its sources goes (_evictor): found by the
                # ids, it holds these very objects. Written out: every kernel runs this
                for x, shape in zip(sources, kept[2], strict=False):  # (as long: same ids)
                    if x is not None and x.shape != shape:  # reshaped in place
                        kept = None
                        break
                else:
                    run = kept[1]
                    args = (vals, X, out) if Y is None else (vals, X, Y, out)
                    mat.stats.seconds["compute"] += run(*args)
                    if mat._tracer is not None:
                        mat._tracer.kernel(True, run, args)
                    return run
            if kept is None:
                first = next(iter(entries.values()))  # every entry's sources are alike
                if all(_alike(x, like) for (_, like), x in zip(first[0], sources, strict=True)):
                    # the same prepared call serves these sources too. A repeated or planned
                    # call's sources get an entry of their own, so that calls on several sets
                    # of operands in turns find it by id; a call on operands the last call did
                    # not pass (new arrays each time) gets none it would not use again
                    kept = first
                    if mat._repeat:
                        entries.pop(ids, None)  # (a reshaped source's)
                        kept = entries[ids] = self._entry(key, ids, sources, first[1])
                        if len(entries) > PREPARED_SOURCES:
                            del entries[next(iter(entries))]  # the oldest
        reused = kept is not None
        if kept is None:
            if op == "sddmm" and out.ndim == 2:  # one result per head, in one pass
                run = prepare_sddmm_multi(mat.kernel, S, vals, X, Y, out)
            else:
                run = mat.kernel.prepare(op, S, vals, X, Y, out, accumulate)
            if key is not None and mat.checks != "always":
                kept = self._entry(key, ids, sources, run)
                self.prepared[key] = {ids: kept}
            else:
                kept = (None, run)
        run = kept[1]
        args = (vals, X, out) if Y is None else (vals, X, Y, out)
        mat.stats.seconds["compute"] += run(*args)
        if mat._tracer is not None:
            mat._tracer.kernel(reused, run, args)
        return run

    def note_only_step(self, kind, run, args: tuple, fresh: tuple | None = None) -> None:
        """Remember that this call (of key ``kind``: ``S._call_key``) ran one kernel, the
        prepared call ``run`` on ``args``, and nothing else (a family's loop on one rank), so
        that a repeat of it can run that kernel alone (:meth:`rerun`). ``fresh``: the result
        (``args``' last) is a new array of the loop's, made as ``fresh[0](*fresh[1:])``, as a
        repeat makes its own; else it is the caller's ``out=``. Not collective."""
        if fresh is not None:
            args = args[:-1]
        self.only_steps[kind] = (run, tuple(map(weakref.ref, args)), fresh)

    def rerun(self, kind) -> np.ndarray | None:
        """Run again the one kernel of the last call of ``kind``, where that call ran only it
        (:meth:`note_only_step`) and its operands are still there; returns the result array
        (the caller's ``out=``, or a new one where the call made one), or None with nothing
        run. Not collective.

        Only for a call that :meth:`~distmm.algorithms.calls.CallChecks.repeat` found to pass
        the very operands of the last call of its operation, unchanged, ``out=`` included:
        that call's kernel is then the one the family's loop would run again, on views of the
        same arrays (a view cut per call, of a block that owns its data, is gone by then: its
        weak reference says so, and the loop runs in full). What makes another kernel run
        (S's values or a named vector replaced, the node model's plan state changed,
        :meth:`release`, another call of ``kind`` checked in full) drops the entry first
        (:meth:`forget`, ``CallChecks.begin``). A plan's traced call is run in full, so that
        its kernels are traced."""
        kept = self.only_steps.get(kind)
        if kept is None:
            return None
        run, refs, fresh = kept
        args = tuple(map(_call, refs))
        for x in args:  # (written out: a repeated call on one rank is mostly this and its kernel)
            if x is None:
                del self.only_steps[kind]
                return None
        mat = self._mat()
        if mat._tracer is not None:
            return None
        if fresh is None:
            out = args[-1]
        else:
            out = fresh[0](*fresh[1:])
            args = (*args, out)
        mat.stats.seconds["compute"] += run(*args)
        return out

    def _entry(self, key: tuple, ids: tuple, sources: tuple, run) -> tuple:
        """One entry of ``prepared[key]``: (the sources, weakly, with their layouts; the
        prepared call; the sources' shapes)."""
        refs = _source_refs(sources, _evictor(weakref.ref(self), key, ids))
        return refs, run, tuple(None if x is None else x.shape for x in sources)

    def forget(self) -> None:
        """Drop the kept kernel calls (see :meth:`run`) and the steps of every plan of the
        matrix built on them (plan.py). Not collective."""
        self.prepared.clear()
        self.only_steps.clear()
        mat = self._mat()
        if mat is not None:
            for plan in list(mat._plans):
                plan.forget()

    def release(self) -> None:
        """Free what the object keeps between calls to make the next call cheaper: the
        scratch buffers of every width used so far (replication, shifts, reduction), the
        prepared kernel calls, and the steps the plans keep with the views of buffers and
        intermediates they hold. S's blocks, its cached transposes and named vectors stay.

        For a loop that moves on to another width or other operands: the object keeps each
        width's buffers until then, so a sweep over r holds the buffers of every width it
        visited (a plan holds its own operands while it lives). The next call of each kind
        allocates and prepares again, as the first did. Not collective (local state only);
        call it between calls, on any ranks (``S.release_buffers()``).
        """
        self.scratch.clear()
        self.forget()


__all__ = ["PREPARED_SOURCES", "PreparedCalls"]
