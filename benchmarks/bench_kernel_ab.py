"""A/B of two versions of the reference node model's kernels in one process, calls in turns.

The "base" version is a copy of ``distmm/kernels/reference.py`` from another commit, loaded as
a module of its own beside this checkout's (the rest of distmm is this checkout's, so the two
files must share its interfaces)::

    git show 3ec573f:distmm/kernels/reference.py > /tmp/reference_base.py
    NUMBA_NUM_THREADS=2 .venv/bin/python benchmarks/bench_kernel_ab.py \\
        --base /tmp/reference_base.py --matrices cora-adjacency,er-65536 --rs 16,32,128

For each matrix (natural order, one block: the work of a rank at p = 1), dtype, width and
operation, both versions prepare the call on the same operands (``NodeModel.prepare``: the
kernel's own plan, timed around its compiled code), check that their results agree (bitwise,
or the largest difference relative to the largest entry is printed), and then run
``--calls`` calls each, taking turns for ``--rounds`` rounds (odd rounds in the reverse
order). Two versions in one process sample the same moments of a shared machine, far better
than processes in turns: the table gives each version's median over rounds of the 20th
percentile of its calls, and the median and quartiles over rounds of new / base.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

from distmm.core.sparse import CSRBlock  # noqa: E402
from distmm.kernels import reference  # noqa: E402

OPS = ("spmm_a", "sddmm", "fusedmm_a")


def load_base(path: str):
    """The module in ``path`` (a reference.py of another commit), imported under its own name."""
    spec = importlib.util.spec_from_file_location("reference_base", path)
    module = importlib.util.module_from_spec(spec)
    # registered, so that numba can find the module again when it loads a kernel compiled
    # and cached on disk by an earlier run (it imports the kernel's module by name)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def prepared(model, op: str, S: CSRBlock, A: np.ndarray, B: np.ndarray):
    """(run, args, out) of ``op`` on S with a fresh output, prepared by ``model``."""
    if op == "sddmm":
        out = np.empty(S.nnz, S.dtype)
        return model.prepare(op, S, S.data, A, B, out, False), (S.data, A, B, out), out
    out = np.empty((S.shape[0], A.shape[1]), S.dtype)
    if op == "spmm_a":
        return model.prepare(op, S, S.data, B, None, out, False), (S.data, B, out), out
    return model.prepare(op, S, S.data, A, B, out, False), (S.data, A, B, out), out


def agreement(a: np.ndarray, b: np.ndarray) -> str:
    """"bitwise", or the largest difference relative to the largest entry."""
    if np.array_equal(a, b):
        return "bitwise"
    return f"{np.abs(a - b).max() / max(np.abs(a).max(), 1e-300):.1e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a reference.py of another commit")
    ap.add_argument("--matrices", type=e2e.csv_list(str), default=["cora-adjacency"])
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32, 128])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32"])
    ap.add_argument("--ops", type=e2e.csv_list(str), default=list(OPS))
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    bad = sorted(set(args.ops) - set(OPS))
    if bad:
        ap.error(f"unknown operations {bad}; choose from {', '.join(OPS)}")
    models = {"base": load_base(args.base).ReferenceModel(), "new": reference.ReferenceModel()}
    print("| matrix | dtype | r | op | base (us) | new (us) | new / base, median (quartiles) "
          "| results |")
    print("|---|---|---:|---|---:|---:|---|---|")
    for name in args.matrices:
        csr = e2e.load_matrix(name)
        for dtype in map(np.dtype, args.dtypes):
            S = CSRBlock.from_scipy(csr, dtype=dtype)
            for r in args.rs:
                A = e2e.dense(S.shape[0], r, 1, dtype)
                B = e2e.dense(S.shape[1], r, 2, dtype)
                for op in args.ops:
                    runs = {v: prepared(m, op, S, A, B) for v, m in models.items()}
                    for run, call_args, _ in runs.values():
                        run(*call_args)
                        run(*call_args)
                    same = agreement(runs["base"][2], runs["new"][2])
                    times: dict[str, list[float]] = {v: [] for v in runs}
                    for k in range(args.rounds):
                        for v in (("base", "new") if k % 2 == 0 else ("new", "base")):
                            run, call_args, _ = runs[v]
                            seconds = [run(*call_args) for _ in range(args.calls)]
                            times[v].append(float(np.percentile(seconds, 20)))
                    base, new = np.array(times["base"]), np.array(times["new"])
                    q = np.percentile(new / base, [25, 50, 75])
                    print(f"| {name} | {dtype} | {r} | {op} | {np.median(base) * 1e6:.1f} | "
                          f"{np.median(new) * 1e6:.1f} | {q[1]:.2f} ({q[0]:.2f}-{q[2]:.2f}) | "
                          f"{same} |", flush=True)


if __name__ == "__main__":
    main()
