"""The multi-head SDDMM kernel against H separate single-value SDDMMs of width F (the
reference node model's prepared calls, each on one head's contiguous columns: the separate
calls' best case), one rank, the whole matrix, float32, in turns::

    NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sddmm_multi.py \
        ../shared/data/metis-mdual.mtx.gz 8 8

Prints the best of ``--rounds`` runs of each and their ratio; the results are compared first.
"""

from __future__ import annotations

import argparse
import gzip
import time

import numpy as np
import scipy.io
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.kernels import make_node_model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("matrix")
    ap.add_argument("heads", type=int)
    ap.add_argument("features", type=int)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    H, F = args.heads, args.features
    with gzip.open(args.matrix) if args.matrix.endswith(".gz") else open(args.matrix,
                                                                             "rb") as fh:
        S = CSRBlock.from_scipy(sp.csr_matrix(scipy.io.mmread(fh)), np.float32)
    m, n = S.shape
    rng = np.random.default_rng(0)
    A = rng.standard_normal((m, H * F)).astype(np.float32)
    B = rng.standard_normal((n, H * F)).astype(np.float32)
    As = [np.ascontiguousarray(A[:, h * F:(h + 1) * F]) for h in range(H)]
    Bs = [np.ascontiguousarray(B[:, h * F:(h + 1) * F]) for h in range(H)]
    vals = np.ones(S.nnz, np.float32)
    out = np.empty((S.nnz, H), np.float32)
    outs = [np.empty(S.nnz, np.float32) for _ in range(H)]
    model = make_node_model("reference")
    multi = model.prepare("sddmm", S, vals, A, B, out, accumulate=False)
    sep = [model.prepare("sddmm", S, vals, As[h], Bs[h], outs[h], accumulate=False)
           for h in range(H)]

    def run_multi():
        multi(vals, A, B, out)

    def run_separate():
        for h in range(H):
            sep[h](vals, As[h], Bs[h], outs[h])

    run_multi()
    run_separate()
    np.testing.assert_allclose(out, np.stack(outs, axis=1), rtol=1e-4, atol=1e-4)
    times = {"multi": [], "separate": []}
    for _ in range(args.rounds):
        for name, f in (("multi", run_multi), ("separate", run_separate)):
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    print(f"{args.matrix.split('/')[-1]} nnz {S.nnz} heads {H} F {F}: multi "
          f"{best['multi'] * 1e3:.2f} ms, separate {best['separate'] * 1e3:.2f} ms, "
          f"multi / separate {best['multi'] / best['separate']:.2f}")


if __name__ == "__main__":
    main()
