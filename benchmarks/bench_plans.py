"""Per-call time of small calls as plain method calls and through call plans (``S.plan``).

    mpiexec -n P .venv/bin/python benchmarks/bench_plans.py [--matrix M] [--r R[,R2...]]
        [--rounds K] [--calls N] [--clock wall|cpu] [--compare PACKAGE]

On Cora's adjacency (default ``$DISTMM_DATA/cora-adjacency.mtx.gz``), 15d-dense-shift, c = 1,
float64, at each width r given (default 16): SDDMM, SpMMA and SpMMB into ``out=``, FusedMMA
into ``out=`` and without it, and SpMMA without ``out=`` on two operand arrays in turns (a loop
that makes new arrays, as each distmm.torch call does). Each is timed as a plain method call
(``S.spmm_a(B, out=Y)``) and through a plan made once (``step = S.plan("spmm_a", B, out=Y)``,
then ``step()``, or ``step(B2)`` on new operands). ``--compare PACKAGE[,PACKAGE2...]`` also
times other copies of distmm importable as PACKAGE (say, an older checkout's ``distmm``
directory copied as
``distmm_base`` with its imports renamed, on ``PYTHONPATH``): its plain calls, and its
``S.bind`` where the copy has one.

Every variant has its own distributed object, made and warmed (compiled kernels, first
calls, plans replaying) before timing; rounds alternate the variants' order (A B C, C B A,
...), so each samples the same moments of a shared machine. A figure is the loop's wall
time / calls on the slowest rank, the best of the rounds; ratios are against this version's
plain call. ``--clock cpu`` times the calling thread's CPU time instead of wall time (at
p = 1 on a shared machine it leaves out the time other jobs held the core; at p > 1 it would
count a rank's waiting for its neighbour as work, so keep wall time there). Short loops
(``--calls`` of a few tens) and many rounds let the best rounds fall between the other jobs'
time slices. Prints a Markdown table per width on rank 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time

import numpy as np
from mpi4py import MPI

import distmm

COMM = MPI.COMM_WORLD
CASES = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_a no out", "spmm_a new operands")


def _objects(pkg, path: str, r: int):
    """(S, A, B, two copies of B, out buffers) of one copy of the package."""
    S = pkg.distribute(path, COMM, dtype=np.float64, root=None)
    A = S.dense("a", r, fill=pkg.hashed_normal(0, 0.1))
    B = S.dense("b", r, fill=pkg.hashed_normal(1, 0.1))
    Bs = [B.copy(), B.copy()]
    outs = {"a": S.dense("a", r), "b": S.dense("b", r), "v": np.empty_like(S.values)}
    return S, A, B, Bs, outs


def plain_calls(pkg, path: str, r: int) -> tuple:
    """(S, case -> call) of plain method calls."""
    S, A, B, Bs, o = _objects(pkg, path, r)
    turn = [0]

    def new_operands():
        turn[0] ^= 1
        return S.spmm_a(Bs[turn[0]])

    return S, {
        "sddmm": lambda: S.sddmm(A, B, out=o["v"]),
        "spmm_a": lambda: S.spmm_a(B, out=o["a"]),
        "spmm_b": lambda: S.spmm_b(A, out=o["b"]),
        "fusedmm_a": lambda: S.fusedmm_a(A, B, out=o["a"]),
        "fusedmm_a no out": lambda: S.fusedmm_a(A, B),
        "spmm_a new operands": new_operands,
    }


def planned_calls(pkg, path: str, r: int) -> tuple:
    """(S, case -> call) through ``S.plan`` (or, in a copy without it, ``S.bind``)."""
    S, A, B, Bs, o = _objects(pkg, path, r)
    if not hasattr(S, "plan"):
        return S, {
            "sddmm": S.bind("sddmm", A, B, out=o["v"]),
            "spmm_a": S.bind("spmm_a", B, out=o["a"]),
            "spmm_b": S.bind("spmm_b", A, out=o["b"]),
            "fusedmm_a": S.bind("fusedmm_a", A, B, out=o["a"]),
        }
    step = S.plan("spmm_a", Bs[0])
    turn = [0]

    def new_operands():
        turn[0] ^= 1
        return step(Bs[turn[0]])

    return S, {
        "sddmm": S.plan("sddmm", A, B, out=o["v"]),
        "spmm_a": S.plan("spmm_a", B, out=o["a"]),
        "spmm_b": S.plan("spmm_b", A, out=o["b"]),
        "fusedmm_a": S.plan("fusedmm_a", A, B, out=o["a"]),
        "fusedmm_a no out": S.plan("fusedmm_a", A, B),
        "spmm_a new operands": new_operands,
    }


def best_times(variants: dict, rounds: int, calls: int, clock=time.perf_counter) -> dict:
    """(variant, case) -> best per-call seconds of the slowest rank (collective)."""
    for _, fns in variants.values():
        for fn in fns.values():
            for _ in range(5):
                fn()
    best = {}
    names = list(variants)
    for k in range(rounds):
        order = names if k % 2 == 0 else names[::-1]
        for case in CASES:
            for name in order:
                fn = variants[name][1].get(case)
                if fn is None:
                    continue
                COMM.Barrier()
                t0 = clock()
                for _ in range(calls):
                    fn()
                dt = COMM.allreduce((clock() - t0) / calls, op=MPI.MAX)
                best[name, case] = min(best.get((name, case), float("inf")), dt)
    return best


def table(best: dict, names: list) -> str:
    """A Markdown table: microseconds per call and ratios to this version's plain call."""
    head = "| call | " + " | ".join(f"{n} (us)" for n in names) + " | " + " | ".join(
        f"{n} / plain" for n in names if n != "plain") + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(names) - 1)]
    for case in CASES:
        base = best["plain", case]
        cells = [f"{best[n, case] * 1e6:.1f}" if (n, case) in best else "-" for n in names]
        ratios = [f"{best[n, case] / base:.2f}" if (n, case) in best else "-"
                  for n in names if n != "plain"]
        lines.append(f"| {case} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main() -> None:
    data = os.environ.get("DISTMM_DATA", os.path.join("..", "shared", "data"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", default=os.path.join(data, "cora-adjacency.mtx.gz"))
    parser.add_argument("--r", default="16", help="dense widths, comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--compare", default=None,
                        help="other copies of distmm, importable under these names "
                             "(comma-separated)")
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    others = [(name, importlib.import_module(name))
              for name in (args.compare.split(",") if args.compare else ())]
    for r in (int(w) for w in args.r.split(",")):
        variants = {"plain": plain_calls(distmm, args.matrix, r),
                    "plan": planned_calls(distmm, args.matrix, r)}
        for name, other in others:
            variants[f"{name} plain"] = plain_calls(other, args.matrix, r)
            variants[f"{name} plan"] = planned_calls(other, args.matrix, r)
        best = best_times(variants, args.rounds, args.calls, clock)
        if COMM.rank == 0:
            print(f"p={COMM.size}, {os.path.basename(args.matrix)}, r={r}, best of "
                  f"{args.rounds} rounds x {args.calls} calls, {args.clock} time, slowest rank")
            print(table(best, list(variants)), flush=True)
        for S, _ in variants.values():
            S.close()


if __name__ == "__main__":
    main()
