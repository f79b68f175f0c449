"""A rank's measured peak memory for placing S and one operation, beside the family's model
(:mod:`distmm.core.memory` holds the model and the resident-set readings this uses).

Collective: it places S with :func:`distmm.distribute` and runs one call, so it sits above the
families and the user-facing entry point, not beside the model's pieces.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
from distmm.api import distribute
from distmm.core.memory import (
    Memory,
    baseline_rss,
    map_large_allocations,
    peak_rss,
    reset_peak_rss,
)
from distmm.io.generate import erdos_renyi
from distmm.perf.planner import family_memory

__all__ = ["measure_peak"]


def measure_peak(algorithm: str, make_share, comm: MPI.Comm, c: int, r: int,
                 op: str = "fusedmm_a", strategy: str | None = None, dtype=np.float32,
                 overlap: bool = False, rounds: int = 3, permute="auto"
                 ) -> tuple[int | None, Memory]:
    """This rank's measured peak resident bytes for placing S and one ``op``, beside the
    family's predicted :class:`Memory` (:func:`~distmm.perf.planner.family_memory`: rank 0's
    partitioner counted where distribute partitions S with ``permute``; compare a rank's
    reading with ``model.rank_peak(rank)``). Collective over ``comm``.

    ``make_share()`` returns this rank's :class:`~distmm.core.coo.CooShare` of S (e.g. a
    generator's); it is called after the baseline is taken and only the object keeps S. The
    baseline is the resident set after a small warm-up of the same family and operation (so
    that compiled kernels and MPI's buffers are not counted) with freed memory returned to the
    OS; the peak is Linux's VmHWM, reset after ``make_share``. The measurement runs
    ``rounds`` times (S placed anew each time) and the median peak is kept: what a process
    did before (a first use of something at full size) can add to one round, and memory freed
    late (after the baseline was read) can take from one, never from what placing S and one
    call need. It first fixes glibc's mmap threshold for the rest of the
    process (:func:`~distmm.core.memory.map_large_allocations`): with glibc's moving one, the
    same call's peak varied with the allocator's history by a third. ``permute`` is
    distribute's. Returns (None, model) where the peak cannot be reset (not Linux)."""
    cls = ALGORITHMS[algorithm]
    strategy = strategy or cls.strategies[-1]
    p = comm.Get_size()
    map_large_allocations()

    def run(share, width):
        obj = distribute(share, comm, algorithm=algorithm, c=c, r=width, dtype=dtype,
                         overlap=overlap, permute=permute)
        A, B = obj.dense("a", width, 0.5), obj.dense("b", width, 0.25)
        args = {"sddmm": (A, B), "spmm_a": (B,), "spmm_b": (A,)}.get(op, (A, B))
        kw = {"strategy": strategy} if op.startswith("fusedmm") else {}
        return obj, getattr(obj, op)(*args, **kw)

    # the warm-up runs at the measured width: the kernels are compiled (or loaded from numba's
    # cache) per width, and a first load inside the measured call would count as its memory
    warm, _ = run(erdos_renyi(64, 48, 3, 1, comm), r)
    warm.close()
    del warm
    peaks, model = [], None
    for _ in range(max(1, rounds)):
        base = baseline_rss()  # the last round's object freed
        holder = [make_share()]
        if model is None:  # the same S every round
            m, n = holder[0].shape
            nnz = int(comm.allreduce(holder[0].nnz))
            model = family_memory(algorithm, strategy, m, n, nnz, r, p, c, dtype, overlap, op,
                                  permute)
        ok = reset_peak_rss() and base is not None
        obj, result = run(holder.pop(), r)
        peaks.append(peak_rss() - base if ok else None)
        del result
        obj.close()
    return (None if None in peaks else int(np.median(peaks))), model
