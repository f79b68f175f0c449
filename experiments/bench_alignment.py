"""Cache-line aligned dense blocks against blocks 16 bytes off a line, one process, in turns.

distmm allocates its dense blocks on a 64-byte boundary (distmm/core/aligned.py); numpy's own
arrays usually start 16 bytes past one. This measures what that is worth to a user's calls:
S distributed on one rank (``distmm.distribute`` with its defaults), the operands from
``S.dense`` (aligned) and copies of them placed 16 bytes past a line and typed with
``S.wrap`` (what a user's own numpy arrays usually are), then FusedMMA, SpMMA and SDDMM into
``out=`` buffers, calling the aligned and the misaligned variant alternately (A B A B ...)
so that both see the same moments of a shared machine; best call of each. Prints one line
per matrix, dtype and width: the best seconds of each variant and misaligned / aligned
(above 1: aligned is faster)::

    DISTMM_DATA=../shared/data python experiments/bench_alignment.py \\
        --matrices movielens-100k-ratings,cora-adjacency --rs 16,32,64,128
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

OPS = ("fusedmm_a", "spmm_a", "sddmm")


def misaligned_copy(S, side: str, X: np.ndarray, offset: int = 16):
    """A copy of block X whose data starts ``offset`` bytes past a 64-byte line, typed for S."""
    from distmm.core.aligned import aligned_empty

    Y = aligned_empty(X.nbytes + offset, np.uint8)[offset:].view(X.dtype).reshape(X.shape)
    Y[...] = X
    return S.wrap(side, Y)


def measure(S, r: int, calls: int) -> dict[str, tuple[float, float]]:
    """{op: (best aligned seconds, best misaligned seconds)} for one width."""
    import distmm
    from distmm.core.aligned import is_aligned

    A = S.dense("a", r, fill=distmm.hashed_normal(1, 0.1))
    B = S.dense("b", r, fill=distmm.hashed_normal(2, 0.1))
    out = S.dense("a", r)
    Am, Bm, outm = (misaligned_copy(S, "a", A), misaligned_copy(S, "b", B),
                    misaligned_copy(S, "a", out))
    assert is_aligned(A) and is_aligned(B) and not is_aligned(Bm)
    vals = np.empty_like(S.values)
    variants = {
        "fusedmm_a": (lambda: S.fusedmm_a(A, B, out=out), lambda: S.fusedmm_a(Am, Bm, out=outm)),
        "spmm_a": (lambda: S.spmm_a(B, out=out), lambda: S.spmm_a(Bm, out=outm)),
        "sddmm": (lambda: S.sddmm(A, B, out=vals), lambda: S.sddmm(Am, Bm, out=vals)),
    }
    best = {}
    for op in OPS:
        aligned, misaligned = variants[op]
        aligned()
        misaligned()
        ta = tm = float("inf")
        for _ in range(calls):
            t0 = time.perf_counter()
            aligned()
            t1 = time.perf_counter()
            misaligned()
            t2 = time.perf_counter()
            ta, tm = min(ta, t1 - t0), min(tm, t2 - t1)
        best[op] = (ta, tm)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", type=e2e.csv_list(str),
                    default=["movielens-100k-ratings", "cora-adjacency", "genes-pubmed",
                             "metis-mdual"])
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32, 64, 128])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32", "float64"])
    ap.add_argument("--work", type=float, default=3e7,
                    help="nonzeros x r per variant and op (sets the calls, 40 to 400)")
    args = ap.parse_args(argv)

    from mpi4py import MPI

    import distmm
    from distmm.core.coo import CooShare

    print("| matrix | dtype | r | " + " | ".join(
        f"{op} aligned (s) | {op} misaligned / aligned" for op in OPS) + " |")
    print("|---|---|---:|" + "---:|---:|" * len(OPS))
    for name in args.matrices:
        S_global = e2e.load_matrix(name)
        for dtype in args.dtypes:
            share = CooShare.from_scipy(S_global, MPI.COMM_SELF, root=0)
            with distmm.distribute(share, MPI.COMM_SELF, dtype=dtype) as S:
                for r in args.rs:
                    calls = int(max(40, min(400, args.work / (S.values.size * r))))
                    best = measure(S, r, calls)
                    cells = " | ".join(f"{a:.3g} | {m / a:.2f}x" for a, m in
                                       (best[op] for op in OPS))
                    print(f"| {name} | {dtype} | {r} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
