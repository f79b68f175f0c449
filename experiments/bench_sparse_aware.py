"""FusedMMA time: the sparsity-aware family (with and without overlap) against the
sparsity-oblivious families, same run, calls alternating, on a real graph.

    mpiexec -n P .venv/bin/python experiments/bench_sparse_aware.py GRAPH.mtx.gz --r 32
        [--repeat 7] [--permute auto | --partition G.part.h5] [--algorithms NAME...] [--cs C...]

Every configuration is distributed once; then each round calls every configuration once,
in turn, and the median seconds per call over the rounds are printed (rank 0, one JSON line
per configuration, with the busiest rank's counted words per call and the ratio to the
fastest oblivious configuration).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import distmm
from distmm.perf import costmodel

AWARE = "15d-sparse-aware"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--permute", default="auto")
    ap.add_argument("--partition", default=None, metavar="FILE",
                    help="order S for the sparsity-aware family by a partition saved by "
                         "`distmm partition` (instead of --permute: partitioned once)")
    ap.add_argument("--algorithms", nargs="+", default=None,
                    help="only these families (default: every registered one)")
    ap.add_argument("--cs", nargs="+", type=int, default=None,
                    help="only these replication factors (default: every valid one)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.size
    configs = []
    for name, cls in distmm.ALGORITHMS.items():
        if args.algorithms is not None and name not in args.algorithms:
            continue
        for c in costmodel.valid_cs(name, p, args.r):
            if args.cs is not None and c not in args.cs:
                continue
            for strategy in cls.strategies:
                for overlap in ((False, True) if name == AWARE else (False,)):
                    configs.append((name, c, strategy, overlap))
    aware_order = args.permute
    if args.partition is not None:
        from distmm.core.partition import load_partition
        aware_order = load_partition(args.partition)
    objs = []
    for name, c, strategy, overlap in configs:
        permute = aware_order if name == AWARE else "auto"
        obj = distmm.distribute(args.graph, comm, algorithm=name, c=c, r=args.r,
                                permute=permute, overlap=overlap)
        A = obj.dense("a", args.r, lambda rows, cols: np.cos(rows[:, None] + cols[None, :]))
        B = obj.dense("b", args.r, lambda rows, cols: np.sin(rows[:, None] - cols[None, :]))
        obj.fusedmm_a(A, B, strategy)  # warm-up: S^T, buffers, compiled kernels
        obj.stats.reset()
        obj.fusedmm_a(A, B, strategy)
        words = comm.allreduce(sum(obj.stats.words(ph) for ph in
                                   ("replication", "propagation", "reduction")), op=MPI.MAX)
        objs.append((obj, A, B, strategy, words))
    times = [[] for _ in objs]
    for _ in range(args.repeat):
        for k, (obj, A, B, strategy, _) in enumerate(objs):
            comm.Barrier()
            t0 = time.perf_counter()
            obj.fusedmm_a(A, B, strategy)
            comm.Barrier()
            times[k].append(time.perf_counter() - t0)
    if comm.rank == 0:
        med = [float(np.median(t)) for t in times]
        best = min(m for m, (name, *_) in zip(med, configs, strict=True) if name != AWARE)
        for (name, c, strategy, overlap), m, (_, _, _, _, words) in zip(configs, med, objs,
                                                                         strict=True):
            print(json.dumps({"graph": args.graph.rsplit("/", 1)[-1], "p": p, "r": args.r,
                              "algorithm": name, "c": c, "strategy": strategy,
                              "overlap": overlap,
                              "permute": (args.partition or args.permute) if name == AWARE
                              else "auto", "median_s": m, "max_words": int(words),
                              "vs_best_oblivious": m / best}), flush=True)
    for obj, *_ in objs:
        obj.close()


if __name__ == "__main__":
    main()
