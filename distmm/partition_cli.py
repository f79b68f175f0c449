"""``distmm partition`` and ``distmm plan --sparse``: the partitioner and the pattern planner
on the command line (hooked into :mod:`distmm.cli` by :func:`add_parser`,
:func:`extend_plan`, :func:`add_partition_option` and :func:`permute_value`).

* ``distmm partition G.mtx -p 64 --out G.part.h5 [--method kahip|kahypar]`` partitions S's
  rows into p parts (:mod:`distmm.core.partition`) on one process, saves them, and prints one
  JSON line: the partitioner's seconds, SpMM's volume before and after, the parts' balance.
* ``--partition FILE`` (``distmm run`` and the commands sharing its options) reuses a saved
  partition with the sparsity-aware family; a file that does not fit S is refused on every
  rank before S moves.
* ``distmm plan --sparse G.mtx -p P --r R [--permute MODE | --partition FILE]`` orders S as a
  run would and prints one JSON line per candidate (family, strategy, c) with the busiest
  rank's words per FusedMM call and the fullest rank's memory
  (:func:`distmm.perf.sparse_planner.plan_sparse`); no MPI job of P ranks is needed.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

from distmm.core.partition import PARTITIONERS
from distmm.core.permute import PARTITION_MODES, PERMUTE_MODES
from distmm.errors import InputError, agree, require


def _read_pattern(path: str) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """S's entries (rows, cols, original coordinates) and shape, read by this process alone
    with distmm's own reader (the entries a run counts)."""
    from distmm import api

    share = api.as_coo_share(path, MPI.COMM_SELF)
    return share.rows, share.cols, share.shape


def _on_rank0(work):
    """Run ``work()`` on rank 0 only (a serial command under mpiexec); every rank raises
    the same InputError if it failed there."""
    comm = MPI.COMM_WORLD
    result, problem = None, None
    if comm.rank == 0:
        try:
            result = work()
        except InputError as exc:
            problem = str(exc)
    agree(comm, problem)
    return result


def add_parser(sub) -> None:
    """The ``partition`` subcommand."""
    pa = sub.add_parser("partition", help="partition S's rows into p parts of balanced work "
                                          "and low SpMM volume; save them for --partition")
    pa.add_argument("sparse", help="S as .mtx, .mtx.gz or .h5/.hdf5 (square)")
    pa.add_argument("-p", "--ranks", type=int, required=True, dest="p", help="parts (ranks)")
    pa.add_argument("--out", required=True, help="partition file to write (HDF5)")
    pa.add_argument("--method", default="kahip", choices=list(PARTITIONERS),
                    help="kahip (default: graph partitioner, fast) or kahypar (column-net "
                         "hypergraph, SpMM's volume itself, slower)")
    pa.add_argument("--imbalance", type=float, default=0.03,
                    help="allowed imbalance of the parts' nonzeros (default 0.03)")
    pa.add_argument("--seed", type=int, default=0)
    pa.set_defaults(func=cmd_partition)


def cmd_partition(args) -> int:
    import scipy.sparse as sp

    from distmm.core.partition import partition, save_partition, volume

    def work() -> dict:
        require(args.p >= 1, f"-p must be >= 1, got {args.p}")
        rows, cols, shape = _read_pattern(args.sparse)
        S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=shape)
        part = partition(S, args.p, args.method, args.imbalance, args.seed)
        save_partition(part, args.out)
        n = shape[0]
        weights = np.bincount(part.parts, weights=np.diff(sp.csr_matrix(S).indptr) + 1,
                              minlength=args.p)
        natural = np.arange(n) * args.p // max(n, 1)
        return {"event": "partition", "sparse": args.sparse, "out": args.out, "p": args.p,
                "n": n, "nnz": part.nnz, "method": part.method, "seconds": part.seconds,
                "volume": volume(S, part.parts), "natural_volume": volume(S, natural),
                "max_over_mean_work": float(weights.max() / weights.mean())}

    record = _on_rank0(work)
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(record, sort_keys=True), flush=True)
    return 0


def add_partition_option(p: argparse.ArgumentParser) -> None:
    """``--partition FILE`` for the commands that distribute S."""
    p.add_argument("--partition", metavar="FILE",
                   help="order S by a partition saved by `distmm partition` (the "
                        "15d-sparse-aware family; refused if it does not fit S)")


PERMUTE_CHOICES = list(PERMUTE_MODES + PARTITION_MODES)


def permute_value(args, mode: str):
    """What ``permute=`` gets: the loaded ``--partition FILE`` (every rank reads it; one that
    cannot stops all, collectively) or ``mode``."""
    path = getattr(args, "partition", None)
    if path is None:
        return mode
    from distmm.core.partition import load_partition

    part, problem = None, None
    try:
        part = load_partition(path)
    except InputError as exc:
        problem = str(exc)
    agree(MPI.COMM_WORLD, problem)
    return part


def extend_plan(pl: argparse.ArgumentParser, cmd_plan) -> None:
    """``plan --sparse FILE`` (with ``--permute``, ``--partition``, ``--seed``): --m and --nnz
    are then read from the file."""
    for action in pl._actions:
        if action.dest in ("m", "nnz"):
            action.required = False
    pl.add_argument("--sparse", help="plan for this matrix's pattern: every family's "
                                     "busiest-rank words and memory, one JSON line each")
    pl.add_argument("--permute", default="auto", choices=PERMUTE_CHOICES,
                    help="with --sparse: order S as a run with this --permute would")
    add_partition_option(pl)
    pl.add_argument("--seed", type=int, default=0, help="with --sparse: the run's --seed")

    def run(args) -> int:
        if args.sparse is None:
            problem = None if args.m is not None and args.nnz is not None else \
                "plan needs --m and --nnz, or --sparse FILE"
            agree(MPI.COMM_WORLD, problem)
            return cmd_plan(args)
        return cmd_plan_sparse(args)

    pl.set_defaults(func=run)


def cmd_plan_sparse(args) -> int:
    from distmm.perf.planner import Machine
    from distmm.perf.sparse_planner import plan_sparse

    permute = permute_value(args, args.permute)

    def work():
        require(args.p >= 1 and args.r >= 1, "plan needs -p >= 1 and --r >= 1")
        machine = Machine.load(args.machine) if args.machine else Machine()
        t0 = time.perf_counter()
        rows, cols, shape = _read_pattern(args.sparse)
        read_s = time.perf_counter() - t0
        found, info = plan_sparse(rows, cols, shape, args.r, args.p, machine, permute,
                                  args.seed, np.dtype(args.dtype))
        head = {"m": shape[0], "n": shape[1], "nnz": int(rows.size), "p": args.p,
                "r": args.r, "read_s": read_s, **info}
        return [{**head, **row} for row in found]

    lines = _on_rank0(work)
    if MPI.COMM_WORLD.rank == 0:
        for row in lines[:args.top or None]:
            print(json.dumps(row, sort_keys=True), flush=True)
    return 0


__all__ = ["PERMUTE_CHOICES", "add_parser", "add_partition_option", "cmd_partition",
           "cmd_plan_sparse", "extend_plan", "permute_value"]
