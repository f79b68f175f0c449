"""``distmm run`` (one operation on files: S as Matrix Market or HDF5, A and B as .npy, the
result to HDF5) and ``distmm bench`` (operations timed on a generated Erdos-Renyi matrix)."""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm.cli import files
from distmm.cli.common import (
    check_common,
    choose,
    common_options,
    emit,
    log_rank,
    machine_from_args,
    node_model_from_args,
    parse_limit,
    permute_mode,
    permute_name,
    refuse_oversized,
    relay_from_args,
    relay_option,
    resolve_limit,
)
from distmm.core.operations import CLI_OPS
from distmm.errors import Checks, InputError, require
from distmm.io.hdf5 import sparse_header
from distmm.io.npy import npy_header
from distmm.io.outputs import write_h5_atomic
from distmm.perf import bench
from distmm.perf.bench import kernel_summary, measure, phase_summary, random_blocks, timed
from distmm.runtime import signals


def add_parser(sub) -> None:
    """Register ``distmm run`` and ``distmm bench``."""
    run = sub.add_parser("run", help="run one operation on a Matrix Market matrix and .npy "
                                     "dense inputs; write the result to HDF5")
    run.add_argument("op", help=f"one of {', '.join(CLI_OPS)}")
    files.input_option(run, "--sparse", required=True,
                       help="S (m x n) as .mtx, .mtx.gz or .h5/.hdf5 (CSR or COO layout, see "
                            "docs/hardening.md)")
    files.input_option(run, "--a", help="A as .npy (m x r)")
    files.input_option(run, "--b", help="B as .npy (n x r)")
    files.output_option(run, "--out", required=True,
                        help="output HDF5 file (written atomically)")
    run.add_argument("--repeat", type=int, default=1,
                     help="run the operation this many times; report each (default 1)")
    common_options(run)
    relay_option(run)
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
    common_options(bench)
    relay_option(bench)
    bench.set_defaults(func=cmd_bench)


def _run_prechecks(args) -> dict:
    """Every check of ``distmm run`` that reads no data, on this rank alone (not collective).

    Arguments (the files themselves were checked by :func:`distmm.cli.files.check_files`);
    then the headers of S (Matrix Market) and of A and B (.npy), so that their sizes are compared
    and S's size is checked against this machine's memory before anything is read; then the
    --node-config and --machine files. Raises InputError; returns what later steps need.
    """
    require(args.op in CLI_OPS, f"unknown operation {args.op!r}; choose one of "
                                f"{', '.join(CLI_OPS)}")
    check_common(args)
    require(args.repeat >= 1, f"--repeat must be at least 1, got {args.repeat}")
    require(args.tune >= 1, f"--tune must be at least 1, got {args.tune}")
    need_a, need_b = bench.op_inputs(args.op)
    require(not need_a or args.a, f"{args.op} needs --a A.npy")
    require(not need_b or args.b, f"{args.op} needs --b B.npy")
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
    machine = machine_from_args(args) if args.algorithm == "auto" or args.machine else None
    # Ranks with files of their own must see the same sizes (agreed with the checks).
    sizes = {"S (rows, columns, entries)": (m, n, nnz), "r": r}
    return {"need_a": need_a, "need_b": need_b, "r": r, "kernel": kernel, "machine": machine,
            "same": sizes, "shape": (m, n, nnz), "limit": parse_limit(args)}


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
    """``distmm run`` (collective): checks, read, distribute, run ``--repeat`` times, write."""
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    pre: dict = {}
    with checks.guard():
        pre = _run_prechecks(args)
    checks.agree(same=pre.get("same"))  # one collective: every rank's checks passed
    from distmm.io.npy import load_dense_npy

    dtype = np.dtype(args.dtype)
    limit = resolve_limit(pre["limit"], comm)
    refuse_oversized(comm, limit, args.algorithm, args.c, [args.strategy], [args.op],
                      *pre["shape"], pre["r"], dtype, args.overlap, permute_name(args))
    # The values (NaN, infinities, float32 overflow): every rank scans what it sees.
    checks, A, B = Checks(comm), None, None
    with checks.guard():
        A = load_dense_npy(args.a, dtype=dtype) if pre["need_a"] else None
        B = load_dense_npy(args.b, dtype=dtype) if pre["need_b"] else None
    checks.agree()
    share = api.as_coo_share(args.sparse, comm)
    r = pre["r"]
    obj = choose(args, share, r, args.op, pre["machine"], limit)
    check_common(args)
    if obj is None:
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=r,
                             node_model=pre["kernel"], dtype=dtype,
                             permute=permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap,
                             relay=relay_from_args(args, pre["machine"], r))
    share = None  # S lives in the object now; the memory model counts no second copy
    A_loc = obj.scatter("a", A, root=None) if A is not None else None
    B_loc = obj.scatter("b", B, root=None) if B is not None else None
    nnz = int(comm.allreduce(obj.values.size))
    out = bench.result_buffer(obj, args.op, r)  # every repetition writes it, as a loop does
    for rep in range(args.repeat):
        signals.stop_if_requested(comm, "before repeat 1" if rep == 0 else
                                  f"after repeat {rep} of {args.repeat}")
        obj.stats.reset()
        result, seconds = timed(comm, lambda: bench.run_op(obj, args.op, A_loc, B_loc,
                                                         args.strategy, out))
        report = obj.stats.report()
        record = {"event": "run", "op": args.op, "strategy": args.strategy, "repeat": rep,
                  "seconds": seconds, "nnz": nnz, "r": r,
                  "gflops": bench.op_flops(args.op, nnz, r) / seconds / 1e9 if seconds else None,
                  **obj.stats.describe(), "phases": phase_summary(report) if report else None,
                  "kernels": kernel_summary(report) if report else None}
        emit(record)
        log_rank(args, obj, record)
    _check_result(obj, args.op, result, A_loc, B_loc)
    side = bench.op_output_side(args.op)
    if side is None:
        gathered = obj.gather_values(result)
        datasets = dict(zip(("row", "col", "val"), gathered, strict=True)) if gathered else {}
    else:
        full = obj.gather(side, result)
        datasets = {"result": full} if full is not None else {}
    attrs = {"op": args.op, "strategy": args.strategy, "config": obj.stats.describe(),
             "seconds": seconds, "report": report, "sparse": os.path.abspath(args.sparse)}
    files.write_output(comm, args.out, "--out",
                       lambda path: write_h5_atomic(path, datasets, attrs))
    obj.close()
    return 0


