"""The ``distmm`` command: ``run`` (files in, files out), ``bench`` (generated matrices) and
``simulate`` (one accelerator simulator on one node).

Launch under the MPI that distmm was installed with, e.g. ``mpiexec -n 4 distmm run ...``.
Every rank parses the same arguments and makes the same checks, so a bad argument exits every
rank with status 2 and one message (printed by rank 0). An unexpected error on any rank prints
that rank's traceback and aborts the whole job, so nothing waits forever for a rank that left.
Results are JSON Lines on stdout (rank 0): one object per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm import info as _info
from distmm.bench import kernel_summary, measure, phase_summary, random_blocks, timed
from distmm.calibrate import calibrate, save
from distmm.errors import InputError, agree, require
from distmm.io import read_csr_block, read_json_object
from distmm.kernels import NODE_MODELS, make_node_model
from distmm.permute import PERMUTE_MODES
from distmm.planner import Machine, format_table, plan
from distmm.tuning import tune, tune_events


class _Parser(argparse.ArgumentParser):
    """argparse that prints usage errors once (rank 0) and exits every rank with status 2."""

    def _print_message(self, message, file=None):
        if MPI.COMM_WORLD.Get_rank() == 0:
            super()._print_message(message, file)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algorithm", default="15d-dense-shift",
                   help=f"algorithm family: {', '.join(api.ALGORITHMS)}, or auto (the planner "
                        "picks algorithm, strategy and c; -c and --strategy are then ignored) "
                        "(default %(default)s)")
    p.add_argument("--machine", help="machine file for --algorithm auto (distmm calibrate)")
    p.add_argument("--tune", type=int, default=3, metavar="K",
                   help="with --algorithm auto: time the model's K best configurations on "
                        "this data (one warm FusedMM each) and keep the fastest; 1 = the "
                        "model alone (default %(default)s)")
    p.add_argument("-c", "--replication", type=int, default=1, dest="c",
                   help="replication factor c; must divide the number of ranks (default 1)")
    p.add_argument("--strategy", default=None,
                   help="FusedMM strategy: none, reuse or fusion (default: the algorithm's most "
                        "communication-eliding one, fusion for 15d-dense-shift)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--node-model", default="reference", choices=list(NODE_MODELS))
    p.add_argument("--node-config", metavar="FILE",
                   help="JSON object of the node model's options (e.g. tile sizes, simulator "
                        "parameters); every rank reads it")
    p.add_argument("--order", default="fiber", choices=["fiber", "layer"],
                   help="rank order: fiber- or layer-contiguous world ranks (default fiber)")
    p.add_argument("--permute", default="auto", choices=list(PERMUTE_MODES),
                   help="load balance: 'blocks' assigns rows to blocks at random and keeps "
                        "their natural order inside each block; 'random' permutes uniformly; "
                        "'auto' (default) is 'none' on one rank, 'blocks' otherwise")
    p.add_argument("--no-permute", action="store_true", help="same as --permute none")
    p.add_argument("--seed", type=int, default=0, help="seed of the permutation/generator")
    p.add_argument("--overlap", action="store_true",
                   help="overlap each propagation shift with the local kernel")
    p.add_argument("--log-dir", help="every rank appends its own counters and kernel stats "
                                     "to DIR/rank-K.jsonl after each measurement")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``distmm`` command."""
    parser = _Parser(prog="distmm", description="Distributed SDDMM, SpMM and FusedMM on MPI "
                                                "process grids (run under mpiexec or srun).")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one operation on a Matrix Market matrix and .npy "
                                     "dense inputs; write the result to HDF5")
    run.add_argument("op", help=f"one of {', '.join(api.OPS)}")
    run.add_argument("--sparse", required=True, help="S as .mtx or .mtx.gz (m x n)")
    run.add_argument("--a", help="A as .npy (m x r)")
    run.add_argument("--b", help="B as .npy (n x r)")
    run.add_argument("--out", required=True, help="output HDF5 file (written atomically)")
    run.add_argument("--repeat", type=int, default=1,
                     help="run the operation this many times; report each (default 1)")
    _common(run)
    bench = sub.add_parser("bench", help="time operations on a generated Erdos-Renyi matrix")
    bench.add_argument("--n", type=int, default=1 << 14, help="rows and columns of S")
    bench.add_argument("--nnz-per-row", type=int, default=32)
    bench.add_argument("--r", type=int, default=128, help="dense width r")
    bench.add_argument("--repeat", type=int, default=3, help="timed repetitions per op")
    bench.add_argument("--ops", default="fusedmm-a", help="comma-separated operations")
    bench.add_argument("--strategies", default="all",
                       help="comma-separated FusedMM strategies to time (default: all the "
                            "algorithm has)")
    _common(bench)
    cal = sub.add_parser("calibrate", help="measure alpha, beta (MPI) and gamma (node model) "
                                           "for the planner; needs >= 2 ranks")
    cal.add_argument("--out", required=True, help="machine file to write (JSON)")
    cal.add_argument("--node-model", default="reference", choices=list(NODE_MODELS))
    cal.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    cal.add_argument("--quick", action="store_true", help="fewer, smaller measurements")
    sg = sub.add_parser("spgemm", help="C = X @ Y on one process with a node model's SpGEMM; "
                                       "write C (CSR) to HDF5")
    sg.add_argument("--x", required=True, help="X as .mtx or .mtx.gz (m x k)")
    sg.add_argument("--y", required=True, help="Y as .mtx or .mtx.gz (k x n)")
    sg.add_argument("--out", required=True, help="output HDF5 file with indptr, indices, data "
                                                 "and shape of C (written atomically)")
    sg.add_argument("--node-model", default="hash-spgemm", choices=list(NODE_MODELS))
    sg.add_argument("--node-config", metavar="FILE", help="JSON object of the node model's "
                                                          "options")
    sg.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                    help="value type (default float64, as the OpSparse paper measures)")
    sg.add_argument("--repeat", type=int, default=1,
                    help="multiply this many times; one JSON line each (default 1)")
    pl = sub.add_parser("plan", help="rank every algorithm, strategy and c by predicted time")
    pl.add_argument("--m", type=int, required=True, help="rows of S")
    pl.add_argument("--n", type=int, help="columns of S (default m)")
    pl.add_argument("--nnz", type=int, required=True, help="nonzeros of S")
    pl.add_argument("--r", type=int, required=True, help="dense width r")
    pl.add_argument("-p", "--ranks", type=int, required=True, dest="p", help="rank count p")
    pl.add_argument("--machine", help="machine file from distmm calibrate (default: built-in)")
    pl.add_argument("--all-algorithms", action="store_true",
                    help="include families this build does not implement yet")
    pl.add_argument("--top", type=int, default=0, help="show only the best N rows")
    pl.add_argument("--json", action="store_true", help="JSON Lines instead of a table")
    _info.add_parser(parser, sub)
    _add_simulate(sub)
    return parser


