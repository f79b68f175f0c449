"""Errors and the collective agreement that keeps every rank's view of an error identical.

A parameter error that only one rank notices (a malformed line in its share of a file, say) must
still be raised on every rank, or the ranks that did not notice walk into the next collective and
wait forever for the one that left. :func:`agree` is the single place where that happens.
"""

from __future__ import annotations

from mpi4py import MPI


class DistmmError(Exception):
    """Base class of every error distmm raises on purpose."""


class InputError(DistmmError, ValueError):
    """Bad user input: a parameter, a shape, a file. Raised identically on every rank."""


def agree(comm: MPI.Comm, message: str | None) -> None:
    """Raise :class:`InputError` on every rank of ``comm`` if any rank passes a message.

    Collective over ``comm``. Each rank passes ``None`` when it found nothing wrong, or a
    description of what it found. When at least one rank found a problem, every rank raises the
    same error, naming the first rank that reported one (and how many did). This is a tiny
    pickle-based allgather: it runs on the error path and during setup, never in a kernel loop.
    """
    messages = comm.allgather(message)
    bad = [(rank, msg) for rank, msg in enumerate(messages) if msg is not None]
    if not bad:
        return
    rank, msg = bad[0]
    where = "" if comm.Get_size() == 1 else f" (reported by rank {rank}"
    if where and len(bad) > 1:
        where += f" and {len(bad) - 1} other rank(s)"
    if where:
        where += ")"
    raise InputError(f"{msg}{where}")


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` unless ``condition`` holds.

    Not collective: use it only for checks whose inputs are identical on every rank (global
    shapes, p, c, names), so that every rank raises the same error without communicating.
    """
    if not condition:
        raise InputError(message)
