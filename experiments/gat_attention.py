"""GAT attention forward (the paper's Figure 9 workload, random weights): unfused vs fused.

For one GAT layer's attention on an Erdos-Renyi graph (self-loops added) with H heads of F
features, times and counts, per c dividing p, the unfused path (``S.sddmm_add`` ->
LeakyReLU -> ``S.edge_softmax`` -> one ``S.spmm_a`` per head) and the fused online-softmax
loop (:func:`distmm.apps.gat_fused.fused_attention`), alternating them (A, B, A, B, ...) and
keeping each one's best time. Prints one JSON line per (c, variant) on rank 0: words sent per
rank (max over ranks), seconds split into communication of the SpMM/shift loop, its compute,
the softmax/score primitives and the rest.

    mpiexec -n 4 python experiments/gat_attention.py --n 4096 --per-row 16 --heads 8 --f 8
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

from distmm.apps.gat import distribute_graph
from distmm.apps.gat_fused import fused_attention
from distmm.generate import erdos_renyi

LOOP = ("replication", "propagation", "reduction", "values")
EDGE = ("sddmm_add", "softmax", "expand", "row_reduce", "col_reduce", "plan")


def unfused(obj, s_dst, s_src, Z, H, F):
    e = obj.sddmm_add(s_dst, s_src)
    e = np.where(e > 0, e, 0.2 * e)
    alpha = obj.edge_softmax(e, dim="row")
    return np.stack([obj.spmm_a(np.ascontiguousarray(Z[:, h * F:(h + 1) * F]),
                                values=np.ascontiguousarray(alpha[:, h])) for h in range(H)],
                    axis=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--per-row", type=int, default=16)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--f", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    H, F = args.heads, args.f
    for c in [c for c in (1, 2, 4, 8) if comm.size % c == 0]:
        share = erdos_renyi(args.n, args.n, args.per_row, 0, comm)
        obj = distribute_graph(share, comm, c=c, dtype=np.float32, seed=0)
        rng = np.random.default_rng(comm.rank)
        rows = obj.dense_rows("a", comm.rank).size
        Z = rng.standard_normal((rows, H * F)).astype(np.float32)
        s_dst = rng.standard_normal((rows, H)).astype(np.float32)
        s_src = rng.standard_normal((rows, H)).astype(np.float32)
        args_c = (obj, s_dst, s_src, Z)
        variants = {"unfused": lambda a=args_c: unfused(*a, H, F),
                    "fused": lambda a=args_c: fused_attention(*a)}
        for fn in variants.values():   # warm-up: plans, compilation, S^T
            fn()
        best = {}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                obj.reset_stats()
                comm.Barrier()
                t0 = time.perf_counter()
                fn()
                wall = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
                sec = obj.stats.seconds
                split = {"loop_comm": sum(sec.get(p, 0.0) for p in LOOP),
                         "compute": sec.get("compute", 0.0),
                         "edge": sum(sec.get(p, 0.0) for p in EDGE)}
                split["rest"] = max(0.0, wall - sum(split.values()))
                words = comm.allreduce(obj.stats.words(), op=MPI.MAX)
                if name not in best or wall < best[name]["seconds"]:
                    best[name] = {"seconds": wall, "words_max_rank": words,
                                  **{f"seconds_{k}": v for k, v in split.items()}}
        if comm.rank == 0:
            for name, rec in best.items():
                print(json.dumps({"p": comm.size, "c": c, "n": args.n, "nnz_per_row":
                                  args.per_row, "heads": H, "f": F, "variant": name, **rec}),
                      flush=True)


if __name__ == "__main__":
    main()
