"""Timing of distributed operations, shared by ``distmm bench`` and the experiments."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from distmm import api, signals
from distmm.algorithms.base import DistributedMatrix


def timed(comm: MPI.Comm, fn):
    """Run ``fn`` between barriers (collective); returns (result, slowest rank's seconds)."""
    comm.Barrier()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    return out, comm.allreduce(dt, op=MPI.MAX)


def phase_summary(report: dict) -> dict:
    """Per-phase max-over-ranks seconds, words and messages sent, from a gathered report."""
    out = {}
    for ph, counters in report["phases"].items():
        if ph.startswith("kernel:"):
            continue
        out[ph] = {k: counters[k]["max"] for k in ("seconds", "words_sent", "messages_sent")
                   if k in counters}
    return out


def kernel_summary(report: dict) -> dict:
    """Per local operation, the max over ranks of the node model's measured seconds, calls
    that fell back to the reference model, and every model counter (a simulator's
    ``model_seconds``, DRAM bytes, ...), from a gathered report.

    Beside the measured communication phases this answers "communication measured here plus
    computation on p modelled chips": the slowest rank's modelled kernel time."""
    out = {}
    for ph, counters in report["phases"].items():
        if ph.startswith("kernel:"):
            out[ph[len("kernel:"):]] = {k: v["max"] for k, v in counters.items()
                                        if k not in ("flops", "bytes")}
    return out


def random_blocks(obj: DistributedMatrix, r: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's blocks of random normal A (m x r) and B (n x r), in the object's
    distribution (rows and columns of r), as typed blocks. Not collective."""
    rng = np.random.default_rng([seed, obj.rank])

    def block(side: str) -> np.ndarray:
        shape = obj.local_shape(side, r)
        return obj.wrap(side, rng.standard_normal(shape).astype(obj.dtype), r)

    return block("a"), block("b")


def measure(obj: DistributedMatrix, op: str, A_loc: np.ndarray, B_loc: np.ndarray, r: int,
            strategy: str = "-", repeat: int = 3) -> dict:
    """Time one operation on blocks of dense width ``r``, ``repeat`` times after one untimed
    warm-up (collective).

    The warm-up absorbs JIT compilation and the one-off construction of S^T. Returns, on every
    rank, the record: times, best seconds, GFLOP/s at the best time, and (on rank 0 only, None
    elsewhere) the per-phase breakdown of the fastest repetition.
    """
    out = api.result_buffer(obj, op, r)  # reused by every call, as a user's loop does

    def call():
        return api.run_op(obj, op, A_loc, B_loc, strategy, out)

    call()
    times, reports = [], []
    for k in range(repeat):
        signals.stop_if_requested(obj.comm, f"measuring {op} ({strategy}) before repeat "
                                  f"{k + 1} of {repeat}", "the records printed so far are "
                                  "complete")
        obj.stats.reset()
        _, seconds = timed(obj.comm, call)
        times.append(seconds)
        reports.append(obj.stats.report())
    nnz = int(obj.comm.allreduce(obj.values.size))
    best = min(times)
    report = reports[times.index(best)]
    return {"op": op, "strategy": strategy, "nnz": nnz, "r": r,
            "times": times, "seconds": best, "gflops": api.op_flops(op, nnz, r) / best / 1e9,
            **obj.stats.describe(),
            "phases": phase_summary(report) if report else None,
            "kernels": kernel_summary(report) if report else None}
