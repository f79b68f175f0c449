"""Time loading S from .mtx.gz, .mtx and .h5 with distmm's parallel readers, and scipy.io.mmread.

Run under mpiexec (every rank loads its share; the time is the slowest rank's, from a barrier
before to the end of the read)::

    mpiexec -n 4 python benchmarks/bench_load.py S.mtx.gz S.mtx S.h5 --repeat 3
    python benchmarks/bench_load.py S.mtx.gz S.mtx --repeat 3 --scipy   # one process
    python benchmarks/bench_load.py S.h5 --repeat 3 --h5py   # whole datasets, one process

The files are read in rotating order (A, B, C, then B, C, A, ...) so that a slow moment of a
shared machine does not fall on one variant only. One JSON line per read on rank 0; the
summary line gives each variant's median and minimum, and every rank's peak resident set
(``getrusage``'s ``ru_maxrss``: the process's peak over all its reads, so give one file per
run to measure one variant's memory) beside its resident set before the first read.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import h5py
import scipy.io
from mpi4py import MPI

from distmm.io.hdf5 import read_sparse


def _time_distmm(path: str, comm: MPI.Comm) -> tuple[float, int]:
    comm.Barrier()
    t0 = time.perf_counter()
    share = read_sparse(path, comm)
    seconds = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    return seconds, int(comm.allreduce(share.nnz))


def _time_scipy(path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    S = scipy.io.mmread(path)
    return time.perf_counter() - t0, int(S.nnz)


def _time_h5py(path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with h5py.File(path, "r") as fh:
        arrays = [fh[name][:] for name in fh if isinstance(fh[name], h5py.Dataset)]
    return time.perf_counter() - t0, max(a.size for a in arrays)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scipy", action="store_true",
                        help="time scipy.io.mmread instead (one process; Matrix Market only)")
    parser.add_argument("--h5py", action="store_true",
                        help="time h5py reading every dataset whole instead (one process)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    if (args.scipy or args.h5py) and p != 1:
        raise SystemExit("--scipy and --h5py run on one process")
    reader = "scipy.io.mmread" if args.scipy else "h5py" if args.h5py else "distmm"
    time_one = {"scipy.io.mmread": _time_scipy, "h5py": _time_h5py}.get(
        reader, lambda path: _time_distmm(path, comm))
    before = _resident_bytes()
    times: dict[str, list[float]] = {f: [] for f in args.files}
    for rep in range(args.repeat):
        shift = rep % len(args.files)
        for path in args.files[shift:] + args.files[:shift]:
            seconds, nnz = time_one(path)
            times[path].append(seconds)
            if comm.Get_rank() == 0:
                print(json.dumps({"reader": reader,
                                  "file": path, "p": p, "repeat": rep, "seconds": seconds,
                                  "entries": nnz}), flush=True)
    peaks = comm.gather(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    befores = comm.gather(before)
    if comm.Get_rank() == 0:
        print(json.dumps({"summary": True, "p": p, "reader": reader,
                          "peak_rss_bytes": peaks, "rss_before_bytes": befores,
                          **{path: {"median": statistics.median(t), "min": min(t)}
                             for path, t in times.items()}}), flush=True)


if __name__ == "__main__":
    main()
