"""Timing of distributed operations, shared by ``distmm bench`` and the experiments."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from distmm.algorithms.base import DistributedMatrix
from distmm.core.operations import op_name
from distmm.runtime import signals

# ----------------------------------------------------------------- operations by name
# ``distmm run``, ``distmm bench``, the tuner and the experiments name an operation as the
# command line spells it; distmm.core.operations maps either spelling to the method's name.

def run_op(obj: DistributedMatrix, op: str, A_loc: np.ndarray | None,
           B_loc: np.ndarray | None, strategy: str | None = None,
           out: np.ndarray | None = None) -> np.ndarray:
    """Run one named operation on distributed blocks. Collective over the object's
    communicator.

    Parameters
    ----------
    obj : DistributedMatrix
        S distributed by :func:`distmm.distribute`.
    op : str
        An operation in either spelling (``"fusedmm-a"`` or ``"fusedmm_a"``:
        :func:`distmm.core.operations.op_name`).
    A_loc, B_loc : numpy.ndarray or None
        This rank's blocks of A and B in ``obj``'s distribution (None where ``op`` does not
        read it, see :func:`op_inputs`).
    strategy : str, optional
        FusedMM only; default (None or ``"-"``): the family's most communication-eliding one.
    out : numpy.ndarray, optional
        Where to write the result (:func:`result_buffer` makes one); default: a new array.

    Returns
    -------
    numpy.ndarray
        The SDDMM values in this rank's value order, or this rank's dense output block
        (``out`` when given).

    Raises
    ------
    InputError
        For an unknown operation or strategy, or blocks of the wrong shape (on every rank).
    """
    op = op_name(op)
    if strategy is None or strategy == "-":
        strategy = obj.strategies[-1]
    if op == "sddmm":
        return obj.sddmm(A_loc, B_loc, out=out)
    if op == "spmm_a":
        return obj.spmm_a(B_loc, out=out)
    if op == "spmm_b":
        return obj.spmm_b(A_loc, out=out)
    return getattr(obj, op)(A_loc, B_loc, strategy=strategy, out=out)


def result_buffer(obj: DistributedMatrix, op: str, r: int) -> np.ndarray:
    """A buffer for the result of ``op`` (either spelling) at width r on this rank, to pass
    to :func:`run_op` as ``out``: a side's dense block, or (SDDMM) one value per stored
    nonzero in value order. Not collective (meant to be called on every rank)."""
    side = op_output_side(op)
    return np.empty_like(obj.values) if side is None else obj.dense(side, r)


def op_inputs(op: str) -> tuple[bool, bool]:
    """Whether an operation reads A and whether it reads B. Not collective.

    Parameters
    ----------
    op : str
        An operation in either spelling.

    Returns
    -------
    tuple of bool
        ``(reads_a, reads_b)``: ``spmm-a`` reads only B, ``spmm-b`` only A, the rest both.
    """
    op = op_name(op)
    return op != "spmm_a", op != "spmm_b"


def op_output_side(op: str) -> str | None:
    """The side of an operation's dense result. Not collective.

    Parameters
    ----------
    op : str
        An operation in either spelling.

    Returns
    -------
    str or None
        ``"a"`` (m x r: ``spmm-a``, ``fusedmm-a``), ``"b"`` (n x r: ``spmm-b``,
        ``fusedmm-b``), or None for SDDMM, whose result is values of S.
    """
    op = op_name(op)
    return None if op == "sddmm" else op[-1]


def op_flops(op: str, nnz: int, r: int) -> float:
    """Useful flops of one operation. Not collective.

    Parameters
    ----------
    op : str
        An operation in either spelling.
    nnz : int
        Nonzeros of S.
    r : int
        Dense width.

    Returns
    -------
    float
        2 nnz r for SDDMM or SpMM, 4 nnz r for FusedMM.
    """
    return (4.0 if op_name(op).startswith("fusedmm") else 2.0) * nnz * r


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
    out = result_buffer(obj, op, r)  # reused by every call, as a user's loop does

    def call():
        return run_op(obj, op, A_loc, B_loc, strategy, out)

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
            "times": times, "seconds": best, "gflops": op_flops(op, nnz, r) / best / 1e9,
            **obj.stats.describe(),
            "phases": phase_summary(report) if report else None,
            "kernels": kernel_summary(report) if report else None}
