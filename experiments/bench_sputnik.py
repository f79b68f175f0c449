"""Sputnik's Figure 7 on a CPU: SpMM throughput as row lengths grow more unequal.

The paper (shared/papers/sputnik-sc2020.txt, Figure 7) multiplies sparse matrices of one shape
and one nnz whose row lengths have a growing coefficient of variation (CV = std / mean) and
reports throughput as a percentage of the throughput on a matrix whose rows all have the same
length: 47.5% without and 96.5% with the row swizzle on a V100. This script does the same on
this machine's CPU threads, for the Sputnik node model with the swizzle on and off, and puts
the reference node model and scipy on the same matrices in the same run:

* synthetic matrices, ``--rows`` x ``--cols`` with ``--mean`` nonzeros per row on average
  (exactly ``rows * mean`` nonzeros in all of them): row lengths drawn from a lognormal
  distribution whose CV is each of ``--cvs``, scaled and rounded to the exact total (capped at
  ``--cols``; the CV actually reached is reported), in random row order, distinct uniformly
  random columns in every row; plus, for the largest CV, the same rows sorted by *increasing*
  length (the heaviest rows last: the worst order for a schedule that does not reorder);
* ``--mtx`` files (default the skewed genes-pubmed matrix of $DISTMM_DATA, default
  ../shared/data), each against
  its *balanced twin*: the same shape and nnz with equal row lengths and random columns.

Implementations (all on ``--threads`` numba threads except scipy, which has one):
``sputnik`` (automatic tile width, swizzle on), ``sputnik-noswizzle`` (the same, swizzle off),
``sputnik-tile32`` (tile width 32, swizzle on), ``reference`` (the reference node model, which
balances threads by nnz already) and ``scipy`` (``S @ B``). Every result is checked against the
reference model before anything is timed. Timing: one warm-up call each, then ``--repeat``
rounds, each timing every implementation on every matrix once (interleaved, so a slow phase of
a shared host hits all alike); best and median seconds. The timed rounds hold the shared
benchmark lock (``--lock``, flock); building the matrices and compiling happen outside it.

Output: one JSON object per (matrix, implementation) on stdout, then a markdown table with
GFLOP/s (2 nnz r / best time), the percentage of the same implementation's throughput on the
balanced matrix (CV = 0 for the synthetic ones, the twin for files), and for the Sputnik rows
the measured thread load imbalance (max / mean of the nonzeros + rows each thread did).

Example::

    python experiments/bench_sputnik.py --threads 2 --r 128 --repeat 5 > sputnik.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import json
import os
import platform
import statistics
import sys
import time

import numba
import numpy as np
import scipy.io
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels.reference import ReferenceModel
from distmm.kernels.sputnik import SputnikModel

# the real matrices: $DISTMM_DATA, else ../shared/data beside the checkout
DATA = os.environ.get("DISTMM_DATA", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))

IMPLS = ("sputnik", "sputnik-noswizzle", "sputnik-tile32", "reference", "scipy")


def _scaled(z: np.ndarray, sigma: float, total: int, cap: int) -> np.ndarray:
    """exp(sigma z) scaled to sum ``total`` with no entry above ``cap`` (real-valued)."""
    x = np.exp(sigma * (z - z.max()))  # shifted: no overflow; the scale is fixed below
    for _ in range(100):  # scale to the total, cap, and spread what the cap cut off
        want = np.minimum(x * (total / x.sum()), cap)
        if abs(want.sum() - total) < 0.5:
            break
        x = want
    return want


def lognormal_lengths(rows: int, mean: int, cv: float, cap: int, rng) -> np.ndarray:
    """Integer row lengths, lognormal in shape, summing to exactly rows * mean, none above
    ``cap``, whose sample CV is ``cv`` (found by bisection on the lognormal's sigma, as the
    sample CV of a heavy-tailed draw falls short of the distribution's)."""
    total = rows * mean
    if cv == 0:
        return np.full(rows, mean, dtype=np.int64)
    z = rng.standard_normal(rows)
    lo, hi = 0.0, 6.0
    for _ in range(60):
        sigma = (lo + hi) / 2
        want = _scaled(z, sigma, total, cap)
        if want.std() / want.mean() < cv:
            lo = sigma
        else:
            hi = sigma
    lengths = np.floor(want).astype(np.int64)
    short = total - int(lengths.sum())
    room = np.flatnonzero(lengths < cap)
    frac = (want - lengths)[room]
    lengths[room[np.argsort(-frac, kind="stable")[:short]]] += 1  # largest remainders
    assert lengths.sum() == total and lengths.max() <= cap
    return lengths


def block_from_lengths(lengths: np.ndarray, cols: int, rng, dtype) -> CSRBlock:
    """A CSR block whose row i holds lengths[i] distinct uniformly random columns."""
    indptr = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    for i, k in enumerate(lengths):
        if k:
            indices[indptr[i]:indptr[i + 1]] = np.sort(rng.choice(cols, int(k), replace=False))
    data = rng.uniform(0.5, 1.5, indices.size).astype(dtype)
    return CSRBlock((lengths.size, cols), indptr, indices, data)


def load_mtx(path: str, dtype) -> CSRBlock:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        M = sp.csr_matrix(scipy.io.mmread(fh))
    M.sum_duplicates()
    M.sort_indices()
    return CSRBlock(M.shape, M.indptr.astype(np.int64), M.indices.astype(np.int32),
                    M.data.astype(dtype))


def cv_of(S: CSRBlock) -> float:
    lengths = np.diff(S.indptr)
    return float(lengths.std() / lengths.mean()) if lengths.mean() > 0 else 0.0


@contextlib.contextmanager
def bench_lock(path: str | None):
    """Hold the shared benchmark lock (flock) while timing, if a path is given."""
    if not path:
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def make_impls(S: CSRBlock, B: np.ndarray):
    """name -> (callable computing S @ B into a fresh array, model or None)."""
    models = {"sputnik": SputnikModel(), "sputnik-noswizzle": SputnikModel(swizzle=False),
              "sputnik-tile32": SputnikModel(tile_width=32), "reference": ReferenceModel()}
    Ssp = S.to_scipy()
    impls = {}
    for name, model in models.items():
        def run(model=model):
            out = np.zeros((S.shape[0], B.shape[1]), B.dtype)
            model.spmm_a(S, S.data, B, out)
            return out
        impls[name] = (run, model)
    impls["scipy"] = (lambda: np.asarray(Ssp @ B), None)
    return impls


class Case:
    """One matrix with its dense operand, implementations and timings."""

    def __init__(self, label: str, S: CSRBlock, r: int, seed: int, extra: dict) -> None:
        self.label, self.S, self.extra = label, S, extra
        self.B = np.random.default_rng(seed).standard_normal((S.shape[1], r)).astype(S.dtype)
        self.impls = make_impls(S, self.B)
        self.times: dict[str, list[float]] = {name: [] for name in self.impls}

    def check_and_warm(self) -> None:
        """Check every implementation against the reference model (also compiles them)."""
        want = self.impls["reference"][0]()
        for name, (fn, _) in self.impls.items():
            got = fn()
            err = np.abs(got.astype(np.float64) - want).max(initial=0.0)
            if err > 1e-4 * np.abs(want).max(initial=1.0):
                raise SystemExit(f"{self.label}: {name} differs from the reference by {err:.3g}")
        for _, model in self.impls.values():
            if model is not None:
                model.stats.reset()

    def time_round(self) -> None:
        for name, (fn, _) in self.impls.items():
            t0 = time.perf_counter()
            fn()
            self.times[name].append(time.perf_counter() - t0)

    def records(self) -> list[dict]:
        S, r = self.S, self.B.shape[1]
        flops = 2.0 * S.nnz * r
        out = []
        for name, (_, model) in self.impls.items():
            t = self.times[name]
            rec = {"matrix": self.label, "impl": name, "rows": S.shape[0], "cols": S.shape[1],
                   "nnz": S.nnz, "r": r, "dtype": S.dtype.name, "cv": cv_of(S),
                   "threads": 1 if name == "scipy" else numba.get_num_threads(),
                   "best_s": min(t), "median_s": statistics.median(t),
                   "gflops": flops / min(t) / 1e9, **self.extra}
            if model is not None and name.startswith("sputnik"):
                st = model.stats.as_dict()["spmm_a"]
                rec["load_imbalance"] = st["load_imbalance"] / st["calls"]
                rec["options"] = model.options()
            out.append(rec)
        return out


def markdown(records: list[dict]) -> str:
    """One row per matrix: GFLOP/s and % of the balanced matrix's throughput per implementation
    (same implementation), Sputnik's thread imbalance, and Sputnik against the alternatives."""
    base = {(rec["balanced_for"], rec["impl"]): rec["gflops"] for rec in records
            if rec.get("balanced_for") is not None}
    by_matrix: dict[str, dict[str, dict]] = {}
    for rec in records:
        by_matrix.setdefault(rec["matrix"], {})[rec["impl"]] = rec
    head = ["matrix", "CV"] + [f"{name} GFLOP/s (% of balanced)" for name in IMPLS]
    head += ["imbalance swizzle / no swizzle", "sputnik vs reference", "sputnik vs scipy"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for label, recs in by_matrix.items():
        first = next(iter(recs.values()))
        cells = [label, f"{first['cv']:.2f}"]
        for name in IMPLS:
            rec = recs[name]
            b = base.get((rec.get("group"), name))
            cells.append(f"{rec['gflops']:.1f} ({100 * rec['gflops'] / b:.0f}%)" if b
                         else f"{rec['gflops']:.1f}")
        cells.append(f"{recs['sputnik']['load_imbalance']:.3f} / "
                     f"{recs['sputnik-noswizzle']['load_imbalance']:.3f}")
        sput = recs["sputnik"]["gflops"]
        cells.append(f"{sput / recs['reference']['gflops']:.2f}x")
        cells.append(f"{sput / recs['scipy']['gflops']:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2**15)
    p.add_argument("--cols", type=int, default=2048)
    p.add_argument("--mean", type=int, default=64, help="nonzeros per row on average")
    p.add_argument("--cvs", default="0,0.25,0.5,1,1.5,2,3")
    p.add_argument("--mtx", default=os.path.join(DATA, "genes-pubmed.mtx.gz"),
                   help="comma-separated Matrix Market files ('' for none)")
    p.add_argument("--r", type=int, default=128)
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lock", default="/tmp/distmm-bench.lock",
                   help="flock this file while timing ('' for no lock)")
    p.add_argument("--markdown", help="write the table here instead of stdout")
    p.add_argument("--table-from", metavar="JSONL",
                   help="measure nothing: print the table of the records in this file")
    args = p.parse_args(argv)
    if args.table_from:
        with open(args.table_from) as fh:
            print(markdown([json.loads(line) for line in fh if line.strip()]))
        return
    numba.set_num_threads(args.threads)
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(args.seed)
    env = {"machine": platform.machine(), "cpus": os.cpu_count(), "numba": numba.__version__}
    cases = []
    cvs = [float(c) for c in args.cvs.split(",") if c]
    for cv in cvs:
        lengths = lognormal_lengths(args.rows, args.mean, cv, args.cols, rng)
        S = block_from_lengths(lengths, args.cols, rng, dtype)
        extra = {"group": "synthetic", "target_cv": cv, **env}
        if cv == 0:
            extra["balanced_for"] = "synthetic"
        cases.append(Case(f"synthetic CV {cv:g}", S, args.r, args.seed, extra))
        if cv == max(cvs) and cv > 0:
            S = block_from_lengths(np.sort(lengths), args.cols, rng, dtype)
            cases.append(Case(f"synthetic CV {cv:g}, heaviest rows last", S, args.r,
                              args.seed, {"group": "synthetic", "target_cv": cv, **env}))
    for path in [x for x in args.mtx.split(",") if x]:
        S = load_mtx(path, dtype)
        name = os.path.basename(path).split(".")[0]
        cases.append(Case(name, S, args.r, args.seed, {"group": name, **env}))
        m, n = S.shape
        lengths = np.full(m, S.nnz // m, dtype=np.int64)
        lengths[: S.nnz - int(lengths.sum())] += 1
        twin = block_from_lengths(lengths, n, rng, dtype)
        cases.append(Case(f"{name} balanced twin", twin, args.r, args.seed,
                          {"group": name, "balanced_for": name, **env}))
    for case in cases:
        case.check_and_warm()
        print(f"ready: {case.label}", file=sys.stderr, flush=True)
    # every round times every implementation on every matrix, so a slow phase of the shared
    # host hits all of them alike; the timed rounds hold the benchmark lock together
    with bench_lock(args.lock):
        for k in range(args.repeat):
            for case in cases:
                case.time_round()
            print(f"round {k + 1} of {args.repeat} done", file=sys.stderr, flush=True)
    records = [rec for case in cases for rec in case.records()]
    for rec in records:
        print(json.dumps(rec))
    table = markdown(records)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table + "\n")
    else:
        print(table)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
