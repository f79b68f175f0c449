"""The ``distmm`` command: ``run`` (files in, files out), ``bench`` (generated matrices) and
``simulate`` (one accelerator simulator on one node).

Launch under the MPI that distmm was installed with, e.g. ``mpiexec -n 4 distmm run ...``.
Every rank parses its own arguments and makes its own checks (files, headers, sizes, the
output path), then the ranks agree in one collective (:mod:`distmm.errors`): arguments that
differ between ranks, or a check that failed on any rank, exit every rank with status 2 and
one message naming the ranks (printed by rank 0), before any work. An unexpected error on any
rank prints that rank's traceback and aborts the whole job, so nothing waits forever for a
rank that left; Ctrl-C (SIGINT) ends every rank with status 130 and one line.
Results are JSON Lines on stdout (rank 0): one object per measurement.

Subcommands: each ``add_parser`` call below sets ``func`` (the function that runs it) with
``set_defaults``; a subcommand defined in another module registers itself with one call to
its own ``add_parser(sub)`` in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

from distmm import api, partition_cli, signals, watchdog
from distmm import info as _info
from distmm.apps import als_cli, gat_cli
from distmm.core.memory import (
    available_bytes,
    cgroup_limit,
    format_bytes,
    parse_memory_limit,
    physical_memory,
)
from distmm.errors import Checks, InputError, abort_job, agree, require
from distmm.io import convert
from distmm.io.hdf5 import sparse_header
from distmm.io.matrix_market import read_csr_block
from distmm.io.npy import npy_header
from distmm.io.outputs import check_output, read_json_object, write_json_atomic
from distmm.kernels import NODE_MODELS, make_node_model
from distmm.perf.bench import kernel_summary, measure, phase_summary, random_blocks, timed
from distmm.perf.calibrate import calibrate, save
from distmm.perf.planner import Machine, format_table, memory_problem, plan
from distmm.perf.tuning import tune, tune_events


class UsageError(Exception):
    """A command-line usage error found by one rank's parser (agreed before it is reported)."""

    def __init__(self, usage: str, message: str) -> None:
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """argparse that prints only on rank 0 and raises :class:`UsageError` instead of exiting,
    so that the ranks can agree on a usage error before every one of them exits."""

    def _print_message(self, message, file=None):
        if MPI.COMM_WORLD.Get_rank() == 0:
            super()._print_message(message, file)

    def error(self, message):
        raise UsageError(self.format_usage(), message)


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
    p.add_argument("--permute", default="auto", choices=partition_cli.PERMUTE_CHOICES,
                   help="load balance: 'blocks' assigns rows to blocks at random and keeps "
                        "their natural order inside each block; 'random' permutes uniformly; "
                        "'auto' (default) is 'none' on one rank, 'blocks' otherwise; "
                        "'kahip', 'kahypar': a graph partition (15d-sparse-aware only)")
    p.add_argument("--no-permute", action="store_true", help="same as --permute none")
    partition_cli.add_partition_option(p)  # --partition FILE (sparse-aware family)
    p.add_argument("--seed", type=int, default=0, help="seed of the permutation/generator")
    p.add_argument("--overlap", action="store_true",
                   help="overlap each propagation shift with the local kernel")
    p.add_argument("--log-dir", help="every rank appends its own counters and kernel stats "
                                     "to DIR/rank-K.jsonl after each measurement")
    _memory_limit_option(p, "auto", "refuse a job whose modelled memory per rank exceeds this "
                                    "before reading any data")
    job_options(p)


