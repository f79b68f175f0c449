"""Run many cases of mpmd_cases.py in one MPMD launch: ``mpiexec -n 1 -wdir D0 python
mpmd_driver.py RESULTS [IDS...] : -n 1 -wdir D1 ...`` (or ``--interrupt``: print "ready",
then run a long ``distmm bench`` for the SIGINT test).

Every rank starts in its own working directory, which holds one subdirectory per case (made
by test_mpmd.py). For each case, in the order given, the ranks meet in a barrier, then each
enters the case's directory and runs it (``distmm.cli.main`` with that rank's arguments, or
the API call), with stderr captured, and records its exit status (2 for an InputError from
the API), its stderr, any traceback and the seconds from the barrier to the error. Each rank
writes its records to RESULTS/rank-K.json. A case that does not end on every rank hangs the
launch; the test's timeout turns that into a failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str]) -> int:
    import mpmd_cases
    from mpi4py import MPI

    from distmm.cli import main as cli_main
    from distmm.errors import InputError

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    if argv[0] == "--interrupt":
        # For the SIGINT test: say when distmm is about to run, then bench until interrupted.
        comm.Barrier()
        if rank == 0:
            print("ready", flush=True)
        return cli_main(["bench", "--n", "20000", "--nnz-per-row", "8", "--r", "16",
                         "--repeat", "1000000", "--ops", "sddmm"])
    results_dir, ids = argv[0], argv[1:]
    cases = {case.id: case for case in mpmd_cases.CASES}
    home = os.getcwd()
    records = []
    for case_id in ids:
        case = cases[case_id]
        os.chdir(os.path.join(home, case_id))
        err = io.StringIO()
        comm.Barrier()
        start = time.perf_counter()
        code, crash, error = None, None, None
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                if case.cli is not None:
                    code = cli_main(case.cli(rank, p))
                else:
                    case.api(rank, p)
                    code = 0
            except SystemExit as exc:
                code = exc.code
            except InputError as exc:  # the API's error: the same on every rank
                code, error = 2, str(exc)
            except BaseException:  # recorded, not raised: the test reports it
                crash = traceback.format_exc()
                code = 1
        seconds = time.perf_counter() - start
        os.chdir(home)
        records.append({"id": case_id, "code": code, "stderr": err.getvalue(), "crash": crash,
                        "error": error, "seconds": seconds})
        if crash is not None:
            break  # the other ranks may be stuck: stop here, the test fails on this record
    with open(os.path.join(results_dir, f"rank-{rank}.json"), "w") as fh:
        json.dump(records, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
