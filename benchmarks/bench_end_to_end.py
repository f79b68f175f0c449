"""End-to-end speed of distmm's calls on real matrices beside PyTorch and scipy.

The tables in docs/performance.md come from this script.

Each library runs in processes of its own, so that no threading runtime slows another (numba's
and PyTorch's OpenMP pools compete when they share a process), and the variants take turns:
round 1 runs every variant once, round 2 again, and so on, so that each samples the same
moments of a shared machine. For every matrix (natural order), dtype, width r and operation a
worker times ``--calls`` calls after one warm-up and reports its best; the table keeps the best
over rounds. Below the summary, every case whose PyTorch / distmm ratio (best over best) misses
the project's PyTorch target (:data:`TORCH_TARGETS`, docs/performance.md) is listed with each
round's own ratio, the two libraries' best times within the same round: on a shared machine
one library's single fast round can decide a best-over-best cell.

Variants:

* ``distmm-p1``: ``mpiexec -n 1``, 2 numba threads (``--threads``), the public API as users call
  it: ``distmm.distribute`` (default options: 1.5D dense shifting, c = 1, the default
  permutation and checks) and typed blocks from ``S.dense``, results into ``out=`` buffers.
* ``distmm-p2``: the same at ``mpiexec -n 2``, one thread per rank.
* ``torch``: PyTorch's CPU ``torch.sparse.mm`` (SpMMA), ``torch.sparse.sampled_addmm`` times S's
  values (SDDMM) and the pair (FusedMMA), on a CSR tensor, ``--threads`` threads.
* ``scipy``: scipy's CSR ``S @ B`` (one thread) and a vectorised numpy SDDMM.
* ``run-p1``, ``run-p2`` (not run unless named in ``--variants``): the command line, as a user
  first tries it: ``mpiexec -n P distmm run OP`` with the matrix's file (the generated
  Erdos-Renyi one written as HDF5 first), the dense operands as ``.npy`` files and the
  result written to an HDF5 file; one job per dtype, r and operation, ``--calls`` + 1
  repetitions (``--repeat``), the first one a warm-up. ``distmm run`` passes no ``out=``
  buffer, so every repetition allocates its result. Its records carry the same split as
  ``distmm-p1``/``-p2`` (from the command's own JSON lines) but no memory figure, and a table
  of their own compares them with the API's calls.

Each distmm worker also times every case as a bound call (``S.bind(op, ..., out=out)``, the
same operands, right after the method's calls in the same process): records with
``"call": "bound"``, the variants ``distmm-p1-bound`` and ``distmm-p2-bound`` in the tables.

For distmm every call is split into the local kernels (phase ``compute``), each communication
phase, and the rest (the call's time minus those: checks, dispatch, buffers, copies). Each
case also reports each rank's memory for it (``peak_rss``): the peak resident set while its
timed calls run (Linux's VmHWM, reset after the warm-up call) above the worker's baseline (the
resident set after every kernel was loaded at every width, before S is placed; on rank 0 it
includes the whole matrix read by scipy). It covers S's blocks, A, B, the one result buffer
alive and what the calls keep or make, which is what the memory model's ``held`` + ``call``
bytes for the call predict (``model_bytes``, docs/memory.md), plus what the worker keeps alive
beyond the call's operands: A beside SpMMA (each width starts with ``S.release_buffers()``,
and the width's earlier results are let go, so nothing else is held); beside them, the bytes
of the rank's own data (``data_bytes``: S's values, A, B and the result). The tables show the
fullest rank's figure and the model. Where VmHWM cannot be reset (not Linux) the figure is
the worker's whole life.

Run from the repository root (it launches its own workers)::

    .venv/bin/python benchmarks/bench_end_to_end.py --jsonl e2e.jsonl --markdown e2e.md

A worker is this script with ``--worker NAME``; it prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.environ.get("DISTMM_DATA", os.path.join(ROOT, "..", "shared", "data"))
MATRICES = ("metis-mdual", "genes-pubmed", "movielens-100k-ratings", "cora-adjacency",
            "er-65536")
OPS = ("fusedmm_a", "spmm_a", "sddmm")
# The project's targets for PyTorch's time over distmm's at p = 1 (docs/performance.md): a
# FusedMMA call at least 1.5x PyTorch's SDDMM + SpMM pair, SpMMA and SDDMM at least as fast as
# PyTorch's calls.
TORCH_TARGETS = {"fusedmm_a": 1.5, "spmm_a": 1.0, "sddmm": 1.0}
VARIANTS = ("distmm-p1", "distmm-p2", "torch", "scipy")  # the default --variants
RUN_VARIANTS = ("run-p1", "run-p2")  # distmm run, on request: a job per case is slow
COMM_PHASES = ("replication", "propagation", "reduction", "values", "other")
BIN = os.path.dirname(sys.executable)  # the environment's mpiexec and distmm commands


# ----------------------------------------------------------------------------- inputs
def _matrix_path(name: str) -> str:
    """The file of a named matrix of ../shared/data (or ``name`` itself when it is a path);
    a generated matrix (``er-N``) has none: the path returned does not exist."""
    return name if os.path.exists(name) else os.path.join(DATA, name + ".mtx.gz")


def load_matrix(name: str):
    """The named matrix as scipy CSR (float64, duplicates summed), natural order."""
    import scipy.io
    import scipy.sparse as sp

    if name.startswith("er-"):
        n = int(name.split("-")[1])
        rng = np.random.default_rng(0)
        nnz = 32 * n
        rows = rng.integers(0, n, nnz)
        cols = rng.integers(0, n, nnz)
        S = sp.coo_matrix((rng.uniform(0.5, 1.5, nnz), (rows, cols)), shape=(n, n))
    else:
        with gzip.open(_matrix_path(name)) as fh:
            S = scipy.io.mmread(fh)
    S = S.tocsr().astype(np.float64)
    S.sum_duplicates()
    return S


def dense(rows: int, r: int, seed: int, dtype) -> np.ndarray:
    """A deterministic dense matrix (the same in every worker)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, r)) * 0.1).astype(dtype)


