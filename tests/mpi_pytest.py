"""Run pytest on every MPI rank: ``mpiexec -n N python tests/mpi_pytest.py [--allow-empty] ARGS``.

ARGS go to pytest (e.g. ``tests/mpi -q``). Only rank 0 prints pytest's report: the other ranks'
stdout goes to /dev/null, their stderr stays, so crashes and harness messages from any rank
are seen. The lock-step harness itself (one outcome for all ranks, timeouts) is
tests/mpi/conftest.py. pytest's cache plugin is off: the ranks would race on .pytest_cache;
so are Hypothesis's, which no MPI test uses, and the logging plugin, as nothing logs.

Exit status: pytest's, the same on every rank. "No tests collected" (5) is an error, as it
usually means a wrong path or -k; pass --allow-empty to turn it into success.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    allow_empty = "--allow-empty" in argv
    args = [arg for arg in argv if arg != "--allow-empty"]

    # Like `python -m pytest`: the checkout is importable even without `pip install -e .`.
    sys.path.insert(0, str(REPO))
    # prepared before MPI, as the distmm command is: MPICH's single-copy path between the
    # ranks of a node is then on where permitted (distmm.runtime.intranode), so the suite runs the
    # transport users get
    import distmm

    distmm.prepare_process()

    # isort: split
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    if rank != 0:
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)

    import pytest

    # Hypothesis's plugin (no test under MPI uses it) costs each process a few ms per test
    # and more than a second at the end of the session: with 8 ranks on 2 cores that was a
    # third of the time of a test that does little. pytest's logging plugin has nothing to
    # capture (neither distmm nor its tests log), yet before every phase of every test it
    # attaches its handlers to each logger that does not propagate, and PyTorch makes dozens.
    code = int(pytest.main(["-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                            "-p", "no:logging", *args]))
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        if allow_empty:
            code = 0
        elif rank == 0:
            print(f"mpi_pytest: no tests collected for {args} (exit 5); "
                  "pass --allow-empty if that is expected", file=sys.stderr)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
