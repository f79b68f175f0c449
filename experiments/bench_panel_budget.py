"""Column-panel cache budgets of the reference model, compared on whole distributed calls.

Run under mpiexec; every rank takes part. For each matrix and dtype, S is distributed once per
budget (``--budgets``: MiB, or ``auto`` for the model's default, half of the process's share
of the last-level cache), with the API's defaults otherwise; the objects share one set of
dense operands and output buffers, so they differ only in their node model's budget. Each
case (operation, r) runs a warm-up call per object, then ``--calls`` rounds of one call per
object, the order reversed every round, each call timed alone between barriers (slowest
rank). Calls taking turns one by one sample the same moments of a shared machine, so the
per-round ratio of two budgets is far steadier than either time; the table gives each
budget's best and median seconds and the median over rounds of the first budget's time over
each other's (above 1: the other budget is faster). Every budget's object holds its own S and
shift buffers: genes-pubmed in float64 at r = 256 with two budgets at p = 2 did not fit 23
GiB::

    DISTMM_DATA=../shared/data NUMBA_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python \\
        experiments/bench_panel_budget.py --matrices er-65536,genes-pubmed --budgets 16,8 \\
        --rs 64,128 --dtypes float32,float64
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

OPS = ("fusedmm_a", "spmm_a", "sddmm")


def measure(comm, objs: list, op: str, r: int, calls: int, MAX) -> list[list[float]]:
    """Per object, the slowest rank's seconds of each of ``calls`` rounds (collective)."""
    import distmm

    first = objs[0]
    A = first.dense("a", r, fill=distmm.hashed_normal(1, 0.1))
    B = first.dense("b", r, fill=distmm.hashed_normal(2, 0.1))
    out = np.empty_like(first.values) if op == "sddmm" else first.dense("a", r)
    fns = [e2e._distmm_calls(S, A, B, {op: out})[op] for S in objs]
    for fn in fns:
        fn()
        fn()  # the first call checks in full; the second is the one a loop repeats
    times: list[list[float]] = [[] for _ in objs]
    for k in range(calls):
        order = range(len(objs)) if k % 2 == 0 else reversed(range(len(objs)))
        for i in order:
            comm.Barrier()
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(comm.allreduce(time.perf_counter() - t0, op=MAX))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matrices", default="er-65536,genes-pubmed,metis-mdual")
    ap.add_argument("--budgets", default="auto,16,8",
                    help="comma-separated MiB, or auto (the model's default)")
    ap.add_argument("--rs", default="32,64,128")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--calls", type=int, default=16, help="rounds of one call per budget")
    args = ap.parse_args()

    from mpi4py import MPI

    import distmm
    from distmm.core.coo import CooShare
    from distmm.kernels.reference import ReferenceModel

    comm = MPI.COMM_WORLD
    budgets = args.budgets.split(",")
    rs = [int(x) for x in args.rs.split(",")]
    ops = args.ops.split(",")
    if comm.rank == 0:
        print(f"p = {comm.size}, numba threads per rank = {os.environ.get('NUMBA_NUM_THREADS')}"
              f", {args.calls} rounds")
        print("| matrix | dtype | op | r | " + " | ".join(
            f"{b} best / median (ms)" for b in budgets) + " | " + " | ".join(
            f"{budgets[0]} / {b}" for b in budgets[1:]) + " |")
        print("|---|---|---|---|" + "---|" * (2 * len(budgets) - 1))
    for name in args.matrices.split(","):
        S_global = e2e.load_matrix(name) if comm.rank == 0 else None
        for dtype in args.dtypes.split(","):
            models = [ReferenceModel() if b == "auto" else
                      ReferenceModel(panel_bytes=int(float(b) * 2**20)) for b in budgets]
            objs = [distmm.distribute(CooShare.from_scipy(S_global, comm, root=0), comm,
                                      dtype=dtype, node_model=model) for model in models]
            labels = [f"{b} ({models[i].panel_bytes / 2**20:g} MiB)" if b == "auto" else b
                      for i, b in enumerate(budgets)]
            for r in rs:
                for op in ops:
                    times = measure(comm, objs, op, r, args.calls, MPI.MAX)
                    if comm.rank != 0:
                        continue
                    cells = [f"{min(t) * 1e3:.2f} / {np.median(t) * 1e3:.2f}" for t in times]
                    ratios = [np.median(np.array(times[0]) / np.array(t)) for t in times[1:]]
                    print(f"| {name} | {dtype} | {op} | {r} | " + " | ".join(cells) + " | "
                          + " | ".join(f"{x:.2f}x" for x in ratios) + " |", flush=True)
            if comm.rank == 0:
                print(f"<!-- {name} {dtype}: budgets {', '.join(labels)} -->", flush=True)
            for S in objs:
                S.close()


if __name__ == "__main__":
    main()