def _memory_limit_option(p: argparse.ArgumentParser, default: str | None, what: str) -> None:
    p.add_argument("--memory-limit", default=default, metavar="BYTES|auto|none",
                   help=f"{what}: bytes (e.g. 4000000000, 512M, 4GiB), auto (the cgroup "
                        "memory limit, else physical memory, divided by the ranks on each "
                        "node) or none (default %(default)s; docs/memory.md)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def job_options(p: argparse.ArgumentParser) -> None:
    """The options of a long command (run, bench, als, gat train): ``--timeout`` (the
    watchdog, :mod:`distmm.watchdog`), and stopping at safe points on SIGTERM and SIGINT
    (:mod:`distmm.signals`), which such a command supports."""
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                   help="abort the whole job (exit status 124) with a message naming the "
                        "phase and the ranks that did not arrive when a collective waits "
                        "longer than this (default: no limit)")
    p.set_defaults(safe_points=True)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``distmm`` command."""
    parser = _Parser(prog="distmm", description="Distributed SDDMM, SpMM and FusedMM on MPI "
                                                "process grids (run under mpiexec or srun).")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one operation on a Matrix Market matrix and .npy "
                                     "dense inputs; write the result to HDF5")
    run.add_argument("op", help=f"one of {', '.join(api.OPS)}")
    run.add_argument("--sparse", required=True,
                     help="S (m x n) as .mtx, .mtx.gz or .h5/.hdf5 (CSR or COO layout, see "
                          "docs/hardening.md)")
    run.add_argument("--a", help="A as .npy (m x r)")
    run.add_argument("--b", help="B as .npy (n x r)")
    run.add_argument("--out", required=True, help="output HDF5 file (written atomically)")
    run.add_argument("--repeat", type=int, default=1,
                     help="run the operation this many times; report each (default 1)")
    _common(run)
    run.set_defaults(func=cmd_run)
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
    bench.set_defaults(func=cmd_bench)
    cal = sub.add_parser("calibrate", help="measure alpha, beta (MPI) and gamma (node model) "
                                           "for the planner; needs >= 2 ranks")
    cal.add_argument("--out", required=True, help="machine file to write (JSON)")
    cal.add_argument("--node-model", default="reference", choices=list(NODE_MODELS))
    cal.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    cal.add_argument("--quick", action="store_true", help="fewer, smaller measurements")
    cal.set_defaults(func=cmd_calibrate)
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
    sg.set_defaults(func=cmd_spgemm)
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
    pl.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    _memory_limit_option(pl, None, "leave out candidates whose modelled memory per rank "
                                   "exceeds this (auto: this machine's, shared by one rank "
                                   "per core)")
    pl.set_defaults(func=cmd_plan)
    partition_cli.extend_plan(pl, cmd_plan)  # plan --sparse FILE
    partition_cli.add_parser(sub)  # distmm partition
    _info.add_parser(parser, sub)
    _add_simulate(sub)
    als_cli.add_parser(sub)
    gat_cli.add_parser(sub)
    convert.add_parser(sub)
    return parser


def _add_simulate(sub) -> None:
    """``distmm simulate <simulator>``: one accelerator simulator on one node (serial); each
    simulator is a nested subcommand with its own options and its own function."""
    sim = sub.add_parser("simulate", help="run a kernel or a GNN on a simulated accelerator "
                                          "(serial; one nested subcommand per simulator)")
    sim.set_defaults(func=cmd_simulate)
    sims = sim.add_subparsers(dest="simulator", required=True)
    from distmm.sim.sparch import PREFETCH_POLICIES, SCHEDULERS

    sa = sims.add_parser("sparch", help="C = X Y on the SpArch accelerator model (HPCA'20); "
                                        "writes the modelled cycles, DRAM traffic and energy")
    sa.add_argument("--x", required=True, help="left matrix X as .mtx or .mtx.gz")
    sa.add_argument("--y", help="right matrix Y as .mtx or .mtx.gz (default: X, i.e. A times A)")
    sa.add_argument("--config", metavar="FILE",
                    help="JSON object of SpArch parameters (Table I names, see "
                         "distmm.sim.sparch.SpArchConfig); the flags below override it")
    sa.add_argument("--no-condense", action="store_true", help="read X by original columns")
    sa.add_argument("--scheduler", choices=list(SCHEDULERS),
                    help="merge order (default huffman)")
    sa.add_argument("--prefetch", choices=list(PREFETCH_POLICIES),
                    help="row-buffer replacement (default belady)")
    sa.add_argument("--no-pipeline", action="store_true",
                    help="multiply phase to DRAM, then merge (OuterSPACE's flow)")
    sa.add_argument("--report", required=True, help="report JSON file (written atomically)")
    sa.set_defaults(simulate_func=cmd_simulate_sparch)
    from distmm.sim import dynaspase_cli

    dynaspase_cli.add_parser(sims)


def cmd_simulate(args) -> int:
    require(MPI.COMM_WORLD.Get_size() == 1,
            f"distmm simulate models one chip and runs serially; start it without mpiexec "
            f"(got {MPI.COMM_WORLD.Get_size()} ranks)")
    return args.simulate_func(args)


def cmd_simulate_sparch(args) -> int:
    """Model C = X Y on SpArch; write the report JSON and print a one-line summary."""
    from distmm.sim.sparch import simulate
    from distmm.sim.sparch.simulate import make_config

    _require_output(args.report, "--report", [args.x, args.y, args.config])
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
    write_json_atomic(args.report, report)
    c, d = report["counters"], report["derived"]
    _emit({"event": "simulate", "simulator": "sparch", "report": args.report,
           "model_seconds": c["model_seconds"], "gflops": d["gflops"],
           "dram_bytes": c["dram_read_bytes"] + c["dram_write_bytes"],
           "energy_nj": c["energy_nj"], "partial_matrices": c["partial_matrices"],
           "merge_rounds": c["merge_rounds"], "prefetch_hit_rate": d["prefetch_hit_rate"]})
    return 0


def _open_log_dir(args) -> None:
    """Create --log-dir on every rank (each writes its own file there; with per-rank working
    directories a relative one is a different directory per rank) and agree (collective)."""
    if not args.log_dir:
        return
    msg = None
    try:
        os.makedirs(args.log_dir, exist_ok=True)
    except OSError as exc:
        msg = f"cannot create --log-dir {args.log_dir}: {exc.strerror}"
    agree(MPI.COMM_WORLD, msg)


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
    """The node model named by --node-model, configured by --node-config (not collective: a
    rank that cannot read the file raises InputError; callers agree on it)."""
    options = (read_json_object(args.node_config, "--node-config")
               if getattr(args, "node_config", None) else {})
    return make_node_model(args.node_model, **options)


def _require_output(path: str | None, what: str, inputs: list) -> None:
    """Raise InputError if ``path`` cannot be written as an output (see
    :func:`distmm.io.outputs.check_output`). Not collective; touches nothing."""
    problem = check_output(path, what, inputs)
    if problem is not None:
        raise InputError(problem)


def _machine(args) -> Machine:
    """The planner's machine for --algorithm auto: --machine FILE or the built-in one."""
    return Machine.load(args.machine) if args.machine else Machine()


