"""A reference kernel called through numba's dispatcher against its machine code, one process,
in turns.

A prepared kernel call (``NodeModel.prepare``) goes through numba's dispatcher on its first
call only; from then on it calls the compiled code of those argument types directly
(``numba_util.machine_code``), skipping the dispatcher's typing of the nine arguments and the
Python frame that added S's arrays and the plan's constants to the operands. This times the
two ways on the same local block (the whole matrix in natural order, as at p = 1) with the
model's own plan: "dispatcher" is the bound kernel called as a function
(``CompiledCall.__call__``: a frame, then the dispatcher, as every call went before), "machine
code" the entry point with the same arguments. It checks that their results are bitwise
equal, then times single calls in turns (the order reversed every call) for ``--calls`` pairs
per round and prints, per case, the median over rounds of each round's median call, the
difference and the ratio::

    DISTMM_DATA=../shared/data NUMBA_NUM_THREADS=2 python experiments/bench_kernel_entry.py \\
        --matrices cora-adjacency,movielens-100k-ratings --rs 16,32 --dtypes float32,float64
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

OPS = ("spmm_a", "sddmm", "fusedmm_a")


def case(S, op: str, r: int, dtype, calls: int, rounds: int) -> tuple[float, float]:
    """(dispatcher, machine code) seconds of one ``op`` call at width r on the CSR matrix S:
    the median over rounds of each round's median call."""
    from distmm.core.sparse import CSRBlock
    from distmm.kernels import reference
    from distmm.kernels.numba_util import machine_code

    block = CSRBlock.from_scipy(S, dtype=dtype)
    m, n = block.shape
    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, r)).astype(dtype)
    B = rng.standard_normal((n, r)).astype(dtype)
    bound = reference.ReferenceModel()._bind(op, block, r, False)
    dense = (B,) if op == "spmm_a" else (A, B)
    outs = [np.empty(block.nnz if op == "sddmm" else (m, r), dtype) for _ in range(2)]
    args = [(*bound.head, block.data, *dense, out, *bound.tail) for out in outs]
    bound(block.data, *dense, outs[0])  # compiles, or loads from the disk cache
    entry = machine_code(bound.dispatcher, args[1])
    if entry is None:
        raise SystemExit(f"bench_kernel_entry: no machine code for {op} at r={r} {dtype}")
    entry(*args[1])
    if outs[0].tobytes() != outs[1].tobytes():
        raise SystemExit(f"bench_kernel_entry: the two ways differ for {op} at r={r}")
    ways = ((lambda: bound(block.data, *dense, outs[0])), (lambda: entry(*args[1])))
    clock = time.perf_counter
    medians: list[list[float]] = [[], []]
    for _ in range(rounds):
        times: list[list[float]] = [[], []]
        for i in range(2 * calls):
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                t0 = clock()
                ways[k]()
                times[k].append(clock() - t0)
        for k in (0, 1):
            medians[k].append(float(np.median(times[k])))
    return float(np.median(medians[0])), float(np.median(medians[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", type=e2e.csv_list(str), default=["cora-adjacency"])
    ap.add_argument("--ops", type=e2e.csv_list(str), default=list(OPS))
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32", "float64"])
    ap.add_argument("--calls", type=int, default=500, help="pairs of calls per round")
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args(argv)
    bad = sorted(set(args.ops) - set(OPS))
    if bad:
        ap.error(f"unknown operations {bad}; choose from {', '.join(OPS)}")
    print(f"Machine: {e2e.machine()}, {os.environ.get('NUMBA_NUM_THREADS', 'all')} numba "
          "threads\n")
    print("| matrix | dtype | op | r | dispatcher (us) | machine code (us) | difference (us) | "
          "machine code / dispatcher |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name in args.matrices:
        S = e2e.load_matrix(name).tocsr()
        S.sort_indices()
        for dtype in args.dtypes:
            for op in args.ops:
                for r in args.rs:
                    slow, fast = case(S, op, r, np.dtype(dtype), args.calls, args.rounds)
                    print(f"| {name} | {dtype} | {op} | {r} | {slow * 1e6:.2f} | "
                          f"{fast * 1e6:.2f} | {(slow - fast) * 1e6:.2f} | {fast / slow:.3f} |",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
