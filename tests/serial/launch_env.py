"""The environment of the mpiexec jobs that serial tests launch."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# How late a timed sleep of the serial tests and of the jobs they launch may end (Linux's timer
# slack, 50 us by default): a sleeping MPICH rank polls in sleeps of nanoseconds, each ending
# after the slack, so a rank that waits seconds for another (a watchdog's timeout, a signal)
# costs a quarter of a core at 50 us and little at this; the lock-step tests of tests/mpi, which
# wait after every phase, keep the default (docs/developer.md, "Tests")
TIMER_SLACK_NS = 250_000
_PR_SET_TIMERSLACK = 29


def mpi_env(**overrides: str) -> dict[str, str]:
    """This process's environment for an oversubscribed ``mpiexec`` job of this checkout: the
    shared numba cache, one thread per rank, MPICH's sleeping wait, and the checkout first on
    the import path (so helper drivers import the code under test); then ``overrides``."""
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    # MPICH's sleeping wait: heavy yield sleeps in each poll of a blocking send, receive or
    # collective, but a blocking probe (mpi4py's pickled recv) still spins unless the progress
    # throttle is on too; so ranks that wait long (a deadlock until the watchdog, a rank until
    # another's signal) leave the cores to the ranks that work (docs/performance.md)
    env.update(MPIR_CVAR_ENABLE_HEAVY_YIELD="1", MPIR_CVAR_CH4_PROGRESS_THROTTLE="1",
               NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(overrides)
    return env


def coarsen_timer_slack(ns: int = TIMER_SLACK_NS) -> bool:
    """Set the timer slack of the calling thread to ``ns``, which the threads and processes it
    starts from then on inherit; whether that worked (False off Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return prctl(_PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children.get(child, [])
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_job(launcher: int, timeout: float = 60) -> None:
    """SIGKILL an ``mpiexec`` job at once: the launcher and every process below it.

    MPICH's proxy and each rank run in sessions of their own, so killing the launcher's
    process group leaves the ranks running (and writing) until they notice; a test that
    simulates a node failure kills the whole tree and waits until none of it is left."""

    tree = [*reversed(descendants(launcher)), launcher]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in tree[:-1]) and time.monotonic() < deadline:
        time.sleep(0.01)
