"""``distmm plan`` (every algorithm, strategy and c ranked by predicted time) and ``distmm
calibrate`` (alpha, beta and gamma of this machine, written to a machine file)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm.cli import files
from distmm.cli.common import (
    emit,
    machine_from_args,
    memory_limit_option,
    parse_limit,
    permute_mode,
    permute_options,
    relay_option,
)
from distmm.core.memory import cgroup_limit, format_bytes, physical_memory
from distmm.core.relay_rule import relay_rule
from distmm.errors import Checks, InputError, agree
from distmm.kernels import NODE_MODELS
from distmm.perf.calibrate import calibrate, save
from distmm.perf.planner import format_table, plan


def add_parser(sub) -> None:
    """Register ``distmm plan`` and ``distmm calibrate``."""
    pl = sub.add_parser("plan", help="rank every algorithm, strategy and c by predicted time")
    pl.add_argument("--m", type=int, help="rows of S (not with --sparse)")
    pl.add_argument("--n", type=int, help="columns of S (default m)")
    pl.add_argument("--nnz", type=int, help="nonzeros of S (not with --sparse)")
    pl.add_argument("--r", type=int, required=True, help="dense width r")
    pl.add_argument("-p", "--ranks", type=int, required=True, dest="p", help="rank count p")
    files.input_option(pl, "--machine", help="machine file from distmm calibrate (default: "
                                             "built-in)")
    pl.add_argument("--all-algorithms", action="store_true",
                    help="include families this build does not implement yet")
    pl.add_argument("--top", type=int, default=0, help="show only the best N rows")
    pl.add_argument("--json", action="store_true", help="JSON Lines instead of a table")
    pl.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    memory_limit_option(pl, None, "leave out candidates whose modelled memory per rank "
                                  "exceeds this (auto: this machine's, shared by one rank "
                                  "per core)")
    files.input_option(pl, "--sparse", readers="root",
                       help="plan for this matrix's pattern instead of --m/--nnz: every "
                            "family's busiest-rank words and memory, one JSON line each")
    permute_options(pl)
    relay_option(pl)
    pl.add_argument("--seed", type=int, default=0, help="with --sparse: the run's --seed")
    pl.set_defaults(func=cmd_plan)
    cal = sub.add_parser("calibrate", help="measure alpha, beta (MPI) and gamma (node model) "
                                           "for the planner; needs >= 2 ranks")
    files.output_option(cal, "--out", required=True, help="machine file to write (JSON)")
    cal.add_argument("--node-model", default="reference", choices=list(NODE_MODELS))
    cal.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    cal.add_argument("--quick", action="store_true", help="fewer, smaller measurements")
    cal.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args) -> int:
    """``distmm calibrate`` (collective): measure, then rank 0 writes the machine file."""
    comm = MPI.COMM_WORLD
    data = calibrate(comm, args.node_model, np.dtype(args.dtype), quick=args.quick)
    files.write_output(comm, args.out, "--out", lambda path: save(path, data))
    if comm.rank == 0 and data["warning"]:
        print(f"distmm: warning: {data['warning']}", file=sys.stderr, flush=True)
    emit({"event": "calibrate", "out": args.out,
          **{k: data[k] for k in ("alpha", "beta", "gamma", "gamma_unfused", "delta",
                                  "per_call", "unpack_nonzero", "transpose_nonzero",
                                  "beta_allgather", "beta_reduce_scatter", "p")}})
    return 0


def cmd_plan(args) -> int:
    """``distmm plan``: the table (or JSON Lines) on rank 0. Every rank reads --machine.
    With ``--sparse FILE``, :func:`cmd_plan_sparse`."""
    if args.sparse is not None:
        return cmd_plan_sparse(args)
    agree(MPI.COMM_WORLD, None if args.m is not None and args.nnz is not None else
          "plan needs --m and --nnz, or --sparse FILE")
    checks, machine, limit = Checks(MPI.COMM_WORLD), None, None
    with checks.guard():  # every rank reads --machine; one that cannot must stop them all
        machine = machine_from_args(args)
        limit = parse_limit(args)
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
    # its words depend on S's pattern, which m, n and nnz do not give
    print("not ranked: 15d-sparse-aware (its words depend on S's pattern; "
          "`distmm plan --sparse S.mtx` ranks it with the others)")
    return 0




def cmd_plan_sparse(args) -> int:
    """``distmm plan --sparse FILE``: S ordered as a run with these ``--permute`` /
    ``--partition`` options would order it, then one JSON line per candidate (family, strategy,
    c) with the busiest rank's words per FusedMM call and the fullest rank's memory
    (:func:`distmm.perf.sparse_planner.plan_sparse`). Rank 0 reads the file and plans; no MPI
    job of p ranks is needed. Collective over COMM_WORLD (errors are agreed)."""
    import time

    from distmm.perf.planner import Machine
    from distmm.perf.sparse_planner import plan_sparse

    comm = MPI.COMM_WORLD
    permute = permute_mode(args)
    checks, lines = Checks(comm), None
    with checks.guard():
        if comm.Get_rank() == 0:
            if args.p < 1 or args.r < 1:
                raise InputError("plan needs -p >= 1 and --r >= 1")
            machine = Machine.load(args.machine) if args.machine else Machine()
            t0 = time.perf_counter()
            share = api.as_coo_share(args.sparse, MPI.COMM_SELF)
            read_s = time.perf_counter() - t0
            found, info = plan_sparse(share.rows, share.cols, share.shape, args.r, args.p,
                                      machine, permute, args.seed, np.dtype(args.dtype),
                                      relay_rule(args.relay or "auto", machine, args.r))
            info.pop("partition", None)
            head = {"m": share.shape[0], "n": share.shape[1], "nnz": int(share.rows.size),
                    "p": args.p, "r": args.r, "read_s": read_s, **info}
            lines = [{**head, **row} for row in found]
    checks.agree()
    if comm.Get_rank() == 0:
        for row in lines[:args.top or None]:
            print(json.dumps(row, sort_keys=True), flush=True)
    return 0
