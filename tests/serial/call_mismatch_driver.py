"""Test driver: ``call_mismatch_driver.py ALGORITHM C CHECKS`` makes every rank call SDDMM and
SpMMA once on one distributed matrix (the agreed first calls), then rank 0 calls SDDMM while
the others call SpMMA, under a watchdog of 3 s. With each call's messages under its own tag
the ranks cannot pair up: the job must hang in the calls' phases and be aborted by the
watchdog, never print a result. Used by tests/serial/test_call_mismatch.py only."""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import distmm
from distmm import watchdog

COMM = MPI.COMM_WORLD


def main(algorithm: str, c: int, checks: str) -> None:
    S = sp.random(40, 36, density=0.2, random_state=1, format="coo")
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            checks=checks)
    r = obj.r_rule()[0] + 1
    rng = np.random.default_rng(0)
    A_loc = obj.scatter("a", rng.standard_normal((40, r)), root=None)
    B_loc = obj.scatter("b", rng.standard_normal((36, r)), root=None)
    obj.sddmm(A_loc, B_loc)
    obj.spmm_a(B_loc)
    with watchdog.running(COMM, 3.0):
        for _ in range(3):
            got = obj.sddmm(A_loc, B_loc) if COMM.rank == 0 else obj.spmm_a(B_loc)
        print(f"rank {COMM.rank} got a result of {np.asarray(got).size} numbers", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
