"""Test driver: ``call_mismatch_driver.py CASE...``, each CASE ``ALGORITHM:C:CHECKS:KIND``, runs
the cases one after another in one job. For each, every rank makes the agreed first calls on
one distributed matrix (SDDMM, SpMMA, FusedMMA) over its own duplicate of the job's
communicator, then rank 0 makes one call and the others another, three times, under a
watchdog of 3 s. KIND says how the calls differ: ``op`` (SDDMM on rank 0, SpMMA on the
others), ``strategy`` (FusedMMA under the family's first and last strategies), ``width``
(FusedMMA at two widths r) or ``gather`` (a block of A gathered at two widths).

Each rank prints ``case I rank K got a result ...`` if its calls return, or ``case I rank K
refused: ...`` if one raises the library's InputError, and then waits in a barrier; rank 0
prints ``case I done`` when every rank has passed it. So each case either ends with every
rank refused, and the job goes on to the next, or hangs where the watchdog names the phases
and aborts the job (exit 124): the cases after it need another job. It must never print a
result. Used by tests/serial/test_call_mismatch.py only."""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import distmm
from distmm.errors import InputError
from distmm.runtime import watchdog


def run_case(index: int, comm: MPI.Comm, algorithm: str, c: int, checks: str,
             case: str) -> None:
    S = sp.random(40, 36, density=0.2, random_state=1, format="coo")
    obj = distmm.distribute(S, comm, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            checks=checks)
    low = obj.r_rule()[0]
    rng = np.random.default_rng(0)
    loc = {}
    for r in (low + 1, 2 * low + 1):  # two widths every family takes
        loc[r] = (obj.scatter("a", rng.standard_normal((40, r)), root=None),
                  obj.scatter("b", rng.standard_normal((36, r)), root=None))
    r, wide = low + 1, 2 * low + 1
    first, last = obj.strategies[0], obj.strategies[-1]
    obj.sddmm(*loc[r])
    obj.spmm_a(loc[r][1])
    obj.fusedmm_a(*loc[r], strategy=first)
    mine = comm.rank == 0
    if case == "op":
        def call():
            return obj.sddmm(*loc[r]) if mine else obj.spmm_a(loc[r][1])
    elif case == "strategy":
        def call():
            return obj.fusedmm_a(*loc[r], strategy=first if mine else last)
    elif case == "gather":
        obj.gather("a", loc[r][0])
        obj.gather("a", loc[wide][0])

        def call():
            return obj.gather("a", loc[r if mine else wide][0])
    else:
        def call():
            return obj.fusedmm_a(*loc[r if mine else wide], strategy=first)
    with watchdog.running(comm, 3.0):
        try:
            for _ in range(3):
                got = call()
            print(f"case {index} rank {comm.rank} got a result of {np.asarray(got).size} "
                  "numbers", flush=True)
        except InputError as err:
            print(f"case {index} rank {comm.rank} refused: {err}", flush=True)
        with watchdog.waiting("refused"):
            comm.Barrier()
    obj.close()


def main(cases: list[str]) -> None:
    for index, spec in enumerate(cases):
        algorithm, c, checks, case = spec.split(":")
        # a communicator per case: a message a refused call left unreceived stays on it
        comm = MPI.COMM_WORLD.Dup()
        run_case(index, comm, algorithm, int(c), checks, case)
        comm.Free()
        if MPI.COMM_WORLD.rank == 0:
            print(f"case {index} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
