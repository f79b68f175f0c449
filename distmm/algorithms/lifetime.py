"""Closing a distributed matrix: what it frees, what it keeps, and the error a closed one raises.

:meth:`DistributedMatrix.close <distmm.algorithms.base.DistributedMatrix.close>` calls
:func:`close`: the communicators the object created are freed (collective), then every part
but the object's identity is dropped (:func:`release`, local), so that a closed object that is
still referred to holds no memory.
"""

from __future__ import annotations

from mpi4py import MPI

from distmm.errors import InputError

# What a closed object keeps: its configuration, its diagnostics, the part whose checks refuse
# a closed object's calls and the caller's communicator.
KEPT_AFTER_CLOSE = frozenset((
    "c", "overlap", "comm", "p", "rank", "dtype", "shape", "check_finite", "checks", "r",
    "_closed", "stats", "kernel", "node_model", "permute", "q", "s", "_calls", "_plans",
    "_tracer", "_repeat", "_kind", "_plan_state"))


class ClosedError(InputError, AttributeError):
    """The use of a closed distributed object (an InputError; an AttributeError too, so that
    ``getattr(S, name, default)`` on a part that close released gives the default)."""


def close(mat, comms: list[MPI.Comm]) -> None:
    """Close ``mat``: free ``comms`` (the grid's) and the edge primitives' communicators, drop
    every plan's kept steps, then :func:`release` the parts. Collective over ``mat.comm``;
    closing again does nothing."""
    meta = mat.__dict__
    if meta.get("_closed", False):
        return
    mat._closed = True
    for sub in comms:
        if sub != MPI.COMM_NULL:
            sub.Free()
    edge_state = meta.get("_edges")
    if edge_state is not None:
        edge_state.close()
    for plan in list(meta.get("_plans", ())):
        plan.forget()
    release(mat)


def release(mat) -> None:
    """Drop every part of ``mat`` but its identity (:data:`KEPT_AFTER_CLOSE`): S's blocks and
    values, the permutations, the loop's indices, the buffers and prepared calls, named
    vectors, the edge primitives' plans; ``stats.describe()`` keeps its last answer. Not
    collective (close's local half)."""
    meta = mat.__dict__
    stats = meta.get("stats")
    if stats is not None:
        try:
            stats.keep_description()
        except AttributeError:  # a half-built object (construction failed): nothing to keep
            pass
    calls = meta.get("_calls")
    if calls is not None:
        calls.forget()
    cls = type(mat)
    for name in [k for k in meta if k not in KEPT_AFTER_CLOSE]:
        # a method set on the object (a wrapper, a test's spy) is not a part: whoever set it
        # may still restore or delete it
        if not (callable(meta[name]) and hasattr(cls, name)):
            del meta[name]
    if not isinstance(meta.get("permute"), (str, bool)):
        meta.pop("permute", None)  # a partition object holds the order's arrays


__all__ = ["KEPT_AFTER_CLOSE", "ClosedError", "close", "release"]