def _add_simulate(sub) -> None:
    """``distmm simulate <simulator>``: one accelerator simulator on one node (serial); each
    simulator is a nested subcommand with its own options and its own function."""
    sim = sub.add_parser("simulate", help="run a kernel or a GNN on a simulated accelerator "
                                          "(serial; one nested subcommand per simulator)")
    sims = sim.add_subparsers(dest="simulator", required=True)
    from distmm.kernels.sparch import PREFETCH_POLICIES, SCHEDULERS

    sa = sims.add_parser("sparch", help="C = X Y on the SpArch accelerator model (HPCA'20); "
                                        "writes the modelled cycles, DRAM traffic and energy")
    sa.add_argument("--x", required=True, help="left matrix X as .mtx or .mtx.gz")
    sa.add_argument("--y", help="right matrix Y as .mtx or .mtx.gz (default: X, i.e. A times A)")
    sa.add_argument("--config", metavar="FILE",
                    help="JSON object of SpArch parameters (Table I names, see "
                         "distmm.kernels.sparch.SpArchConfig); the flags below override it")
    sa.add_argument("--no-condense", action="store_true", help="read X by original columns")
    sa.add_argument("--scheduler", choices=list(SCHEDULERS),
                    help="merge order (default huffman)")
    sa.add_argument("--prefetch", choices=list(PREFETCH_POLICIES),
                    help="row-buffer replacement (default belady)")
    sa.add_argument("--no-pipeline", action="store_true",
                    help="multiply phase to DRAM, then merge (OuterSPACE's flow)")
    sa.add_argument("--report", required=True, help="report JSON file (written atomically)")
    sa.set_defaults(simulate_func=cmd_simulate_sparch)
    from distmm.apps import dynaspase_cli

    dynaspase_cli.add_parser(sims)


