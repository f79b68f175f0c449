"""Software prefetch on against off in the reference model's kernels, one process, in turns.

The reference model prefetches the gathered rows only when the gathered matrix is larger than
a quarter of the panel budget and its rows are at most ``_PREFETCH_MAX_ROW_BYTES`` long
(``ReferenceModel._plan``). This measures both choices on the
same local block (the whole matrix in natural order, as at p = 1): the node model's kernel
with the prefetch distance forced to the planned one ("on") and to 0 ("off"), every other
part of the plan (panels, chunks, width) the model's own, calling them in rounds that
alternate which goes first; each round keeps the best of ``--calls`` calls. Prints one line
per case (off / on per round and their geometric mean; above 1: prefetch is faster), then
the geometric mean by operation and row length::

    DISTMM_DATA=../shared/data NUMBA_NUM_THREADS=2 python experiments/bench_prefetch.py \\
        --matrices er-65536,metis-mdual,genes-pubmed --rs 16,32,64,128,256
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

OPS = ("fusedmm_a", "spmm_a", "sddmm")


def forced_models():
    """(off, on): reference models whose plans prefetch never and always (at the planned
    distance), everything else as planned."""
    from distmm.kernels import reference

    class Forced(reference.ReferenceModel):
        def __init__(self, on: bool) -> None:
            super().__init__()
            self.on = on

        def _plan(self, gathered_rows, r, itemsize, nnz, rows, min_run):
            _, panels = super()._plan(gathered_rows, r, itemsize, nnz, rows, min_run)
            return (reference._prefetch_distance(r, itemsize) if self.on else 0), panels

    return Forced(False), Forced(True)


def measure(S, dtype, r: int, op: str, rounds: int, calls: int) -> list[float]:
    """off / on seconds per round for one case (best of ``calls`` each)."""
    from distmm.core.aligned import aligned_empty
    from distmm.core.sparse import CSRBlock

    m, n = S.shape
    blk = CSRBlock((m, n), S.indptr.astype(np.int64), S.indices.astype(np.int32),
                   S.data.astype(dtype))
    rng = np.random.default_rng(1)
    A, B = aligned_empty((m, r), dtype), aligned_empty((n, r), dtype)
    A[...] = rng.standard_normal((m, r))
    B[...] = rng.standard_normal((n, r))
    out = aligned_empty((blk.nnz,) if op == "sddmm" else (m, r), dtype)
    args = (blk.data, B, out) if op == "spmm_a" else (blk.data, A, B, out)
    fns = [model._bind(op, blk, r, False) for model in forced_models()]
    for fn in fns:
        fn(*args)  # compile and warm
    ratios = []
    for k in range(rounds):
        best = [math.inf, math.inf]
        for which in ((0, 1) if k % 2 == 0 else (1, 0)):
            for _ in range(calls):
                t0 = time.perf_counter()
                fns[which](*args)
                best[which] = min(best[which], time.perf_counter() - t0)
        ratios.append(best[0] / best[1])
    return ratios


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main(argv=None) -> int:
    from distmm.kernels import reference

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", type=e2e.csv_list(str),
                    default=["er-65536", "metis-mdual", "genes-pubmed"])
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32, 64, 128, 256])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32", "float64"])
    ap.add_argument("--ops", type=e2e.csv_list(str), default=list(OPS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args(argv)
    groups = defaultdict(list)
    for name in args.matrices:
        S = e2e.load_matrix(name)
        S.sort_indices()
        for dtype in map(np.dtype, args.dtypes):
            for r in args.rs:
                row = r * dtype.itemsize
                for op in args.ops:
                    ratios = measure(S, dtype, r, op, args.rounds, args.calls)
                    size = S.shape[1] * row / 2**20
                    print(f"{name} r={r} {dtype.name} {op}: gathered {size:.1f} MiB, off/on "
                          f"{' '.join(f'{x:.2f}' for x in ratios)}, gmean "
                          f"{gmean(ratios):.2f}", flush=True)
                    short = row <= reference._PREFETCH_MAX_ROW_BYTES
                    groups[op, "short rows" if short else "long rows"].append(gmean(ratios))
    for (op, rows), values in sorted(groups.items()):
        print(f"{op}, {rows}: {len(values)} cases, off/on gmean {gmean(values):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
