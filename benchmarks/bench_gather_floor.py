"""How close a memory-bound FusedMMA is to the machine: the reference kernel against a bare
loop that only reads the dense rows the kernel gathers.

Run under mpiexec; each rank does the local work of one rank of 1.5D dense shifting at p
ranks on an Erdős–Rényi matrix (n x n, ``--nnz-per-row`` per row, sorted random columns): p
blocks of n/p rows by n/p columns with about nnz-per-row / p entries per row, one per shift,
each with its own n/p x r block of B, and the kernel called on each in turn, as the shifts
do (without the messages). In turns, ``--rounds`` times:

* ``kernel``: the reference model's FusedMMA on every block (its default plan: chunks per
  thread, column panels, prefetch);
* ``gather``: a loop that adds up, for every stored entry in the same order, the row of B it
  gathers (each row's lines prefetched a few entries ahead, which made this loop the fastest
  reader of random rows measured here): nothing but the reads the kernel cannot avoid
  without reusing a row from cache.

Each is timed between barriers (slowest rank). Rank 0 prints each's best and median
seconds, the rows' bytes over that time (GB/s, all ranks together) and the median over
rounds of kernel / gather. A ratio near 1 means the kernel runs at the speed of reading its
rows once, whatever it computes::

    NUMBA_NUM_THREADS=2 .venv/bin/mpiexec -n 1 .venv/bin/python benchmarks/bench_gather_floor.py
    NUMBA_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/bench_gather_floor.py
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
from mpi4py import MPI
from numba import njit, prange

from distmm.core.sparse import CSRBlock
from distmm.kernels.numba_util import prefetch_row
from distmm.kernels.reference import ReferenceModel, _num_chunks

# entries ahead whose rows the gather loop prefetches
AHEAD = 4


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def gather_rows(indices, B, nchunks, sums):
    """sums[c] = the sum of the rows B[indices[t]] over chunk c of the entries (one chunk per
    thread), each row read once."""
    r = B.shape[1]
    nnz = indices.shape[0]
    for c in prange(nchunks):
        lo = nnz * c // nchunks
        hi = nnz * (c + 1) // nchunks
        acc = np.zeros(r, B.dtype)
        for t in range(lo, hi):
            if t + AHEAD < hi:
                prefetch_row(B, indices[t + AHEAD])
            row = B[indices[t]]
            for k in range(r):
                acc[k] += row[k]
        sums[c] = acc.sum()


def er_block(rows: int, cols: int, per_row: int, dtype, rng) -> CSRBlock:
    """A rows x cols block with ``per_row`` random columns per row (repeats summed)."""
    row = np.repeat(np.arange(rows), per_row)
    col = rng.integers(0, cols, size=rows * per_row)
    return CSRBlock.from_coo(row, col, rng.uniform(0.5, 1.5, row.size), (rows, cols), dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--nnz-per-row", type=int, default=32)
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    p, rank = comm.size, comm.rank
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(1000 + rank)
    rows = cols = args.n // p
    per_row = max(1, args.nnz_per_row // p)
    blocks = [er_block(rows, cols, per_row, dtype, rng) for _ in range(p)]
    Bs = [rng.standard_normal((cols, args.r)).astype(dtype) for _ in range(p)]
    A = rng.standard_normal((rows, args.r)).astype(dtype)
    out = np.empty((rows, args.r), dtype)
    model = ReferenceModel()
    nchunks = _num_chunks(rows)
    sums = np.zeros(nchunks)

    def kernel() -> None:
        for S, B in zip(blocks, Bs, strict=True):
            model.fusedmm_a(S, S.data, A, B, out, accumulate=S is not blocks[0])

    def gather() -> None:
        for S, B in zip(blocks, Bs, strict=True):
            gather_rows(S.indices, B, nchunks, sums)

    runs = {"kernel": kernel, "gather": gather}
    for fn in runs.values():
        fn()
    # the loop reads the very rows the kernel gathers: its sums are those of B's rows
    # counted once per entry
    for S, B in zip(blocks, Bs, strict=True):
        gather_rows(S.indices, B, nchunks, sums)
        want = np.bincount(S.indices, minlength=cols) @ B.sum(axis=1)
        assert np.isclose(sums.sum(), want, rtol=1e-4), (sums.sum(), want)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for k in range(args.rounds):
        for name in (runs if k % 2 == 0 else reversed(list(runs))):
            comm.Barrier()
            t0 = time.perf_counter()
            runs[name]()
            times[name].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    nnz = comm.allreduce(sum(S.nnz for S in blocks))
    row_bytes = nnz * args.r * dtype.itemsize
    if rank == 0:
        print(f"p = {p}, {numba.get_num_threads()} thread(s) per rank; Erdős–Rényi n = "
              f"{args.n}, {args.nnz_per_row} per row; r = {args.r}, {dtype}; "
              f"{row_bytes / 1e6:.3f} MB of gathered rows; {args.rounds} rounds")
        print("| loop | best (ms) | median (ms) | GB/s of gathered rows (best) |")
        print("|---|---:|---:|---:|")
        for name, ts in times.items():
            print(f"| {name} | {min(ts) * 1e3:.3f} | {np.median(ts) * 1e3:.3f} | "
                  f"{row_bytes / min(ts) / 1e9:.2f} |")
        ratio = np.median(np.array(times["kernel"]) / np.array(times["gather"]))
        print(f"kernel / gather, median over rounds: {ratio:.2f}")


if __name__ == "__main__":
    main()
