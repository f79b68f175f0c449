"""The environment of the mpiexec jobs that serial tests launch."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


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
