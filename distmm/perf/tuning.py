"""Measured planning: time the model's best few configurations on the real data, keep the
fastest (``--algorithm auto --tune K``).

The model (:func:`distmm.perf.planner.plan`) ranks every (algorithm, strategy, c); its errors are
those of any analytic model (local kernel speed it only interpolates, a shared machine, the
scheduler when ranks outnumber cores), so, as FFTW's planner does, :func:`tune` distributes S
for each of the model's top K configurations, runs one untimed FusedMM (JIT compilation, S^T
built on first use) and then times ``repeat`` more (default 3: one timing carries the
noise of a shared machine), and picks the fastest by best time. Every rank takes the
slowest rank's time of each candidate (an all-reduce), so every rank picks the same one without
further agreement. K = 1 is the model alone: nothing is timed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm.algorithms.base import DistributedMatrix
from distmm.core.coo import CooShare
from distmm.core.operations import CLI_OPS
from distmm.errors import require
from distmm.perf.bench import random_blocks, result_buffer, run_op, timed
from distmm.perf.planner import Machine, plan


@dataclass
class Tuned:
    """The outcome of :func:`tune`: the chosen plan row (with ``measured_s``), S distributed
    for it (ready to use, so the caller need not distribute again), and every candidate row
    in the model's order, each with ``predicted_s`` and ``measured_s`` (None when K = 1)."""

    best: dict
    obj: DistributedMatrix
    candidates: list[dict]


def candidates(rows: list[dict], k: int, op: str = "fusedmm-a") -> list[dict]:
    """The model's first ``k`` distinct configurations for ``op`` (not collective).

    Strategies matter only for FusedMM; for the other ops, rows that differ only in strategy
    are one configuration."""
    require(isinstance(k, int) and k >= 1, f"--tune must be a positive integer, got {k!r}")
    out, seen = [], set()
    for row in rows:
        key = (row["algorithm"], row["c"]) + ((row["strategy"],) if op.startswith("fusedmm")
                                              else ())
        if key not in seen:
            seen.add(key)
            out.append(row)
        if len(out) == k:
            break
    return out


def tune(share: CooShare, comm: MPI.Comm, r: int, candidates_k: int = 3,
         machine: Machine | None = None, op: str = "fusedmm-a",
         algorithms: tuple[str, ...] | None = None, repeat: int = 3, seed: int = 0,
         memory_limit: int | None = None, rows: list[dict] | None = None,
         family_kwargs: dict[str, dict] | None = None, **distribute_kwargs) -> Tuned:
    """Pick (algorithm, strategy, c) for ``op`` on S at width ``r`` by timing the model's top
    ``candidates_k`` configurations on this data (collective over ``comm``).

    ``share`` is this rank's part of S (a :class:`~distmm.core.coo.CooShare`); ``distribute_kwargs``
    go to :func:`distmm.distribute` for every candidate (node_model, dtype, permute, order,
    overlap, ...), so the returned object is the one the caller would have built. Random dense
    blocks of width r (seeded by ``seed``) are the inputs: the time of these kernels does not
    depend on the values. A candidate that cannot be distributed raises the same InputError on
    every rank (distribute checks collectively), so no rank is left waiting. Returns a
    :class:`Tuned`; only the chosen candidate's distribution is kept in memory: the others are
    closed (their sub-communicators freed) as soon as they are beaten. With
    ``memory_limit`` (bytes per rank) only candidates whose modelled peak fits are tried.
    ``rows``: the planner's ranking when the caller has it (e.g.
    :func:`distmm.perf.sparse_planner.plan_distributed`'s, which prices the sparsity-aware
    family from S's pattern), instead of :func:`distmm.perf.planner.plan`'s.
    ``family_kwargs``: more of distribute's arguments for one family's candidates only
    (``{"15d-sparse-aware": {"relay": ..., "permute": ...}}``: the run's relay setting and
    the order the planner priced), so that what is timed is what will run.
    """
    require(op in CLI_OPS, f"unknown operation {op!r}; choose one of {', '.join(CLI_OPS)}")
    require(isinstance(repeat, int) and repeat >= 1, "repeat must be at least 1")
    m, n = share.shape
    nnz = int(comm.allreduce(share.nnz))
    if rows is None:
        rows = plan(m, n, nnz, r, comm.Get_size(), machine,
                    algorithms=algorithms or tuple(api.ALGORITHMS),
                    dtype=distribute_kwargs.get("dtype", np.float32),
                    overlap=bool(distribute_kwargs.get("overlap")), memory_limit=memory_limit)
    chosen = [dict(row, predicted_s=row["time_s"], measured_s=None)
              for row in candidates(rows, candidates_k, op)]
    family_kwargs = family_kwargs or {}

    def kwargs(algorithm: str) -> dict:
        return {**distribute_kwargs, **family_kwargs.get(algorithm, {})}

    if len(chosen) == 1:
        row = chosen[0]
        obj = api.distribute(share, comm, algorithm=row["algorithm"], c=row["c"], r=r,
                             seed=seed, **kwargs(row["algorithm"]))
        return Tuned(row, obj, chosen)
    best_obj, best_row = None, None
    # Candidates that share (algorithm, c) share one distribution.
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in chosen:
        groups.setdefault((row["algorithm"], row["c"]), []).append(row)
    for (algorithm, c), group in groups.items():
        obj = api.distribute(share, comm, algorithm=algorithm, c=c, r=r, seed=seed,
                             **kwargs(algorithm))
        A_loc, B_loc = random_blocks(obj, r, seed)
        kept = False
        for row in group:
            row["measured_s"] = _time(comm, obj, op, A_loc, B_loc, row["strategy"], r,
                                      repeat)
            if best_row is None or row["measured_s"] < best_row["measured_s"]:
                best_row, kept = row, True
        # Every rank takes the same decision (the times are all-reduced), so closing the
        # discarded object (collective) is safe.
        if kept:
            if best_obj is not None:
                best_obj.close()
            best_obj = obj
        else:
            obj.close()
        del obj, A_loc, B_loc
    best_obj.stats.reset()
    return Tuned(best_row, best_obj, chosen)


def _time(comm: MPI.Comm, obj: DistributedMatrix, op: str, A_loc, B_loc, strategy: str,
          r: int, repeat: int, warmup: int = 1) -> float:
    """``warmup`` untimed calls (JIT compilation, S^T built on first use), then the best of
    ``repeat`` timed ones, each the slowest rank's time (collective). Every call writes one
    result buffer, as the loop of an application does."""
    out = result_buffer(obj, op, r)

    def call():
        return run_op(obj, op, A_loc, B_loc, strategy, out)

    for _ in range(warmup):
        call()
    return min(timed(comm, call)[1] for _ in range(repeat))


def tune_events(result: Tuned) -> list[dict]:
    """JSON-ready ``"tune"`` events, one per candidate, for the CLI and the experiments."""
    out = []
    for k, row in enumerate(result.candidates):
        out.append({"event": "tune", "candidate": k, "algorithm": row["algorithm"],
                    "strategy": row["strategy"], "c": row["c"],
                    "predicted_s": row["predicted_s"], "measured_s": row["measured_s"],
                    "chosen": row is result.best})
    return out


__all__ = ["Tuned", "candidates", "tune", "tune_events"]