def _parse_limit(args) -> str | int | None:
    """--memory-limit checked on this rank (not collective): None (none), "auto" or bytes."""
    text = getattr(args, "memory_limit", None)
    if text is None or text.strip().lower() == "none":
        return None
    limit = parse_memory_limit(text)
    return "auto" if limit is None else limit


def _resolve_limit(parsed: str | int | None, comm: MPI.Comm) -> int | None:
    """Bytes per rank from :func:`_parse_limit` ("auto": :func:`distmm.core.memory.available_bytes`,
    collective over ``comm``; every rank must call it with the same ``parsed``)."""
    return available_bytes(comm) if parsed == "auto" else parsed


def _refuse_oversized(comm: MPI.Comm, limit: int | None, algorithm: str, c: int,
                      strategies: list[str], ops: list[str], m: int, n: int, nnz: int,
                      r: int, dtype, overlap: bool) -> None:
    """Collective: the same InputError on every rank when the memory model of any (op,
    strategy) to run exceeds ``limit`` bytes per rank, naming the c or p that would fit."""
    msg = None
    if limit is not None and algorithm != "auto":
        p = comm.Get_size()
        for op in ops:
            for strategy in (strategies if op.startswith("fusedmm") else strategies[-1:]):
                msg = msg or memory_problem(algorithm, strategy, m, n, nnz, r, p, c, limit,
                                            dtype, overlap, op.replace("-", "_"))
    agree(comm, msg)


