"""distmm's exception types and the checks and aborts that need no communication.

:mod:`distmm.errors` re-exports all of it beside the collective agreement (:func:`agree`);
import from there. These live apart so that the watchdog (:mod:`distmm.runtime.watchdog`), which the
agreement marks its wait with, can raise and abort without importing the agreement back.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["ABORT_DRAIN", "DistmmError", "InputError", "abort_job", "require"]


class DistmmError(Exception):
    """Base class of every error distmm raises on purpose."""


class InputError(DistmmError, ValueError):
    """Bad user input: a parameter, a shape, a file. Raised identically on every rank."""


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


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` unless ``condition`` holds.

    Not collective: use it only for checks whose inputs are identical on every rank (global
    shapes, p, c, names), so that every rank raises the same error without communicating.
    """
    if not condition:
        raise InputError(message)
