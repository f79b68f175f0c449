"""FusedMM strategies on p ranks: time, phase breakdown, and counted vs modelled words.

Run under the installed MPI, e.g.::

    .venv/bin/mpiexec -n 4 .venv/bin/python experiments/fusedmm_strategies.py \
        --n 65536 --nnz-per-row 32 --r 128 --markdown results/fusedmm-p4.md

For every divisor c of p (or --c) and every strategy it distributes S once per c, times
FusedMMA (best of --repeat after a warm-up) and prints one JSON line per measurement (rank 0).
With --matrix it uses a Matrix Market file (e.g. ../shared/data/metis-mdual.mtx.gz) instead
of a generated Erdos-Renyi matrix. --markdown writes the table that goes into the README.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
from mpi4py import MPI

import distmm
from distmm import costmodel
from distmm.bench import measure, random_blocks
from distmm.generate import erdos_renyi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--nnz-per-row", type=int, default=32)
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--matrix", help="Matrix Market file instead of an Erdos-Renyi matrix")
    ap.add_argument("--c", default="all", help="comma-separated c values, or 'all' divisors")
    ap.add_argument("--op", default="fusedmm-a", choices=["fusedmm-a", "fusedmm-b"])
    ap.add_argument("--strategies", default="none,reuse,fusion")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", help="write a markdown table here (rank 0)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    cs = [c for c in range(1, p + 1) if p % c == 0] if args.c == "all" else [
        int(x) for x in args.c.split(",")]
    if args.matrix:
        from distmm.io import read_matrix_market

        source = read_matrix_market(args.matrix, comm)
        label = os.path.basename(args.matrix)
    else:
        source = erdos_renyi(args.n, args.n, args.nnz_per_row, args.seed, comm)
        label = f"ER n={args.n} d={args.nnz_per_row}"
    rows = []
    for c in cs:
        obj = distmm.distribute(source, comm, c=c, dtype=np.dtype(args.dtype), seed=args.seed)
        A_loc, B_loc = random_blocks(obj, args.r, args.seed)
        for strategy in args.strategies.split(","):
            rec = measure(obj, args.op, A_loc, B_loc, args.r, strategy, args.repeat)
            m, n = obj.shape
            model = costmodel.dense_shift_15d_exact(args.op.replace("-", "_"), m, n, args.r, p,
                                                    c, strategy)
            rec.update(matrix=label, threads=int(os.environ.get("NUMBA_NUM_THREADS", "0")),
                       model_words=costmodel.total(model))
            if comm.rank == 0:
                print(json.dumps(rec, sort_keys=True), flush=True)
            rows.append(rec)
    if comm.rank == 0 and args.markdown:
        write_markdown(args.markdown, rows, label, p)


def write_markdown(path: str, rows: list[dict], label: str, p: int) -> None:
    """The README table: one line per (c, strategy)."""
    head = ("| p | c | strategy | time (s) | GFLOP/s | replication s | propagation s | "
            "reduction s | compute s | words/rank counted | words/rank model |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        ph = r["phases"]

        def sec(name, ph=ph):
            return f"{ph.get(name, {}).get('seconds', 0.0):.4f}"
        words = sum(ph.get(k, {}).get("words_sent", 0)
                    for k in ("replication", "propagation", "reduction"))
        lines.append(f"| {p} | {r['c']} | {r['strategy']} | {r['seconds']:.4f} | "
                     f"{r['gflops']:.2f} | {sec('replication')} | {sec('propagation')} | "
                     f"{sec('reduction')} | {sec('compute')} | {int(words)} | "
                     f"{int(r['model_words'])} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(f"{label}, r = {rows[0]['r'] if rows else '?'}, {rows[0]['dtype']}, "
                 f"{platform.processor() or platform.machine()}\n\n" + head
                 + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