def _choose(args, share, r: int, op: str, machine: Machine, limit: int | None = None):
    """Resolve --algorithm auto: the planner's pick, or with --tune K > 1 the fastest of its
    K best measured on this data (collective; every rank picks the same). Returns S
    distributed for the pick when tuning built it, else None."""
    if args.algorithm != "auto":
        return None
    comm = MPI.COMM_WORLD
    m, n = share.shape
    nnz = int(comm.allreduce(share.nnz))
    # With --overlap, only the families that can overlap are candidates.
    families = tuple(name for name, cls in api.ALGORITHMS.items()
                     if not args.overlap or getattr(cls, "supports_overlap", False))
    best = plan(m, n, nnz, r, comm.Get_size(), machine, algorithms=families,
                dtype=np.dtype(args.dtype), overlap=args.overlap, memory_limit=limit)[0]
    _emit({"event": "plan", "m": m, "n": n, "nnz": nnz, "r": r, **best,
           "machine": machine.as_dict()})
    obj = None
    if args.tune > 1:
        result = tune(share, comm, r, args.tune, machine, op=op, algorithms=families,
                      node_model=node_model_from_args(args), dtype=np.dtype(args.dtype),
                      permute=_permute_mode(args), seed=args.seed, order=args.order,
                      overlap=args.overlap, memory_limit=limit)
        for event in tune_events(result):
            _emit(event)
        best, obj = result.best, result.obj
    args.algorithm, args.strategy, args.c = best["algorithm"], best["strategy"], best["c"]
    return obj


def cmd_calibrate(args) -> int:
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    with checks.guard():
        if comm.rank == 0:  # only rank 0 writes the machine file
            _require_output(args.out, "--out", [])
    checks.agree()
    data = calibrate(comm, args.node_model, np.dtype(args.dtype), quick=args.quick)
    if comm.rank == 0:
        save(args.out, data)
        if data["warning"]:
            print(f"distmm: warning: {data['warning']}", file=sys.stderr, flush=True)
    _emit({"event": "calibrate", "out": args.out,
           **{k: data[k] for k in ("alpha", "beta", "gamma", "gamma_unfused", "delta",
                                   "per_call", "unpack_nonzero", "transpose_nonzero",
                                   "beta_allgather", "beta_reduce_scatter", "p")}})
    return 0


def cmd_plan(args) -> int:
    checks, machine, limit = Checks(MPI.COMM_WORLD), None, None
    with checks.guard():  # every rank reads --machine; one that cannot must stop them all
        machine = _machine(args)
        limit = _parse_limit(args)
    checks.agree()
    if limit == "auto":  # the planned job's ranks are not running: one per core of this node
        memory = cgroup_limit() or physical_memory()
        limit = None if memory is None else memory // max(1, min(args.p, os.cpu_count() or 1))
    algorithms = None if args.all_algorithms else tuple(api.ALGORITHMS)
    rows = plan(args.m, args.n or args.m, args.nnz, args.r, args.p, machine, algorithms,
                dtype=np.dtype(args.dtype), memory_limit=limit)
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
          f"delta={machine.delta:.3g} s/nonzero); memory per rank modelled for "
          f"{args.dtype}" + ("" if limit is None else
                             f", candidates over the limit of {format_bytes(limit)} left out"))
    print(format_table(rows, args.top or None))
    best = rows[0]
    print(f"winner: --algorithm {best['algorithm']} --strategy {best['strategy']} "
          f"-c {best['c']}")
    return 0


