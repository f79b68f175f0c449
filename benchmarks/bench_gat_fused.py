"""The fused GAT attention (DistGAT(fused=True)) against the unfused layer, training steps
on Cora at every c, variants in turns in one run::

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/bench_gat_fused.py --steps 30

One process per rank; S placed once per c; both models (the GAT paper's: 2 layers, 8 heads
of 8, then 7 classes x 1 head; dropout 0.6, float32, row-normalised features) share it. A
round runs one training step (forward with dropout, cross-entropy, backward, the packed
gradient all-reduce) and one inference forward of each variant, the order alternating
between rounds. Per variant and c it prints (rank 0, one JSON line each): the median step and
forward seconds over rounds (slowest rank), the words each sends per step (largest over
ranks, every phase including the gradient all-reduce), the seconds of the fused attention
loops themselves (the training step's forward calls and backward calls, each summed over
layers; unfused: None), and the bytes of the attention caches a step keeps per rank
(unfused: the scores before the LeakyReLU, the coefficients and the dropped coefficients,
(edges, heads) each; fused: the per-node scores and log-sum-exp, (nodes, heads) each; of
these, ``row_statistics_bytes`` the log-sum-exp alone, what recomputing the statistics in
the backward would save at the price of one more forward loop per layer).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

import numpy as np
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.apps.gat import DistGAT, Dropout, cross_entropy, distribute_graph
from distmm.apps.gat_model import GATModel
from distmm.perf import costmodel

DATA = os.environ.get("DISTMM_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "shared", "data"))
CACHE_KEYS = {False: ("pre", "alpha", "ad"), True: ("s_dst", "s_src", "L")}


def features(path: str) -> sp.csr_matrix:
    with gzip.open(path, "rb") as fh:
        X = sp.csr_matrix(scipy.io.mmread(fh), dtype=np.float32)
    X.sum_duplicates()
    s = np.asarray(X.sum(axis=1)).ravel()
    s[s == 0] = 1.0
    X = sp.diags((1.0 / s).astype(np.float32)) @ X
    X = sp.csr_matrix(X, dtype=np.float32)
    X.sort_indices()
    return X


class Clock:
    """Seconds spent in the wrapped methods of the object."""

    def __init__(self):
        self.seconds = 0.0

    def wrap(self, fn):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--cs", default=None, help="comma-separated c (default: every valid c)")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    p = comm.size
    X = features(os.path.join(DATA, "cora-features.mtx.gz"))
    labels = np.loadtxt(os.path.join(DATA, "cora-labels.txt"), dtype=np.int64)
    cs = ([int(c) for c in args.cs.split(",")] if args.cs
          else costmodel.valid_cs("15d-dense-shift", p))
    for c in cs:
        obj = distribute_graph(os.path.join(DATA, "cora-adjacency.mtx.gz"), comm, c=c,
                               dtype=np.float32, seed=0)
        model = GATModel.init(X.shape[1], 8, 8, int(labels.max()) + 1, 1, 2, 0, np.float32)
        clock, bclock = Clock(), Clock()
        obj.fused_attention = clock.wrap(obj.fused_attention)
        obj.fused_attention_backward = bclock.wrap(obj.fused_attention_backward)
        gats = {v: DistGAT(obj, model, fused=v) for v in (False, True)}
        Xl = X[gats[False].nodes]
        y = labels[gats[False].nodes]
        mask = np.ones(y.size, dtype=bool)
        rec = {v: {"step": [], "forward": [], "words": [], "loop": [], "bloop": []}
               for v in gats}
        stats_bytes = 0
        cache_bytes = {}
        for step in range(args.steps + 2):
            order = (False, True) if step % 2 == 0 else (True, False)
            for v in order:
                gat = gats[v]
                comm.Barrier()
                obj.stats.reset()
                clock.seconds = bclock.seconds = 0.0
                t0 = time.perf_counter()
                logits, caches = gat.forward(Xl, Dropout(0.6, 0.6, 0, step))
                _, d = cross_entropy(logits, y, mask, labels.size)
                gat.backward(d, caches)
                t1 = time.perf_counter()
                words = sum(obj.stats.words(ph) for ph in obj.stats.counts)
                loop, bloop = clock.seconds, bclock.seconds
                comm.Barrier()
                t2 = time.perf_counter()
                gat.forward(Xl, None)
                t3 = time.perf_counter()
                cache_bytes[v] = sum(cc[k].nbytes for cc in caches for k in CACHE_KEYS[v])
                if v:
                    stats_bytes = sum(cc["L"].nbytes for cc in caches)
                if step >= 2:  # the first two rounds compile and plan
                    r = rec[v]
                    r["step"].append(comm.allreduce(t1 - t0, MPI.MAX))
                    r["forward"].append(comm.allreduce(t3 - t2, MPI.MAX))
                    r["words"].append(comm.allreduce(words, MPI.MAX))
                    r["loop"].append(comm.allreduce(loop, MPI.MAX))
                    r["bloop"].append(comm.allreduce(bloop, MPI.MAX))
        for v in gats:
            r = rec[v]
            row = {"p": p, "c": c, "variant": "fused" if v else "unfused",
                   "step_s": float(np.median(r["step"])),
                   "forward_s": float(np.median(r["forward"])),
                   "words_per_step": int(np.median(r["words"])),
                   "fused_forward_loops_s": float(np.median(r["loop"])) if v else None,
                   "fused_backward_loops_s": float(np.median(r["bloop"])) if v else None,
                   "attention_cache_bytes": int(comm.allreduce(cache_bytes[v], MPI.MAX)),
                   "row_statistics_bytes": int(comm.allreduce(stats_bytes, MPI.MAX)) if v
                   else None,
                   "rounds": len(r["step"])}
            if comm.rank == 0:
                print(json.dumps(row), flush=True)
        ratio = np.median(np.array(rec[True]["step"]) / np.array(rec[False]["step"]))
        if comm.rank == 0:
            print(json.dumps({"p": p, "c": c, "fused_over_unfused_step_median": float(ratio)}),
                  flush=True)
        obj.close()


if __name__ == "__main__":
    main()
