"""Stopping a job cleanly on SIGTERM and SIGINT: a flag, safe points, and one agreement.

A scheduler ends a job with SIGTERM (Slurm's time limit and ``scancel`` send it to every task,
then SIGKILL after its ``KillWait``); Ctrl-C sends SIGINT. MPICH's ``mpiexec`` forwards both to
every rank; ``kill`` of one rank's process reaches that rank only. A rank must not stop on its
own (the others would wait for it in their next collective), and Python runs a signal handler
only between bytecodes of the main thread, never inside a blocking MPI call. So the handler
only records the signal; the drivers call :func:`agreed` at their safe points (between
epochs, repetitions, measurements), one small all-reduce that tells every rank whether any
rank got a signal, and every rank then stops at the same point: a training driver writes its
checkpoint, and :class:`Stopped` carries the exit status 128 + the signal's number (143 for
SIGTERM, 130 for SIGINT) out to ``distmm``'s ``main``. A second signal on a rank that already
has one pending stops that rank at once (``KeyboardInterrupt``), as ``mpiexec`` does for a
second Ctrl-C.

The handlers are installed only inside :func:`handled` (``distmm`` enters it before it parses
its arguments, so a signal that arrives during start-up is kept, and leaves it with
:func:`release` for a command without safe points); outside it :func:`agreed` communicates
nothing and returns 0, so library callers pay nothing unless they opt in.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from distmm.runtime import watchdog

__all__ = ["SIGNALS", "Stopped", "agreed", "exit_code", "handled", "pending", "release",
           "stop_if_requested"]

SIGNALS = (signal.SIGTERM, signal.SIGINT)  # the order is the priority when ranks differ
_received = 0  # this rank's first signal since handled() was entered (0: none)
_forced = 0  # the signal that forced an immediate stop (a second one)
_installed = False
_previous: dict = {}  # the handlers handled() replaced


class Stopped(Exception):
    """Raised on every rank at the same safe point after a rank received a stop signal.

    ``signum`` is the signal, ``message`` says where the job stopped and what it wrote.
    """

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def exit_code(signum: int) -> int:
    """The exit status of a job stopped by a signal (the shell's convention). Not collective.

    Parameters
    ----------
    signum : the signal's number.

    Returns
    -------
    int
        128 + ``signum`` (143 for SIGTERM, 130 for SIGINT).
    """
    return 128 + int(signum)


def name(signum: int) -> str:
    """``SIGTERM``, ``SIGINT``, ... for a signal number."""
    return signal.Signals(signum).name


def _handler(signum: int, frame) -> None:
    global _received, _forced
    if _received:
        _forced = signum
        raise KeyboardInterrupt
    _received = signum


def pending() -> int:
    """This rank's pending stop signal (0: none). Not collective."""
    return _received


def forced() -> int:
    """The signal (SIGINT if unknown) that interrupted this rank at once. Not collective."""
    return _forced or signal.SIGINT


@contextmanager
def handled() -> Iterator[None]:
    """Context manager: inside it, SIGTERM and SIGINT set this rank's stop flag instead of
    ending the process, and the safe points (:func:`agreed`) communicate.

    Every rank must enter it alike (the safe points' agreement is collective only inside it);
    entering and leaving are not collective. Restores the previous handlers on leaving, or
    earlier with :func:`release`. Only the main thread can install handlers; in another thread
    the block runs with them unchanged.

    Returns
    -------
    contextlib.AbstractContextManager
        The block's context (yields None).
    """
    global _received, _forced, _installed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _previous.update({s: signal.signal(s, _handler) for s in SIGNALS})
    _received, _forced, _installed = 0, 0, True
    try:
        yield
    finally:
        _restore()


def _restore() -> None:
    global _installed
    _installed = False
    for s, h in _previous.items():
        signal.signal(s, h)
    _previous.clear()


def release() -> None:
    """Leave :func:`handled`'s handling early (for a command without safe points): restore
    the previous handlers; a signal already received stops this rank at once
    (``KeyboardInterrupt``). Not collective."""
    global _forced
    _restore()
    if _received:
        _forced = _received
        raise KeyboardInterrupt


def agreed(comm: MPI.Comm) -> int:
    """Whether any rank of ``comm`` got a stop signal: a safe point's agreement.

    Collective over ``comm`` (one all-reduce of one integer) inside :func:`handled`; outside
    it returns 0 without communicating. A control message like :func:`distmm.errors.agree`,
    so not counted in the algorithms' communication; with ``--timeout`` it is watched as
    phase ``safe-point``.

    Parameters
    ----------
    comm : every rank of the job (all must call).

    Returns
    -------
    int
        The signal any rank received (SIGTERM when ranks got different ones), the same on
        every rank; 0 when none did.
    """
    if not _installed:
        return 0
    flag = np.array([len(SIGNALS) - SIGNALS.index(_received) if _received else 0],
                    dtype=np.int32)
    with watchdog.waiting("safe-point"):
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
    return 0 if flag[0] == 0 else int(SIGNALS[len(SIGNALS) - int(flag[0])])


def stop_if_requested(comm: MPI.Comm, where: str, done: str = "nothing was written") -> None:
    """A safe point: raise :class:`Stopped` on every rank if any rank got a stop signal.

    Collective over ``comm`` (see :func:`agreed`).

    Parameters
    ----------
    comm : every rank of the job (all must call).
    where : the point, for the message (``"after repeat 2 of 5"``).
    done : what the stop keeps, for the message.

    Returns
    -------
    None
        Returns only when no rank got a signal; otherwise raises :class:`Stopped` (message
        ``stopped by SIGTERM <where>; <done>``) on every rank.
    """
    signum = agreed(comm)
    if signum:
        raise Stopped(signum, f"stopped by {name(signum)} {where}; {done}")