def _write_json_atomic(path: str, obj: dict) -> None:
    """Write ``obj`` as JSON to ``path`` under a temporary name, then rename into place."""
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=1, sort_keys=True, default=_json_default)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def cmd_simulate(args) -> int:
    require(MPI.COMM_WORLD.Get_size() == 1,
            f"distmm simulate models one chip and runs serially; start it without mpiexec "
            f"(got {MPI.COMM_WORLD.Get_size()} ranks)")
    return args.simulate_func(args)


def cmd_simulate_sparch(args) -> int:
    """Model C = X Y on SpArch; write the report JSON and print a one-line summary."""
    from distmm.kernels.sparch import simulate
    from distmm.kernels.sparch.simulate import make_config

    out_dir = os.path.dirname(os.path.abspath(args.report))
    require(os.path.isdir(out_dir), f"report directory {out_dir} does not exist")
    require(os.access(out_dir, os.W_OK), f"report directory {out_dir} is not writable")
    options = read_json_object(args.config, "--config") if args.config else {}
    if args.no_condense:
        options["condense"] = False
    if args.no_pipeline:
        options["pipeline"] = False
    if args.scheduler:
        options["scheduler"] = args.scheduler
    if args.prefetch:
        options["prefetch"] = args.prefetch
    try:
        cfg = make_config(options)
    except (TypeError, ValueError) as exc:
        raise InputError(f"SpArch configuration: {exc}") from None
    X = read_csr_block(args.x)
    Y = X if args.y is None else read_csr_block(args.y)
    require(X.shape[1] == Y.shape[0],
            f"X is {X.shape[0]} x {X.shape[1]} but Y has {Y.shape[0]} rows; X's columns must "
            "equal Y's rows")
    C, report = simulate(X, Y, cfg)
    report.update({"simulator": "sparch", "x": os.path.abspath(args.x),
                   "y": os.path.abspath(args.y) if args.y else None,
                   "x_nnz": X.nnz, "y_nnz": Y.nnz, "c_nnz": C.nnz})
    _write_json_atomic(args.report, report)
    c, d = report["counters"], report["derived"]
    _emit({"event": "simulate", "simulator": "sparch", "report": args.report,
           "model_seconds": c["model_seconds"], "gflops": d["gflops"],
           "dram_bytes": c["dram_read_bytes"] + c["dram_write_bytes"],
           "energy_nj": c["energy_nj"], "partial_matrices": c["partial_matrices"],
           "merge_rounds": c["merge_rounds"], "prefetch_hit_rate": d["prefetch_hit_rate"]})
    return 0


def _open_log_dir(args) -> None:
    """Create --log-dir once (rank 0) and agree on failure (collective)."""
    if not args.log_dir:
        return
    comm = MPI.COMM_WORLD
    msg = None
    if comm.rank == 0:
        try:
            os.makedirs(args.log_dir, exist_ok=True)
        except OSError as exc:
            msg = f"cannot create --log-dir {args.log_dir}: {exc.strerror}"
    agree(comm, msg)


def _log_rank(args, obj, record: dict) -> None:
    """Append this rank's own counters to its log file (not collective)."""
    if not args.log_dir:
        return
    line = {"rank": obj.rank, **{k: record[k] for k in ("event", "op", "strategy")
                                 if k in record},
            "comm": obj.stats.as_dict(), "kernel": obj.kernel.stats.as_dict()}
    with open(os.path.join(args.log_dir, f"rank-{obj.rank}.jsonl"), "a") as fh:
        fh.write(json.dumps(line, sort_keys=True, default=_json_default) + "\n")


