"""What the ``distmm`` commands share: the parser class, the common options, JSON Lines output,
per-rank logs, the node model, the memory limit and ``--algorithm auto``.

This module is public to the command modules of :mod:`distmm.cli` (and to a new command): a
command imports from here and from :mod:`distmm.cli.files` (its files), never from another
command's module. Nothing here imports a command module, so no import cycle can form.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm.cli import files
from distmm.core.memory import available_bytes, parse_memory_limit
from distmm.core.permute import PARTITION_MODES, PERMUTE_MODES
from distmm.core.relay_rule import RELAY_CHOICES, relay_rule
from distmm.errors import Checks, InputError, agree, require
from distmm.io.outputs import read_json_object
from distmm.kernels import NODE_MODELS, make_node_model
from distmm.perf.planner import Machine, auto_candidates, memory_problem
from distmm.perf.sparse_planner import AWARE, partitioner_fit, plan_distributed
from distmm.perf.tuning import tune, tune_events

__all__ = ["PERMUTE_CHOICES", "Parser", "UsageError", "check_common", "choose",
           "common_options", "emit", "job_options", "json_default", "log_rank",
           "machine_from_args", "memory_limit_option", "node_model_from_args", "parse_limit",
           "permute_mode", "permute_name", "permute_options", "refuse_oversized",
           "relay_from_args", "relay_option", "resolve_limit"]


class UsageError(Exception):
    """A command-line usage error found by one rank's parser (agreed before it is reported)."""

    def __init__(self, usage: str, message: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse that prints only on rank 0 and raises :class:`UsageError` instead of exiting,
    so that the ranks can agree on a usage error before every one of them exits."""

    def _print_message(self, message, file=None):
        if MPI.COMM_WORLD.Get_rank() == 0:
            super()._print_message(message, file)

    def error(self, message):
        raise UsageError(self.format_usage(), message)


def common_options(p: argparse.ArgumentParser) -> None:
    """The options of the commands that distribute S (run, bench, als): family, grid, node
    model, permutation, ``--log-dir``, ``--memory-limit`` and :func:`job_options`."""
    p.add_argument("--algorithm", default="15d-dense-shift",
                   help=f"algorithm family: {', '.join(api.ALGORITHMS)}, or auto (the planner "
                        "picks algorithm, strategy and c; -c and --strategy are then ignored) "
                        "(default %(default)s)")
    files.input_option(p, "--machine", help="machine file for --algorithm auto "
                                            "(distmm calibrate)")
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
    files.input_option(p, "--node-config", metavar="FILE",
                       help="JSON object of the node model's options (e.g. tile sizes, "
                            "simulator parameters); every rank reads it")
    p.add_argument("--order", default="fiber", choices=["fiber", "layer"],
                   help="rank order: fiber- or layer-contiguous world ranks (default fiber)")
    permute_options(p)
    p.add_argument("--no-permute", action="store_true", help="same as --permute none")
    p.add_argument("--seed", type=int, default=0, help="seed of the permutation/generator")
    p.add_argument("--overlap", action="store_true",
                   help="overlap each propagation shift with the local kernel")
    files.log_dir_option(p)
    memory_limit_option(p, "auto", "refuse a job whose modelled memory per rank exceeds this "
                                   "before reading any data")
    job_options(p)


def memory_limit_option(p: argparse.ArgumentParser, default: str | None, what: str) -> None:
    """Add ``--memory-limit`` (bytes, auto or none; see :func:`parse_limit`)."""
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
    watchdog, :mod:`distmm.runtime.watchdog`), and stopping at safe points on SIGTERM and SIGINT
    (:mod:`distmm.runtime.signals`), which such a command supports."""
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                   help="abort the whole job (exit status 124) with a message naming the "
                        "phase and the ranks that did not arrive when a collective waits "
                        "longer than this (default: no limit)")
    p.set_defaults(safe_points=True)


def json_default(o):
    """``json.dumps``'s ``default`` for numpy scalars and arrays."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


def emit(record: dict, comm: MPI.Comm | None = None) -> None:
    """Print ``record`` as one JSON line on rank 0's stdout (not collective)."""
    if (comm or MPI.COMM_WORLD).Get_rank() == 0:
        print(json.dumps(record, sort_keys=True, default=json_default), flush=True)


