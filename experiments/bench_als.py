"""ALS benchmarks for docs/als.md (run under mpiexec; rank 0 prints).

``rmse``: per-epoch train/test RMSE of distributed ALS on a ratings file next to the exact
serial solver (numpy.linalg.solve per row) and a "global mean + user/item bias" baseline.

``breakdown``: Figure 9 of the paper for ALS -- time per epoch split into FusedMM communication,
FusedMM compute and the rest, for every family and strategy at every valid c (the docs keep
each one's best c), on a ratings file or a planted synthetic problem. At p = 1 the same run
also times the single-node numpy/scipy ALS with the same CG iterations. Variants are run in
rounds (every variant once per round, ``--rounds`` rounds) and each variant's median epoch
(with that epoch's own split) over all rounds is reported, so that load from other users of
the machine spreads over all of them.

    mpiexec -n 2 python experiments/bench_als.py rmse --ratings ml100k.mtx.gz
    mpiexec -n 4 python experiments/bench_als.py breakdown --planted 16384 --rank 32
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

import distmm
from distmm import costmodel, generate
from distmm.apps import als
from distmm.apps.als_io import read_ratings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "mpi"))
import als_reference as ref  # noqa: E402  (serial references shared with the tests)

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


def _configs(p: int, r: int, only: str | None):
    for name, cls in distmm.ALGORITHMS.items():
        if only and name not in only.split(","):
            continue
        for c in costmodel.valid_cs(name, p, r):
            for strategy in cls.strategies:
                yield name, c, strategy


def _serial_epochs(train: sp.csr_matrix, args) -> list[float]:
    """Seconds of each epoch after the first of the numpy/scipy CG ALS."""
    A0, B0 = ref.init(*train.shape, args.rank, args.seed)
    stamps = [time.perf_counter()]
    ref.scipy_cg_als(train, A0, B0, args.lam, args.epochs, args.cg_iters,
                     callback=lambda *_: stamps.append(time.perf_counter()))
    return list(np.diff(stamps)[1:])


def cmd_breakdown(args) -> None:
    S, share = load(args)
    p = COMM.Get_size()
    configs = list(_configs(p, args.rank, args.algorithms))
    kw = {"rank": args.rank, "lam": args.lam, "epochs": args.epochs, "cg_iters": args.cg_iters,
          "test_fraction": 0.0, "seed": args.seed}
    runs: dict = {cfg: [] for cfg in configs}
    serial: list[float] = []
    train = ref.split(S, 0.0, args.seed)[0] if p == 1 else None
    for _ in range(args.rounds):
        for cfg in configs:
            name, c, strategy = cfg
            res = als.fit(share, COMM, algorithm=name, c=c, strategy=strategy, **kw)
            runs[cfg] += res.history[1:]  # epoch 1 builds S^T copies and warms caches
            res.close()
        if p == 1:
            serial += _serial_epochs(train, args)
    nnz = int(S.nnz)
    rows = []
    for (name, c, strategy), hist in runs.items():
        # The epoch of median length, with its own split (medians of the parts do not add up).
        mid = sorted(hist, key=lambda h: h["seconds"])[len(hist) // 2]
        med = {k: mid[k] for k in
               ("seconds", "fusedmm_comm_seconds", "fusedmm_compute_seconds", "other_seconds")}
        rows.append({"algorithm": name, "c": c, "strategy": strategy, **med})
        emit({"event": "als-breakdown", "p": p, "m": S.shape[0], "n": S.shape[1], "nnz": nnz,
              "rank": args.rank, "cg_iters": args.cg_iters, "epochs_timed": len(hist),
              **rows[-1]})
    if serial:
        emit({"event": "scipy-als", "p": 1, "seconds": float(np.median(serial)),
              "epochs_timed": len(serial)})
    if COMM.rank == 0:
        print("| p | family | strategy | best c | epoch s | FusedMM comm | FusedMM compute "
              "| other |")
        print("|---|---|---|---|---|---|---|---|")
        best: dict = {}
        for row in rows:
            key = (row["algorithm"], row["strategy"])
            if key not in best or row["seconds"] < best[key]["seconds"]:
                best[key] = row
        for (name, strategy), row in sorted(best.items(), key=lambda kv: kv[1]["seconds"]):
            print(f"| {p} | {name} | {strategy} | {row['c']} | {row['seconds']:.4f} | "
                  f"{row['fusedmm_comm_seconds']:.4f} | {row['fusedmm_compute_seconds']:.4f} | "
                  f"{row['other_seconds']:.4f} |")
        if serial:
            print(f"| 1 | numpy/scipy (serial) | - | - | {np.median(serial):.4f} | - | - | - |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["rmse", "breakdown"])
    ap.add_argument("--ratings", default="/work/shared/data/movielens-100k-ratings.mtx.gz")
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
    ap.add_argument("--algorithms", help="breakdown: comma-separated families (default all)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    t0 = time.perf_counter()
    {"rmse": cmd_rmse, "breakdown": cmd_breakdown}[args.mode](args)
    emit({"event": "done", "mode": args.mode, "wall_seconds": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