def best_of(fn, calls: int) -> float:
    fn()  # warm-up: JIT, S^T built on first use, the first call's full checks
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


# ----------------------------------------------------------------------------- workers
def _distmm_calls(S, A, B, outs) -> dict:
    return {"fusedmm_a": lambda: S.fusedmm_a(A, B, out=outs["fusedmm_a"]),
            "spmm_a": lambda: S.spmm_a(B, out=outs["spmm_a"]),
            "sddmm": lambda: S.sddmm(A, B, out=outs["sddmm"])}


def _bound_call(S, op: str, A, B, out):
    """``op`` as a bound call (``S.bind``) on the same operands as :func:`_distmm_calls`."""
    return S.bind(op, *((B,) if op == "spmm_a" else (A, B)), out=out)


def api_operands(S, r: int) -> tuple:
    """(A, B) of width r on the distributed S: typed blocks from ``S.dense`` (the same values
    at any p)."""
    import distmm

    return (S.dense("a", r, fill=distmm.hashed_normal(1, 0.1)),
            S.dense("b", r, fill=distmm.hashed_normal(2, 0.1)))


def api_out(S, op: str, r: int) -> np.ndarray:
    """The ``out=`` buffer of ``op`` at width r."""
    return np.empty_like(S.values) if op == "sddmm" else S.dense("a", r)


def api_case(S, r: int) -> tuple:
    """(A, B, outs, calls) of width r on the distributed S: :func:`api_operands`, an ``out=``
    buffer per operation, and each operation's call."""
    A, B = api_operands(S, r)
    outs = {op: api_out(S, op, r) for op in ("fusedmm_a", "spmm_a", "sddmm")}
    return A, B, outs, _distmm_calls(S, A, B, outs)


