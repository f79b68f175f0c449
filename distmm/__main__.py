"""The ``distmm`` command: ``distmm ARGS`` or ``python -m distmm ARGS``.

It prepares the process (:func:`distmm.prepare_process`: OpenBLAS's threads, MPICH's
single-copy path) before anything loads numpy or mpi4py's ``MPI``, then runs the command
line (:func:`distmm.cli.main`).
"""

from __future__ import annotations

import sys

from distmm.runtime.process import prepare_process


def main(argv: list[str] | None = None) -> int:
    """Prepare the process, then run the command line. Collective as the command is."""
    prepare_process()
    from distmm.cli import main as cli_main  # numpy and MPI load here, after the settings

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
