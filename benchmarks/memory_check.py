"""The memory model against the operating system: one table row per (family, c, strategy).

For every family, strategy and valid c at the launching rank count, places an Erdos-Renyi
matrix and runs one FusedMM (:func:`distmm.perf.memory_peak.measure_peak`), then prints, as a
Markdown table on rank 0, the fullest rank's measured peak resident set above its baseline, the
model's predicted peak and their ratio (docs/memory.md). Run under mpiexec, e.g.::

    NUMBA_NUM_THREADS=1 mpiexec -n 4 .venv/bin/python benchmarks/memory_check.py --n 64000
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import distmm
from distmm.io.generate import erdos_renyi
from distmm.perf import costmodel
from distmm.perf.memory_peak import measure_peak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64000, help="rows and columns of S")
    ap.add_argument("--nnz-per-row", type=int, default=8)
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--op", default="fusedmm_a", choices=list(distmm.core.memory.OPS))
    ap.add_argument("--header", action="store_true", help="print the table's header first")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    if args.header and comm.rank == 0:
        print("| p | algorithm | c | strategy | measured peak (MiB) | model (MiB) | "
              "measured / model |")
        print("|---:|---|---:|---|---:|---:|---:|")
    for algorithm, cls in distmm.ALGORITHMS.items():
        for c in costmodel.valid_cs(algorithm, p, args.r):
            # the sparsity-aware family's default partition runs on rank 0 with the
            # partitioner's own memory, outside the per-rank model (docs/memory.md): its layout
            # in natural-order blocks is what is measured
            permute = "blocks" if getattr(cls, "needs_pattern", False) else "auto"
            for strategy in cls.strategies:
                peak, model = measure_peak(
                    algorithm, lambda: erdos_renyi(args.n, args.n, args.nnz_per_row, 5, comm),
                    comm, c, args.r, args.op, strategy, np.dtype(args.dtype), permute=permute)
                if peak is None:
                    raise SystemExit("measuring the peak needs Linux's /proc/self/clear_refs")
                peaks = comm.gather(peak, root=0)
                if comm.rank == 0:
                    top = max(peaks)
                    print(f"| {p} | {algorithm} | {c} | {strategy} | {top / 2**20:.1f} | "
                          f"{model.peak / 2**20:.1f} | {top / model.peak:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
