"""Per-call overhead of a FusedMM under checks="always", "once" and "off" (docs/api.md).

Run under mpiexec, e.g.::

    mpiexec -n 2 python benchmarks/bench_call_overhead.py --n 4096 --d 16 --r 16
    mpiexec -n 2 python benchmarks/bench_call_overhead.py \
        --matrix ../shared/data/metis-mdual.mtx.gz --r 128 --calls 5

For each policy (taken in turns, A B C A B C ..., so that each samples the same moments of a
shared machine) S is distributed once, typed blocks of width r are made with ``S.dense``,
two untimed calls warm up (JIT, S^T built on first use, the first call's full checks), then
``--calls`` FusedMMA calls run back to back into one ``out=`` buffer (with ``--no-out``:
without one, each call returning a new array, as ``y = S.fusedmm_a(A, B)`` in a loop; with
``--new-operands K``: each call on the next of K copies of A and B, in turns, as a loop that
makes new operand arrays every step passes objects the last call did not see). Per
rank, the call time is the loop's wall time / calls; the phases are the object's per-phase
seconds (``S.stats.report()``: compute = the local kernels; replication, propagation, reduction =
the paper's communication); overhead = call time - (compute + replication + propagation +
reduction), i.e. everything a call spends outside the kernels and the paper's communication
(the checks, Python dispatch, buffer set-up and copies). Each figure is the slowest rank's,
and each column is its minimum over ``--rounds`` rounds (on a shared machine a round that a
neighbour slowed inflates one phase; the minimum of each keeps the clean samples). checks =
the policy's best call minus the best call of ``checks="off"`` (what the policy's validation
adds: the NaN scans and cross-rank agreement of a full check, or the cheap local checks;
noise can make it slightly negative); rest = overhead - checks.
Prints a Markdown table (rank 0) and, with
``--jsonl``, appends one JSON line per policy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

from mpi4py import MPI

import distmm
from distmm.io.generate import erdos_renyi

POLICIES = ("always", "once", "off")
LOOP_PHASES = ("compute", "replication", "propagation", "reduction")


def measure(share, comm, args, checks: str) -> dict:
    """One round for one policy: per-call seconds by phase, slowest rank's (collective)."""
    with distmm.distribute(share, comm, algorithm=args.algorithm, c=args.c,
                           checks=checks, seed=args.seed) as S:
        A = S.dense("a", args.r, fill=distmm.hashed_normal(args.seed, 0.1))
        B = S.dense("b", args.r, fill=distmm.hashed_normal(args.seed + 1, 0.1))
        out = S.dense("a", args.r)
        k = max(1, args.new_operands)
        pairs = [(A, B)] + [(A.copy(), B.copy()) for _ in range(k - 1)]
        turn = itertools.cycle(pairs)
        if args.no_out:
            def call():
                X, Y = next(turn)
                return S.fusedmm_a(X, Y, args.strategy)
        else:
            def call():
                X, Y = next(turn)
                return S.fusedmm_a(X, Y, args.strategy, out=out)
        for _ in range(2):
            call()
        S.stats.reset()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            call()
        wall = (time.perf_counter() - t0) / args.calls
        per_phase = {ph: S.stats.seconds.get(ph, 0.0) / args.calls
                     for ph in LOOP_PHASES + ("other",)}
        overhead = wall - sum(per_phase[ph] for ph in LOOP_PHASES)
        mine = {"call": wall, **per_phase, "overhead": overhead}
        worst = {k: comm.allreduce(v, op=MPI.MAX) for k, v in mine.items()}
        desc = S.stats.describe()
    return {"checks": checks, **worst, "algorithm": desc["algorithm"], "c": desc["c"],
            "strategy": args.strategy or S.strategies[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--matrix", help="a .mtx/.mtx.gz file (default: Erdos-Renyi)")
    ap.add_argument("--n", type=int, default=4096, help="Erdos-Renyi size")
    ap.add_argument("--d", type=int, default=16, help="Erdos-Renyi nonzeros per row")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--algorithm", default="15d-dense-shift", choices=list(distmm.ALGORITHMS))
    ap.add_argument("--c", type=int, default=1)
    ap.add_argument("--strategy", default=None)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-out", action="store_true",
                    help="call without an out= buffer (a new result array per call)")
    ap.add_argument("--new-operands", type=int, default=1, metavar="K",
                    help="each call on the next of K copies of the operands (default 1: "
                         "the same operands every call)")
    ap.add_argument("--jsonl", help="append one JSON line per policy here")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if args.matrix:
        share = distmm.api.as_coo_share(args.matrix, comm)
        label = args.matrix.rsplit("/", 1)[-1]
    else:
        share = erdos_renyi(args.n, args.n, args.d, args.seed, comm)
        label = f"Erdos-Renyi n={args.n}, {args.d}/row"
    nnz = int(comm.allreduce(share.nnz))
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for checks in POLICIES:
            rec = measure(share, comm, args, checks)
            if checks not in best:
                best[checks] = rec
            else:
                best[checks] = {k: min(v, rec[k]) if isinstance(v, float) else v
                                for k, v in best[checks].items()}
    for b in best.values():  # what validation adds: the best call against the best unchecked
        b["checks_s"] = b["call"] - best["off"]["call"]
        b["rest"] = b["overhead"] - b["checks_s"]
    if comm.rank != 0:
        return
    p = comm.Get_size()
    print(f"{label}: nnz={nnz}, r={args.r}, p={p}, {best['once']['algorithm']} "
          f"c={best['once']['c']} {best['once']['strategy']}, {args.calls} calls, minimum of "
          f"{args.rounds} rounds per column (slowest rank); microseconds per call"
          f"{', no out= buffer' if args.no_out else ''}"
          + (f", operands in turns from {args.new_operands} copies"
             if args.new_operands > 1 else ""))
    print("| checks | call | compute | communication | checks | rest | overhead | "
          "checks / compute | overhead / compute |")
    print("|---|---|---|---|---|---|---|---|---|")
    for checks in POLICIES:
        b = best[checks]
        comm_s = b["replication"] + b["propagation"] + b["reduction"]
        def per(x, b=b):
            return x / b["compute"] if b["compute"] > 0 else float("nan")

        print(f"| {checks} | {b['call'] * 1e6:.0f} | {b['compute'] * 1e6:.0f} | "
              f"{comm_s * 1e6:.0f} | {b['checks_s'] * 1e6:.0f} | {b['rest'] * 1e6:.0f} | "
              f"{b['overhead'] * 1e6:.0f} | {per(b['checks_s']):.4f} | "
              f"{per(b['overhead']):.3f} |")
        if args.jsonl:
            with open(args.jsonl, "a") as fh:
                fh.write(json.dumps({"matrix": label, "nnz": nnz, "r": args.r, "p": p,
                                     "calls": args.calls, "no_out": args.no_out, **b},
                                    sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
