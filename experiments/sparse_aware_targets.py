"""Busiest-rank words of one FusedMM: the sparsity-aware family against 1.5D dense shifting
(c = 1) and the best sparsity-oblivious family at its best c, from the pattern alone (the
planner's exact model, no MPI job), on real graphs, at several p and orderings.

    .venv/bin/python experiments/sparse_aware_targets.py GRAPH.mtx.gz [...] --p 64 256 --r 128
        [--permute auto blocks] [--relay on off]

One JSON line per (graph, p, ordering): the sparse-aware family's best candidate (strategy,
c), its max_words and memory, the two ratios, the best oblivious candidate's memory, and the
partitioner's seconds. "auto" is the family's default order (a KaHIP partition when kahip is
installed: of rows and columns together for a square S, a row and a column partition for a
rectangular one, kept at each c unless the natural blocks give the busiest rank fewer words:
the aware candidate's "permute" says which), "blocks" the natural-order blocks. "--relay"
on (the family's default) or off: the relay tree of the exchange
(distmm.core.exchange.relay_parents), or every row from its owner.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os

import scipy.io
import scipy.sparse as sp

from distmm.perf.sparse_planner import AWARE, plan_sparse


def read(path: str) -> sp.coo_matrix:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sp.coo_matrix(scipy.io.mmread(f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--p", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--permute", nargs="+", default=["auto", "blocks"])
    ap.add_argument("--relay", nargs="+", default=["on"], choices=["on", "off"])
    args = ap.parse_args()
    for path in args.graphs:
        S = read(path)
        for p in args.p:
            for permute, relay in itertools.product(args.permute, args.relay):
                rows, info = plan_sparse(S.row, S.col, S.shape, args.r, p, permute=permute,
                                         relay=relay == "on")
                aware = min((r for r in rows if r["algorithm"] == AWARE),
                            key=lambda r: (r["max_words"], r["c"]))
                oblivious = [r for r in rows if r["algorithm"] != AWARE]
                best = min(oblivious, key=lambda r: (r["max_words"], r["c"]))
                dense = min((r for r in oblivious if r["algorithm"] == "15d-dense-shift"
                             and r["c"] == 1), key=lambda r: r["max_words"])
                print(json.dumps({
                    "graph": os.path.basename(path), "m": S.shape[0], "n": S.shape[1],
                    "nnz": int(S.nnz), "p": p, "r": args.r, "permute": info["permute"],
                    "relay": relay,
                    "partition_s": round(info.get("partition_s", 0.0), 2),
                    "aware": {k: aware[k] for k in ("strategy", "c", "max_words",
                                                    "memory_bytes", "permute")},
                    "dense_shift_c1_words": dense["max_words"],
                    "best_oblivious": {k: best[k] for k in ("algorithm", "strategy", "c",
                                                            "max_words", "memory_bytes")},
                    "vs_dense_shift_c1": round(aware["max_words"] / dense["max_words"], 4),
                    "vs_best_oblivious": round(aware["max_words"] / best["max_words"], 4)}),
                    flush=True)


if __name__ == "__main__":
    main()