def _run_prechecks(args) -> dict:
    """Every check of ``distmm run`` that reads no data, on this rank alone (not collective).

    Arguments; then (rank 0, the writer) the output path, before any input is opened; then
    the headers of S (Matrix Market) and of A and B (.npy), so that their sizes are compared
    and S's size is checked against this machine's memory before anything is read; then the
    --node-config and --machine files. Raises InputError; returns what later steps need.
    """
    require(args.op in api.OPS, f"unknown operation {args.op!r}; choose one of "
                                f"{', '.join(api.OPS)}")
    _check_common(args)
    require(args.repeat >= 1, f"--repeat must be at least 1, got {args.repeat}")
    require(args.tune >= 1, f"--tune must be at least 1, got {args.tune}")
    need_a, need_b = api.op_inputs(args.op)
    require(not need_a or args.a, f"{args.op} needs --a A.npy")
    require(not need_b or args.b, f"{args.op} needs --b B.npy")
    if MPI.COMM_WORLD.rank == 0:
        _require_output(args.out, "--out",
                        [args.sparse, args.a, args.b, args.node_config, args.machine])
    m, n, nnz = sparse_header(args.sparse)
    problem = api.size_problem(args.sparse, m, n, nnz, MPI.COMM_WORLD.size)
    if problem is not None:
        raise InputError(problem)
    widths = {}
    for name, path, rows in (("A", args.a if need_a else None, m),
                             ("B", args.b if need_b else None, n)):
        if path is None:
            continue
        (got, width), _ = npy_header(path)
        require(got == rows, f"{name} ({path}) has {got} rows but S ({args.sparse}) is "
                             f"{m} x {n}, so {name} must have {rows} rows")
        widths[name] = (path, width)
    (_, r), *others = widths.values()
    for _, width in others:
        require(width == r, f"A ({args.a}) has {r} columns but B ({args.b}) has {width}; both "
                            "must have the same width r")
    require(r >= 1, f"the dense inputs have {r} columns; they need r >= 1")
    if args.algorithm == "auto":
        require(m > 0 and n > 0 and nnz > 0,
                f"{args.sparse}: the matrix is empty ({m} x {n}, {nnz} entries), so "
                "--algorithm auto has nothing to plan for; name an algorithm instead")
    kernel = node_model_from_args(args)
    machine = _machine(args) if args.algorithm == "auto" else None
    # Ranks with files of their own must see the same sizes (agreed with the checks).
    sizes = {"S (rows, columns, entries)": (m, n, nnz), "r": r}
    return {"need_a": need_a, "need_b": need_b, "r": r, "kernel": kernel, "machine": machine,
            "same": sizes, "shape": (m, n, nnz), "limit": _parse_limit(args)}


def _check_result(obj, op: str, result: np.ndarray, A_loc, B_loc) -> None:
    """Collective: refuse a result that is not finite (with finite inputs: an overflow).

    Names the operation, the stage that overflowed (for FusedMM, the SDDMM is recomputed on
    this error path to tell its stage from the SpMM's) and the cure."""
    comm = MPI.COMM_WORLD

    def anywhere(bad: bool) -> bool:
        flag = np.array([int(bad)], dtype=np.int32)
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        return bool(flag[0])

    if not anywhere(not np.isfinite(result).all()):
        return
    stage = {"sddmm": "SDDMM", "spmm-a": "SpMM", "spmm-b": "SpMM"}.get(op)
    if stage is None:
        sddmm_bad = anywhere(not np.isfinite(obj.sddmm(A_loc, B_loc)).all())
        stage = "SDDMM" if sddmm_bad else "SpMM"
    stage += (" stage (the dot products S * (A B^T))" if stage == "SDDMM"
              else " stage (the sums of products with the dense matrix)")
    largest = float(np.finfo(obj.dtype).max)
    hint = ("use --dtype float64" if obj.dtype == np.float32
            else "scale the inputs down")
    raise InputError(f"{op} overflowed {obj.dtype} in its {stage}: the result has infinite or "
                     f"NaN values although every input is finite (largest {obj.dtype} is "
                     f"{largest:.3g}); nothing was written; {hint}")


