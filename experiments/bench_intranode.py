"""MPICH's single-copy path between the ranks of a node (``MPIR_CVAR_CH4_CMA_ENABLE``), on and
off, on the shifts of whole distributed calls.

MPICH reads the switch once, when MPI is initialised, so the two settings run in jobs of their
own (``mpiexec -n P``, one numba thread per rank), taking turns: round 1 runs the switch off
then on, round 2 on then off, and so on. Each job first swaps messages of 64 KiB to 32 MiB
between rank pairs (``Sendrecv``, the primitive of a cyclic shift; best of 10), then, for every
matrix (the API's defaults: 1.5D dense shifting, c = 1), dtype, r and operation, times
``--calls`` calls after two warm-ups and keeps the best, split into the local kernels, the
shifts (phase ``propagation``) and the rest. The table gives each setting's best over rounds
and the median over rounds of the per-round ratio on / off (below 1: single copy is faster).

Run from the repository root (it launches its own jobs)::

    DISTMM_DATA=../shared/data .venv/bin/python experiments/bench_intranode.py \\
        --matrices er-65536,metis-mdual --rs 16,128 --dtypes float32,float64 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

from distmm.intranode import VARIABLE  # noqa: E402

SIZES = (1 << 16, 1 << 20, 1 << 23, 1 << 25)  # bytes per message


def worker(args) -> None:
    """One job: the message sizes, then every case (collective)."""
    import distmm

    distmm.prepare_process()  # keeps the driver's value: "environment"

    # isort: split
    from mpi4py import MPI

    from distmm.core.coo import CooShare

    comm = MPI.COMM_WORLD
    rank, p = comm.rank, comm.size
    if rank == 0:  # what this job's MPI read: the driver's value, which distmm keeps
        e2e.emit({"kind": "job", "value": os.environ.get(VARIABLE),
                  "state": distmm.intranode.STATE})
    for size in SIZES:
        a = np.ones(size // 8)
        b = np.empty_like(a)
        best = float("inf")
        for _ in range(10):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Sendrecv(a, (rank + 1) % p, 0, b, (rank - 1) % p, 0)
            best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        if rank == 0:
            e2e.emit({"kind": "message", "bytes": size, "seconds": best})
    for matrix in args.matrices:
        S_global = e2e.load_matrix(matrix) if rank == 0 else None
        for dtype in args.dtypes:
            share = CooShare.from_scipy(S_global, comm, root=0)
            with distmm.distribute(share, comm, dtype=dtype) as S:
                for r in args.rs:
                    calls = e2e.api_case(S, r)[3]
                    for op in args.ops:
                        fn = calls[op]
                        fn()
                        fn()
                        best, split = e2e.best_split(comm, S, fn, args.calls,
                                                     ("compute", "propagation"))
                        if rank == 0:
                            e2e.emit({"kind": "call", "matrix": matrix, "dtype": dtype,
                                      "r": r, "op": op, "seconds": best,
                                      "compute": float(split[0]),
                                      "propagation": float(split[1])})


def launch(switch: str, args) -> list[dict]:
    """One job with the switch set to ``switch``; its records, each tagged with it."""
    env = e2e._rank_env(args.p, args)
    env[VARIABLE] = switch
    cmd = [os.path.join(e2e.BIN, "mpiexec"), "-n", str(args.p), sys.executable, "-m", "mpi4py",
           os.path.abspath(__file__), "--worker", "--matrices", ",".join(args.matrices),
           "--rs", ",".join(map(str, args.rs)), "--dtypes", ",".join(args.dtypes),
           "--ops", ",".join(args.ops), "--calls", str(args.calls)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if res.returncode != 0:
        raise SystemExit(f"bench_intranode: {' '.join(cmd)} failed:\n{res.stderr}")
    return [{**json.loads(line), "switch": switch} for line in res.stdout.splitlines()
            if line.startswith("{")]


def _key(rec: dict) -> tuple:
    if rec["kind"] == "message":
        return ("message", rec["bytes"])
    return ("call", rec["matrix"], rec["dtype"], rec["r"], rec["op"])


def table(records: list[dict]) -> str:
    """The markdown tables: messages, then calls; best per setting over rounds, and the
    median over rounds of on / off."""
    by: dict[tuple, dict[str, dict[int, dict]]] = {}
    for rec in records:
        if rec["kind"] == "job":
            continue
        by.setdefault(_key(rec), {}).setdefault(rec["switch"], {})[rec["round"]] = rec
    msg = ["| message | off: best (ms) | on: best (ms) | on / off (median of rounds) |",
           "|---|---:|---:|---:|"]
    calls = ["| matrix | dtype | r | op | off: best (ms), shifts | on: best (ms), shifts | "
             "on / off (median of rounds) |", "|---|---|---:|---|---|---|---:|"]
    for key, sides in by.items():
        off, on = sides.get("0", {}), sides.get("1", {})
        rounds = sorted(set(off) & set(on))
        if not rounds:
            continue
        ratio = float(np.median([on[k]["seconds"] / off[k]["seconds"] for k in rounds]))
        b_off = min(off.values(), key=lambda x: x["seconds"])
        b_on = min(on.values(), key=lambda x: x["seconds"])
        if key[0] == "message":
            msg.append(f"| {key[1] / 2**20:g} MiB | {b_off['seconds'] * 1e3:.3f} | "
                       f"{b_on['seconds'] * 1e3:.3f} | {ratio:.2f} |")
        else:
            def cell(b):
                return f"{b['seconds'] * 1e3:.2f}, {b['propagation'] * 1e3:.2f}"
            calls.append(f"| {key[1]} | {key[2]} | {key[3]} | {key[4]} | {cell(b_off)} | "
                         f"{cell(b_on)} | {ratio:.2f} |")
    return "\n".join(msg) + "\n\n" + "\n".join(calls) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--matrices", type=e2e.csv_list(str), default=["er-65536", "metis-mdual"])
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 128])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32", "float64"])
    ap.add_argument("--ops", type=e2e.csv_list(str), default=["fusedmm_a", "spmm_a"])
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--p", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="numba threads split between ranks")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--jsonl", help="append every record here")
    ap.add_argument("--markdown", help="write the tables here")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    records = []
    for rnd in range(args.rounds):
        for switch in ("0", "1") if rnd % 2 == 0 else ("1", "0"):
            t0 = time.perf_counter()
            recs = [{**rec, "round": rnd} for rec in launch(switch, args)]
            records += recs
            print(f"round {rnd + 1}/{args.rounds} {VARIABLE}={switch}: "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as fh:
                    fh.writelines(json.dumps(rec) + "\n" for rec in recs)
    text = table(records)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
