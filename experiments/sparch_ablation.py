"""SpArch ablation (paper Fig. 16), condensing and prefetch numbers, simulator wall time.

    flock /tmp/distmm-bench.lock .venv/bin/python experiments/sparch_ablation.py \
        --jsonl sparch_ablation.jsonl --markdown sparch_ablation.md

For every matrix (the square ones in $DISTMM_DATA, default ../shared/data, as
A*A, the rectangular ones as A*A^T,
and R-MAT / Erdos-Renyi matrices of several densities) it models C on one SpArch chip with the
techniques added one at a time, as in Fig. 16:

  outerspace  OuterSPACE's flow on SpArch's hardware: multiply phase to DRAM, one merge pass
              over all partial matrices (merge tree as wide as needed), no condensing
  pipeline    + multiply and merge pipelined; 64-way tree; random merge order (the paper's
              ablation baseline, III-C); no condensing; no row buffer
  condense    + matrix condensing (left matrix read by condensed columns)
  huffman     + 64-way Huffman-tree scheduler
  prefetch    + row prefetcher with Belady replacement = SpArch (Table I)
  (lru)       SpArch with LRU instead of Belady, for comparison

and prints DRAM traffic, modelled GFLOP/s and the speedup over ``outerspace``, the number of
partial matrices before/after condensing and the prefetch hit rate. It also times the simulator
itself (the full SpArch configuration, numeric product + model) on every matrix.
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

from distmm.core.sparse import CSRBlock
from distmm.io.generate import erdos_renyi, rmat
from distmm.sim.sparch import simulate

DATA = os.environ.get("DISTMM_DATA", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
STEPS = [
    ("outerspace", dict(pipeline=False, condense=False, scheduler="huffman", prefetch="none",
                        merge_tree_layers=20)),
    ("pipeline", dict(condense=False, scheduler="random", prefetch="none")),
    ("condense", dict(scheduler="random", prefetch="none")),
    ("huffman", dict(prefetch="none")),
    ("prefetch", dict()),
    ("lru", dict(prefetch="lru")),
]


def _file(name: str) -> sp.csr_matrix:
    return scipy.io.mmread(gzip.open(os.path.join(DATA, name))).tocsr().astype(np.float64)


def matrices(quick: bool):
    """(name, X, Y, note) for every workload."""
    if not quick:
        A = _file("metis-mdual.mtx.gz")
        yield "metis-mdual", A, A, "A*A"
    A = _file("cora-adjacency.mtx.gz")
    yield "cora-adjacency", A, A, "A*A"
    A = _file("cora-features.mtx.gz")
    yield "cora-features", A, A.T.tocsr(), "A*A^T"
    if not quick:
        A = _file("movielens-100k-ratings.mtx.gz")
        yield "movielens-100k", A, A.T.tocsr(), "A*A^T"
    for scale, ef in ([(12, 4)] if quick else [(15, 2), (14, 8), (11, 12)]):
        s = rmat(scale, ef, 1, MPI.COMM_SELF)
        A = CSRBlock.from_coo(s.rows, s.cols, s.vals, s.shape, np.float64).to_scipy()
        yield f"rmat-s{scale}-e{ef}", A, A, f"A*A, density {A.nnz / A.shape[0] ** 2:.1e}"
    for n, d in ([(4096, 4)] if quick else [(1 << 15, 2), (1 << 14, 8), (1 << 13, 32)]):
        s = erdos_renyi(n, n, d, 2, MPI.COMM_SELF)
        A = CSRBlock.from_coo(s.rows, s.cols, s.vals, s.shape, np.float64).to_scipy()
        yield f"er-{n}-{d}", A, A, f"A*A, density {A.nnz / n ** 2:.1e}"


def run(quick: bool, out) -> list[dict]:
    """Model every step on every matrix; one JSON record per (matrix, step)."""
    rows = []
    for name, X, Y, note in matrices(quick):
        base = None
        for step, kw in STEPS:
            t0 = time.perf_counter()
            C, rep = simulate(X, Y, **kw)
            wall = time.perf_counter() - t0
            c, d = rep["counters"], rep["derived"]
            ref_nnz = (X @ Y).nnz
            assert C.nnz >= ref_nnz   # structural zeros kept; scipy drops numerical ones
            rec = {"matrix": name, "note": note, "step": step, "m": X.shape[0],
                   "nnz": int(X.nnz), "multiplications": c["multiplications"],
                   "c_nnz": int(C.nnz), "dram_bytes": c["dram_read_bytes"]
                   + c["dram_write_bytes"], "left": c["left_read_bytes"],
                   "right": c["right_read_bytes"], "partial": c["partial_read_bytes"]
                   + c["partial_write_bytes"], "final": c["final_write_bytes"],
                   "gflops": d["gflops"], "model_seconds": c["model_seconds"],
                   "energy_nj": c["energy_nj"], "partial_matrices": c["partial_matrices"],
                   "merge_rounds": c["merge_rounds"], "hit_rate": d["prefetch_hit_rate"],
                   "bw_util": d["bandwidth_utilization"],
                   "uncondensed": d["partial_matrices_uncondensed"],
                   "condensed": d["partial_matrices_condensed"],
                   "sim_wall_s": wall, "sim_split_s": rep["simulator_seconds"]}
            if base is None:
                base = rec
            rec["speedup"] = rec["gflops"] / base["gflops"] if base["gflops"] else 0.0
            rec["traffic_vs_outerspace"] = rec["dram_bytes"] / base["dram_bytes"]
            rows.append(rec)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            print(f"{name:16s} {step:10s} {rec['dram_bytes'] / 1e6:10.2f} MB "
                  f"{rec['gflops']:7.2f} GF/s x{rec['speedup']:5.2f} "
                  f"pm={rec['partial_matrices']:.0f} rounds={rec['merge_rounds']:.0f} "
                  f"hit={rec['hit_rate']:.2f} wall={wall:.2f}s", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """The tables of docs/node-models/sparch.md: Fig. 16 as DRAM traffic and as modelled
    GFLOP/s per step, then condensing, prefetch hit rates, energy and the simulator's own time
    per matrix."""
    names = list(dict.fromkeys(r["matrix"] for r in rows))
    by = {(r["matrix"], r["step"]): r for r in rows}
    steps = [s for s, _ in STEPS]
    head = "| matrix | " + " | ".join(steps) + " |"
    rule = "|---|" + "---:|" * len(steps)
    lines = ["DRAM traffic in 12-byte elements per multiplication (the unit of the paper's "
             "III-C: 2.5M, 13.9M, 2.5M, 1.5M, 0.88M):", "", head, rule]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{by[n, s]['dram_bytes'] / 12 / max(by[n, s]['multiplications'], 1):.2f}"
            for s in steps) + " |")
    lines += ["", "Modelled GFLOP/s (in brackets: speedup over the OuterSPACE flow; paper: "
              "0.18x, 1.54x, ..., 4.2x):", "", head, rule]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(
            f"{by[n, s]['gflops']:.2f} ({by[n, s]['speedup']:.2f}x)" for s in steps) + " |")
    lines += ["", "| matrix | workload | nnz | multiplications | partial matrices: columns -> "
              "condensed | merge rounds (SpArch) | Belady hit | LRU hit | SpArch GFLOP/s | "
              "energy nJ/FLOP | simulator s |",
              "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        s = by[n, "prefetch"]
        lines.append(f"| {n} | {s['note']} | {s['nnz']} | {s['multiplications']:.3g} | "
                     f"{s['uncondensed']} -> {s['condensed']} | {s['merge_rounds']:.0f} | "
                     f"{s['hit_rate']:.0%} | {by[n, 'lru']['hit_rate']:.0%} | "
                     f"{s['gflops']:.2f} | "
                     f"{s['energy_nj'] / (2 * max(s['multiplications'], 1)):.2f} | "
                     f"{s['sim_wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small matrices only")
    ap.add_argument("--jsonl", help="write one JSON record per (matrix, step)")
    ap.add_argument("--markdown", help="write the README tables")
    ap.add_argument("--from-jsonl", help="only render the tables of an earlier --jsonl run")
    args = ap.parse_args()
    if args.from_jsonl:
        with open(args.from_jsonl) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    else:
        out = open(args.jsonl, "w") if args.jsonl else None
        try:
            rows = run(args.quick, out)
        finally:
            if out:
                out.close()
    md = markdown(rows)
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(md)


if __name__ == "__main__":
    main()
