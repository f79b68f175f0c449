"""Dynaspase on Cora: modelled latency of S1, S2 and Dynamic for GCN, GraphSAGE, GIN and SGC.

For each model (2 layers, hidden 16, 7 classes, seeded Glorot weights) and each weight sparsity
(0 = unpruned, then magnitude pruning to 50/70/90%), runs every kernel through the simulator
under the three K2P strategies, checks the output against the float64 numpy reference, and
prints Markdown tables: latency in ms and the speedups SO-S1, SO-S2 (paper section VIII-B,
Tables VII and VIII), once with the full model (77 GB/s DDR, double-buffered) and once with
compute only (Table IV alone: DDR bandwidth set to 1e9 GB/s); finally Dynamic with SPMM pairs
charged their actual row-wise products instead of Table IV's expectation (spmm_cost=rowwise).

    .venv/bin/python experiments/dynaspase_cora.py [--data ../shared/data] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import scipy.io
import scipy.sparse as sp

from distmm.sim.dynaspase import DynaspaseConfig
from distmm.sim.dynaspase_gnn import MODELS, init_weights, reference_forward, run_gnn

# the real matrices: $DISTMM_DATA, else ../shared/data beside the checkout
DATA = os.environ.get("DISTMM_DATA", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))

# paper Table VII, Cora (CO) column: latency in ms of S1, S2, Dynamic, then SO-S1, SO-S2 as
# printed (the GCN row's ratio does not follow from its latencies: 0.96 / 4.7e-3 = 204)
PAPER_VII = {"gcn": (9.6e-1, 5.6e-3, 4.7e-3, 21.5, 1.19),
             "sage": (25e-2, 25e-2, 11e-2, 1.72, 1.73),
             "gin": (1.5e-1, 2.4e-1, 1.1e-1, 1.40, 2.31),
             "sgc": (2.0e-1, 3.0e-1, 1.5e-1, 1.27, 1.91)}
# paper Table VIII: geometric-mean speedups over six graphs, by weight sparsity range
PAPER_VIII = {0.5: ("50%-70%", 4.36, 1.64), 0.7: ("70%-90%", 10.77, 2.11),
              0.9: ("> 90%", 15.96, 5.03)}
SPARSITIES = (0.0, 0.5, 0.7, 0.9)


def load(data: str) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Cora's adjacency matrix and 0/1 features from the shared data directory."""
    A = sp.csr_matrix(scipy.io.mmread(os.path.join(data, "cora-adjacency.mtx.gz")))
    X = sp.csr_matrix(scipy.io.mmread(os.path.join(data, "cora-features.mtx.gz")))
    return A, X


def sweep(A, X, base: DynaspaseConfig, sink) -> dict:
    """{(model, sparsity): {strategy: seconds}} with outputs checked against the reference."""
    out = {}
    for model in MODELS:
        for sparsity in SPARSITIES:
            W = init_weights(model, X.shape[1], 16, 7, sparsity, seed=0)
            ref = reference_forward(A, X, model, W)
            row = {}
            for strategy in ("s1", "s2", "dynamic"):
                t0 = time.perf_counter()
                run = run_gnn(A, X, model, W, base.with_strategy(strategy))
                wall = time.perf_counter() - t0
                err = float(np.abs(run.output - ref).max() / np.abs(ref).max())
                assert err < 1e-5, (model, sparsity, strategy, err)
                row[strategy] = run.seconds
                if sink:
                    sink.write(json.dumps({"model": model, "sparsity": sparsity,
                                           "ddr_gbps": base.ddr_gbps, "wall_seconds": wall,
                                           "max_rel_error": err, **run.summary()}) + "\n")
            out[model, sparsity] = row
    return out


def geomean(values) -> float:
    """Geometric mean (how Table VIII averages speedups)."""
    return float(np.exp(np.mean(np.log(values))))


