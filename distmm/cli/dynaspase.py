"""``distmm simulate dynaspase``: GNN inference on the simulated Dynaspase accelerator.

Reads a graph and its features (Matrix Market, ``.mtx`` or ``.mtx.gz``), builds a 2-layer
GCN, GraphSAGE, GIN or SGC with seeded Glorot weights (magnitude-pruned with ``--prune``), runs
every Aggregate and Update kernel through the simulator under one or all K2P strategies, checks
the output against a float64 numpy reference, and prints one JSON line per strategy (modelled
latency per kernel and per layer) plus one with the speedups of Dynamic over S1 and S2.
Serial (``distmm simulate`` refuses more than one rank); the report is written through
:func:`distmm.cli.files.write_output`.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from mpi4py import MPI

from distmm.cli import files
from distmm.errors import InputError, require
from distmm.io.matrix_market import read_csr_block
from distmm.io.outputs import read_json_object, write_json_atomic
from distmm.sim.dynaspase import STRATEGIES, DynaspaseConfig
from distmm.sim.dynaspase_gnn import MODELS, init_weights, reference_forward, run_gnn


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``dynaspase`` command to ``distmm simulate``'s sub-parsers; returns it."""
    p = subparsers.add_parser(
        "dynaspase", help="GNN inference (GCN, SAGE, GIN, SGC) on the simulated Dynaspase "
                          "FPGA accelerator: exact outputs, modelled latency per kernel")
    files.input_option(p, "--graph", required=True,
                       help="adjacency matrix A (n x n), .mtx[.gz]")
    files.input_option(p, "--features", required=True,
                       help="feature matrix X (n x f), .mtx[.gz]")
    p.add_argument("--model", required=True, choices=list(MODELS))
    p.add_argument("--hidden", type=int, default=16, help="hidden size (default 16)")
    p.add_argument("--classes", type=int, default=7, help="output size (default 7, Cora)")
    p.add_argument("--prune", type=float, default=0.0,
                   help="fraction of each weight matrix zeroed by magnitude (default 0)")
    p.add_argument("--strategy", default="all", choices=[*STRATEGIES, "all"],
                   help="K2P mapping: dynamic (Algorithm 7), s1, s2, or all (default)")
    files.input_option(p, "--config", help="JSON object of accelerator options (DynaspaseConfig "
                                           "fields: p_sys, n_cc, eta, freq_mhz, ddr_gbps, ...)")
    files.output_option(p, "--report", help="write every run's full report to this JSON file "
                                            "(written atomically)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights (default 0)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.set_defaults(simulate_func=run)
    return p


def _config(path: str | None) -> DynaspaseConfig:
    options = read_json_object(path, "--config") if path else {}
    options.pop("strategy", None)  # --strategy decides
    try:
        return DynaspaseConfig(**options)
    except (TypeError, ValueError) as exc:
        raise InputError(f"--config {path}: invalid options ({exc})") from None


def run(args: argparse.Namespace) -> int:
    """Handle ``distmm simulate dynaspase``; returns the exit status (bad input raises
    :class:`InputError`). Prints JSON Lines on stdout. Not collective."""
    require(args.hidden >= 1, f"--hidden must be at least 1, got {args.hidden}")
    require(args.classes >= 1, f"--classes must be at least 1, got {args.classes}")
    require(0.0 <= args.prune < 1.0, f"--prune must be in [0, 1), got {args.prune}")
    base = _config(args.config)
    A = read_csr_block(args.graph).to_scipy()
    X = read_csr_block(args.features).to_scipy()
    require(A.shape[0] == A.shape[1], f"--graph must be square, got {A.shape[0]} x "
                                      f"{A.shape[1]}")
    require(X.shape[0] == A.shape[0], f"--features has {X.shape[0]} rows but the graph has "
                                      f"{A.shape[0]} vertices")
    for name, M in (("graph", A), ("features", X)):
        require(bool(np.isfinite(M.data).all()), f"--{name} holds NaN or infinite values")
    dtype = np.dtype(args.dtype)
    weights = init_weights(args.model, X.shape[1], args.hidden, args.classes, args.prune,
                           args.seed, dtype)
    ref = reference_forward(A, X, args.model, weights)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    strategies = STRATEGIES if args.strategy == "all" else (args.strategy,)
    rank0 = MPI.COMM_WORLD.Get_rank() == 0
    runs = []
    for strategy in strategies:
        res = run_gnn(A, X, args.model, weights, base.with_strategy(strategy))
        err = float(np.abs(res.output - ref).max(initial=0.0)) / scale
        record = {"event": "simulate", "simulator": "dynaspase", "model": args.model,
                  "graph": args.graph, "vertices": A.shape[0], "features": X.shape[1],
                  "hidden": args.hidden, "classes": args.classes, "prune": args.prune,
                  "weight_density": _density(weights), "max_rel_error": err,
                  **res.summary()}
        runs.append(record)
        compact = {k: v for k, v in record.items() if k != "kernels"}
        compact["kernel_seconds"] = {k["name"]: k["seconds"] for k in record["kernels"]}
        if rank0:
            print(json.dumps(compact, sort_keys=True), flush=True)
    report = {"config": base.as_dict(), "runs": runs}
    seconds = {r["strategy"]: r["seconds"] for r in runs}
    if "dynamic" in seconds and len(seconds) > 1:
        speed = {f"so_{s}": seconds[s] / seconds["dynamic"] for s in seconds if s != "dynamic"}
        report["speedups"] = speed
        if rank0:
            print(json.dumps({"event": "speedup", "model": args.model, "prune": args.prune,
                              **speed}, sort_keys=True), flush=True)
    if args.report:
        files.write_output(MPI.COMM_WORLD, args.report, "--report",
                           lambda path: write_json_atomic(path, report))
    return 0


def _density(weights: dict[str, np.ndarray]) -> float:
    """Fraction of nonzero weights over all of a model's weight matrices."""
    total = sum(w.size for w in weights.values())
    return float(sum(np.count_nonzero(w) for w in weights.values()) / max(total, 1))
