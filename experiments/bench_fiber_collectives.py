"""Replication and reduction as pairwise exchanges against MPI's collectives, taking turns.

The fiber all-gather (phase "replication") and reduce-scatter (phase "reduction") of every
family with c > 1 move large blocks as pairwise exchanges of point-to-point messages
(distmm/core/comm.py, ``PAIRWISE_BYTES``). This benchmark runs the same distributed calls
with that on and off (off: every block through MPI's ``Allgatherv`` and ``Reduce_scatter``,
patched in this process), in alternating rounds on the same distributed object, so that a
shared machine's slow phases hit both alike. It reports, per case, the best call of each
round (the median over rounds) and the replication and reduction seconds of that call (the
slowest rank's), with the pairwise/MPI ratio of the whole call::

    mpiexec -n 2 python experiments/bench_fiber_collectives.py --matrices metis-mdual,er-65536
    mpiexec -n 4 python experiments/bench_fiber_collectives.py --families 25d-dense-replicate
    python experiments/bench_fiber_collectives.py --table run.jsonl    # the docs' table

Matrices are bench_end_to_end's names (../shared/data, or ``er-N``). Cases: every family of
``--families`` at every c > 1 that is valid at this p, FusedMMA (the family's default
strategy), SpMMA and SDDMM, at each dtype and width. One JSON line per case goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402

PHASES = ("replication", "reduction", "compute", "propagation")


def taking_turns(comm, S, call, limits: dict, rounds: int, calls: int) -> dict:
    """Each variant's median-round best call with its phases, and the pairwise/MPI ratio of
    each round, the variants taking turns (reversed every other round). Collective."""
    from distmm.core import comm as comm_mod

    default = comm_mod.PAIRWISE_BYTES
    got = {k: [] for k in limits}
    try:
        for rnd in range(rounds):
            for variant in (list(limits) if rnd % 2 == 0 else list(limits)[::-1]):
                comm_mod.PAIRWISE_BYTES = limits[variant]
                call()  # the first call of a variant allocates what MPI's collective needs
                best, split = e2e.best_split(comm, S, call, calls, PHASES)
                got[variant].append((best, dict(zip(PHASES, split.tolist(), strict=True))))
    finally:
        comm_mod.PAIRWISE_BYTES = default
    rec = {}
    for variant, runs in got.items():
        times = [t for t, _ in runs]
        k = int(np.argsort(times)[len(times) // 2])
        rec[variant] = {"seconds": times[k], **runs[k][1]}
    rec["ratios"] = [a[0] / b[0] for a, b in zip(got["pairwise"], got["mpi"], strict=True)]
    return rec


def table(path: str) -> str:
    """A markdown table of the JSON lines in ``path``: a row per matrix, family, c, dtype and
    r, a column per operation with its whole call through MPI's collectives and pairwise
    (median rounds, ms) and the pairwise/MPI ratio (median over rounds, and the rounds'
    range)."""
    recs = [json.loads(line) for line in open(path)]
    ops = list(dict.fromkeys(d["op"] for d in recs))
    cases: dict = {}
    for d in recs:
        key = (d["matrix"], f"{d['family']}, {d['c']}", d["dtype"], d["r"])
        ratios = d["ratios"]
        cases.setdefault(key, {})[d["op"]] = (
            f"{1e3 * d['mpi']['seconds']:.1f} -> {1e3 * d['pairwise']['seconds']:.1f}: "
            f"{np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
    rows = ["| matrix | family, c | dtype | r | " + " | ".join(ops) + " |",
            "|---|---|---|---|" + "---|" * len(ops)]
    for key, cells in cases.items():
        rows.append("| " + " | ".join(map(str, key)) + " | "
                    + " | ".join(cells.get(op, "") for op in ops) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    import distmm  # before MPI: single-copy messages between the ranks of a node

    # isort: split
    from mpi4py import MPI

    from distmm.core import comm as comm_mod
    from distmm.core.coo import CooShare
    from distmm.perf import costmodel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrices", default="metis-mdual,er-65536")
    ap.add_argument("--families", default="15d-dense-shift,25d-dense-replicate")
    ap.add_argument("--rs", default="32,128")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--ops", default="fusedmm_a,spmm_a,sddmm")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--table", metavar="JSONL", help="print the markdown table of a run's "
                    "output and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    comm = MPI.COMM_WORLD
    limits = {"pairwise": comm_mod.PAIRWISE_BYTES, "mpi": 1 << 62}
    for matrix in args.matrices.split(","):
        S_global = e2e.load_matrix(matrix) if comm.rank == 0 else None
        grids = [(name, c) for name in args.families.split(",")
                 for c in costmodel.valid_cs(name, comm.size) if c > 1]
        for (name, c), dtype in ((g, d) for g in grids for d in args.dtypes.split(",")):
            share = CooShare.from_scipy(S_global, comm, root=0)
            with distmm.distribute(share, comm, algorithm=name, c=c, dtype=dtype) as S:
                del share
                for r in map(int, args.rs.split(",")):
                    A, B, outs, calls = e2e.api_case(S, r)
                    for op in args.ops.split(","):
                        rec = taking_turns(comm, S, calls[op], limits, args.rounds, args.calls)
                        if comm.rank == 0:
                            print(json.dumps({"matrix": matrix, "family": name, "c": c,
                                              "p": comm.size, "dtype": dtype, "r": r,
                                              "op": op, "pairwise_bytes": limits["pairwise"],
                                              **rec}), flush=True)
                    del A, B, outs, calls
                    S.release_buffers()
    return 0


if __name__ == "__main__":
    sys.exit(main())
