"""ALS benchmarks for docs/als.md (run under mpiexec; rank 0 prints).

``rmse``: per-epoch train/test RMSE of distributed ALS on a ratings file next to the exact
serial solver (numpy.linalg.solve per row) and a "global mean + user/item bias" baseline.

``scipy``: seconds per epoch of the single-node numpy/scipy ALS (the same batched CG, with the
FusedMM written as a scipy SDDMM of the nonzeros and a CSR product), the baseline beside which
docs/als.md puts distmm's p = 1 epochs; median over ``--rounds`` runs of ``--epochs`` epochs,
the first epoch of each excluded. Figure 9's split of distmm's own epochs per family, strategy
and c is experiments/app_breakdown.py (the shared runner's records and plot).

    mpiexec -n 2 python benchmarks/bench_als.py rmse --ratings ml100k.mtx.gz
    python benchmarks/bench_als.py scipy --planted 8192 --per-row 64 --rank 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.apps import als
from distmm.apps.als_io import read_ratings
from distmm.io import generate

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "mpi"))
import als_reference as ref  # noqa: E402  (serial references shared with the tests)

# the real matrices: $DISTMM_DATA, else ../shared/data beside the checkout
DATA = os.environ.get("DISTMM_DATA", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))

COMM = MPI.COMM_WORLD


def emit(obj: dict) -> None:
    if COMM.rank == 0:
        print(json.dumps(obj, sort_keys=True), flush=True)


def load(args):
    """(global scipy matrix on every rank, this rank's share)."""
    if args.planted:
        share = generate.planted_low_rank(args.planted, args.planted, 8, args.per_row, 0, COMM,
                                          noise=0.1, pattern="power-law")
    else:
        share = read_ratings(args.ratings, COMM)
    parts = COMM.allgather((share.rows, share.cols, share.vals))
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
    return sp.coo_matrix((vals, (rows, cols)), shape=share.shape), share


def bias_baseline(train: sp.csr_matrix, test: sp.csr_matrix, reg: float = 5.0,
                  passes: int = 10) -> tuple[float, float]:
    """Global mean + regularised user and item biases, fitted by alternating passes."""
    coo = train.tocoo()
    mu = coo.data.mean()
    bu, bi = np.zeros(train.shape[0]), np.zeros(train.shape[1])
    nu = np.bincount(coo.row, minlength=train.shape[0])
    ni = np.bincount(coo.col, minlength=train.shape[1])
    for _ in range(passes):
        bi = np.bincount(coo.col, coo.data - mu - bu[coo.row], train.shape[1]) / (ni + reg)
        bu = np.bincount(coo.row, coo.data - mu - bi[coo.col], train.shape[0]) / (nu + reg)

    def rmse(M):
        c = M.tocoo()
        e = c.data - mu - bu[c.row] - bi[c.col]
        return float(np.sqrt(e @ e / c.nnz))

    return rmse(train), rmse(test)


def cmd_rmse(args) -> None:
    S, share = load(args)
    kw = {"rank": args.rank, "lam": args.lam, "weighted": args.weighted,
          "test_fraction": args.test_fraction, "seed": args.seed}
    res = als.fit(share, COMM, epochs=args.epochs, cg_iters=args.cg_iters,
                  algorithm=args.algorithm, c=args.c, **kw)
    history = res.history
    res.close()
    if COMM.rank != 0:
        return
    train, test = ref.split(S, args.test_fraction, args.seed)
    exact = []
    ref.exact_als(train, *ref.init(*S.shape, args.rank, args.seed), args.lam, args.epochs,
                  args.weighted, callback=lambda e, A, B: exact.append(
                      (ref.rmse(train, A, B), ref.rmse(test, A, B))))
    base = bias_baseline(train, test)
    emit({"event": "bias-baseline", "train_rmse": base[0], "test_rmse": base[1]})
    print(f"| epoch | train RMSE (CG {args.cg_iters}) | test RMSE (CG {args.cg_iters}) | "
          "train RMSE (exact) | test RMSE (exact) |")
    print("|---|---|---|---|---|")
    for h, (tr, te) in zip(history, exact, strict=True):
        print(f"| {h['epoch']} | {h['train_rmse']:.4f} | {h['test_rmse']:.4f} | {tr:.4f} | "
              f"{te:.4f} |")
    print(f"| bias baseline | {base[0]:.4f} | {base[1]:.4f} | | |")


def _serial_epochs(train: sp.csr_matrix, args) -> list[float]:
    """Seconds of each epoch after the first of the numpy/scipy CG ALS."""
    A0, B0 = ref.init(*train.shape, args.rank, args.seed)
    stamps = [time.perf_counter()]
    ref.scipy_cg_als(train, A0, B0, args.lam, args.epochs, args.cg_iters,
                     callback=lambda *_: stamps.append(time.perf_counter()))
    return list(np.diff(stamps)[1:])


def cmd_scipy(args) -> None:
    S, _ = load(args)
    train = ref.split(S, 0.0, args.seed)[0]
    serial = [s for _ in range(args.rounds) for s in _serial_epochs(train, args)]
    emit({"event": "scipy-als", "p": 1, "m": S.shape[0], "n": S.shape[1], "nnz": int(S.nnz),
          "rank": args.rank, "cg_iters": args.cg_iters, "seconds": float(np.median(serial)),
          "epochs_timed": len(serial)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["rmse", "scipy"])
    ap.add_argument("--ratings", default=os.path.join(DATA, "movielens-100k-ratings.mtx.gz"))
    ap.add_argument("--planted", type=int, default=0,
                    help="use a planted n x n power-law problem instead of --ratings")
    ap.add_argument("--per-row", type=int, default=64, help="planted ratings per user")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lambda", type=float, default=0.1, dest="lam")
    ap.add_argument("--weighted", action="store_true")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--cg-iters", type=int, default=3)
    ap.add_argument("--test-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--algorithm", default="15d-dense-shift")
    ap.add_argument("-c", type=int, default=1, help="rmse: replication factor")
    ap.add_argument("--rounds", type=int, default=3, help="scipy: runs of --epochs epochs")
    args = ap.parse_args()
    t0 = time.perf_counter()
    {"rmse": cmd_rmse, "scipy": cmd_scipy}[args.mode](args)
    emit({"event": "done", "mode": args.mode, "wall_seconds": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