def log_rank(args, obj, record: dict) -> None:
    """Append this rank's own counters to its ``--log-dir`` file (not collective; the
    directory was checked and created before the work, :func:`distmm.cli.files.check_files`).
    """
    if not getattr(args, "log_dir", None):
        return
    line = {"rank": obj.rank, **{k: record[k] for k in ("event", "op", "strategy")
                                 if k in record},
            "comm": obj.stats.as_dict(), "kernel": obj.kernel.stats.as_dict()}
    path = os.path.join(args.log_dir, f"rank-{obj.rank}.jsonl")
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(line, sort_keys=True, default=json_default) + "\n")
    except OSError as exc:  # a log is a side record: a full disk must not end the job late
        files.warn_once(f"--log-dir: cannot append to {path} ({files.reason(exc)}); "
                        "the run goes on without its per-rank log")


PERMUTE_CHOICES = list(PERMUTE_MODES + PARTITION_MODES)


def permute_options(p: argparse.ArgumentParser) -> None:
    """Add ``--permute MODE`` and ``--partition FILE`` (the order S is placed in)."""
    p.add_argument("--permute", default="auto", choices=PERMUTE_CHOICES,
                   help="load balance: 'blocks' assigns rows to blocks at random and keeps "
                        "their natural order inside each block; 'random' permutes uniformly; "
                        "'auto' (default) is 'none' on one rank, 'blocks' otherwise; "
                        "'kahip', 'kahypar': a graph partition (15d-sparse-aware only)")
    files.input_option(p, "--partition", metavar="FILE",
                       help="order S by a partition saved by `distmm partition` (the "
                            "15d-sparse-aware family; refused if it does not fit S)")


def permute_mode(args):
    """What ``permute=`` gets: the partition loaded from ``--partition FILE`` (every rank reads
    it; one that cannot stops all, collectively), else the mode the options ask for
    (--no-permute wins). Collective over COMM_WORLD when ``--partition`` is given."""
    planned = getattr(args, "planned_partition", None)  # --algorithm auto's, see choose
    if planned is not None:
        return planned
    path = getattr(args, "partition", None)
    if path is None:
        return "none" if getattr(args, "no_permute", False) else args.permute
    from distmm.core.partition import load_partition

    checks, part = Checks(MPI.COMM_WORLD), None
    with checks.guard():
        part = load_partition(path)
    checks.agree()
    return part


def check_common(args) -> None:
    """Check --algorithm, --strategy and -c on this rank (not collective; same everywhere)."""
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
    require(getattr(args, "relay", None) is None or "relay" in vars(cls),
            f"--relay applies only to the 15d-sparse-aware family's exchange, not to "
            f"{args.algorithm}")


def relay_option(p: argparse.ArgumentParser) -> None:
    """Add ``--relay auto|on|off`` (the 15d-sparse-aware family's relay tree)."""
    p.add_argument("--relay", default=None, choices=list(RELAY_CHOICES),
                   help="15d-sparse-aware only: relay rows many ranks need through some of "
                        "them; auto (the default) where it pays: by the modelled time with a "
                        "calibrated --machine, else where it saves 25%% of the busiest rank's "
                        "rows; on: wherever it saves any; off: never")


def relay_from_args(args, machine, r: int | None, algorithm: str | None = None):
    """distribute's ``relay=`` from ``--relay`` and ``--machine`` for ``algorithm`` (default
    ``--algorithm``): None (the family's default) for a family without the relay, or where
    neither is given; else :func:`distmm.core.relay_rule.relay_rule` (by modelled time with a
    calibrated machine and the width r). Not collective."""
    cls = api.ALGORITHMS.get(algorithm or args.algorithm)
    choice = getattr(args, "relay", None)
    if cls is None or "relay" not in vars(cls):
        return None
    if choice is None and getattr(machine, "source", "defaults") == "defaults":
        return None
    return relay_rule(choice or "auto", machine, r)


def node_model_from_args(args):
    """The node model named by --node-model, configured by --node-config (not collective: a
    rank that cannot read the file raises InputError; callers agree on it)."""
    options = (read_json_object(args.node_config, "--node-config")
               if getattr(args, "node_config", None) else {})
    return make_node_model(args.node_model, **options)


def machine_from_args(args) -> Machine:
    """The planner's machine: --machine FILE or the built-in one (not collective)."""
    return Machine.load(args.machine) if args.machine else Machine()