def _emit(obj: dict) -> None:
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps(obj, sort_keys=True, default=_json_default), flush=True)


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


def _check_common(args) -> None:
    if args.algorithm == "auto":
        return
    require(args.algorithm in api.ALGORITHMS,
            f"unknown algorithm {args.algorithm!r}; choose one of {', '.join(api.ALGORITHMS)}")
    cls = api.ALGORITHMS[args.algorithm]
    if args.strategy is None:
        args.strategy = cls.strategies[-1]
    require(args.strategy in cls.strategies,
            f"unknown strategy {args.strategy!r} for {args.algorithm}; choose one of "
            f"{', '.join(cls.strategies)}")
    p = MPI.COMM_WORLD.Get_size()
    require(args.c >= 1 and p % args.c == 0,
            f"replication factor -c {args.c} must be a positive divisor of the {p} ranks")


def node_model_from_args(args):
    """The node model named by --node-model, configured by --node-config (every rank reads
    the same file, so a bad one raises the same InputError everywhere)."""
    options = (read_json_object(args.node_config, "--node-config")
               if getattr(args, "node_config", None) else {})
    return make_node_model(args.node_model, **options)


def _choose(args, share, r: int, op: str):
    """Resolve --algorithm auto: the planner's pick, or with --tune K > 1 the fastest of its
    K best measured on this data (collective; every rank picks the same). Returns S
    distributed for the pick when tuning built it, else None."""
    if args.algorithm != "auto":
        return None
    comm = MPI.COMM_WORLD
    require(args.tune >= 1, f"--tune must be at least 1, got {args.tune}")
    machine = Machine.load(args.machine) if args.machine else Machine()
    m, n = share.shape
    nnz = int(comm.allreduce(share.nnz))
    # With --overlap, only the families that can overlap are candidates.
    families = tuple(name for name, cls in api.ALGORITHMS.items()
                     if not args.overlap or getattr(cls, "supports_overlap", False))
    best = plan(m, n, nnz, r, comm.Get_size(), machine, algorithms=families)[0]
    _emit({"event": "plan", "m": m, "n": n, "nnz": nnz, "r": r, **best,
           "machine": machine.as_dict()})
    obj = None
    if args.tune > 1:
        result = tune(share, comm, r, args.tune, machine, op=op, algorithms=families,
                      node_model=node_model_from_args(args), dtype=np.dtype(args.dtype),
                      permute=_permute_mode(args), seed=args.seed, order=args.order,
                      overlap=args.overlap)
        for event in tune_events(result):
            _emit(event)
        best, obj = result.best, result.obj
    args.algorithm, args.strategy, args.c = best["algorithm"], best["strategy"], best["c"]
    return obj


def cmd_calibrate(args) -> int:
    comm = MPI.COMM_WORLD
    data = calibrate(comm, args.node_model, np.dtype(args.dtype), quick=args.quick)
    if comm.rank == 0:
        save(args.out, data)
    _emit({"event": "calibrate", "out": args.out,
           **{k: data[k] for k in ("alpha", "beta", "gamma", "gamma_unfused", "delta",
                                   "per_call", "unpack_nonzero", "transpose_nonzero",
                                   "beta_allgather", "beta_reduce_scatter", "p")}})
    return 0


def cmd_plan(args) -> int:
    machine = Machine.load(args.machine) if args.machine else Machine()
    algorithms = None if args.all_algorithms else tuple(api.ALGORITHMS)
    rows = plan(args.m, args.n or args.m, args.nnz, args.r, args.p, machine, algorithms)
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    if args.json:
        for row in rows[:args.top or None]:
            print(json.dumps(row, sort_keys=True))
        return 0
    n = args.n or args.m
    print(f"m={args.m} n={n} nnz={args.nnz} r={args.r} p={args.p} "
          f"phi={rows[0]['phi']:.4g}; machine: {machine.source} (alpha={machine.alpha:.3g} "
          f"s, beta={machine.beta:.3g} s/word, gamma={machine.gamma:.3g} s/flop, "
          f"delta={machine.delta:.3g} s/nonzero)")
    print(format_table(rows, args.top or None))
    best = rows[0]
    print(f"winner: --algorithm {best['algorithm']} --strategy {best['strategy']} "
          f"-c {best['c']}")
    return 0


