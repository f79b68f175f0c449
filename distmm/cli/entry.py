"""The ``distmm`` command's entry point: parse on every rank, agree, check the files, run.

Launch under the MPI that distmm was installed with, e.g. ``mpiexec -n 4 distmm run ...``.
Every rank parses its own arguments; the ranks agree in one collective
(:func:`parse_agreed`): arguments that differ between ranks or a usage error on any rank exit
every rank with status 2 and one message from rank 0. Then the command's own argument checks
run (``check_arguments``, set with ``set_defaults``: checks of the arguments alone, identical
on every rank), and every declared file of the command is checked and agreed
(:func:`distmm.cli.files.check_files`) before the command's function runs. An
:class:`~distmm.errors.InputError` (raised alike on every rank by an agreed check) exits 2
with one line; an unexpected error on any rank prints that rank's traceback and
aborts the whole job, so nothing waits forever for a rank that left; Ctrl-C (SIGINT) ends
every rank with status 130 and one line. Results are JSON Lines on stdout (rank 0).

Adding a command is one module in this package with ``add_parser(sub)`` (which declares its
files with :mod:`distmm.cli.files` and sets ``func``) and one entry in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from mpi4py import MPI

from distmm.cli import als, convert, gat, kernels, partition, plan, simulate, spgemm
from distmm.cli.common import Parser, UsageError
from distmm.cli.files import FILES, check_files
from distmm.errors import InputError, abort_job, agree
from distmm.runtime import info, signals, watchdog

# Each module's add_parser(sub) registers its command(s); the order is the help's order.
COMMANDS = (kernels, plan, partition, spgemm, simulate, als, gat, convert)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``distmm`` command."""
    parser = Parser(prog="distmm", description="Distributed SDDMM, SpMM and FusedMM on MPI "
                                               "process grids (run under mpiexec or srun).")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(sub)
    info.add_parser(parser, sub)
    return parser


def _label(dest: str) -> str:
    """How an argparse destination is spelled on the command line, for messages."""
    return {"c": "-c", "p": "-p", "op": "OP", "command": "COMMAND",
            "simulator": "SIMULATOR"}.get(dest, "--" + dest.replace("_", "-"))


def parse_agreed(parser: argparse.ArgumentParser, argv: list[str] | None,
                 comm: MPI.Comm) -> argparse.Namespace:
    """Parse the command line on every rank and agree on the outcome (collective).

    A usage error on any rank, or parsed arguments that differ between ranks (an MPMD launch
    given different options per rank), exits every rank with status 2 and one message from
    rank 0 naming the ranks and the arguments that differ; ``--help`` on every rank exits 0.
    """
    args, usage, problem = None, None, None
    try:
        args = parser.parse_args(argv)
        same = {"--help": False, **{_label(k): v for k, v in sorted(vars(args).items())
                                    if not callable(v) and k != FILES}}
    except UsageError as exc:
        usage, problem = exc.usage, str(exc)
        same = {}
    except SystemExit as exc:  # --help: printed on rank 0
        same = {"--help": True, "exit": exc.code}
    try:
        agree(comm, problem, same)
    except InputError as exc:
        if comm.rank == 0:
            if usage:
                sys.stderr.write(usage)
            print(f"distmm: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if args is None:
        raise SystemExit(same["exit"])
    return args


def _interrupted(comm: MPI.Comm, signum: int = 2) -> int:
    """End this rank at once after Ctrl-C (SIGINT), or after a second SIGTERM or SIGINT in a
    command with safe points: one line, status 128 + the signal's number (130 for SIGINT).

    mpiexec sends SIGINT to every rank. Rank 0 prints the line and leaves at once; the job
    launcher then ends the ranks still blocked in a collective (which cannot run Python's
    handler). Another rank waits a moment first, so that rank 0's line is the only one unless
    rank 0 itself is blocked. With more than one rank the process leaves with os._exit: a
    normal exit would enter MPI_Finalize and wait for ranks that are gone.
    """
    import time

    if comm.rank != 0:
        time.sleep(1.0)
    sys.stderr.write(f"distmm: interrupted ({signals.name(signum)}); stopping every rank; "
                     "nothing was written\n")
    sys.stderr.flush()
    sys.stdout.flush()
    code = signals.exit_code(signum)
    if comm.size > 1:
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distmm`` console script."""
    comm = MPI.COMM_WORLD
    try:
        with signals.handled():
            args = parse_agreed(build_parser(), argv, comm)
            if not getattr(args, "safe_points", False):
                signals.release()
            with watchdog.running(comm, getattr(args, "timeout", None)):
                if getattr(args, "check_arguments", None):  # same arguments on every rank
                    args.check_arguments(args)
                check_files(args, comm)
                return args.func(args)
    except InputError as exc:
        if comm.rank == 0:
            print(f"distmm: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except signals.Stopped as exc:  # raised on every rank at the same safe point
        if comm.rank == 0:
            print(f"distmm: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except SystemExit:
        raise
    except KeyboardInterrupt:
        return _interrupted(comm, signals.forced())
    except BaseException:
        message = f"distmm: rank {comm.rank} of {comm.size} failed:\n" + traceback.format_exc()
        if comm.size > 1:
            abort_job(comm, 1, message)
        sys.stderr.write(message)
        sys.stderr.flush()
        return 1
