"""Runs launched without thread settings: numba's count per rank against distmm's share.

numba gives each process as many threads as the CPUs it may run on, so ranks that an
unbinding launcher (MPICH's ``mpiexec``) starts on one node each run that many;
:func:`distmm.kernels.threads.settle` (called by ``distmm.distribute``) gives each rank its
share of the node instead. This runs the same jobs both ways, as a user launches them
(``mpiexec -n P``, no thread variables), in processes that take turns:

* "numba": ``NUMBA_NUM_THREADS`` set to the CPUs of this process, the count numba picks by
  itself, which distmm then keeps (what every run got before distmm set the count);
* "distmm": no variable, distmm's share.

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

SETTINGS = ("numba", "distmm")
CALLS = (("cora-adjacency", 16, 300), ("cora-adjacency", 128, 300),
         ("movielens-100k-ratings", 32, 300), ("metis-mdual", 32, 5),
         ("genes-pubmed", 32, 5))


def setting_env(setting: str) -> dict:
    """This process's environment without thread variables, and with numba's own count for
    "numba"."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
    if setting == "numba":
        env["NUMBA_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    return env


def fusedmm_call(matrix: str, r: int, calls: int, p: int, env: dict) -> dict:
    """Per-call microseconds of a FusedMMA loop (call, kernels, messages), under checks="once"."""
    cmd = [os.path.join(apps.BIN, "mpiexec"), "-n", str(p), sys.executable,
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
    rows: dict[tuple, list[dict]] = {}
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
    print("\n| p | case | numba's count: time (kernels) | distmm's share: time (kernels) | "
          "numba / distmm |")
    print("|---|---|---|---|---|")
    for (p, case), cells in rows.items():
        if case[0] == "fusedmm":
            name, time_key, kernel_key, unit, scale = (f"FusedMMA {case[1]}, r = {case[2]}",
                                                       "call_us", "kernels_us", "us", 1.0)
        else:
            name, time_key, kernel_key, unit, scale = (f"{case[0]} epoch", "epoch_s",
                                                       "kernels_s", "ms", 1e3)
        best = {s: (min(r[time_key] for r in cells[s]) * scale,
                    min(r[kernel_key] for r in cells[s]) * scale) for s in SETTINGS}
        print(f"| {p} | {name} | {best['numba'][0]:.4g} {unit} ({best['numba'][1]:.4g}) | "
              f"{best['distmm'][0]:.4g} {unit} ({best['distmm'][1]:.4g}) | "
              f"{best['numba'][0] / best['distmm'][0]:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
