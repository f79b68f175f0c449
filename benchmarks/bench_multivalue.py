"""The multi-value SpMM (one pass, every head's values) against h separate SpMMs, in turns::

    NUMBA_NUM_THREADS=2 .venv/bin/python benchmarks/bench_multivalue.py \\
        --matrices cora-adjacency,metis-mdual --rs 16,64 --heads 1,4,8
    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/bench_multivalue.py --level call ...

``--level kernel`` (default, one process): the local kernels on the whole matrix (a rank's
work at p = 1), float32: :func:`distmm.kernels.multivalue.spmm_multi_block` on B of width
h * r against the reference node model's prepared SpMM called h times, each on one head's
contiguous (n, r) block and values (the split done once, outside the timing: the baseline's
best case). ``--level call``: the distributed calls on 15d-dense-shift at every c,
``S.spmm_a(B, values=V)`` against h calls ``S.spmm_a(B_h, values=V[h])``, each variant's
words per call (largest over ranks) beside its time.

Each round times ``--calls`` calls of each variant (the order alternating between rounds);
the table gives each variant's median over rounds of its fastest call in the round (on a
loaded shared machine the fastest call is the one least disturbed), and the median over
rounds of multi / separate. Results are checked to agree (relative 1e-5) first. One
JSON line per case on rank 0. Compare with ``../shared/tools/roofline.py MATRIX R`` at
R = h * r (its SpMM-A limit reads one value per nonzero; the multi-value kernel reads h).
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

import distmm
from distmm.core.sparse import CSRBlock
from distmm.kernels import make_node_model
from distmm.kernels.multivalue import spmm_multi_block
from distmm.perf import costmodel

DATA = os.environ.get("DISTMM_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "shared", "data"))


def load(name: str) -> sp.csr_matrix:
    with gzip.open(os.path.join(DATA, name + ".mtx.gz"), "rb") as fh:
        S = sp.csr_matrix(scipy.io.mmread(fh), dtype=np.float32)
    S.sum_duplicates()
    S.sort_indices()
    return S


def timed_rounds(variants: dict, rounds: int, calls: int, comm=None,
                 clock=time.perf_counter) -> dict:
    """{name: [per-round fastest call seconds]} with the variants in turns."""
    res = {k: [] for k in variants}
    names = list(variants)
    for rnd in range(rounds):
        for k in (names if rnd % 2 == 0 else names[::-1]):
            ts = []
            for _ in range(calls):
                if comm is not None:
                    comm.Barrier()
                t0 = clock()
                variants[k]()
                dt = clock() - t0
                ts.append(dt if comm is None else comm.allreduce(dt, MPI.MAX))
            res[k].append(float(np.min(ts)))
    return res


def kernel_case(S: sp.csr_matrix, H: int, r: int, rounds: int, calls: int,
                clock=time.perf_counter) -> dict:
    blk = CSRBlock.from_scipy(S, np.float32)
    n = S.shape[0]
    rng = np.random.default_rng(0)
    B = rng.standard_normal((S.shape[1], H * r)).astype(np.float32)
    V = rng.random((H, blk.nnz)).astype(np.float32)
    heads_B = [np.ascontiguousarray(B[:, h * r:(h + 1) * r]) for h in range(H)]
    heads_V = [np.ascontiguousarray(V[h]) for h in range(H)]
    model = make_node_model("reference")
    out_m = np.empty((n, H * r), np.float32)
    outs = [np.empty((n, r), np.float32) for _ in range(H)]
    runs = [model.prepare("spmm_a", blk, heads_V[h], heads_B[h], None, outs[h], False)
            for h in range(H)]

    def multi():
        spmm_multi_block(model, "spmm_multi_a", blk, V, 0, B, out_m, H, accumulate=False)

    def separate():
        for h in range(H):
            runs[h](heads_V[h], heads_B[h], outs[h])

    multi()
    separate()
    ref = np.concatenate(outs, axis=1)
    assert np.abs(out_m - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    return timed_rounds({"multi": multi, "separate": separate}, rounds, calls, clock=clock)


def call_case(S: sp.csr_matrix, H: int, r: int, rounds: int, calls: int, c: int,
              comm) -> tuple[dict, dict]:
    obj = distmm.distribute(S if comm.rank == 0 else None, comm, algorithm="15d-dense-shift",
                            c=c, dtype=np.float32, root=0, seed=0)
    rng = np.random.default_rng(0)
    B = obj.scatter("b", rng.standard_normal((S.shape[1], H * r)).astype(np.float32), root=None)
    V = rng.random((H, obj.values.shape[0])).astype(np.float32)
    Bp = np.asarray(B)
    heads_B = [obj.wrap("b", np.ascontiguousarray(Bp[:, h * r:(h + 1) * r])) for h in range(H)]
    heads_V = [np.ascontiguousarray(V[h]) for h in range(H)]
    out_m = obj.dense("a", H * r)
    outs = [obj.dense("a", r) for _ in range(H)]

    def multi():
        obj.spmm_a(B, values=V, out=out_m)

    def separate():
        for h in range(H):
            obj.spmm_a(heads_B[h], values=heads_V[h], out=outs[h])

    words = {}
    for name, fn in (("multi", multi), ("separate", separate)):
        fn()
        fn()   # past the first, agreed call of each kind
        obj.stats.reset()
        fn()
        words[name] = comm.allreduce(sum(obj.stats.words(ph) for ph in obj.stats.counts),
                                     MPI.MAX)
    ref = np.concatenate([np.asarray(o) for o in outs], axis=1)
    assert np.abs(np.asarray(out_m) - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
    res = timed_rounds({"multi": multi, "separate": separate}, rounds, calls, comm)
    obj.close()
    return res, words


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrices", default="cora-adjacency,metis-mdual")
    ap.add_argument("--rs", default="16,64")
    ap.add_argument("--heads", default="1,4,8")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--level", choices=("kernel", "call"), default="kernel")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="kernel level: 'cpu' times the process's CPU seconds (with one numba "
                         "thread, what a machine shared with other jobs does not inflate)")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    for name in args.matrices.split(","):
        S = load(name)
        for r in (int(x) for x in args.rs.split(",")):
            for H in (int(x) for x in args.heads.split(",")):
                cs = [1] if args.level == "kernel" else costmodel.valid_cs("15d-dense-shift",
                                                                            comm.size)
                for c in cs:
                    words = None
                    if args.level == "kernel":
                        res = kernel_case(S, H, r, args.rounds, args.calls,
                                          time.process_time if args.clock == "cpu"
                                          else time.perf_counter)
                    else:
                        res, words = call_case(S, H, r, args.rounds, args.calls, c, comm)
                    ratio = np.median(np.array(res["multi"]) / np.array(res["separate"]))
                    row = {"matrix": name, "nnz": int(S.nnz), "r": r, "heads": H,
                           "level": args.level, "p": comm.size, "c": c,
                           "clock": args.clock,
                           "threads": int(os.environ.get("NUMBA_NUM_THREADS", "0") or 0),
                           "multi_ms": 1e3 * float(np.median(res["multi"])),
                           "separate_ms": 1e3 * float(np.median(res["separate"])),
                           "multi_over_separate": float(ratio), "words": words}
                    if comm.rank == 0:
                        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
