"""Errors and the collective agreement that keeps every rank's view of an error identical.

A check that only some ranks fail (a file that one node cannot see, a malformed line in one
rank's share of a file, an argument that differs between the ranks of an MPMD launch) must
still be raised on every rank, or the ranks that passed walk into the next collective and wait
forever for the one that left. :func:`agree` is the single place where that happens: every
rank makes its own checks without communicating (collecting them in a :class:`Checks`), then
one collective decides, and every rank raises the same :class:`InputError` naming the rank(s)
that found the problem.

The rest needs no communication: the exception types, :func:`require` for checks that are
identical on every rank, and :func:`abort_job` for a rank that must end the job alone (the
watchdog, :mod:`distmm.runtime.watchdog`, aborts with it). The watchdog imports this module, so
this one does not import it back: while a watchdog runs it lends :func:`agree` its mark for the
agreement's wait (:func:`mark_waits`).
"""

from __future__ import annotations

import contextlib
import operator
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from mpi4py import MPI

__all__ = ["ABORT_DRAIN", "Checks", "DistmmError", "InputError", "abort_job", "agree",
           "as_int", "format_ranks", "mark_waits", "require", "wait_quietly"]


class DistmmError(Exception):
    """Base class of every error distmm raises on purpose."""


class InputError(DistmmError, ValueError):
    """Bad user input: a parameter, a shape, a file. Raised identically on every rank."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` unless ``condition`` holds.

    Not collective: use it only for checks whose inputs are identical on every rank (global
    shapes, p, c, names), so that every rank raises the same error without communicating.
    """
    if not condition:
        raise InputError(message)


# Seconds between a rank's last words on stderr and MPI_Abort. MPICH's launcher forwards each
# rank's stderr through a pipe and, on an abort, kills the job without draining it: a line
# written just before MPI_Abort can be lost with everything else the rank printed.
ABORT_DRAIN = 0.5


def abort_job(comm: MPI.Comm, code: int, message: str) -> None:
    """Write ``message`` (one or more lines) to this rank's stderr, give the launcher time to
    forward it, then call ``MPI_Abort(comm, code)``, which ends every rank of the job. Not
    collective: called by the one rank that decides the job cannot go on."""
    sys.stderr.write(message if message.endswith("\n") else message + "\n")
    sys.stderr.flush()
    time.sleep(ABORT_DRAIN)
    comm.Abort(code)


# The running watchdog's mark for the agreement's wait (mark_waits); None: no watchdog runs.
_WAIT_MARK: Callable[[str], AbstractContextManager] | None = None


def mark_waits(mark: Callable[[str], AbstractContextManager] | None) -> None:
    """Have :func:`agree` mark its wait with ``mark("agree")`` (a running watchdog's
    ``watch``), or, with None, mark nothing. Not collective; called by
    :func:`distmm.runtime.watchdog.running` as its watchdog starts and stops."""
    global _WAIT_MARK
    _WAIT_MARK = mark

# At most this many distinct problems (and ranks per problem) are spelled out in one message.
_SHOWN = 3
_SHOWN_RANKS = 8


