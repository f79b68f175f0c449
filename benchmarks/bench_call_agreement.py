"""What the cross-rank agreement of a call costs on small calls: Cora's adjacency, r = 16.

    mpiexec -n P .venv/bin/python benchmarks/bench_call_agreement.py [MATRIX] [R] [ROUNDS]

For SDDMM, SpMMA and FusedMMA (15d-dense-shift, c = 1, float64) it times, alternating in one
run: the first call of a fresh object under checks="once" (full checks plus the agreement on
the call, and the call's own first-time work), a later call under "once" (cheap local checks,
no collective), and a later call under "always" (the full checks and the agreement on every
call); and, alone, the agreement's collective (the all-gather of one rank's small tuple that
the full checks make). Prints one line per operation on rank 0: medians in microseconds over
ROUNDS rounds (each the slowest rank's time), and "always" over "once" later calls.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import distmm

COMM = MPI.COMM_WORLD
CALLS = {
    "sddmm": lambda S, A, B: S.sddmm(A, B),
    "spmm_a": lambda S, A, B: S.spmm_a(B),
    "fusedmm_a": lambda S, A, B: S.fusedmm_a(A, B),
}


def timed(fn) -> float:
    COMM.Barrier()
    t0 = time.perf_counter()
    fn()
    return COMM.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def main(path: str, r: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    objs = {checks: distmm.distribute(path, COMM, dtype=np.float64, root=None, checks=checks)
            for checks in ("once", "always")}
    m, n = objs["once"].shape
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    blocks = {k: (S.scatter("a", A, root=None), S.scatter("b", B, root=None))
              for k, S in objs.items()}
    for k, S in objs.items():  # warm: compiled kernels, first calls done
        for call in CALLS.values():
            call(S, *blocks[k])
    kinds = ("first", "once", "always", "agree")
    times = {(op, kind): [] for op in CALLS for kind in kinds}
    call_info = {"operation": "sddmm", "strategy": None, "values=": "not given",
                 "out=": "not given"}
    for _ in range(rounds):
        for op, call in CALLS.items():
            fresh = distmm.distribute(path, COMM, dtype=np.float64, root=None, checks="once",
                                      permute=objs["once"])
            Af, Bf = fresh.scatter("a", A, root=None), fresh.scatter("b", B, root=None)
            times[(op, "first")].append(timed(functools.partial(call, fresh, Af, Bf)))
            fresh.close()
            for kind in ("once", "always"):
                S = objs[kind]
                times[(op, kind)].append(timed(functools.partial(call, S, *blocks[kind])))
            times[(op, "agree")].append(timed(functools.partial(
                COMM.allgather, (None, None, r, None, call_info))))
    if COMM.rank == 0:
        print(f"# {path}: {m} x {n}, r = {r}, p = {COMM.size}, {rounds} rounds; "
              "median microseconds (slowest rank)")
        for op in CALLS:
            med = {k: 1e6 * statistics.median(times[(op, k)]) for k in kinds}
            print(f"{op:10s} once first {med['first']:8.1f}  once later {med['once']:7.1f}  "
                  f"always {med['always']:7.1f}  always/once {med['always'] / med['once']:5.2f}  "
                  f"agreement alone {med['agree']:6.1f}")
    for S in objs.values():
        S.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    # the real matrices: $DISTMM_DATA, else ../shared/data beside the checkout
    data = os.environ.get("DISTMM_DATA", os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
    main(args[0] if args else os.path.join(data, "cora-adjacency.mtx.gz"),
         int(args[1]) if len(args) > 1 else 16, int(args[2]) if len(args) > 2 else 30)
