"""Runs launched without thread settings: the libraries' own counts per rank against distmm's.

numba and OpenBLAS each give a process as many threads as the CPUs it may run on, so ranks that
an unbinding launcher (MPICH's ``mpiexec``) starts on one node each run that many.
``distmm.distribute`` gives each rank its share of the node as numba threads
(:mod:`distmm.kernels.threads`), and ``import distmm`` does the same for OpenBLAS where the
launcher says several ranks share the node (:mod:`distmm.blas_threads`). This runs the same
jobs three ways, as a user launches them (``mpiexec -n P``, no thread variables), in processes
that take turns:

* "own": ``NUMBA_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` set to the CPUs of this process,
  the counts both libraries pick by themselves, which distmm then keeps (what every run got
  before distmm set them);
* "blas": only ``OPENBLAS_NUM_THREADS`` so set (numba gets distmm's share);
* "distmm": no variable, distmm's share for both.

Cases: FusedMMA calls (``bench_call_overhead.py``: the call time, the kernels, the messages,
per call, best of its rounds) on real matrices, and the applications (``distmm gat train`` on
Cora, ``distmm als`` on MovieLens 100K: median epoch and the epoch's kernel seconds), at
p = 2 (and p = 1, where both ways give one rank every CPU, as a control).

Run from the repository root::

    DISTMM_DATA=../shared/data .venv/bin/python experiments/bench_rank_threads.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_blas_threads as apps  # noqa: E402

from distmm.cores import cpus  # noqa: E402

SETTINGS = ("own", "blas", "distmm")
CALLS = (("cora-adjacency", 16, 300), ("cora-adjacency", 128, 300),
         ("movielens-100k-ratings", 32, 300), ("metis-mdual", 32, 5),
         ("genes-pubmed", 32, 5))


def setting_env(setting: str) -> dict:
    """This process's environment without thread variables, then the libraries' own counts
    for "own" (numba and OpenBLAS) and "blas" (OpenBLAS only)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    own = str(cpus())
    if setting == "own":
        env["NUMBA_NUM_THREADS"] = own
    if setting in ("own", "blas"):
        env["OPENBLAS_NUM_THREADS"] = own
    return env


def fusedmm_call(matrix: str, r: int, calls: int, p: int, env: dict) -> dict:
    """Per-call microseconds of a FusedMMA loop (call, kernels, messages), under checks="once"."""
    cmd = [os.path.join(apps.BIN, "mpiexec"), "-n", str(p), sys.executable, "-m", "mpi4py",
           os.path.join(HERE, "bench_call_overhead.py"), "--matrix",
           os.path.join(apps.DATA, matrix + ".mtx.gz"), "--r", str(r), "--calls", str(calls),
           "--rounds", "2"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"bench_rank_threads: {' '.join(cmd)} failed:\n{res.stderr}")
    row = next(x for x in res.stdout.splitlines() if x.startswith("| once |"))
    call, compute, comm = (float(x) for x in row.split("|")[2:5])
    return {"call_us": call, "kernels_us": compute, "messages_us": comm}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--ps", default="2", help="rank counts, comma-separated (1 is a control)")
    args = ap.parse_args(argv)
    ps = [int(x) for x in args.ps.split(",")]
    rows: dict[tuple, dict[str, list[dict]]] = {}
    for rnd in range(args.rounds):
        order = SETTINGS if rnd % 2 == 0 else SETTINGS[::-1]
        for p in ps:
            cases = [("fusedmm", m, r, n) for m, r, n in CALLS] + [("gat",), ("als",)]
            for case in cases:
                for setting in order:
                    env = setting_env(setting)
                    if case[0] == "fusedmm":
                        rec = fusedmm_call(*case[1:], p, env)
                    else:
                        rec = apps.run_app(case[0], p, env, args.epochs)
                    rows.setdefault((p, case[:3]), {}).setdefault(setting, []).append(rec)
                    print(json.dumps({"p": p, "case": case[:3], "setting": setting,
                                      "round": rnd, **rec}), flush=True)
    print("\n| p | case | libraries' own counts: time (kernels) | OpenBLAS's own count: time "
          "(kernels) | distmm's share: time (kernels) | own / distmm | OpenBLAS's / distmm |")
    print("|---|---|---|---|---|---|---|")
    for (p, case), cells in rows.items():
        if case[0] == "fusedmm":
            name, time_key, kernel_key, unit, scale = (f"FusedMMA {case[1]}, r = {case[2]}",
                                                       "call_us", "kernels_us", "us", 1.0)
        else:
            name, time_key, kernel_key, unit, scale = (f"{case[0]} epoch", "epoch_s",
                                                       "kernels_s", "ms", 1e3)
        best = {s: (min(r[time_key] for r in cells[s]) * scale,
                    min(r[kernel_key] for r in cells[s]) * scale) for s in SETTINGS}
        cols = " | ".join(f"{best[s][0]:.4g} {unit} ({best[s][1]:.4g})" for s in SETTINGS)
        print(f"| {p} | {name} | {cols} | {best['own'][0] / best['distmm'][0]:.2f}x | "
              f"{best['blas'][0] / best['distmm'][0]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