def cmd_run(args) -> int:
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    pre: dict = {}
    with checks.guard():
        pre = _run_prechecks(args)
    checks.agree(same=pre.get("same"))  # one collective: every rank's checks passed
    from distmm.io.npy import load_dense_npy
    from distmm.io.outputs import write_h5_atomic

    dtype = np.dtype(args.dtype)
    limit = _resolve_limit(pre["limit"], comm)
    _refuse_oversized(comm, limit, args.algorithm, args.c, [args.strategy], [args.op],
                      *pre["shape"], pre["r"], dtype, args.overlap)
    # The values (NaN, infinities, float32 overflow): every rank scans what it sees.
    checks, A, B = Checks(comm), None, None
    with checks.guard():
        A = load_dense_npy(args.a, dtype=dtype) if pre["need_a"] else None
        B = load_dense_npy(args.b, dtype=dtype) if pre["need_b"] else None
    checks.agree()
    _open_log_dir(args)
    share = api.as_coo_share(args.sparse, comm)
    r = pre["r"]
    obj = _choose(args, share, r, args.op, pre["machine"], limit)
    _check_common(args)
    if obj is None:
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=r,
                             node_model=pre["kernel"], dtype=dtype,
                             permute=_permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap)
    share = None  # S lives in the object now; the memory model counts no second copy
    A_loc = obj.scatter("a", A, root=None) if A is not None else None
    B_loc = obj.scatter("b", B, root=None) if B is not None else None
    nnz = int(comm.allreduce(obj.values.size))
    out = api.result_buffer(obj, args.op, r)  # every repetition writes it, as a loop does
    for rep in range(args.repeat):
        signals.stop_if_requested(comm, "before repeat 1" if rep == 0 else
                                  f"after repeat {rep} of {args.repeat}")
        obj.reset_stats()
        result, seconds = timed(comm, lambda: api.run_op(obj, args.op, A_loc, B_loc,
                                                         args.strategy, out))
        report = obj.report()
        record = {"event": "run", "op": args.op, "strategy": args.strategy, "repeat": rep,
                  "seconds": seconds, "nnz": nnz, "r": r,
                  "gflops": api.op_flops(args.op, nnz, r) / seconds / 1e9 if seconds else None,
                  **obj.describe(), "phases": phase_summary(report) if report else None,
                  "kernels": kernel_summary(report) if report else None}
        _emit(record)
        _log_rank(args, obj, record)
    _check_result(obj, args.op, result, A_loc, B_loc)
    side = api.op_output_side(args.op)
    if side is None:
        gathered = obj.gather_values(result)
        datasets = dict(zip(("row", "col", "val"), gathered, strict=True)) if gathered else {}
    else:
        full = obj.gather(side, result)
        datasets = {"result": full} if full is not None else {}
    msg = None
    if comm.rank == 0:
        try:
            write_h5_atomic(args.out, datasets, {
                "op": args.op, "strategy": args.strategy, "config": obj.describe(),
                "seconds": seconds, "report": report,
                "sparse": os.path.abspath(args.sparse)})
        except OSError as exc:
            msg = f"--out {args.out}: cannot write the result ({exc.strerror or exc})"
    agree(comm, msg)
    obj.close()
    return 0


def cmd_spgemm(args) -> int:
    """C = X @ Y on one process (refuses more than one rank); C to HDF5, a JSON line per run."""
    import time

    from distmm.io.outputs import write_h5_atomic
    from distmm.kernels.base import spgemm_flops

    p = MPI.COMM_WORLD.Get_size()
    require(p == 1, f"distmm spgemm multiplies on one process; run it without mpiexec "
                    f"(got {p} ranks)")
    require(args.repeat >= 1, "--repeat must be at least 1")
    _require_output(args.out, "--out", [args.x, args.y, args.node_config])
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


def _bench_prechecks(args) -> dict:
    """The checks of ``distmm bench`` on this rank alone (not collective); raises InputError."""
    _check_common(args)
    ops = args.ops.split(",")
    for op in ops:
        require(op in api.OPS, f"unknown operation {op!r}; choose from {', '.join(api.OPS)}")
    require(args.n >= 1 and args.r >= 1 and args.nnz_per_row >= 0 and args.repeat >= 1,
            "--n, --r and --repeat must be positive and --nnz-per-row non-negative")
    require(args.tune >= 1, f"--tune must be at least 1, got {args.tune}")
    strategies = (api.ALGORITHMS[args.algorithm].strategies
                  if args.strategies == "all" and args.algorithm != "auto"
                  else args.strategies.split(","))
    if args.algorithm != "auto":
        for s in strategies:
            require(s in api.ALGORITHMS[args.algorithm].strategies,
                    f"unknown strategy {s!r} for {args.algorithm}")
    return {"ops": ops, "strategies": strategies, "kernel": node_model_from_args(args),
            "machine": _machine(args) if args.algorithm == "auto" else None,
            "limit": _parse_limit(args)}