def print_tables(title: str, res: dict) -> None:
    """Markdown: unpruned latencies beside Table VII, pruned speedups beside Table VIII."""
    print(f"\n#### {title}\n")
    print("| model | S1 (ms) | S2 (ms) | Dynamic (ms) | SO-S1 | SO-S2 | paper S1 / S2 / Dynamic "
          "(ms) | paper SO-S1 | paper SO-S2 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        r = res[model, 0.0]
        p = PAPER_VII[model]
        print(f"| {model} | {r['s1'] * 1e3:.3g} | {r['s2'] * 1e3:.3g} | "
              f"{r['dynamic'] * 1e3:.3g} | {r['s1'] / r['dynamic']:.2f}x | "
              f"{r['s2'] / r['dynamic']:.2f}x | {p[0]:.2g} / {p[1]:.2g} / {p[2]:.2g} | "
              f"{p[3]:.2f}x | {p[4]:.2f}x |")
    print("\n| weight sparsity | SO-S1 per model (gcn, sage, gin, sgc) | SO-S2 per model | "
          "geomean SO-S1 | geomean SO-S2 | paper range | paper SO-S1 | paper SO-S2 |")
    print("|---|---|---|---|---|---|---|---|")
    for s in SPARSITIES[1:]:
        s1 = [res[m, s]["s1"] / res[m, s]["dynamic"] for m in MODELS]
        s2 = [res[m, s]["s2"] / res[m, s]["dynamic"] for m in MODELS]
        rng, p1, p2 = PAPER_VIII[s]
        print(f"| {s:.0%} | {', '.join(f'{v:.2f}' for v in s1)} | "
              f"{', '.join(f'{v:.2f}' for v in s2)} | {geomean(s1):.2f}x | "
              f"{geomean(s2):.2f}x | {rng} | {p1:.2f}x | {p2:.2f}x |")
    print("\n| weight sparsity | Dynamic latency (ms) gcn, sage, gin, sgc |")
    print("|---|---|")
    for s in SPARSITIES:
        print(f"| {s:.0%} | " + ", ".join(f"{res[m, s]['dynamic'] * 1e3:.3g}" for m in MODELS)
              + " |")


def main() -> None:
    """Run the sweeps and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--json", help="append one JSON line per run (full per-kernel report)")
    args = ap.parse_args()
    A, X = load(args.data)
    sink = open(args.json, "a") if args.json else None
    t0 = time.perf_counter()
    try:
        full = sweep(A, X, DynaspaseConfig(), sink)
        compute = sweep(A, X, DynaspaseConfig(ddr_gbps=1e9), sink)
    finally:
        if sink:
            sink.close()
    print(f"Cora: {A.shape[0]} vertices, {A.nnz} nonzeros in A, {X.shape[1]} features "
          f"(density {X.nnz / (X.shape[0] * X.shape[1]):.2%}); hidden 16, 7 classes; "
          f"{2 * len(MODELS) * len(SPARSITIES) * 3} simulated inferences in "
          f"{time.perf_counter() - t0:.1f} s, every output within 1e-5 of the reference")
    print_tables("Full model: Table IV compute, 77 GB/s DDR shared by 7 cores, double "
                 "buffering", full)
    print_tables("Compute only (Table IV alone, DDR bandwidth unlimited)", compute)
    print("\n#### Dynamic: SPMM cost from Table IV vs actual row-wise products (ms)\n")
    print("| model | weight sparsity | full, table | full, rowwise | compute only, table | "
          "compute only, rowwise |")
    print("|---|---|---|---|---|---|")
    for model in MODELS:
        for sparsity in (0.0, 0.9):
            W = init_weights(model, X.shape[1], 16, 7, sparsity, seed=0)
            lat = [run_gnn(A, X, model, W, DynaspaseConfig(ddr_gbps=bw, spmm_cost=cost)).seconds
                   for bw in (77.0, 1e9) for cost in ("table", "rowwise")]
            print(f"| {model} | {sparsity:.0%} | " + " | ".join(f"{v * 1e3:.3g}" for v in lat)
                  + " |")


if __name__ == "__main__":
    main()