def warm_kernels(comm, dtypes, rs, ops) -> None:
    """Every operation at every dtype and width once on a small matrix of the same family and
    p, so that the kernels' machine code (loaded per width and dtype) is resident before the
    worker's memory baseline is taken. Collective."""
    import distmm
    from distmm.io.generate import erdos_renyi

    for dtype in dtypes:
        with distmm.distribute(erdos_renyi(64, 48, 3, 1, comm), comm, dtype=dtype) as T:
            for r in rs:
                A, B = api_operands(T, r)
                calls = _distmm_calls(T, A, B, {op: api_out(T, op, r) for op in ops})
                for op in ops:
                    calls[op]()


def best_split(comm, S, fn, calls: int, keys: tuple) -> tuple[float, np.ndarray]:
    """The best of ``calls`` calls of ``fn`` (each timed between barriers, the slowest rank's
    seconds) and that call's seconds in each of the phases ``keys`` (the slowest rank's each).
    Collective."""
    from mpi4py import MPI

    best, split = float("inf"), None
    for _ in range(calls):
        S.stats.reset()
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        mine = np.array([S.stats.seconds.get(k, 0.0) for k in keys])
        slowest = np.empty_like(mine)
        comm.Allreduce(mine, slowest, op=MPI.MAX)
        if dt < best:
            best, split = dt, slowest
    return best, split


def _torch_calls(torch, St, A, B) -> dict:
    m, n = St.shape
    vals, Bt = St.values(), B.t()

    def sddmm():
        R = torch.sparse.sampled_addmm(St, A, Bt, beta=0.0)
        return torch.sparse_csr_tensor(R.crow_indices(), R.col_indices(), R.values() * vals,
                                       size=(m, n))

    return {"spmm_a": lambda: torch.sparse.mm(St, B), "sddmm": sddmm,
            "fusedmm_a": lambda: torch.sparse.mm(sddmm(), B)}


def _scipy_calls(Sd, rows, A, B) -> dict:
    cols, vals = Sd.indices, Sd.data
    out = np.empty_like(vals)
    chunk = 1 << 18  # bounded temporaries: nonzeros x r gathered rows at a time

    def sddmm():
        for lo in range(0, vals.size, chunk):
            hi = min(lo + chunk, vals.size)
            np.einsum("ij,ij->i", A[rows[lo:hi]], B[cols[lo:hi]], out=out[lo:hi])
        return out * vals

    def fused():
        R = Sd.copy()
        R.data = sddmm()
        return R @ B

    return {"spmm_a": lambda: Sd @ B, "sddmm": sddmm, "fusedmm_a": fused}


def worker_distmm(args) -> None:
    """Runs under mpiexec: the public API as a user calls it (the process prepared before MPI,
    as the README's example does, so MPICH's single-copy messages are on where permitted)."""
    import distmm

    distmm.prepare_process()
    # isort: split
    from mpi4py import MPI

    from distmm.core.coo import CooShare
    from distmm.core.memory import current_rss, peak_rss, release_freed_memory, reset_peak_rss

    comm = MPI.COMM_WORLD
    S_global = load_matrix(args.matrix) if comm.rank == 0 else None
    warm_kernels(comm, args.dtypes, args.rs, args.ops)
    # the worker's baseline: interpreter, libraries, loaded kernels, rank 0's copy of the matrix
    release_freed_memory()
    base = current_rss()
    for dtype in args.dtypes:
        share = CooShare.from_scipy(S_global, comm, root=0)
        with distmm.distribute(share, comm, dtype=dtype) as S:
            del share
            for r in args.rs:
                # the last width's buffers are let go
                S.release_buffers()
                A, B = api_operands(S, r)
                for op in args.ops:
                    out = api_out(S, op, r)
                    fn = _distmm_calls(S, A, B, {op: out})[op]
                    fn()
                    release_freed_memory()
                    reset_peak_rss()
                    keys = ("compute",) + COMM_PHASES
                    best, phases = best_split(comm, S, fn, args.calls, keys)
                    # the resident set at the peak of the timed calls above the baseline: S's
                    # blocks, A, B, the result and whatever the calls keep or make
                    rss = comm.allreduce(peak_rss() - base, op=MPI.MAX)
                    data = comm.allreduce(S.values.nbytes * 3 + A.nbytes + B.nbytes
                                          + out.nbytes, op=MPI.MAX)
                    # alive beyond the call's model: A, where the call does not read it
                    extra = A.nbytes if op == "spmm_a" else 0
                    model = S.stats.memory_model(op, None, r)
                    model = comm.allreduce(model.held + sum(model.call.values()) + extra,
                                           op=MPI.MAX)
                    common = {"dtype": dtype, "r": r, "op": op,
                              "permute": S.stats.describe()["permute"],
                              "intranode": distmm.runtime.intranode.STATE}
                    if comm.rank == 0:
                        emit(dict(common, call="method", peak_rss=rss, data_bytes=data,
                                  model_bytes=model, **_split_record(best, phases, keys)))
                    # the same operation as a bound call, right after (same process)
                    bound = _bound_call(S, op, A, B, out)
                    bound()
                    best, phases = best_split(comm, S, bound, args.calls, keys)
                    if comm.rank == 0:
                        emit(dict(common, call="bound", **_split_record(best, phases, keys)))
                    del fn, bound, out
                del A, B


