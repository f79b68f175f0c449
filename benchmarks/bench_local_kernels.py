"""Benchmark the reference node model's local kernels against scipy, numpy and (optionally) torch.

One rank's local kernels are measured on an Erdos-Renyi block (every row gets ``--nnz-per-row``
uniformly random column indices; duplicates are summed, so rows hold slightly fewer) with dense
operands of width ``--r``:

* reference model (:class:`distmm.kernels.reference.ReferenceModel`, through its public,
  validating entry points): ``spmm_a``, ``spmm_b``, ``sddmm``, ``fusedmm_a``, ``fusedmm_b``, and
  "sddmm then spmm_a" as two calls (the unfused FusedMM);
* scipy ``S @ B`` (single-threaded whatever ``--threads`` says);
* numpy gather-and-dot SDDMM, ``einsum('ij,ij->i', A[rows], B[cols]) * vals`` in chunks of
  ``--numpy-chunk`` nonzeros so the gathered rows stay in cache (single-threaded);
* if ``import torch`` works: ``torch.sparse.mm`` on a CSR and on a COO tensor, and
  ``torch.sparse.sampled_addmm`` (beta = 0, alpha = 1) with ``mat2`` both as the transposed view
  of B and as a contiguous copy; the faster variant of each is reported as the baseline.
  ``sampled_addmm`` only uses the *pattern* of its input, so it returns ``dot(A_i, B_j)`` without
  the multiplication by ``vals``; its result times ``vals`` is checked against the reference
  model (which does that multiplication as well, so torch does slightly less work).

Every baseline's result is checked against the reference model once before anything is timed.

Timing: after one untimed warm-up call each, all implementations (and the STREAM triad) are
timed once per round for ``--repeat`` rounds, interleaved, and the best and median are reported.
Interleaving puts every implementation into the same time windows, so a slow phase of a shared
host hits all of them alike. Before each round the script waits (``--wait-idle``) for this
machine's other processes to go idle, and every record reports the fraction of the machine's CPU
time other processes used during the timed rounds of its thread count (``background_load``).

Flops: 2 * nnz * r for SpMM and SDDMM, 4 * nnz * r for FusedMM and for sddmm+spmm_a.

Memory bandwidth: a numba-parallel STREAM triad (``a = b + s * c`` over three arrays of
``--stream-mib`` MiB each, far bigger than the last-level cache) is measured at each thread count
in the same run, counting 3 * 8 bytes per element (STREAM's convention: no write-allocate
traffic). Each kernel's "fraction of bandwidth bound" is its *compulsory* traffic divided by its
time, divided by the triad bandwidth, where compulsory traffic is
:func:`distmm.kernels.base.kernel_bytes`: the sparse structure (indptr, indices, values) read
once, every dense input row read once, every output row read and written once (and, for SDDMM,
the nnz output values read and written once). Random gathers of dense rows that miss the cache
move more than this, so the fraction is an upper bound on how well a kernel uses memory, and a
low fraction means the kernel is bound by something else (latency of the gathers, compute).

Output: one JSON object per measurement per line on stdout (JSON Lines), then a markdown table
on stdout (or in ``--markdown FILE``).

Example::

    python benchmarks/bench_local_kernels.py --threads 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # allow running from a checkout without installing
    sys.path.insert(0, str(_ROOT))

from distmm.core.sparse import CSRBlock  # noqa: E402
from distmm.kernels.base import kernel_bytes  # noqa: E402
from distmm.kernels.reference import ReferenceModel  # noqa: E402

try:  # optional benchmark dependency; distmm itself never imports torch
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None


# --------------------------------------------------------------------------------------------
# STREAM triad


@njit(parallel=True, fastmath=True, nogil=True)
def _triad(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: float) -> None:
    for i in prange(a.shape[0]):
        a[i] = b[i] + s * c[i]


def make_triad(mib: int) -> tuple[Callable[[], None], float, Callable[[], None]]:
    """A STREAM triad on 3 float64 arrays of ``mib`` MiB: (run, bytes per run, check)."""
    n = mib * 2**20 // 8
    a = np.zeros(n)
    b = np.ones(n)
    c = np.full(n, 2.0)
    _triad(a, b, c, 3.0)  # compile and first-touch

    def check() -> None:
        if not np.all(a == 7.0):
            raise RuntimeError("STREAM triad produced a wrong result")

    return (lambda: _triad(a, b, c, 3.0)), 3.0 * 8 * n, check


# --------------------------------------------------------------------------------------------
# problem


def make_block(n: int, per_row: int, dtype: np.dtype, seed: int) -> CSRBlock:
    """An n x n Erdos-Renyi block: per_row uniform column indices per row, duplicates summed."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n, dtype=np.int64), per_row)
    cols = rng.integers(0, n, size=n * per_row, dtype=np.int64)
    vals = rng.uniform(0.5, 1.5, size=n * per_row)
    return CSRBlock.from_coo(rows, cols, vals, (n, n), dtype=dtype)


