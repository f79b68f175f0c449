"""A watchdog for hung collectives: ``--timeout SECONDS`` aborts the whole job with one message.

A rank stuck outside MPI (a slow file system, a hung kernel) leaves every other rank blocked
in its next collective, holding the reservation until the scheduler's time limit. With a
watchdog running, each rank marks the collective it is waiting in (the phase names of
:class:`distmm.core.comm.CountingComm`, plus ``agree`` for the agreement of checks and
``safe-point`` for the stop checks of :mod:`distmm.runtime.signals`): two attribute writes per call.
A daemon thread per rank looks at its own mark every ``poll`` seconds; when the rank has
waited in one collective longer than the timeout, the thread reports to rank 0's thread, which
asks every rank's thread where it is (each answers with its mark), prints one line naming
the phase, the ranks waiting and the ranks that did not arrive, and calls ``MPI_Abort`` with
status :data:`EXIT_CODE`. A rank whose thread does not answer (its main thread holds the
interpreter, or it is gone) is listed as not answering. If rank 0's thread itself does not
act, the reporting rank aborts the job on its own after a grace period.

The threads talk over their own duplicate of the communicator (small pickled messages, only
after a timeout), so they never match the program's messages; this needs MPI initialised with
``MPI_THREAD_MULTIPLE`` (mpi4py's default). Without a watchdog the marks cost one global
lookup per collective.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from mpi4py import MPI

from distmm.errors import abort_job, mark_waits, require

__all__ = ["EXIT_CODE", "Watchdog", "running", "waiting"]

EXIT_CODE = 124  # as timeout(1)
GRACE = 3.0  # seconds rank 0 waits for the answers; a reporting rank waits twice that
_REPORT, _QUERY, _ANSWER = 71, 72, 73

ACTIVE: Watchdog | None = None


class Watchdog:
    """One rank's watchdog over ``comm`` (collective to create and to :meth:`stop`).

    Parameters
    ----------
    comm : the communicator of the job (duplicated for the watchdog's own messages).
    timeout : seconds a rank may wait in one collective.
    poll : seconds between looks at the mark (default: a tenth of the timeout, at most 0.5).
    """

    def __init__(self, comm: MPI.Comm, timeout: float, poll: float | None = None) -> None:
        require(MPI.Query_thread() >= MPI.THREAD_MULTIPLE,
                "--timeout needs MPI initialised with MPI_THREAD_MULTIPLE (mpi4py's default; "
                "check mpi4py.rc.thread_level)")
        require(timeout > 0, f"--timeout must be positive, got {timeout}")
        self.timeout = float(timeout)
        self.poll = poll if poll is not None else min(0.5, self.timeout / 10)
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.phase: str | None = None
        self.since = time.monotonic()
        self.last: str | None = None
        self._halt = threading.Event()
        self._sends: list[MPI.Request] = []
        self._thread = threading.Thread(target=self._loop, name="distmm-watchdog", daemon=True)
        self._thread.start()

    def watch(self, phase: str, inner: AbstractContextManager | None = None) -> _Mark:
        """Context manager: mark this rank as waiting in collective ``phase`` for the ``with``
        body, inside ``inner`` (e.g. the phase's timer) when given. Not collective."""
        return _Mark(self, phase, inner)

    def halt(self) -> None:
        """End the thread (not collective; the duplicate communicator is left to MPI)."""
        self._halt.set()
        self._thread.join()

    def stop(self) -> None:
        """End the thread and free the duplicate communicator. Collective."""
        self.halt()
        MPI.Request.Waitall(self._sends)
        self.comm.Barrier()  # no watchdog message is in flight past this point
        self.comm.Free()

    # ------------------------------------------------------------------ the thread
    def _status(self) -> tuple:
        now = time.monotonic()
        return (self.phase, now - self.since, self.last)

    def _loop(self) -> None:
        reported = None
        status = MPI.Status()
        while not self._halt.wait(self.poll):
            while self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
                source, tag = status.Get_source(), status.Get_tag()
                self.comm.recv(source=source, tag=tag)
                if tag == _QUERY:
                    self._sends.append(self.comm.isend(self._status(), dest=source,
                                                       tag=_ANSWER))
                elif tag == _REPORT and self.rank == 0:
                    self._coordinate()
            phase, waited, _ = self._status()
            if reported is None and phase is not None and waited > self.timeout:
                reported = time.monotonic()
                if self.rank == 0:
                    self._coordinate()
                self._sends.append(self.comm.isend(None, dest=0, tag=_REPORT))
            if reported is not None and time.monotonic() - reported > 2 * GRACE:
                self._abort(f"rank {self.rank} waited {waited:.1f} s in phase "
                            f"{phase or self.last!r}, longer than --timeout "
                            f"{self.timeout:g} s; rank 0 did not answer, so the other ranks' "
                            "states are unknown")

    def _coordinate(self) -> None:
        """Rank 0's thread: ask every rank where it is, print one line, abort the job."""
        for k in range(1, self.size):
            self._sends.append(self.comm.isend(None, dest=k, tag=_QUERY))
        states = {0: self._status()}
        status = MPI.Status()
        deadline = time.monotonic() + GRACE
        while len(states) < self.size and time.monotonic() < deadline:
            if self.comm.Iprobe(MPI.ANY_SOURCE, _ANSWER, status):
                states[status.Get_source()] = self.comm.recv(source=status.Get_source(),
                                                             tag=_ANSWER)
            else:
                time.sleep(0.01)
        self._abort(describe(self.timeout, states, self.size))

    def _abort(self, message: str) -> None:
        abort_job(MPI.COMM_WORLD, EXIT_CODE, f"distmm: watchdog: {message}; aborting the job")


class _Mark:
    """The mark of one collective call (a plain class: entered on every collective)."""

    __slots__ = ("dog", "phase", "inner")

    def __init__(self, dog: Watchdog, phase: str, inner: AbstractContextManager | None):
        self.dog, self.phase, self.inner = dog, phase, inner

    def __enter__(self) -> None:
        if self.inner is not None:
            self.inner.__enter__()
        self.dog.phase, self.dog.since = self.phase, time.monotonic()

    def __exit__(self, *exc) -> bool | None:
        dog = self.dog
        dog.last, dog.phase, dog.since = self.phase, None, time.monotonic()
        return None if self.inner is None else self.inner.__exit__(*exc)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def describe(timeout: float, states: dict[int, tuple], size: int) -> str:
    """The watchdog's message. Not collective.

    Ranks waiting in a collective are grouped by phase (a hung rank can leave its neighbours
    waiting in one phase and ranks further on in another); every other rank (outside any
    collective, or not answering) is one that did not arrive.

    Parameters
    ----------
    timeout : the ``--timeout`` in seconds.
    states : rank -> (phase it waits in or None, seconds in that state, last phase or None),
        for the ranks that answered.
    size : the number of ranks.

    Returns
    -------
    str
        One line (without the ``distmm: watchdog:`` prefix).
    """
    waiting: dict[str, list[int]] = {}
    outside, silent = [], []
    for k in range(size):
        if k not in states:
            silent.append(k)
        elif states[k][0] is None:
            outside.append(k)
        else:
            waiting.setdefault(states[k][0], []).append(k)
    absent = sorted(outside + silent)
    phases = ", ".join(sorted(waiting))
    parts = [f"a collective did not complete within --timeout {timeout:g} s (waiting in "
             f"phase{'s' if len(waiting) > 1 else ''} {phases or 'none'})"]
    parts.append("did not arrive: " + (_ranks(absent) if absent else "none (every rank is "
                                                                      "waiting)"))
    for k in outside:
        _, secs, last = states[k]
        # The mark covers CountingComm's calls, agree and the stop checks only: a rank
        # without a mark is computing or waiting in a collective the watchdog does not see.
        parts.append(f"rank {k} is in no watched collective (for {secs:.1f} s: computing, or "
                     f"blocked in an unwatched collective; the last phase it entered was "
                     f"{last or 'none'})")
    if silent:
        parts.append(f"{_ranks(silent)} did not answer (busy holding the interpreter, or gone)")
    for ph, ranks in waiting.items():
        longest = max(states[k][1] for k in ranks)
        parts.append(f"{_ranks(ranks)} waiting in {ph} (up to {longest:.1f} s)")
    return "; ".join(parts)


def waiting(phase: str) -> AbstractContextManager:
    """Mark this rank as waiting in a collective for a ``with`` block. Not collective.

    Parameters
    ----------
    phase : the collective's phase name, as the watchdog's message prints it.

    Returns
    -------
    contextlib.AbstractContextManager
        The mark while a watchdog runs, otherwise a context that does nothing.
    """
    return nullcontext() if ACTIVE is None else ACTIVE.watch(phase)


@contextmanager
def running(comm: MPI.Comm, timeout: float | None) -> Iterator[Watchdog | None]:
    """Context manager: run a watchdog over ``comm`` for the ``with`` body.

    Collective over ``comm`` on entry and on a normal exit (every rank passes the same
    timeout); leaving with an exception ends this rank's thread without communicating.

    Parameters
    ----------
    comm : the job's communicator.
    timeout : seconds a rank may wait in one collective; None runs no watchdog.

    Returns
    -------
    contextlib.AbstractContextManager
        Yields the :class:`Watchdog` (None without a timeout).
    """
    global ACTIVE
    if timeout is None:
        yield None
        return
    dog = Watchdog(comm, timeout)
    ACTIVE = dog
    mark_waits(dog.watch)
    try:
        yield dog
    except BaseException:
        # Other ranks may be gone or blocked: end this rank's thread without communicating.
        ACTIVE = None
        mark_waits(None)
        dog.halt()
        raise
    ACTIVE = None
    mark_waits(None)
    dog.stop()
