"""What telling later calls apart costs on small calls: Cora's adjacency, r = 16.

    mpiexec -n P .venv/bin/python benchmarks/bench_call_checks.py [MATRIX] [R] [ROUNDS]

Under checks="once", calls after the first of each operation are compared across ranks only
by their messages (distmm.core.comm): every shift's received size is checked, and the first
collective of each call on each communicator (the first shift too, in the families whose
shifts do not show the width) is preceded by one all-gather of the call's tag and width. For
each family at c = 1 and at its deepest c, and SDDMM, SpMMA and FusedMMA, it times later calls
on two objects alike, in turns: one as shipped, one with those checks bypassed on its
communicators (the comparison made a no-op, the size check skipped); and, alone, the
comparison's all-gather of three integers over all ranks. Prints, on rank 0, the median
microseconds over ROUNDS rounds (each the slowest rank's time) and checked over bypassed.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys

import numpy as np
from mpi4py import MPI

import distmm
from distmm.perf import costmodel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_call_agreement import CALLS, timed  # noqa: E402  (the calls and their timing)

COMM = MPI.COMM_WORLD


def bypass(S) -> None:
    """Turn the later calls' checks off on S's communicators (the comparison and the size
    check of received shifts)."""
    for name in ("world", "fiber", "layer", "row", "col"):
        comm = getattr(S, name, None)
        if comm is not None:
            comm._same_call = lambda phase: None
            comm._received = lambda *args: None


def main(path: str, r: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    if COMM.rank == 0:
        print(f"# {path}: r = {r}, p = {COMM.size}, {rounds} rounds; median microseconds "
              "of later calls under checks='once' (slowest rank)")
    for family in distmm.ALGORITHMS:
        for c in sorted({1, costmodel.valid_cs(family, COMM.size, r)[-1]}):
            if c not in costmodel.valid_cs(family, COMM.size, r):
                continue
            objs = [distmm.distribute(path, COMM, algorithm=family, c=c, dtype=np.float64,
                                      root=None, checks="once") for _ in range(2)]
            bypass(objs[1])
            m, n = objs[0].shape
            A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
            blocks = [(S.scatter("a", A, root=None), S.scatter("b", B, root=None))
                      for S in objs]
            for S, (Ab, Bb) in zip(objs, blocks, strict=True):  # warm: first calls done
                for call in CALLS.values():
                    call(S, Ab, Bb)
            mine, every = np.zeros(3, np.int64), np.zeros((COMM.size, 3), np.int64)
            alone = functools.partial(COMM.Allgather, [mine, MPI.INT64_T],
                                      [every, MPI.INT64_T])
            for op, call in CALLS.items():
                times = [[], [], []]
                for _ in range(rounds):
                    for k in (0, 1):
                        times[k].append(timed(functools.partial(call, objs[k], *blocks[k])))
                    times[2].append(timed(alone))
                med = [1e6 * statistics.median(t) for t in times]
                if COMM.rank == 0:
                    print(f"{family:22s} c={c} {op:10s} checked {med[0]:8.1f}  bypassed "
                          f"{med[1]:8.1f}  ratio {med[0] / med[1]:5.2f}  comparison alone "
                          f"{med[2]:6.1f}", flush=True)
            for S in objs:
                S.close()


if __name__ == "__main__":
    data = os.environ.get("DISTMM_DATA", os.path.join("..", "shared", "data"))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(data, "cora-adjacency.mtx.gz"),
         int(sys.argv[2]) if len(sys.argv) > 2 else 16,
         int(sys.argv[3]) if len(sys.argv) > 3 else 40)
