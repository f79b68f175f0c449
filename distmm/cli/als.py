"""``distmm als``: fit user and item factors to a ratings file with distributed ALS.

Prints one JSON line per epoch on rank 0's stdout (train and test RMSE, seconds, and the
seconds split into FusedMM communication, FusedMM compute and the rest of the application), a
one-line progress report per epoch on stderr, and writes the factors (original user and item
order) to ``--out`` atomically. ``--checkpoint FILE --checkpoint-every K`` saves the state every
K epochs; ``--resume`` continues from that file (written at any p, family or c).
"""

from __future__ import annotations

import argparse
import sys

from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
from distmm.apps.als import ALSResult, auto_choice, fit
from distmm.apps.als_io import ratings_header, save_factors
from distmm.apps.als_memory import als_memory_problem
from distmm.cli import files
from distmm.cli.common import (
    common_options,
    emit,
    log_rank,
    machine_from_args,
    node_model_from_args,
    parse_limit,
    permute_mode,
    permute_name,
    resolve_limit,
)
from distmm.errors import InputError, agree, require


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``als`` command to ``distmm``'s sub-parsers; returns it."""
    p = subparsers.add_parser(
        "als", help="alternating least squares (collaborative filtering) on distributed "
                    "FusedMM: fit factors to a ratings file")
    files.input_option(p, "--ratings", required=True,
                   help="ratings users x items: .mtx[.gz] (user, item, rating; 1-based) or "
                        ".h5 (datasets row, col, rating, 0-based; attribute shape)")
    files.input_option(p, "--test", help="held-out ratings file (same forms); instead of "
                                  "--test-fraction")
    p.add_argument("--test-fraction", type=float, default=0.0,
                   help="hold out this fraction of the ratings, by a hash of (user, item) "
                        "and --seed (default 0)")
    p.add_argument("--rank", type=int, default=32, help="factor width r (default 32)")
    p.add_argument("--lambda", type=float, default=0.1, dest="lam",
                   help="regularisation lambda (default 0.1)")
    p.add_argument("--weighted", action="store_true",
                   help="weight each row's lambda by its number of ratings (Zhou et al.)")
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--cg-iters", type=int, default=3,
                   help="CG iterations per half-step (default 3)")
    p.add_argument("--cg-tol", type=float, default=0.0,
                   help="stop a half-step early once every row's relative residual is below "
                        "this (default 0: always --cg-iters)")
    files.output_option(p, "--out", help="factors file (HDF5: A, B in original order), written "
                                 "atomically at the end")
    files.output_option(p, "--checkpoint", help="checkpoint file (HDF5, same format as --out)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="write --checkpoint after every K-th epoch (default 0: never)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    common_options(p)
    p.set_defaults(dtype="float64", tune=1, func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Handle ``distmm als`` (collective over COMM_WORLD); returns the exit status. Bad input
    raises :class:`distmm.errors.InputError` on every rank before any file is written."""
    comm = MPI.COMM_WORLD
    require(args.tune == 1, "distmm als asks the planner once for --algorithm auto; "
                            "--tune is not supported")
    machine = machine_from_args(args) if args.machine else None
    algorithm, strategy, c, limit = refuse_oversized(args, comm, machine)

    def report(record: dict, result: ALSResult) -> None:
        emit({"event": "als-epoch", **record})
        log_rank(args, result.obj, {"event": "als-epoch"})
        if comm.Get_rank() == 0:
            test = ("-" if record["test_rmse"] is None else f"{record['test_rmse']:.4f}")
            print(f"distmm als: epoch {record['epoch']}/{args.epochs} train RMSE "
                  f"{record['train_rmse']:.4f} test RMSE {test} {record['seconds']:.3f} s "
                  f"(FusedMM comm {record['fusedmm_comm_seconds']:.3f} s, compute "
                  f"{record['fusedmm_compute_seconds']:.3f} s, other "
                  f"{record['other_seconds']:.3f} s)", file=sys.stderr, flush=True)

    result = fit(args.ratings, comm, rank=args.rank, lam=args.lam, epochs=args.epochs,
                 cg_iters=args.cg_iters, cg_tol=args.cg_tol, weighted=args.weighted,
                 test_fraction=args.test_fraction, seed=args.seed, algorithm=algorithm,
                 c=c, strategy=strategy, node_model=node_model_from_args(args),
                 dtype=args.dtype, permute=permute_mode(args), order=args.order,
                 overlap=args.overlap, test=args.test, machine=machine, callback=report,
                 checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                 resume=args.resume, memory_limit=limit)
    if args.out:
        save_factors(args.out, result, len(result.history))
    last = result.history[-1] if result.history else {}
    emit({"event": "als-done", "out": args.out, "epochs": len(result.history),
           "train_rmse": last.get("train_rmse"), "test_rmse": last.get("test_rmse"),
           **result.obj.stats.describe(), "strategy": result.config.strategy,
           "rank": result.config.rank})
    result.close()
    return 0


def refuse_oversized(args: argparse.Namespace, comm: MPI.Comm,
                     machine=None) -> tuple[str, str | None, int, int | None]:
    """Collective: the same InputError on every rank when ALS's memory model
    (:mod:`distmm.apps.als_memory`) exceeds --memory-limit, from the ratings files' headers,
    before any rating is read; it names the largest --rank that fits.

    Returns the (algorithm, strategy, c) to run, the arguments', and the limit in bytes per
    rank (None: none). For ``--algorithm auto`` the family checked here is the header
    planner's pick (:func:`distmm.apps.als.auto_choice`, the training ratings a
    --test-fraction leaves expected from the header's count); the run then asks the planner
    again with the ratings' pattern, the sparsity-aware family included, and checks its pick
    against the limit before any factor is made. Not checked for an unknown family (the ALS
    configuration's own check names it); a file whose header cannot be read is reported by
    the reading that follows."""
    limit = resolve_limit(parse_limit(args), comm)
    msg = None
    algorithm, strategy, c = args.algorithm, args.strategy, args.c
    known = algorithm in ALGORITHMS or algorithm == "auto"
    if known and args.c >= 1 and args.rank >= 1:
        try:
            m, n, nnz = ratings_header(args.ratings)
            held = ratings_header(args.test)[2] if args.test else round(nnz * args.test_fraction)
        except InputError:
            m = None
        train = None if m is None else nnz - (0 if args.test else held)
        checked = (algorithm, strategy, c)
        if m is not None and algorithm == "auto":
            checked = auto_choice(m, n, train, args.rank, comm.Get_size(), args.overlap,
                                  machine)
        if m is not None and limit is not None:
            msg = als_memory_problem(limit, checked[0],
                                     checked[1] or ALGORITHMS[checked[0]].strategies[-1], m, n,
                                     train, held, args.rank, comm.Get_size(), checked[2],
                                     args.dtype, args.overlap, permute_name(args))
    agree(comm, msg)
    return algorithm, strategy, c, limit
