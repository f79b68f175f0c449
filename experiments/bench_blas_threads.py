"""GAT and ALS epochs with OpenBLAS's default thread spin against distmm's (docs/guide.md).

``import distmm`` sets ``OPENBLAS_THREAD_TIMEOUT=4`` where the environment has no value
(:mod:`distmm.blas_threads`). This measures what that does to the applications, which
alternate numpy's BLAS with distmm's kernels: ``distmm gat train`` on Cora and ``distmm als``
on MovieLens 100K, each run as a user runs it (``mpiexec -n P distmm ...``) with the variable
at OpenBLAS's own default (28: about 2**28 clock ticks of spinning after each call, what a
run got before distmm set it) and at distmm's (4), in processes that take turns, P = 1 (all
numba threads in one rank) and P = 2 (one per rank). Each run reports its median epoch after
the first few, and the median seconds of distmm's kernels in an epoch (the "compute" phase,
which is where the waiting for a core shows). Also, in this process, one SpMM on Cora right
after a numpy matrix product, at each setting, in a child process per setting.

Run from the repository root::

    DISTMM_DATA=../shared/data .venv/bin/python experiments/bench_blas_threads.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.abspath(os.environ.get("DISTMM_DATA",
                                      os.path.join(HERE, "..", "..", "shared", "data")))
BIN = os.path.dirname(sys.executable)
SETTINGS = ("28", "4")  # OpenBLAS's default spin, distmm's


def app_command(app: str, p: int, out: str, epochs: int) -> list[str]:
    base = [os.path.join(BIN, "mpiexec"), "-n", str(p), os.path.join(BIN, "distmm")]
    if app == "gat":
        return base + ["gat", "train", "--graph", f"{DATA}/cora-adjacency.mtx.gz",
                       "--features", f"{DATA}/cora-features.mtx.gz",
                       "--labels", f"{DATA}/cora-labels.txt", "--out", out,
                       "--epochs", str(epochs), "--patience", str(epochs)]
    return base + ["als", "--ratings", f"{DATA}/movielens-100k-ratings.mtx.gz",
                   "--epochs", str(epochs)]


def blas_env(timeout: str, p: int, threads: int) -> dict:
    """The environment of a run with OPENBLAS_THREAD_TIMEOUT=timeout, ``threads`` numba
    threads shared by p ranks."""
    return dict(os.environ, OPENBLAS_THREAD_TIMEOUT=timeout,
                NUMBA_NUM_THREADS=str(max(1, threads // p)))


def run_app(app: str, p: int, env: dict, epochs: int) -> dict:
    """One run of ``app`` on p ranks in environment ``env``: median epoch and kernel seconds
    over the epochs after the third, and the last epoch's test accuracy (GAT) or training RMSE
    (ALS)."""
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(app_command(app, p, os.path.join(tmp, "w.h5"), epochs),
                             capture_output=True, text=True, env=env, cwd=tmp, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"bench_blas_threads: {app} at p = {p} failed:\n{res.stderr}")
    events = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    kind, kernels = (("epoch", "seconds_compute") if app == "gat"
                     else ("als-epoch", "fusedmm_compute_seconds"))
    epochs_ = [e for e in events if e.get("event") == kind]
    last = epochs_[-1]["test_acc" if app == "gat" else "train_rmse"]
    epochs_ = epochs_[3:]
    return {"epoch_s": statistics.median(e["seconds"] for e in epochs_),
            "kernels_s": statistics.median(e[kernels] for e in epochs_), "result": last}


KERNEL_AFTER_BLAS = r"""
import sys, time
import distmm, numpy as np, scipy.io, gzip
from mpi4py import MPI
with gzip.open(sys.argv[1]) as fh:
    M = scipy.io.mmread(fh).tocsr()
S = distmm.distribute(distmm.CooShare.from_scipy(M, MPI.COMM_WORLD, root=0), MPI.COMM_WORLD)
B, out = S.dense("b", 8, fill=distmm.hashed_normal(2, 0.1)), S.dense("a", 8)
X = np.random.default_rng(0).standard_normal((2708, 512)).astype(np.float32)
for _ in range(5):
    S.spmm_a(B, out=out)
for label, work in (("alone", lambda: None), ("after", lambda: X @ X[:512].T)):
    S.stats.reset()
    for _ in range(200):
        work()
        S.spmm_a(B, out=out)
    print(label, S.stats.seconds["compute"] / 200)
"""


def kernel_after_blas(timeout: str, threads: int) -> dict:
    """Seconds of one SpMMA (Cora, r = 8) alone and right after a numpy matrix product."""
    env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT=timeout, NUMBA_NUM_THREADS=str(threads))
    res = subprocess.run([sys.executable, "-c", KERNEL_AFTER_BLAS,
                          f"{DATA}/cora-adjacency.mtx.gz"], capture_output=True, text=True,
                         env=env, timeout=600)
    if res.returncode != 0:
        raise SystemExit(f"bench_blas_threads: the kernel probe failed:\n{res.stderr}")
    return {line.split()[0]: float(line.split()[1]) for line in res.stdout.splitlines()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2, help="numba threads per node")
    args = ap.parse_args(argv)
    rows: dict[tuple, list[dict]] = {}
    for rnd in range(args.rounds):
        order = SETTINGS if rnd % 2 == 0 else SETTINGS[::-1]
        for app in ("gat", "als"):
            for p in (1, 2):
                for timeout in order:
                    rec = run_app(app, p, blas_env(timeout, p, args.threads), args.epochs)
                    rows.setdefault((app, p, timeout), []).append(rec)
                    print(json.dumps({"app": app, "p": p, "timeout": timeout, "round": rnd,
                                      **rec}), flush=True)
        for timeout in order:
            rec = kernel_after_blas(timeout, args.threads)
            rows.setdefault(("spmm", 1, timeout), []).append(rec)
            print(json.dumps({"app": "spmm-after-blas", "timeout": timeout, "round": rnd,
                              **rec}), flush=True)
    print("\n| run | p | OPENBLAS_THREAD_TIMEOUT=28: epoch / kernels (ms) | =4: epoch / "
          "kernels (ms) | epoch 28 / 4 | last epoch's result, every run |")
    print("|---|---|---|---|---|---|")
    for app in ("gat", "als"):
        for p in (1, 2):
            cells = {t: rows[(app, p, t)] for t in SETTINGS}

            def best(t, key, cells=cells):
                return min(r[key] for r in cells[t]) * 1e3

            # one value when both settings train the same model, as they should
            results = sorted({format(r["result"], ".6g") for t in SETTINGS for r in cells[t]})

            print(f"| {app} | {p} | {best('28', 'epoch_s'):.1f} / {best('28', 'kernels_s'):.1f} "
                  f"| {best('4', 'epoch_s'):.1f} / {best('4', 'kernels_s'):.1f} | "
                  f"{best('28', 'epoch_s') / best('4', 'epoch_s'):.2f}x | "
                  f"{', '.join(results)} |")
    for t in SETTINGS:
        recs = rows[("spmm", 1, t)]
        print(f"\nSpMMA on Cora, r = 8, OPENBLAS_THREAD_TIMEOUT={t}: alone "
              f"{min(r['alone'] for r in recs) * 1e6:.0f} us, right after a numpy matrix "
              f"product {min(r['after'] for r in recs) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