def cmd_run(args) -> int:
    comm = MPI.COMM_WORLD
    require(args.op in api.OPS, f"unknown operation {args.op!r}; choose one of "
                                f"{', '.join(api.OPS)}")
    _check_common(args)
    require(args.repeat >= 1, "--repeat must be at least 1")
    need_a, need_b = api.op_inputs(args.op)
    require(not need_a or args.a, f"{args.op} needs --a A.npy")
    require(not need_b or args.b, f"{args.op} needs --b B.npy")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    agree(comm, None if comm.rank != 0 or os.path.isdir(out_dir)
          else f"output directory {out_dir} does not exist")
    agree(comm, None if comm.rank != 0 or os.access(out_dir, os.W_OK)
          else f"output directory {out_dir} is not writable")
    from distmm.io import load_dense_npy

    # Every rank opens the same files, so every rank raises the same error without talking.
    A = load_dense_npy(args.a) if need_a else None
    B = load_dense_npy(args.b) if need_b else None
    if A is not None and B is not None:
        require(A.shape[1] == B.shape[1],
                f"A has {A.shape[1]} columns but B has {B.shape[1]}; both must have r columns")
    share = api.as_coo_share(args.sparse, comm)
    r = (A if A is not None else B).shape[1]
    obj = _choose(args, share, r, args.op)
    _check_common(args)
    if obj is None:
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=r,
                             node_model=node_model_from_args(args), dtype=np.dtype(args.dtype),
                             permute=_permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap)
    m, n = obj.shape
    require(A is None or A.shape[0] == m,
            f"A has {A.shape[0] if A is not None else 0} rows but S has {m} rows")
    require(B is None or B.shape[0] == n,
            f"B has {B.shape[0] if B is not None else 0} rows but S has {n} columns")
    _open_log_dir(args)
    A_loc = obj.scatter("a", A, root=None) if A is not None else None
    B_loc = obj.scatter("b", B, root=None) if B is not None else None
    nnz = int(comm.allreduce(obj.values.size))
    for rep in range(args.repeat):
        obj.reset_stats()
        result, seconds = timed(comm, lambda: api.run_op(obj, args.op, A_loc, B_loc,
                                                         args.strategy))
        report = obj.report()
        record = {"event": "run", "op": args.op, "strategy": args.strategy, "repeat": rep,
                  "seconds": seconds, "nnz": nnz, "r": r,
                  "gflops": api.op_flops(args.op, nnz, r) / seconds / 1e9 if seconds else None,
                  **obj.describe(), "phases": phase_summary(report) if report else None,
                  "kernels": kernel_summary(report) if report else None}
        _emit(record)
        _log_rank(args, obj, record)
    side = api.op_output_side(args.op)
    if side is None:
        gathered = obj.gather_values(result)
        datasets = dict(zip(("row", "col", "val"), gathered, strict=True)) if gathered else {}
    else:
        full = obj.gather(side, result)
        datasets = {"result": full} if full is not None else {}
    if comm.rank == 0:
        from distmm.io import write_h5_atomic

        write_h5_atomic(args.out, datasets, {
            "op": args.op, "strategy": args.strategy, "config": obj.describe(),
            "seconds": seconds, "report": report, "sparse": os.path.abspath(args.sparse)})
    comm.Barrier()
    return 0