def _cpu_ticks() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat (0, 0 elsewhere)."""
    try:
        with open("/proc/stat") as fh:
            fields = [float(x) for x in fh.readline().split()[1:]]
    except OSError:
        return 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(fields[:8]) / hz  # user nice system idle iowait irq softirq steal
    return total - (fields[3] + fields[4]) / hz, total


def _self_cpu() -> float:
    """CPU seconds used by this process (all threads) so far."""
    t = os.times()
    return t.user + t.system


def background_load(interval: float = 0.25) -> float:
    """Fraction of the machine's CPUs busy with other processes over ``interval`` seconds."""
    b0, t0 = _cpu_ticks()
    s0 = _self_cpu()
    time.sleep(interval)
    b1, t1 = _cpu_ticks()
    others = (b1 - b0) - (_self_cpu() - s0)
    return max(0.0, others / (t1 - t0)) if t1 > t0 else 0.0


def wait_for_idle(limit_s: float, threshold: float = 0.1) -> float:
    """Wait (at most ``limit_s``) until other processes use < ``threshold`` of the CPUs."""
    deadline = time.monotonic() + limit_s
    load = background_load()
    while load >= threshold and time.monotonic() < deadline:
        load = background_load()
    return load


def time_interleaved(fns: list[Callable[[], object]], rounds: int,
                     wait_s: float) -> tuple[list[list[float]], float]:
    """Time every callable once per round, ``rounds`` rounds, after one warm-up call each.

    Interleaving puts every implementation in the same time windows, so a slow phase of a shared
    host (memory bandwidth taken by neighbours, which no counter inside this machine shows)
    hits all of them alike and the ratios stay fair. Before each round we wait up to ``wait_s``
    for the other processes of this machine to go idle. Returns the seconds of every call of
    every callable, and the fraction of the machine's CPU time that other processes used during
    the timed rounds (the whole machine's busy time from /proc/stat minus this process's own;
    one figure for all rounds, since /proc/stat counts in 10 ms ticks).
    """
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    others = 0.0
    cpu_total = 0.0
    for _ in range(rounds):
        if wait_s > 0:
            wait_for_idle(wait_s)
        b0, c0 = _cpu_ticks()
        s0 = _self_cpu()
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
        b1, c1 = _cpu_ticks()
        others += max(0.0, (b1 - b0) - (_self_cpu() - s0))
        cpu_total += c1 - c0
    load = min(1.0, others / cpu_total) if cpu_total > 0 else 0.0
    return times, load


