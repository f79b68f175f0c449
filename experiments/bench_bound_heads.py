"""Bound calls of one operation on several operand sets made in turns, against method calls.

A multi-head layer calls one operation once per head, on each head's own operands and
``out=`` buffer, head after head. This times such a loop on a real matrix at p = 1 (or under
``mpiexec``): per call, the best over rounds of ``--heads`` bound calls (``S.bind``) made in
turns, and of the same calls as methods, the two taking turns round by round::

    DISTMM_DATA=../shared/data .venv/bin/python experiments/bench_bound_heads.py \\
        --matrix cora-adjacency --op fusedmm_a --rs 16,64 --heads 4

Run it under two versions of distmm (``PYTHONPATH``) to compare them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrix", default="cora-adjacency", choices=list(e2e.MATRICES))
    ap.add_argument("--op", default="fusedmm_a", choices=list(e2e.OPS))
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 64])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--loops", type=int, default=30, help="loops over the heads per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    import distmm

    # isort: split
    from mpi4py import MPI

    from distmm.core.coo import CooShare

    comm = MPI.COMM_WORLD
    share = CooShare.from_scipy(e2e.load_matrix(args.matrix) if comm.rank == 0 else None, comm)
    with distmm.distribute(share, comm, dtype=args.dtype) as S:
        for r in args.rs:
            S.release_buffers()
            A = S.dense("a", r, fill=distmm.hashed_normal(1, 0.1))
            Bs = [S.dense("b", r, fill=distmm.hashed_normal(10 + h, 0.1))
                  for h in range(args.heads)]
            outs = [e2e.api_out(S, args.op, r) for _ in range(args.heads)]
            pairs = list(zip(Bs, outs, strict=True))
            bound = [e2e._bound_call(S, args.op, A, B, out) for B, out in pairs]
            method = [e2e._distmm_calls(S, A, B, {args.op: out})[args.op] for B, out in pairs]
            best = {"bound": float("inf"), "method": float("inf")}
            for _ in range(3):  # the first calls, the traced ones, a replay
                for calls in (bound, method):
                    for call in calls:
                        call()
            for _ in range(args.rounds):
                for name, calls in (("bound", bound), ("method", method)):
                    for _ in range(args.loops):
                        comm.Barrier()
                        t0 = time.perf_counter()
                        for call in calls:
                            call()
                        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                        best[name] = min(best[name], dt / args.heads)
            if comm.rank == 0:
                print(f"{args.matrix} {args.dtype} {args.op} r={r} p={comm.size} "
                      f"heads={args.heads}: bound {best['bound'] * 1e6:.1f} us/call, "
                      f"method {best['method'] * 1e6:.1f} us/call, "
                      f"bound/method {best['bound'] / best['method']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
