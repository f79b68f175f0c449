"""Test driver for the watchdog: ``hang_driver.py RANK PHASE NTH HOW DISTMM-ARGS...`` runs the
``distmm`` command with one rank made to hang: rank RANK sleeps for an hour just before its
NTH entry into collective phase PHASE of :class:`distmm.core.comm.CountingComm` (outside the
collective, as a rank stuck on a slow file system or in a long kernel would be), so every
other rank ends up waiting for it. HOW is ``sleep`` (time.sleep, which lets the rank's other
threads run) or ``gil`` (libc's sleep called while holding the interpreter lock, as a kernel
that does not release it would, so the rank's watchdog thread cannot answer) or ``unwatched``
(the rank enters a barrier on COMM_WORLD that no other rank enters: a collective the
watchdog does not watch, which it must not call "outside any collective"). PHASE
``read-input`` instead makes the rank sleep (``sleep`` only) while ``distmm run`` reads S's
header, as on a file system that stopped answering, before the ranks agree on their checks.
Used by tests/serial/test_watchdog.py only."""

from __future__ import annotations

import ctypes
import sys
import time

from mpi4py import MPI

from distmm.cli import kernels as cli_run
from distmm.cli import main as cli_main_fn
from distmm.core import comm as counting


def hang(rank: int, phase: str, nth: int, how: str) -> None:
    """Make ``rank`` sleep before its ``nth`` entry into ``phase`` (``how``: see above)."""
    if phase == "read-input":
        header = cli_run.sparse_header

        def slow_header(path):
            if MPI.COMM_WORLD.Get_rank() == rank:
                time.sleep(3600)
            return header(path)

        cli_run.sparse_header = slow_header
        return
    original = counting.CountingComm._phase
    seen = [0]

    def phase_with_hang(self, name: str):
        if MPI.COMM_WORLD.Get_rank() == rank and name == phase:
            seen[0] += 1
            if seen[0] == nth:
                if how == "gil":
                    ctypes.PyDLL(None).sleep(3600)  # a PyDLL call keeps the GIL
                if how == "unwatched":
                    MPI.COMM_WORLD.Barrier()
                time.sleep(3600)
        return original(self, name)

    counting.CountingComm._phase = phase_with_hang


if __name__ == "__main__":
    hang(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4])
    sys.exit(cli_main_fn(sys.argv[5:]))
