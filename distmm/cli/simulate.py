"""``distmm simulate <simulator>``: one accelerator simulator on one node (serial); each
simulator is a nested subcommand with its own options and its own function (SpArch here,
Dynaspase in :mod:`distmm.cli.dynaspase`)."""

from __future__ import annotations

import os

from mpi4py import MPI

from distmm.cli import dynaspase, files
from distmm.cli.common import emit
from distmm.errors import InputError, require
from distmm.io.matrix_market import read_csr_block
from distmm.io.outputs import read_json_object, write_json_atomic


def add_parser(sub) -> None:
    """Register ``distmm simulate`` and its simulators."""
    from distmm.sim.sparch import PREFETCH_POLICIES, SCHEDULERS

    sim = sub.add_parser("simulate", help="run a kernel or a GNN on a simulated accelerator "
                                          "(serial; one nested subcommand per simulator)")
    sim.set_defaults(func=cmd_simulate)
    sims = sim.add_subparsers(dest="simulator", required=True)
    sa = sims.add_parser("sparch", help="C = X Y on the SpArch accelerator model (HPCA'20); "
                                        "writes the modelled cycles, DRAM traffic and energy")
    files.input_option(sa, "--x", required=True, help="left matrix X as .mtx or .mtx.gz")
    files.input_option(sa, "--y", help="right matrix Y as .mtx or .mtx.gz (default: X, i.e. "
                                       "A times A)")
    files.input_option(sa, "--config", metavar="FILE",
                       help="JSON object of SpArch parameters (Table I names, see "
                            "distmm.sim.sparch.SpArchConfig); the flags below override it")
    sa.add_argument("--no-condense", action="store_true", help="read X by original columns")
    sa.add_argument("--scheduler", choices=list(SCHEDULERS),
                    help="merge order (default huffman)")
    sa.add_argument("--prefetch", choices=list(PREFETCH_POLICIES),
                    help="row-buffer replacement (default belady)")
    sa.add_argument("--no-pipeline", action="store_true",
                    help="multiply phase to DRAM, then merge (OuterSPACE's flow)")
    files.output_option(sa, "--report", required=True,
                        help="report JSON file (written atomically)")
    sa.set_defaults(simulate_func=cmd_simulate_sparch)
    dynaspase.add_parser(sims)


def cmd_simulate(args) -> int:
    """Dispatch ``distmm simulate SIMULATOR`` (refuses more than one rank)."""
    require(MPI.COMM_WORLD.Get_size() == 1,
            f"distmm simulate models one chip and runs serially; start it without mpiexec "
            f"(got {MPI.COMM_WORLD.Get_size()} ranks)")
    return args.simulate_func(args)


def cmd_simulate_sparch(args) -> int:
    """Model C = X Y on SpArch; write the report JSON and print a one-line summary."""
    from distmm.sim.sparch import simulate
    from distmm.sim.sparch.simulate import make_config

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
    files.write_output(MPI.COMM_WORLD, args.report, "--report",
                       lambda path: write_json_atomic(path, report))
    c, d = report["counters"], report["derived"]
    emit({"event": "simulate", "simulator": "sparch", "report": args.report,
           "model_seconds": c["model_seconds"], "gflops": d["gflops"],
           "dram_bytes": c["dram_read_bytes"] + c["dram_write_bytes"],
           "energy_nj": c["energy_nj"], "partial_matrices": c["partial_matrices"],
           "merge_rounds": c["merge_rounds"], "prefetch_hit_rate": d["prefetch_hit_rate"]})
    return 0

