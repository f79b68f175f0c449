"""The unfused GAT layer with every head in one call of each kind (the multi-value SpMM
forward, the multi-head SDDMM and multi-value SpMMB backward) against one single-value call
per head of width F (each head's contiguous columns; what a layer without the multi-head calls
makes), training steps on Cora, variants in turns in one run::

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/bench_gat_heads.py --steps 20

The GAT paper's Cora model (2 layers, 8 heads of 8, then 7 classes x 1 head; dropout 0.6,
float32, row-normalised features) on 15d-dense-shift at every valid c; one S and one model
shared by both variants. A round runs one training step (forward with dropout,
cross-entropy, backward, the packed gradient all-reduce) of each variant, the order
alternating between rounds. Per variant and c it prints (rank 0, one JSON line each) the
median step seconds over rounds (slowest rank; CPU time of the slowest rank with
``--clock cpu``) and the words and messages each sends per step (largest over ranks), then
the median of the per-round ratios one call / per head.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from bench_gat_fused import DATA, features
from mpi4py import MPI

from distmm.apps.gat import DistGAT, Dropout, cross_entropy, distribute_graph
from distmm.apps.gat_model import GATModel
from distmm.perf import costmodel

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class _PerHeadCalls:
    """A 15d-dense-shift object whose multi-value SpMMs and multi-head SDDMMs run as one
    single-value call of width F per head (its other attributes are the object's)."""

    def __init__(self, obj) -> None:
        self._obj = obj

    def __getattr__(self, name):
        return getattr(self._obj, name)

    def _heads(self, call, X, V):
        H = V.shape[0]
        F = X.shape[1] // H
        return np.hstack([np.asarray(call(np.ascontiguousarray(X[:, h * F:(h + 1) * F]),
                                          values=np.ascontiguousarray(V[h])))
                          for h in range(H)])

    def spmm_a(self, X, values=None, **kw):
        if values is None or values.ndim == 1:
            return self._obj.spmm_a(X, values=values, **kw)
        return self._heads(self._obj.spmm_a, np.asarray(X), values)

    def spmm_b(self, X, values=None, **kw):
        if values is None or values.ndim == 1:
            return self._obj.spmm_b(X, values=values, **kw)
        return self._heads(self._obj.spmm_b, np.asarray(X), values)

    def sddmm(self, A, B, values=None, heads=None, **kw):
        if heads is None:
            return self._obj.sddmm(A, B, values=values, **kw)
        A, B = np.asarray(A), np.asarray(B)
        F = A.shape[1] // heads
        return np.stack([self._obj.sddmm(np.ascontiguousarray(A[:, h * F:(h + 1) * F]),
                                         np.ascontiguousarray(B[:, h * F:(h + 1) * F]),
                                         values=values)
                         for h in range(heads)], axis=1)


class PerHead(DistGAT):
    """The unfused layer with one single-value call per head (15d-dense-shift)."""

    def __init__(self, obj, model) -> None:
        super().__init__(obj, model)
        self.obj = _PerHeadCalls(obj)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--clock", choices=list(CLOCKS), default="wall")
    args = ap.parse_args(argv)
    clock = CLOCKS[args.clock]
    comm = MPI.COMM_WORLD
    X = features(os.path.join(DATA, "cora-features.mtx.gz"))
    labels = np.loadtxt(os.path.join(DATA, "cora-labels.txt"), dtype=np.int64)
    for c in costmodel.valid_cs("15d-dense-shift", comm.size):
        obj = distribute_graph(os.path.join(DATA, "cora-adjacency.mtx.gz"), comm, c=c,
                               dtype=np.float32, seed=0)
        model = GATModel.init(X.shape[1], 8, 8, int(labels.max()) + 1, 1, 2, 0, np.float32)
        gats = {"one call": DistGAT(obj, model), "per head": PerHead(obj, model)}
        Xl = X[gats["one call"].nodes]
        y = labels[gats["one call"].nodes]
        mask = np.ones(y.size, dtype=bool)
        rec = {v: {"step": [], "words": [], "messages": []} for v in gats}
        for step in range(args.steps + 2):
            for v in (list(gats) if step % 2 == 0 else list(gats)[::-1]):
                gat = gats[v]
                comm.Barrier()
                obj.stats.reset()
                t0 = clock()
                logits, caches = gat.forward(Xl, Dropout(0.6, 0.6, 0, step))
                _, d = cross_entropy(logits, y, mask, labels.size)
                gat.backward(d, caches)
                t1 = clock()
                if step >= 2:  # the first two rounds compile and plan
                    r = rec[v]
                    r["step"].append(comm.allreduce(t1 - t0, MPI.MAX))
                    for key, kind in (("words", "words_sent"), ("messages", "messages_sent")):
                        n = sum(obj.stats.words(ph, kind) for ph in obj.stats.counts)
                        r[key].append(comm.allreduce(n, MPI.MAX))
        for v, r in rec.items():
            if comm.rank == 0:
                print(json.dumps({"p": comm.size, "c": c, "variant": v, "clock": args.clock,
                                  "step_s": float(np.median(r["step"])),
                                  "words_per_step": int(np.median(r["words"])),
                                  "messages_per_step": int(np.median(r["messages"])),
                                  "rounds": len(r["step"])}), flush=True)
        ratio = np.median(np.array(rec["one call"]["step"]) / np.array(rec["per head"]["step"]))
        if comm.rank == 0:
            print(json.dumps({"p": comm.size, "c": c, "one_call_over_per_head": float(ratio),
                              "load_average": os.getloadavg()}), flush=True)
        obj.close()


if __name__ == "__main__":
    main()
