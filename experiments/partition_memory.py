"""The partitioner's memory on rank 0, measured: the basis of
:func:`distmm.core.partition.partition_peak_bytes`.

When the sparsity-aware family orders S by a partition at distribute (its default for p > 1
with KaHIP installed), rank 0 gathers S's pattern, partitions it and compares the partition's
order with the natural blocks (:func:`distmm.algorithms.sparse_aware_15d.order_by_partition`).
This runs that rank-0 step in a fresh process per case, on a pattern already held (the
gathered pieces, which the model counts apart), and reports the peak resident set above it
(Linux VmHWM), per nonzero and beside the model's scratch term.

    .venv/bin/python experiments/partition_memory.py [--p 2 8] [--matrices cora mesh ...]

Prints one JSON line per case. Linux only (VmHWM and /proc/self/clear_refs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys

import numpy as np

DATA = os.environ.get("DISTMM_DATA", os.path.join(os.path.dirname(__file__), "..", "..",
                                                    "shared", "data"))
FILES = {"cora": "cora-adjacency.mtx.gz", "mesh": "metis-mdual.mtx.gz",
         "movielens": "movielens-100k-ratings.mtx.gz", "genes": "genes-pubmed.mtx.gz",
         "cora-features": "cora-features.mtx.gz"}
RANDOM = {"er32k": ("er", 32000, 8), "er200k": ("er", 200000, 8),
          "rmat64k": ("rmat", 65536, 8)}


def load(name: str) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(rows, cols, shape) of a matrix of ../shared/data or a random graph."""
    import scipy.io
    import scipy.sparse as sp

    if name in RANDOM:
        kind, n, d = RANDOM[name]
        rng = np.random.default_rng(7)
        if kind == "er":
            rows = rng.integers(0, n, n * d)
            cols = rng.integers(0, n, n * d)
        else:  # R-MAT (0.57, 0.19, 0.19, 0.05), the usual skewed generator
            scale = int(np.log2(n))
            rows = np.zeros(n * d, dtype=np.int64)
            cols = np.zeros(n * d, dtype=np.int64)
            for _ in range(scale):
                u = rng.random(n * d)
                rows = 2 * rows + (u >= 0.76)
                cols = 2 * cols + (((u >= 0.57) & (u < 0.76)) | (u >= 0.95))
        return rows.astype(np.int64), cols.astype(np.int64), (n, n)
    with gzip.open(os.path.join(DATA, FILES[name])) as fh:
        S = sp.coo_matrix(scipy.io.mmread(fh))
    return S.row.astype(np.int64), S.col.astype(np.int64), S.shape


def one(name: str, p: int, c: int) -> dict:
    """Rank 0's partitioning step on ``name`` for p ranks, in this process."""
    import time

    import scipy.sparse as sp

    from distmm.algorithms.sparse_aware_15d import order, pick_order
    from distmm.core.memory import baseline_rss, map_large_allocations, peak_rss, reset_peak_rss
    from distmm.core.partition import partition, partition_scratch_bytes

    map_large_allocations()  # as measure_peak: the peak follows the live arrays
    rows, cols, shape = load(name)
    # a warm-up on a small graph: KaHIP's and numba's first-use costs are not the step's
    small = np.arange(64)
    partition(sp.coo_matrix((np.ones(64), (small, (small * 7) % 64)), shape=(64, 64)), 2)
    base = baseline_rss()
    assert reset_peak_rss()
    t0 = time.perf_counter()
    # order_by_partition's rank-0 branch (the gathered pieces are rows and cols here)
    r = np.concatenate([rows])
    k = np.concatenate([cols])
    S = sp.coo_matrix((np.ones(r.size), (r, k)), shape=shape)
    part = partition(S, p, "kahip", seed=0)
    mine = order(r, k, shape, p, part, 0)
    blocks = order(r, k, shape, p, "blocks", 0)
    pick_order(r, k, shape, p, c, [mine, blocks])
    seconds = time.perf_counter() - t0
    peak = peak_rss() - base
    m, n = shape
    model = partition_scratch_bytes(m, n, int(rows.size), p)
    return {"matrix": name, "shape": [m, n], "nnz": int(rows.size), "p": p, "c": c,
            "peak_bytes": int(peak), "per_nnz": round(peak / rows.size, 1),
            "model_scratch": model, "measured_over_model": round(peak / model, 3),
            "seconds": round(seconds, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--c", type=int, default=1)
    ap.add_argument("--matrices", nargs="+", default=["cora", "movielens", "er32k", "rmat64k",
                                                      "mesh"])
    ap.add_argument("--one", nargs=2, metavar=("MATRIX", "P"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.c)))
        return 0
    for name in args.matrices:
        for p in args.p:
            out = subprocess.run([sys.executable, __file__, "--one", name, str(p),
                                  "--c", str(args.c)], capture_output=True, text=True)
            print(out.stdout.strip() or json.dumps({"matrix": name, "p": p,
                                                    "error": out.stderr[-400:]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