def format_ranks(ranks: list[int]) -> str:
    """``"rank 3"`` or ``"ranks 0, 2, 5"`` (the first few, then how many more)."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    shown = ", ".join(str(k) for k in ranks[:_SHOWN_RANKS])
    more = f" and {len(ranks) - _SHOWN_RANKS} more" if len(ranks) > _SHOWN_RANKS else ""
    return f"ranks {shown}{more}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _group(values: list[Any]) -> list[tuple[Any, list[int]]]:
    """Distinct values in order of first appearance, each with the ranks that hold it."""
    groups: list[tuple[Any, list[int]]] = []
    for rank, value in enumerate(values):
        for held, ranks in groups:
            if held == value:
                ranks.append(rank)
                break
        else:
            groups.append((value, [rank]))
    return groups


def _describe_problems(messages: list[str | None], p: int) -> str | None:
    """One line naming every distinct problem and the ranks that reported it, or None."""
    groups = [(msg, ranks) for msg, ranks in _group(messages) if msg is not None]
    if not groups:
        return None
    if p == 1 or (len(groups) == 1 and len(groups[0][1]) == p):
        return _one_line(groups[0][0])  # every rank found the same: no rank to single out
    parts = [f"{_one_line(msg)} (reported by {format_ranks(ranks)})"
             for msg, ranks in groups[:_SHOWN]]
    if len(groups) > _SHOWN:
        parts.append(f"and {len(groups) - _SHOWN} more different problem(s)")
    return "; ".join(parts)


def _describe_disagreement(sames: list[Mapping[str, Any] | None]) -> str | None:
    """One line naming each setting whose value differs between ranks, or None.

    A setting that some ranks do not have at all (another subcommand's option, say) follows
    from a difference in one that every rank has; only those are named when there are any.
    """
    sames = [same or {} for same in sames]
    keys: list[str] = []
    for same in sames:
        keys += [key for key in same if key not in keys]
    shared = [key for key in keys if all(key in same for same in sames)]
    parts = []
    for key in shared or keys:
        groups = _group([same.get(key) for same in sames])
        if len(groups) > 1:
            held = "; ".join(f"{value} on {format_ranks(ranks)}"
                             for value, ranks in groups[:_SHOWN])
            parts.append(f"{key} ({held})")
    if not parts:
        return None
    more = f"; and {len(parts) - _SHOWN} more" if len(parts) > _SHOWN else ""
    return ("the ranks were given different settings, which must be identical on every rank: "
            + "; ".join(parts[:_SHOWN]) + more)


def agree(comm: MPI.Comm, message: str | None = None,
          same: Mapping[str, Any] | None = None) -> None:
    """Raise the same :class:`InputError` on every rank of ``comm`` if any rank found a problem.

    Collective over ``comm``: every rank must call it, at the same point. Each rank passes
    ``message=None`` when its own checks passed, or a one-line description of what it found
    (naming the file and cause), and optionally ``same``: a small mapping of settings that must
    be identical on every rank (argument values, sizes, which inputs are present), printed as
    they are in a message when they differ. When any rank passed a message, every rank raises
    one error naming each distinct problem and the ranks that reported it; otherwise, when a
    setting in ``same`` differs, every rank raises one error naming the setting, each value
    and its ranks. One pickle-based allgather of these small objects: it runs during setup and
    on error paths, never in a kernel loop.
    """
    mark = _WAIT_MARK
    with nullcontext() if mark is None else mark("agree"):
        gathered = comm.allgather((message, None if same is None else dict(same)))
    problem = _describe_problems([msg for msg, _ in gathered], comm.Get_size())
    if problem is None:
        problem = _describe_disagreement([s for _, s in gathered])
    if problem is not None:
        raise InputError(problem)


# The longest sleep between two polls of :func:`wait_quietly`, in seconds: the most a waiting
# rank can lag behind the rank it waits for once that rank is done.
QUIET_POLL_MAX = 0.01


def wait_quietly(comm: MPI.Comm, busy: int) -> None:
    """Return on every rank of ``comm`` once rank ``busy`` has called it, the other ranks
    sleeping between polls instead of spinning in MPI's progress loop.

    Collective over ``comm``. For the step before an :func:`agree` where one rank works alone
    for long (rank 0 partitioning S): ranks blocked in a collective poll without pause, and on
    a node with fewer cores than ranks (or shared with other jobs) they take the cores from the
    one rank that works. A nonblocking barrier: it moves no word, so no count changes. Each
    sleep is a tenth of the time waited so far, between 0.1 ms and :data:`QUIET_POLL_MAX`, so
    a short wait stays short.
    """
    request = comm.Ibarrier()
    if comm.Get_rank() == busy:
        request.Wait()
        return
    mark = _WAIT_MARK
    with nullcontext() if mark is None else mark("agree"):
        start = time.monotonic()
        while not request.Test():
            time.sleep(min(QUIET_POLL_MAX, max(1e-4, (time.monotonic() - start) / 10)))


class Checks:
    """The checks one rank makes on its own before any work, agreed in one collective.

    Not collective until :meth:`agree`. Typical use::

        checks = Checks(comm)
        with checks.guard():            # an InputError raised inside is recorded, not raised
            header = read_header(path)
        checks.require(x > 0, "x must be positive")
        checks.agree(same={"c": c})     # collective: the same InputError on every rank

    Only the first problem of a rank is kept (later checks often depend on earlier ones), and
    :meth:`guard` skips the rest of its block once a problem is recorded.
    """

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.problem: str | None = None

    @property
    def ok(self) -> bool:
        """Whether this rank has found no problem so far."""
        return self.problem is None

    def fail(self, message: str) -> None:
        """Record a problem (the first one wins)."""
        if self.problem is None:
            self.problem = message

    def require(self, condition: bool, message: str) -> bool:
        """Record ``message`` unless ``condition`` holds; return ``condition``."""
        if not condition:
            self.fail(message)
        return bool(condition)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Run a block, recording an :class:`InputError` it raises as this rank's problem."""
        try:
            yield
        except InputError as exc:
            self.fail(str(exc))

    def agree(self, same: Mapping[str, Any] | None = None) -> None:
        """Collective: raise the same InputError everywhere if any rank recorded a problem or
        ``same`` differs between ranks (see :func:`agree`)."""
        agree(self.comm, self.problem, same)


def as_int(value: Any, name: str) -> int:
    """``value`` as a plain int (Python or numpy integer; not bool, not float), else raise
    :class:`InputError` naming ``name``. Not collective."""
    if isinstance(value, bool):
        raise InputError(f"{name} must be an integer, got {value}")
    try:
        return operator.index(value)
    except TypeError:
        raise InputError(f"{name} must be an integer, got {value!r} "
                         f"({type(value).__name__})") from None