def cmd_spgemm(args) -> int:
    """C = X @ Y on one process (refuses more than one rank); C to HDF5, a JSON line per run."""
    import time

    from distmm.io import write_h5_atomic
    from distmm.kernels.base import spgemm_flops

    p = MPI.COMM_WORLD.Get_size()
    require(p == 1, f"distmm spgemm multiplies on one process; run it without mpiexec "
                    f"(got {p} ranks)")
    require(args.repeat >= 1, "--repeat must be at least 1")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    require(os.path.isdir(out_dir), f"output directory {out_dir} does not exist")
    require(os.access(out_dir, os.W_OK), f"output directory {out_dir} is not writable")
    model = node_model_from_args(args)
    dtype = np.dtype(args.dtype)
    X, Y = read_csr_block(args.x, dtype), read_csr_block(args.y, dtype)
    require(X.shape[1] == Y.shape[0],
            f"cannot multiply: X ({args.x}) is {X.shape[0]} x {X.shape[1]} but Y ({args.y}) "
            f"is {Y.shape[0]} x {Y.shape[1]}; X's columns must equal Y's rows")
    flops = spgemm_flops(X, Y)
    for rep in range(args.repeat):
        model.stats.reset()
        t0 = time.perf_counter()
        C = model.spgemm(X, Y)
        seconds = time.perf_counter() - t0
        _emit({"event": "spgemm", "repeat": rep, "x": args.x, "y": args.y,
               "shape": list(C.shape), "nnz_x": X.nnz, "nnz_y": Y.nnz, "nnz_c": C.nnz,
               "flops": flops, "seconds": seconds,
               "gflops": flops / seconds / 1e9 if seconds > 0 else None,
               "node_model": args.node_model, "options": model.options(),
               "counters": model.stats.as_dict().get("spgemm", {})})
    write_h5_atomic(args.out, {"indptr": C.indptr, "indices": C.indices, "data": C.data,
                               "shape": np.asarray(C.shape, dtype=np.int64)},
                    {"x": os.path.abspath(args.x), "y": os.path.abspath(args.y),
                     "node_model": args.node_model, "options": model.options(),
                     "flops": flops, "seconds": seconds})
    return 0


def cmd_bench(args) -> int:
    comm = MPI.COMM_WORLD
    _check_common(args)
    ops = args.ops.split(",")
    strategies = (api.ALGORITHMS[args.algorithm].strategies
                  if args.strategies == "all" and args.algorithm != "auto"
                  else args.strategies.split(","))
    for op in ops:
        require(op in api.OPS, f"unknown operation {op!r}; choose from {', '.join(api.OPS)}")
    require(args.n >= 1 and args.r >= 1 and args.nnz_per_row >= 0 and args.repeat >= 1,
            "--n, --r and --repeat must be positive and --nnz-per-row non-negative")
    from distmm.generate import erdos_renyi

    obj = share = None
    if args.algorithm == "auto":
        share = erdos_renyi(args.n, args.n, args.nnz_per_row, args.seed, comm)
        obj = _choose(args, share, args.r, ops[0])
        strategies = [args.strategy]
    cls = api.ALGORITHMS[args.algorithm]
    for s in strategies:
        require(s in cls.strategies, f"unknown strategy {s!r} for {args.algorithm}")
    if obj is None:
        if share is None:
            share = erdos_renyi(args.n, args.n, args.nnz_per_row, args.seed, comm)
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=args.r,
                             node_model=node_model_from_args(args), dtype=np.dtype(args.dtype),
                             permute=_permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap)
    _open_log_dir(args)
    A_loc, B_loc = random_blocks(obj, args.r, args.seed)
    for op in ops:
        for strategy in (strategies if op.startswith("fusedmm") else ["-"]):
            record = {"event": "bench", "n": args.n,
                      **measure(obj, op, A_loc, B_loc, args.r, strategy, args.repeat)}
            _emit(record)
            _log_rank(args, obj, record)
    return 0


def _permute_mode(args) -> str:
    """The permutation mode the options ask for (--no-permute wins)."""
    return "none" if args.no_permute else args.permute


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distmm`` console script."""
    comm = MPI.COMM_WORLD
    try:
        args = build_parser().parse_args(argv)
        if args.command == "info":
            return _info.cmd_info(args)
        return {"run": cmd_run, "bench": cmd_bench, "calibrate": cmd_calibrate,
                "plan": cmd_plan, "simulate": cmd_simulate,
                "spgemm": cmd_spgemm}[args.command](args)
    except InputError as exc:
        if comm.rank == 0:
            print(f"distmm: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except SystemExit:
        raise
    except BaseException:
        sys.stderr.write(f"distmm: rank {comm.rank} of {comm.size} failed:\n"
                         + traceback.format_exc())
        sys.stderr.flush()
        if comm.size > 1:
            comm.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(main())