def _bench_prechecks(args) -> dict:
    """The checks of ``distmm bench`` on this rank alone (not collective); raises InputError."""
    check_common(args)
    ops = args.ops.split(",")
    for op in ops:
        require(op in CLI_OPS, f"unknown operation {op!r}; choose from {', '.join(CLI_OPS)}")
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
            "machine": machine_from_args(args) if args.algorithm == "auto" or args.machine
            else None,
            "limit": parse_limit(args)}


def cmd_bench(args) -> int:
    """``distmm bench`` (collective): one JSON line per (operation, strategy) measured."""
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    pre: dict = {}
    with checks.guard():
        pre = _bench_prechecks(args)
    checks.agree()
    ops, strategies = pre["ops"], pre["strategies"]
    from distmm.io.generate import erdos_renyi

    limit = resolve_limit(pre["limit"], comm)
    refuse_oversized(comm, limit, args.algorithm, args.c, strategies, ops, args.n, args.n,
                      args.n * args.nnz_per_row, args.r, np.dtype(args.dtype), args.overlap,
                      permute_name(args))
    share = erdos_renyi(args.n, args.n, args.nnz_per_row, args.seed, comm)
    obj = None
    if args.algorithm == "auto":
        obj = choose(args, share, args.r, ops[0], pre["machine"], limit)
        strategies = [args.strategy]
    if obj is None:
        obj = api.distribute(share, comm, algorithm=args.algorithm, c=args.c, r=args.r,
                             node_model=pre["kernel"], dtype=np.dtype(args.dtype),
                             permute=permute_mode(args), seed=args.seed, order=args.order,
                             overlap=args.overlap,
                             relay=relay_from_args(args, pre["machine"], args.r))
    share = None  # S lives in the object now; the memory model counts no second copy
    A_loc, B_loc = random_blocks(obj, args.r, args.seed)
    for op in ops:
        for strategy in (strategies if op.startswith("fusedmm") else ["-"]):
            record = {"event": "bench", "n": args.n,
                      **measure(obj, op, A_loc, B_loc, args.r, strategy, args.repeat)}
            emit(record)
            log_rank(args, obj, record)
    obj.close()
    return 0