def check_close(name: str, got: np.ndarray, want: np.ndarray, dtype: np.dtype) -> None:
    """Raise unless ``got`` matches ``want`` to the precision of ``dtype`` (norm-wise)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)
    if not (got.shape == want.shape and err <= tol):
        raise RuntimeError(f"{name} disagrees with the reference model: relative error {err:.3g}")
    print(f"# check {name}: relative error {err:.2e} (ok)", file=sys.stderr)


# --------------------------------------------------------------------------------------------


def gather_bytes(op: str, S: CSRBlock, r: int) -> float:
    """Traffic if every gathered dense row came from memory (no reuse in any cache).

    The sparse structure and values once, one dense row of width r per nonzero for the gathered
    operand, the other dense operand's rows once, outputs read and written once. Together with
    :func:`kernel_bytes` (perfect reuse) it brackets the real traffic of a row-gathering kernel.
    """
    m, n = S.shape
    item = S.data.dtype.itemsize
    sparse = S.indptr.nbytes + S.indices.nbytes + S.nnz * item
    gathered = S.nnz * r * item
    if op == "spmm_a":
        return float(sparse + gathered + 2 * m * r * item)
    if op == "spmm_b":
        return float(sparse + gathered + 2 * n * r * item)
    if op == "sddmm":
        return float(sparse + gathered + m * r * item + 2 * S.nnz * item)
    if op == "fusedmm_a":
        return float(sparse + gathered + 3 * m * r * item)
    if op == "fusedmm_b":
        return float(sparse + gathered + 3 * n * r * item)
    raise ValueError(op)


def build_cases(S: CSRBlock, A: np.ndarray, B: np.ndarray, numpy_chunk: int,
                use_torch: bool) -> list[dict]:
    """All (op, impl, callable, flops, bytes) cases, with baselines checked against the model."""
    r = A.shape[1]
    dtype = A.dtype
    nnz = S.nnz
    vals = S.data
    model = ReferenceModel()
    f2 = 2.0 * nnz * r

    # compulsory traffic (kernel_bytes): inputs read once, outputs read and written once
    by_spmm = kernel_bytes(S, r, S.shape[1], S.shape[0])
    by_sddmm = kernel_bytes(S, r, S.shape[0] + S.shape[1], 0, values_written=nnz)
    by_fused = kernel_bytes(S, r, S.shape[0] + S.shape[1], S.shape[0])
    gb = {op: gather_bytes(op, S, r) for op in ("spmm_a", "spmm_b", "sddmm", "fusedmm_a",
                                                 "fusedmm_b")}

    out_a = np.zeros((S.shape[0], r), dtype)
    out_b = np.zeros((S.shape[1], r), dtype)
    out_s = np.zeros(nnz, dtype)
    tmp_s = np.zeros(nnz, dtype)

    # reference results (fresh outputs), also the oracle for the baselines
    ref_spmm_a = np.zeros_like(out_a)
    model.spmm_a(S, vals, B, ref_spmm_a)
    ref_sddmm = np.zeros_like(out_s)
    model.sddmm(S, vals, A, B, ref_sddmm)
    ref_fused = np.zeros_like(out_a)
    model.fusedmm_a(S, vals, A, B, ref_fused)
    unfused = np.zeros_like(out_a)
    model.spmm_a(S, ref_sddmm, B, unfused)
    check_close("reference fusedmm_a vs sddmm+spmm_a", ref_fused, unfused, dtype)
    # the b-side kernels against scipy once (they are tested properly in the test suite)
    Ssc = S.to_scipy()
    ref_b = np.zeros_like(out_b)
    model.spmm_b(S, vals, A, ref_b)
    check_close("reference spmm_b vs scipy S^T @ A", ref_b,
                Ssc.T.astype(np.float64) @ A.astype(np.float64), dtype)

    def sddmm_then_spmm() -> None:
        model.sddmm(S, vals, A, B, tmp_s)
        model.spmm_a(S, tmp_s, B, out_a)

    cases = [
        dict(op="spmm_a", impl="reference", fn=lambda: model.spmm_a(S, vals, B, out_a),
             flops=f2, bytes=by_spmm),
        dict(op="spmm_b", impl="reference", fn=lambda: model.spmm_b(S, vals, A, out_b),
             flops=f2, bytes=kernel_bytes(S, r, S.shape[0], S.shape[1])),
        dict(op="sddmm", impl="reference", fn=lambda: model.sddmm(S, vals, A, B, out_s),
             flops=f2, bytes=by_sddmm),
        dict(op="fusedmm_a", impl="reference",
             fn=lambda: model.fusedmm_a(S, vals, A, B, out_a), flops=2 * f2, bytes=by_fused),
        dict(op="fusedmm_b", impl="reference",
             fn=lambda: model.fusedmm_b(S, vals, A, B, out_b), flops=2 * f2,
             bytes=kernel_bytes(S, r, S.shape[0] + S.shape[1], S.shape[1])),
        dict(op="fusedmm_a", impl="reference sddmm+spmm_a", fn=sddmm_then_spmm,
             flops=2 * f2, bytes=by_sddmm + by_spmm),
    ]

    # scipy
    check_close("scipy S @ B", Ssc @ B, ref_spmm_a, dtype)
    cases.append(dict(op="spmm_a", impl="scipy", fn=lambda: Ssc @ B, flops=f2, bytes=by_spmm))

    # numpy gather-and-dot SDDMM, chunked
    rows = S.row_ids()
    cols = S.indices

    def numpy_sddmm() -> np.ndarray:
        res = np.empty(nnz, dtype)
        for lo in range(0, nnz, numpy_chunk):
            hi = min(lo + numpy_chunk, nnz)
            res[lo:hi] = np.einsum("ij,ij->i", A[rows[lo:hi]], B[cols[lo:hi]]) * vals[lo:hi]
        return res

    check_close("numpy SDDMM", numpy_sddmm(), ref_sddmm, dtype)
    cases.append(dict(op="sddmm", impl="numpy", fn=numpy_sddmm, flops=f2, bytes=by_sddmm))

    if use_torch:
        tB = torch.from_numpy(B)
        tA = torch.from_numpy(A)
        with warnings.catch_warnings():  # "sparse CSR support is in beta", invariant checks
            warnings.simplefilter("ignore", UserWarning)
            t_csr = torch.sparse_csr_tensor(torch.from_numpy(S.indptr), torch.from_numpy(
                S.indices.astype(np.int64)), torch.from_numpy(vals), size=S.shape,
                check_invariants=True)
        t_coo = t_csr.to_sparse_coo().coalesce()
        for fmt, T in (("csr", t_csr), ("coo", t_coo)):
            check_close(f"torch.sparse.mm ({fmt})", torch.sparse.mm(T, tB).numpy(),
                        ref_spmm_a, dtype)
            cases.append(dict(op="spmm_a", impl=f"torch.sparse.mm {fmt}",
                              fn=lambda T=T: torch.sparse.mm(T, tB), flops=f2, bytes=by_spmm,
                              group="torch.sparse.mm"))
        # sampled_addmm: alpha * (mat1 @ mat2) on the pattern of input, + beta * input
        t_pat = torch.sparse_csr_tensor(t_csr.crow_indices(), t_csr.col_indices(),
                                        torch.ones(nnz, dtype=tA.dtype), size=S.shape,
                                        check_invariants=True)
        tBt_view = tB.t()
        tBt_copy = tB.t().contiguous()
        for lay, mat2 in (("B^T view", tBt_view), ("B^T contiguous", tBt_copy)):
            res = torch.sparse.sampled_addmm(t_pat, tA, mat2, beta=0.0, alpha=1.0)
            if not torch.equal(res.col_indices(), t_csr.col_indices()):
                raise RuntimeError("sampled_addmm changed the sparsity pattern")
            check_close(f"torch.sparse.sampled_addmm ({lay}) * vals",
                        res.values().numpy() * vals, ref_sddmm, dtype)
            cases.append(dict(
                op="sddmm", impl=f"torch.sparse.sampled_addmm {lay}",
                fn=lambda mat2=mat2: torch.sparse.sampled_addmm(t_pat, tA, mat2, beta=0.0,
                                                                alpha=1.0),
                flops=f2, bytes=by_sddmm, group="torch.sparse.sampled_addmm"))
    for c in cases:
        unfused_pair = c["impl"] == "reference sddmm+spmm_a"
        c["gather_bytes"] = gb["sddmm"] + gb["spmm_a"] if unfused_pair else gb[c["op"]]
    return cases


def run(args: argparse.Namespace) -> list[dict]:
    dtype = np.dtype(args.dtype)
    threads = [int(t) for t in args.threads.split(",")]
    if max(threads) > numba.config.NUMBA_NUM_THREADS:
        raise SystemExit(f"--threads {args.threads}: numba has only "
                         f"{numba.config.NUMBA_NUM_THREADS} threads (set NUMBA_NUM_THREADS)")
    use_torch = torch is not None and not args.no_torch
    S = make_block(args.n, args.nnz_per_row, dtype, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    A = rng.standard_normal((args.n, args.r)).astype(dtype)
    B = rng.standard_normal((args.n, args.r)).astype(dtype)
    base = {"n": args.n, "nnz": S.nnz, "r": args.r, "dtype": str(dtype),
            "nnz_per_row_requested": args.nnz_per_row}
    print(f"# block {args.n} x {args.n}, nnz {S.nnz}, r {args.r}, {dtype}; torch: "
          f"{torch.__version__ if use_torch else 'not used'}", file=sys.stderr)
    numba.set_num_threads(max(threads))
    cases = build_cases(S, A, B, args.numpy_chunk, use_torch)
    triad, triad_bytes, triad_check = make_triad(args.stream_mib)
    records = []
    for k in threads:
        numba.set_num_threads(k)
        if use_torch:
            torch.set_num_threads(k)
        times, load = time_interleaved([triad] + [c["fn"] for c in cases], args.repeat,
                                       args.wait_idle)
        triad_check()
        tt = times[0]
        st = {"best_s": min(tt), "median_s": statistics.median(tt),
              "bytes": triad_bytes, "gbs_best": triad_bytes / min(tt) / 1e9,
              "gbs_median": triad_bytes / statistics.median(tt) / 1e9,
              "background_load": load}
        rec = dict(base, op="stream_triad", impl="numba", threads=k, **st)
        records.append(rec)
        print(json.dumps(rec), flush=True)
        for case, tm in zip(cases, times[1:], strict=True):
            best, med = min(tm), statistics.median(tm)
            rec = dict(base, op=case["op"], impl=case["impl"], threads=k,
                       group=case.get("group", case["impl"]), best_s=best, median_s=med,
                       flops=case["flops"], bytes=case["bytes"],
                       gflops_best=case["flops"] / best / 1e9,
                       gflops_median=case["flops"] / med / 1e9,
                       bw_fraction=case["bytes"] / best / 1e9 / st["gbs_best"],
                       gather_bytes=case["gather_bytes"],
                       bw_fraction_no_reuse=case["gather_bytes"] / best / 1e9 / st["gbs_best"],
                       stream_gbs=st["gbs_best"], background_load=load)
            records.append(rec)
            print(json.dumps(rec), flush=True)
    return records


# --------------------------------------------------------------------------------------------
# report

_ORDER = [
    ("spmm_a", "reference"), ("spmm_a", "torch.sparse.mm"), ("spmm_a", "scipy"),
    ("spmm_b", "reference"),
    ("sddmm", "reference"), ("sddmm", "torch.sparse.sampled_addmm"), ("sddmm", "numpy"),
    ("fusedmm_a", "reference"), ("fusedmm_a", "reference sddmm+spmm_a"),
    ("fusedmm_b", "reference"),
]
# (op, group of the measured row, group of the comparison) -> column name
_TARGETS = [
    ("spmm_a", "torch.sparse.mm", 1.5), ("spmm_a", "scipy", 3.0),
    ("sddmm", "torch.sparse.sampled_addmm", 1.0), ("sddmm", "numpy", 5.0),
    ("fusedmm_a", "reference sddmm+spmm_a", 1.0),
]


def best_of_group(records: list[dict], op: str, group: str, k: int) -> dict | None:
    """The fastest record of a group (e.g. torch CSR vs COO) at ``k`` threads."""
    rs = [x for x in records if x["op"] == op and x.get("group") == group and x["threads"] == k]
    return min(rs, key=lambda x: x["best_s"]) if rs else None


def markdown(records: list[dict], args: argparse.Namespace) -> str:
    threads = sorted({x["threads"] for x in records})
    first = records[0]
    lines = [
        f"Block {first['n']} x {first['n']}, nnz {first['nnz']} "
        f"({args.nnz_per_row} random columns per row, duplicates summed), r = {first['r']}, "
        f"{first['dtype']}; best (median) of {args.repeat} runs.",
        "",
        "| op | implementation | threads | GFLOP/s best (median) | fraction of STREAM "
        "(compulsory) | fraction of STREAM (no reuse) | vs reference | background load |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k in threads:
        st = [x for x in records if x["op"] == "stream_triad" and x["threads"] == k][0]
        lines.append(f"| STREAM triad | numba | {k} | {st['gbs_best']:.1f} GB/s "
                     f"({st['gbs_median']:.1f}) | 1.00 | 1.00 | | "
                     f"{st['background_load']:.2f} |")
        for op, group in _ORDER:
            rec = best_of_group(records, op, group, k)
            if rec is None:
                continue
            ref = best_of_group(records, op, "reference", k)
            ratio = "" if group == "reference" else f"{rec['best_s'] / ref['best_s']:.2f}x"
            impl = rec["impl"]
            lines.append(f"| {op} | {impl} | {k} | {rec['gflops_best']:.2f} "
                         f"({rec['gflops_median']:.2f}) | {rec['bw_fraction']:.3f} | "
                         f"{rec['bw_fraction_no_reuse']:.2f} | {ratio} "
                         f"| {rec['background_load']:.2f} |")
    lines += ["", "'vs reference' is the baseline's time over the reference model's time "
              "(> 1: the reference model is faster). The two bandwidth fractions are the "
              "achieved traffic over the STREAM triad bandwidth of the same run, under the "
              "compulsory model (kernel_bytes: every operand moved once) and under the no-reuse "
              "model (every gathered dense row fetched from memory); a fraction above 1 under "
              "the no-reuse model means the cache served gathers. 'background load' is the "
              "fraction of the machine's CPU time used by other processes during the timed "
              "rounds of that thread count. "
              "Targets:", "",
              "| threads | reference op | compared with | target speed-up | measured | met |",
              "|---:|---|---|---:|---:|---|"]
    for k in threads:
        for op, group, target in _TARGETS:
            rec = best_of_group(records, op, group, k)
            ref = best_of_group(records, op, "reference", k)
            if rec is None or ref is None:
                continue
            sp_ = rec["best_s"] / ref["best_s"]
            lines.append(f"| {k} | {op} | {rec['impl']} | {target:g}x | {sp_:.2f}x | "
                         f"{'yes' if sp_ >= target else 'no'} |")
    lines += ["", f"Machine: {platform.machine()}, {cpu_model()}, {os.cpu_count()} logical "
              f"CPUs; numba {numba.__version__}, numpy {np.__version__}, "
              f"scipy {sp.__name__ and __import__('scipy').__version__}"
              + (f", torch {torch.__version__}" if torch is not None and not args.no_torch
                 else "") + "."]
    return "\n".join(lines) + "\n"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), or platform.processor()."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2**16, help="rows = columns of the block")
    p.add_argument("--nnz-per-row", type=int, default=32,
                   help="random column indices drawn per row (duplicates summed)")
    p.add_argument("--r", type=int, default=128, help="dense width")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--repeat", type=int, default=5,
                   help="timed runs per measurement (rounds over all implementations)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--numpy-chunk", type=int, default=8192,
                   help="nonzeros per chunk of the numpy SDDMM")
    p.add_argument("--stream-mib", type=int, default=512,
                   help="MiB per STREAM array (three arrays)")
    p.add_argument("--no-torch", action="store_true", help="skip the torch baselines")
    p.add_argument("--wait-idle", type=float, default=60.0, metavar="SECONDS",
                   help="on a shared machine, wait up to this long for this machine's other "
                        "processes to go idle before each round (0: never wait)")
    p.add_argument("--markdown", metavar="FILE", help="write the markdown table here")
    args = p.parse_args(argv)
    records = run(args)
    md = markdown(records, args)
    if args.markdown:
        Path(args.markdown).write_text(md)
    else:
        print()
        print(md)


if __name__ == "__main__":
    main()
