"""SpMM's row tail in the reference model: looped against straight-line, one process, in turns.

After a row's groups of four entries, the SpMM kernel adds the last (at most three) either in
a loop or in straight-line code (``_spmm_kernel(width, straight_tail)``; the model picks the
straight form for the (width, itemsize) pairs in ``reference._STRAIGHT_TAIL``). The two forms
add the same terms in the same order, so this checks that their results are bitwise equal and
times them on the same local block (the whole matrix in natural order, as at p = 1), with the
model's own plan for everything else (chunks per thread, panels, prefetch distance), in
rounds that alternate which goes first; each round keeps the best of a batch of calls sized
to about 0.2 s. Prints a markdown table: the best time of each form and straight / looped
(below 1: the straight tail is faster)::

    DISTMM_DATA=../shared/data NUMBA_NUM_THREADS=2 python experiments/bench_spmm_tail.py \\
        --matrices cora-adjacency,movielens-100k-ratings,metis-mdual,genes-pubmed,er-65536 \\
        --rs 16,32,64 --dtypes float32,float64
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402


def case(S, r: int, dtype, rounds: int) -> tuple[float, float]:
    """(looped, straight) best seconds of SpMMA at width r on the CSR matrix S."""
    import numba

    from distmm.kernels import reference

    m, n = S.shape
    dt = np.dtype(dtype)
    indptr = S.indptr.astype(np.int64)
    indices = S.indices.astype(np.int32).view(np.uint32)  # as the model passes them
    vals = S.data.astype(dt)
    B = np.random.default_rng(0).standard_normal((n, r)).astype(dt)
    dist, panels = reference.ReferenceModel()._plan(n, r, dt.itemsize, S.nnz, m, 4)
    tail = (reference._num_chunks(m), dist, panels, True)
    width = reference._width(r)
    kernels = {False: reference._spmm_kernel(width, False),
               True: reference._spmm_kernel(width, True)}
    outs = {k: np.empty((m, r), dt) for k in kernels}
    for k, kern in kernels.items():
        kern(indptr, indices, vals, B, outs[k], *tail)
    if outs[False].tobytes() != outs[True].tobytes():
        raise SystemExit(f"bench_spmm_tail: the two tails differ at r={r} {dt.name}")
    calls = max(3, int(0.2 / max(1e-6, 2e-9 * S.nnz * r / 16 * numba.get_num_threads())))
    best = {False: float("inf"), True: float("inf")}
    for rnd in range(rounds):
        for k in ((False, True) if rnd % 2 == 0 else (True, False)):
            kern, out = kernels[k], outs[k]
            t0 = time.perf_counter()
            for _ in range(calls):
                kern(indptr, indices, vals, B, out, *tail)
            best[k] = min(best[k], (time.perf_counter() - t0) / calls)
    return best[False], best[True]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", type=e2e.csv_list(str), default=list(e2e.MATRICES))
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32, 64])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32", "float64"])
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    from distmm.kernels import reference

    print(f"Machine: {e2e.machine()}, {os.environ.get('NUMBA_NUM_THREADS', 'all')} numba "
          "threads\n")
    print("| matrix | dtype | r | looped (us) | straight (us) | straight / looped | "
          "model's choice |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name in args.matrices:
        S = e2e.load_matrix(name).tocsr()
        S.sort_indices()
        for dtype in args.dtypes:
            for r in args.rs:
                looped, straight = case(S, r, dtype, args.rounds)
                chosen = ("straight" if (r, np.dtype(dtype).itemsize)
                          in reference._STRAIGHT_TAIL else "looped")
                print(f"| {name} | {dtype} | {r} | {looped * 1e6:.1f} | {straight * 1e6:.1f} "
                      f"| {straight / looped:.2f} | {chosen} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
