"""FusedMM time of the sparsity-aware family with the relay tree and without, same run,
alternating, on a real graph in the family's default order.

    mpiexec -n P .venv/bin/python benchmarks/bench_relay.py GRAPH.mtx.gz --r 32
        [--repeat 50] [--op fusedmm_a] [--strategy fusion] [--min-saving 0]

S is placed twice (``SparseAware15D.relay`` True, then False); with the tree kept whatever it
saves (``--min-saving``, default 0, sets :data:`distmm.core.exchange.RELAY_MIN_SAVING`; the
library's default is 0.25, where small savings are declined); each round times one call on
each (alternating which goes first), as the slowest rank's seconds. Rank 0 prints one JSON
line: the median seconds of each, their ratio (relay on / off), the rows relayed and the
busiest rank's words per call of each (counted).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import distmm
from distmm.algorithms.sparse_aware_15d import SparseAware15D
from distmm.core import exchange

AWARE = SparseAware15D.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--op", default="fusedmm_a", choices=["fusedmm_a", "fusedmm_b"])
    ap.add_argument("--strategy", default="fusion", choices=list(SparseAware15D.strategies))
    ap.add_argument("--min-saving", type=float, default=0.0)
    args = ap.parse_args()
    exchange.RELAY_MIN_SAVING = args.min_saving
    world = MPI.COMM_WORLD
    objs = {}
    for relay in (True, False):
        SparseAware15D.relay = relay
        objs[relay] = distmm.distribute(args.graph, world, algorithm=AWARE, r=args.r)
    SparseAware15D.relay = True
    r = args.r
    operands = {}
    for relay, obj in objs.items():
        A = obj.dense("a", r, lambda rows, cols: np.cos(rows[:, None] * 0.3 + cols[None, :]))
        B = obj.dense("b", r, lambda rows, cols: np.sin(rows[:, None] * 0.7 + cols[None, :]))
        operands[relay] = (A, B)
    times: dict[bool, list[float]] = {True: [], False: []}
    words = {}
    for k in range(args.repeat + 1):
        for relay in ((True, False) if k % 2 else (False, True)):
            obj = objs[relay]
            A, B = operands[relay]
            obj.stats.reset()
            world.Barrier()
            t0 = time.perf_counter()
            getattr(obj, args.op)(A, B, args.strategy)
            dt = world.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            words[relay] = world.allreduce(obj.stats.words(), op=MPI.MAX)
            if k:  # the first round compiles and warms the buffers
                times[relay].append(dt)
    relayed = world.allreduce(int(objs[True].exchange.relay_rows.size))
    if world.rank == 0:
        on, off = float(np.median(times[True])), float(np.median(times[False]))
        print(json.dumps({"graph": args.graph.rsplit("/", 1)[-1], "p": world.size, "r": r,
                          "op": args.op, "strategy": args.strategy, "rows_relayed": relayed,
                          "max_words_on": words[True], "max_words_off": words[False],
                          "median_s_on": on, "median_s_off": off,
                          "ratio_on_off": round(on / off, 3)}), flush=True)
    for obj in objs.values():
        obj.close()


if __name__ == "__main__":
    main()