def parse_limit(args) -> str | int | None:
    """--memory-limit checked on this rank (not collective): None (none), "auto" or bytes."""
    text = getattr(args, "memory_limit", None)
    if text is None or text.strip().lower() == "none":
        return None
    limit = parse_memory_limit(text)
    return "auto" if limit is None else limit


def resolve_limit(parsed: str | int | None, comm: MPI.Comm) -> int | None:
    """Bytes per rank from :func:`parse_limit` ("auto": :func:`distmm.core.memory.available_bytes`,
    collective over ``comm``; every rank must call it with the same ``parsed``)."""
    return available_bytes(comm) if parsed == "auto" else parsed


def permute_name(args) -> str:
    """The order the options ask for, by name, without reading a ``--partition`` file
    ("partition" then); not collective (:func:`permute_mode` gives what distribute gets)."""
    if getattr(args, "partition", None) is not None:
        return "partition"
    return "none" if getattr(args, "no_permute", False) else args.permute


def refuse_oversized(comm: MPI.Comm, limit: int | None, algorithm: str, c: int,
                     strategies: list[str], ops: list[str], m: int, n: int, nnz: int,
                     r: int, dtype, overlap: bool, permute: str = "auto") -> None:
    """Collective: the same InputError on every rank when the memory model of any (op,
    strategy) to run exceeds ``limit`` bytes per rank, naming the c or p that would fit, or
    where rank 0's partitioning of S at distribute (``permute``, :func:`permute_name`) is
    what does not fit, its share and the ways around it."""
    msg = None
    if limit is not None and algorithm == "auto":  # the planner's partitioning, by name
        try:
            partitioner_fit(permute, m, n, nnz, comm.Get_size(), limit)
        except InputError as err:
            msg = str(err)
    if limit is not None and algorithm != "auto":
        p = comm.Get_size()
        for op in ops:
            for strategy in (strategies if op.startswith("fusedmm") else strategies[-1:]):
                msg = msg or memory_problem(algorithm, strategy, m, n, nnz, r, p, c, limit,
                                            dtype, overlap, op.replace("-", "_"), permute)
    agree(comm, msg)


def choose(args, share, r: int, op: str, machine: Machine, limit: int | None = None):
    """Resolve --algorithm auto: the planner's pick, or with --tune K > 1 the fastest of its
    K best measured on this data (collective; every rank picks the same). Returns S
    distributed for the pick when tuning built it, else None."""
    if args.algorithm != "auto":
        return None
    comm = MPI.COMM_WORLD
    m, n = share.shape
    nnz = int(comm.allreduce(share.nnz))
    families = auto_candidates(args.overlap)
    # the sparsity-aware family is priced from S's pattern in the order a run would give it
    rows, partition = plan_distributed(share, comm, r, machine, families,
                                       dtype=np.dtype(args.dtype), overlap=args.overlap,
                                       memory_limit=limit, permute=permute_mode(args),
                                       seed=args.seed)
    best = rows[0]
    emit({"event": "plan", "m": m, "n": n, "nnz": nnz, "r": r, **best,
          "machine": machine.as_dict()})
    obj = None
    if args.tune > 1:
        # the sparsity-aware candidates with the run's --relay and the order they were
        # priced in where the planner fixed it (what is timed is what will run)
        aware = {"relay": relay_from_args(args, machine, r, AWARE),
                 "permute": "blocks" if "left_out" in best else partition}
        aware = {key: value for key, value in aware.items() if value is not None}
        result = tune(share, comm, r, args.tune, machine, op=op, algorithms=families,
                      node_model=node_model_from_args(args), dtype=np.dtype(args.dtype),
                      permute=permute_mode(args), seed=args.seed, order=args.order,
                      overlap=args.overlap, memory_limit=limit, rows=rows,
                      family_kwargs={AWARE: aware})
        for event in tune_events(result):
            emit(event)
        best, obj = result.best, result.obj
    args.algorithm, args.strategy, args.c = best["algorithm"], best["strategy"], best["c"]
    if "relay" not in vars(api.ALGORITHMS[args.algorithm]):
        args.relay = None  # --relay concerns the sparsity-aware family only
    if obj is None and partition is not None:  # the sparsity-aware pick, ordered by default
        args.planned_partition = partition  # the planner's partition: not made twice
    return obj