def _split_record(best: float, phases, keys: tuple) -> dict:
    """A call's seconds split into the kernels, the communication phases and the rest."""
    ph = dict(zip(keys, (float(x) for x in phases), strict=True))
    comm_s = sum(ph[k] for k in COMM_PHASES)
    return {"seconds": best, "compute": ph["compute"], "comm": comm_s,
            "rest": max(0.0, best - ph["compute"] - comm_s), "phases": ph}


def worker_torch(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    S = load_matrix(args.matrix)
    m, n = S.shape
    for dtype in args.dtypes:
        St = torch.sparse_csr_tensor(torch.from_numpy(S.indptr.astype(np.int64)),
                                     torch.from_numpy(S.indices.astype(np.int64)),
                                     torch.from_numpy(S.data.astype(dtype)), size=(m, n))
        for r in args.rs:
            A = torch.from_numpy(dense(m, r, 1, dtype))
            B = torch.from_numpy(dense(n, r, 2, dtype))
            calls = _torch_calls(torch, St, A, B)
            for op in args.ops:
                emit({"dtype": dtype, "r": r, "op": op,
                      "seconds": best_of(calls[op], args.calls), "peak_rss": peak_rss_bytes()})


def worker_scipy(args) -> None:
    S = load_matrix(args.matrix)
    m, n = S.shape
    rows = np.repeat(np.arange(m), np.diff(S.indptr))
    for dtype in args.dtypes:
        Sd = S.astype(dtype)
        for r in args.rs:
            calls = _scipy_calls(Sd, rows, dense(m, r, 1, dtype), dense(n, r, 2, dtype))
            for op in args.ops:
                emit({"dtype": dtype, "r": r, "op": op,
                      "seconds": best_of(calls[op], args.calls), "peak_rss": peak_rss_bytes()})


WORKERS = {"distmm": worker_distmm, "torch": worker_torch, "scipy": worker_scipy}


# ----------------------------------------------------------------------------- driver
def _rank_env(p: int, args) -> dict:
    """The environment of a distmm job of p ranks: the numba threads of ``--threads`` split
    between the ranks, the project's numba cache."""
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", os.path.join(ROOT, ".numba_cache"))
    threads = max(1, args.threads // p)
    env.update(NUMBA_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    # Waiting ranks yield their core only where ranks outnumber cores: with a core each,
    # yielding while polling adds hundreds of microseconds to every small message.
    if p > (os.cpu_count() or 1):
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"
    return env


def _run_record(lines: list[str], dtype: str, r: int, op: str) -> dict:
    """The best timed repetition of one ``distmm run`` job (its JSON lines; repetition 0 is
    the warm-up), split as the API worker splits a call."""
    reps = [rec for line in lines if line.startswith("{")
            if (rec := json.loads(line)).get("event") == "run" and rec["repeat"] > 0]
    if not reps:
        raise SystemExit(f"bench_end_to_end: distmm run {op} r={r} {dtype} printed no timed "
                         "repetition")
    rec = min(reps, key=lambda x: x["seconds"])
    ph = {k: v["seconds"] for k, v in (rec["phases"] or {}).items()}
    comm_s = sum(ph.get(k, 0.0) for k in COMM_PHASES)
    return {"dtype": dtype, "r": r, "op": op, "seconds": rec["seconds"],
            "compute": ph.get("compute", 0.0), "comm": comm_s,
            "rest": max(0.0, rec["seconds"] - ph.get("compute", 0.0) - comm_s),
            "phases": ph, "permute": rec["permute"]}


def launch_run(p: int, matrix: str, args) -> list[dict]:
    """``mpiexec -n p distmm run OP`` for every dtype, r and operation, on files written
    to a temporary folder (the dense operands the other workers make, and the Erdos-Renyi
    matrix as HDF5); one record each."""
    import tempfile

    import scipy.io

    from distmm.io.convert import write_csr_h5

    records = []
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as tmp:
        sparse = _matrix_path(matrix)
        if os.path.exists(sparse):  # the shape from the header: distmm run reads the file
            with gzip.open(sparse) as fh:
                m, n = scipy.io.mminfo(fh)[:2]
        else:  # generated: write it as a user would bring it
            S = load_matrix(matrix)
            m, n = S.shape
            sparse = os.path.join(tmp, matrix + ".h5")
            write_csr_h5(sparse, S)
        a_path, b_path = os.path.join(tmp, "A.npy"), os.path.join(tmp, "B.npy")
        for dtype in args.dtypes:
            for r in args.rs:
                np.save(a_path, dense(m, r, 1, dtype))
                np.save(b_path, dense(n, r, 2, dtype))
                for op in args.ops:
                    cmd = [os.path.join(BIN, "mpiexec"), "-n", str(p),
                           os.path.join(BIN, "distmm"), "run", op.replace("_", "-"),
                           "--sparse", sparse, "--b", b_path, "--dtype", dtype,
                           "--repeat", str(args.calls + 1),
                           "--out", os.path.join(tmp, "result.h5")]
                    if op != "spmm_a":
                        cmd += ["--a", a_path]
                    res = subprocess.run(cmd, env=_rank_env(p, args), capture_output=True,
                                         text=True, timeout=args.timeout)
                    if res.returncode != 0:
                        raise SystemExit(f"bench_end_to_end: {' '.join(cmd)} failed:\n"
                                         f"{res.stderr}")
                    records.append(_run_record(res.stdout.splitlines(), dtype, r, op))
    return records


def launch(variant: str, matrix: str, args) -> list[dict]:
    """Run one worker process (or mpiexec job) and collect its records."""
    if variant in RUN_VARIANTS:
        return launch_run(int(variant.split("-p")[1]), matrix, args)
    common = ["--matrix", matrix, "--rs", ",".join(map(str, args.rs)), "--dtypes",
              ",".join(args.dtypes), "--ops", ",".join(args.ops), "--calls", str(args.calls)]
    if variant.startswith("distmm"):
        p = int(variant.split("-p")[1])
        env = _rank_env(p, args)
        # under mpi4py's runner, an exception on one rank aborts the job instead of leaving
        # the other ranks waiting in a collective until the timeout
        cmd = [os.path.join(BIN, "mpiexec"), "-n", str(p), sys.executable, "-m", "mpi4py",
               __file__, "--worker", "distmm"] + common
    else:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        cmd = [sys.executable, __file__, "--worker", variant, "--threads",
               str(args.threads)] + common
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if res.returncode != 0:
        raise SystemExit(f"bench_end_to_end: {variant} on {matrix} failed:\n{res.stderr}")
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def machine() -> dict:
    import numba
    import scipy

    info = {"host": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "scipy": scipy.__version__, "numba": numba.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    return info


def _secs(get: dict, v: str) -> str:
    return f"{get[v]['seconds']:.4g}" if get.get(v) else "-"


def _split(get: dict, v: str) -> str:
    rec = get.get(v)
    if not rec:
        return "-"
    t = rec["seconds"]
    return f"{rec['compute'] / t:.0%} / {rec['comm'] / t:.0%} / {rec['rest'] / t:.0%}"


def _memory(get: dict, v: str) -> str:
    rec = get.get(v)
    if not rec or "model_bytes" not in rec:
        return "-"
    return f"{rec['peak_rss'] / 2**20:.0f} / {rec['model_bytes'] / 2**20:.0f}"


def _ratio(get: dict, v: str) -> str:
    if get.get(v) and get.get("distmm-p1"):
        return f"{get[v]['seconds'] / get['distmm-p1']['seconds']:.2f}x"
    return "-"


def markdown(best: dict, args) -> str:
    """One table per matrix and dtype: times and ratios per (r, op)."""
    lines = []
    for matrix in args.matrices:
        for dtype in args.dtypes:
            lines += [f"\n**{matrix}, {dtype}** (best seconds over rounds; distmm's split: "
                      "kernel / communication / rest, as a share of the call; memory: the "
                      "fullest rank's peak resident set in the timed calls above the worker's "
                      "baseline / the memory model's held + call bytes and the worker's other "
                      "live buffers, MiB)\n",
                      "| op | r | distmm p=1 (s) | split p=1 | distmm p=2 (s) | split p=2 | "
                      "torch (s) | scipy (s) | torch / distmm p=1 | scipy / distmm p=1 | "
                      "memory p=1 | memory p=2 |",
                      "|---|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
            for op in args.ops:
                for r in args.rs:
                    get = {v: best.get((v, matrix, dtype, r, op)) for v in args.variants}

                    lines.append(
                        f"| {op} | {r} | {_secs(get, 'distmm-p1')} | "
                        f"{_split(get, 'distmm-p1')} | {_secs(get, 'distmm-p2')} | "
                        f"{_split(get, 'distmm-p2')} | {_secs(get, 'torch')} | "
                        f"{_secs(get, 'scipy')} | {_ratio(get, 'torch')} | "
                        f"{_ratio(get, 'scipy')} | {_memory(get, 'distmm-p1')} | "
                        f"{_memory(get, 'distmm-p2')} |")
    return "\n".join(lines) + "\n"


def _pair_table(best: dict, args, ps: list[str], names: tuple[str, str, str],
                variants: tuple[str, str], rest) -> str:
    """Per matrix, dtype, operation and r, for each p: the best time of a base variant and of
    another (``variants``, formatted with p), other / base, and ``rest(base, other)``; column
    names from ``names`` (base, other, the rest column)."""
    head = ["matrix", "dtype", "op", "r"]
    for p in ps:
        head += [f"{names[0]} p={p} (s)", f"{names[1]} p={p} (s)",
                 f"{names[1]} / {names[0]} p={p}", f"{names[2]} p={p}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for matrix in args.matrices:
        for dtype in args.dtypes:
            for op in args.ops:
                for r in args.rs:
                    cells = [matrix, dtype, op, str(r)]
                    for p in ps:
                        base, other = (best.get((v.format(p=p), matrix, dtype, r, op))
                                       for v in variants)
                        cells += [f"{base['seconds']:.4g}" if base else "-",
                                  f"{other['seconds']:.4g}" if other else "-",
                                  f"{other['seconds'] / base['seconds']:.2f}x"
                                  if base and other else "-",
                                  rest(base, other)]
                    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _rest(rec) -> str:
    return f"{rec['rest'] / rec['seconds']:.0%}"


def run_table(best: dict, args) -> str:
    """``distmm run`` against the API's calls: per matrix, dtype, operation and r, each p's
    best time of both, run / API, and the share of run's call outside its kernels and
    messages."""
    ps = [v.split("-p")[1] for v in RUN_VARIANTS if v in args.variants]
    return _pair_table(best, args, ps, ("API", "run", "run rest"), ("distmm-p{p}", "run-p{p}"),
                       lambda api, run: _rest(run) if run else "-")


def bound_table(best: dict, args) -> str:
    """``S.bind``'s bound calls against the method calls: per matrix, dtype, operation and r,
    each p's best time of both, bound / method, and each one's rest."""
    ps = [v.split("-p")[1] for v in VARIANTS if v.startswith("distmm") and v in args.variants]
    return _pair_table(best, args, ps, ("method", "bound", "rest method / bound"),
                       ("distmm-p{p}", "distmm-p{p}-bound"),
                       lambda met, bnd: f"{_rest(met)} / {_rest(bnd)}" if met and bnd else "-")


def _range(xs: list[float], fmt: str, unit: str) -> str:
    """'lo-hi' of the values that exist, with ``unit`` after it ("-" when none)."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = format(min(xs), fmt), format(max(xs), fmt)
    return (lo if lo == hi else f"{lo}-{hi}") + unit


def summary(best: dict, args) -> str:
    """One row per matrix and op: torch's time over distmm's at p = 1 for each r (float32)
    and its range over r in float64, scipy's over r and dtypes, distmm's time at p = 2 over
    its time at p = 1, and the share of a call outside its kernels and messages ("rest") at
    p = 1 and p = 2 over r and dtypes."""
    def rec(v, matrix, dtype, r, op):
        return best.get((v, matrix, dtype, r, op))

    def ratio(v, matrix, dtype, r, op, base="distmm-p1"):
        a, b = rec(v, matrix, dtype, r, op), rec(base, matrix, dtype, r, op)
        return a["seconds"] / b["seconds"] if a and b else None

    def rest(v, matrix, op):
        return [x["rest"] / x["seconds"] for dt in args.dtypes for r in args.rs
                if (x := rec(v, matrix, dt, r, op))]

    head = ["matrix", "op"] + [f"torch/distmm r={r}" for r in args.rs] + [
        "torch/distmm float64", "scipy/distmm", "time p=2 / p=1", "rest p=1", "rest p=2",
        "rest p=1 bound", "rest p=2 bound"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for matrix in args.matrices:
        for op in args.ops:
            f32 = [ratio("torch", matrix, "float32", r, op) for r in args.rs]
            cells = [matrix, op] + ["-" if x is None else f"{x:.2f}x" for x in f32] + [
                _range([ratio("torch", matrix, "float64", r, op) for r in args.rs], ".2f",
                       "x"),
                _range([ratio("scipy", matrix, dt, r, op) for dt in args.dtypes
                        for r in args.rs], ".1f", "x"),
                _range([ratio("distmm-p2", matrix, dt, r, op) for dt in args.dtypes
                        for r in args.rs], ".2f", "x"),
                _range([100 * x for x in rest("distmm-p1", matrix, op)], ".0f", "%"),
                _range([100 * x for x in rest("distmm-p2", matrix, op)], ".0f", "%"),
                _range([100 * x for x in rest("distmm-p1-bound", matrix, op)], ".0f", "%"),
                _range([100 * x for x in rest("distmm-p2-bound", matrix, op)], ".0f", "%")]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def short_cells(best: dict, rounds: dict, args) -> str:
    """The cases where PyTorch's best time over distmm's best at p = 1 is below its target
    (:data:`TORCH_TARGETS`), one line each with every round's own ratio (PyTorch's best time
    over distmm's in the same round), so that a cell decided by one library's single fast
    round shows as such. ``rounds`` is :func:`keep_round`'s."""
    lines = []
    for matrix in args.matrices:
        for dtype in args.dtypes:
            for op in args.ops:
                for r in args.rs:
                    case = (matrix, dtype, r, op)
                    ours, theirs = best.get(("distmm-p1", *case)), best.get(("torch", *case))
                    if not (ours and theirs):
                        continue
                    ratio = theirs["seconds"] / ours["seconds"]
                    if ratio >= TORCH_TARGETS[op]:
                        continue
                    mine, other = rounds.get(("distmm-p1", *case), {}), rounds.get(
                        ("torch", *case), {})
                    own = [other[k] / mine[k] for k in sorted(set(mine) & set(other))]
                    lines.append(f"- {matrix}, {dtype}, {op}, r = {r}: {ratio:.2f}x (target "
                                 f"{TORCH_TARGETS[op]:g}x); each round's own: "
                                 + ", ".join(f"{x:.2f}x" for x in own))
    return "\n".join(lines) + "\n" if lines else "None: every case meets its target.\n"


def case_key(rec: dict) -> tuple:
    """The case a record measures: (variant, matrix, dtype, r, op), the key of the tables."""
    return rec["variant"], rec["matrix"], rec["dtype"], rec["r"], rec["op"]


def keep_round(rounds: dict, rec: dict, round_id: tuple) -> None:
    """Keep ``rec``'s seconds in ``rounds`` if it is its case's fastest in round
    ``round_id`` (a round of one record file: (file, round))."""
    per = rounds.setdefault(case_key(rec), {})
    if round_id not in per or rec["seconds"] < per[round_id]:
        per[round_id] = rec["seconds"]


def keep_best(best: dict, rec: dict) -> None:
    """Keep ``rec`` in ``best`` if it is the fastest record of its case so far."""
    key = case_key(rec)
    if key not in best or rec["seconds"] < best[key]["seconds"]:
        best[key] = rec


def csv_list(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--matrix", help=argparse.SUPPRESS)
    ap.add_argument("--matrices", type=csv_list(str), default=list(MATRICES))
    ap.add_argument("--variants", type=csv_list(str), default=list(VARIANTS))
    ap.add_argument("--rs", type=csv_list(int), default=[16, 32, 64, 128, 256])
    ap.add_argument("--dtypes", type=csv_list(str), default=["float32", "float64"])
    ap.add_argument("--ops", type=csv_list(str), default=list(OPS))
    ap.add_argument("--calls", type=int, default=5, help="timed calls per worker (best kept)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--jsonl", help="append every record here")
    ap.add_argument("--markdown", help="write the tables here")
    ap.add_argument("--from-jsonl", type=csv_list(str), default=[],
                    help="measure nothing: build the tables from these record files (the "
                         "best of each case over all of them)")
    args = ap.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args)
        return 0
    for v in args.variants:
        if v not in VARIANTS + RUN_VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from "
                     f"{', '.join(VARIANTS + RUN_VARIANTS)}")
    for op in args.ops:
        if op not in OPS:
            ap.error(f"unknown op {op!r}; choose from {', '.join(OPS)}")
    if "torch" in args.variants:
        try:
            import torch  # noqa: F401
        except ImportError:
            ap.error("the torch variant needs PyTorch: pip install distmm[torch] "
                     "(or leave it out with --variants)")
    info = machine()
    best: dict = {}
    rounds: dict = {}
    for k, path in enumerate(args.from_jsonl):
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                keep_best(best, rec)
                keep_round(rounds, rec, (k, rec["round"]))
                info = rec["machine"]
    with open(args.jsonl, "a") if args.jsonl else contextlib.nullcontext() as out:
        for rnd in range(0 if args.from_jsonl else args.rounds):
            for matrix in args.matrices:
                for variant in args.variants:
                    t0 = time.perf_counter()
                    for rec in launch(variant, matrix, args):
                        # a bound call's records are a variant of their own ("distmm-p1-bound")
                        name = variant + ("-bound" if rec.get("call") == "bound" else "")
                        rec.update(variant=name, matrix=matrix, round=rnd, machine=info)
                        keep_best(best, rec)
                        keep_round(rounds, rec, (0, rnd))
                        if out:
                            out.write(json.dumps(rec) + "\n")
                            out.flush()
                    print(f"round {rnd + 1}/{args.rounds} {matrix} {variant}: "
                          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    table = "\n" + summary(best, args)
    if "torch" in args.variants and "distmm-p1" in args.variants:
        table += ("\n**Cases below the PyTorch targets** (PyTorch's best time over "
                  "distmm's best at p = 1; each round's own: the same ratio within each round)"
                  "\n\n" + short_cells(best, rounds, args))
    table += markdown(best, args)
    if any(v.startswith("distmm") for v in args.variants):
        table += ("\n**Bound calls against method calls** (best seconds over rounds; rest: the "
                  "share of the call outside its kernels and messages)\n\n"
                  + bound_table(best, args))
    if any(v in args.variants for v in RUN_VARIANTS):
        table += "\n**distmm run against the API** (best seconds over rounds)\n\n" + run_table(
            best, args)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(f"Machine: {json.dumps(info)}\n" + table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