def cmd_bench(args) -> int:
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    pre: dict = {}
    with checks.guard():
        pre = _bench_prechecks(args)
    checks.agree()
    ops, strategies = pre["ops"], pre["strategies"]
    from distmm.io.generate import erdos_renyi

    limit = _resolve_limit(pre["limit"], comm)
    _refuse_oversized(comm, limit, args.algorithm, args.c, strategies, ops, args.n, args.n,
                      args.n * args.nnz_per_row, args.r, np.dtype(args.dtype), args.overlap)
    share = erdos_renyi(args.n, args.n, args.nnz_per_row, args.seed, comm)
    obj = None
    if args.algorithm == "auto":
        obj = _choose(args, share, args.r, ops[0], pre["machine"], limit)
        strategies = [args.strategy]
    if obj is None:
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=args.r,
                             node_model=pre["kernel"], dtype=np.dtype(args.dtype),
                             permute=_permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap)
    share = None  # S lives in the object now; the memory model counts no second copy
    _open_log_dir(args)
    A_loc, B_loc = random_blocks(obj, args.r, args.seed)
    for op in ops:
        for strategy in (strategies if op.startswith("fusedmm") else ["-"]):
            record = {"event": "bench", "n": args.n,
                      **measure(obj, op, A_loc, B_loc, args.r, strategy, args.repeat)}
            _emit(record)
            _log_rank(args, obj, record)
    obj.close()
    return 0


def _permute_mode(args) -> str:
    """The permutation mode the options ask for (--no-permute wins)."""
    return partition_cli.permute_value(args, "none" if args.no_permute else args.permute)


def _label(dest: str) -> str:
    """How an argparse destination is spelled on the command line, for messages."""
    return {"c": "-c", "p": "-p", "op": "OP", "command": "COMMAND",
            "simulator": "SIMULATOR"}.get(dest, "--" + dest.replace("_", "-"))


def parse_agreed(parser: argparse.ArgumentParser, argv: list[str] | None,
                 comm: MPI.Comm) -> argparse.Namespace:
    """Parse the command line on every rank and agree on the outcome (collective).

    A usage error on any rank, or parsed arguments that differ between ranks (an MPMD launch
    given different options per rank), exits every rank with status 2 and one message from
    rank 0 naming the ranks and the arguments that differ; ``--help`` on every rank exits 0.
    """
    args, usage, problem = None, None, None
    try:
        args = parser.parse_args(argv)
        same = {"--help": False, **{_label(k): v for k, v in sorted(vars(args).items())
                                    if not callable(v)}}
    except UsageError as exc:
        usage, problem = exc.usage, str(exc)
        same = {}
    except SystemExit as exc:  # --help: printed on rank 0
        same = {"--help": True, "exit": exc.code}
    try:
        agree(comm, problem, same)
    except InputError as exc:
        if comm.rank == 0:
            if usage:
                sys.stderr.write(usage)
            print(f"distmm: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if args is None:
        raise SystemExit(same["exit"])
    return args


def _interrupted(comm: MPI.Comm, signum: int = 2) -> int:
    """End this rank at once after Ctrl-C (SIGINT), or after a second SIGTERM or SIGINT in a
    command with safe points: one line, status 128 + the signal's number (130 for SIGINT).

    mpiexec sends SIGINT to every rank. Rank 0 prints the line and leaves at once; the job
    launcher then ends the ranks still blocked in a collective (which cannot run Python's
    handler). Another rank waits a moment first, so that rank 0's line is the only one unless
    rank 0 itself is blocked. With more than one rank the process leaves with os._exit: a
    normal exit would enter MPI_Finalize and wait for ranks that are gone.
    """
    import time

    if comm.rank != 0:
        time.sleep(1.0)
    sys.stderr.write(f"distmm: interrupted ({signals.name(signum)}); stopping every rank; "
                     "nothing was written\n")
    sys.stderr.flush()
    sys.stdout.flush()
    code = signals.exit_code(signum)
    if comm.size > 1:
        os._exit(code)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distmm`` console script."""
    comm = MPI.COMM_WORLD
    try:
        with signals.handled():
            args = parse_agreed(build_parser(), argv, comm)
            if not getattr(args, "safe_points", False):
                signals.release()
            with watchdog.running(comm, getattr(args, "timeout", None)):
                return args.func(args)
    except InputError as exc:
        if comm.rank == 0:
            print(f"distmm: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except signals.Stopped as exc:  # raised on every rank at the same safe point
        if comm.rank == 0:
            print(f"distmm: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except SystemExit:
        raise
    except KeyboardInterrupt:
        return _interrupted(comm, signals.forced())
    except BaseException:
        message = f"distmm: rank {comm.rank} of {comm.size} failed:\n" + traceback.format_exc()
        if comm.size > 1:
            abort_job(comm, 1, message)
        sys.stderr.write(message)
        sys.stderr.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
