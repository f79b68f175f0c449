"""The kernel-level simulator: one matrix product Z = X @ Y on the modelled accelerator.

It runs the whole runtime of sections IV-VI on the real data: partition X and Y (Algorithm 9,
unless the caller fixes (N1, N2)), profile the nonzeros of every block (the Sparsity Profiler),
map every block pair to a primitive (Algorithm 7, or a static strategy S1/S2), cost it with
Table IV, and schedule the tasks on the N_CC cores (Algorithm 8, double-buffered loads). The
numerical result is the sum over the block pairs that were *not* skipped, so a profiler that
called a non-empty block empty would change the answer (the tests compare with scipy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from distmm.sim.dynaspase.config import DynaspaseConfig
from distmm.sim.dynaspase.partition import (
    KernelShape,
    block_nnz,
    block_sizes,
    choose_partition,
    stored_bytes,
    tiles,
)
from distmm.sim.dynaspase.perfmodel import EMPTY, PRIMITIVES, pair_plan
from distmm.sim.dynaspase.schedule import Schedule, schedule


@dataclass
class KernelResult:
    """What one simulated kernel produced.

    ``result`` is Z (m x n, dense); ``cycles`` the modelled latency (makespan over the cores)
    and ``seconds`` the same at the configured clock; ``counts`` the block pairs per primitive
    (``gemm``, ``spdmm``, ``spmm``, ``empty`` = skipped); ``core_busy`` each core's busy
    cycles; ``partition`` (N1, N2); ``tasks`` the task count; ``schedule`` the full schedule.
    """

    result: np.ndarray
    cycles: int
    seconds: float
    counts: dict[str, int]
    core_busy: np.ndarray
    partition: tuple[int, int]
    tasks: int
    macs: int
    schedule: Schedule = field(repr=False)

    def summary(self) -> dict:
        """A JSON-ready summary (no arrays but the per-core busy cycles)."""
        s = self.schedule
        return {"cycles": self.cycles, "seconds": self.seconds, "tasks": self.tasks,
                "partition": list(self.partition), **{f"pairs_{k}": v
                                                      for k, v in self.counts.items()},
                "core_busy": self.core_busy.tolist(), "compute_cycles": s.compute_cycles,
                "transfer_cycles": s.transfer_cycles, "dram_bytes": s.dram_bytes,
                "mode_switches": s.mode_switches, "macs": self.macs}


def _as_operand(name: str, M):
    """A scipy CSR matrix or a 2-D float ndarray; anything else is a ValueError."""
    if sp.issparse(M):
        if M.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got {M.ndim}-D")
        M = sp.csr_matrix(M)
    else:
        M = np.asarray(M)
        if M.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array or scipy sparse matrix, got "
                             f"{M.ndim}-D")
    if not np.issubdtype(M.dtype, np.number) or np.issubdtype(M.dtype, np.complexfloating):
        raise ValueError(f"{name} must hold real numbers, got dtype {M.dtype}")
    return M


def _mask(M, skip: np.ndarray, tr: int, tc: int):
    """M with the entries of skipped blocks removed (the pairs the accelerator never ran)."""
    if not skip.any():
        return M
    if sp.issparse(M):
        coo = M.tocoo()
        keep = ~skip[coo.row // tr, coo.col // tc]
        return sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=M.shape)
    full = np.repeat(np.repeat(~skip, tr, axis=0), tc, axis=1)[:M.shape[0], :M.shape[1]]
    return np.where(full, M, 0).astype(M.dtype, copy=False)


def _product(X, Y, dtype: np.dtype) -> np.ndarray:
    """X @ Y as a C-contiguous dense array of ``dtype`` (products accumulate in ``dtype``)."""
    X = X.astype(dtype, copy=False)
    Y = Y.astype(dtype, copy=False)
    if sp.issparse(X):
        Z = X @ Y
    elif sp.issparse(Y):
        Z = (Y.T @ X.T).T
    else:
        Z = X @ Y
    if sp.issparse(Z):
        Z = Z.toarray()
    return np.ascontiguousarray(Z, dtype=dtype)


def rowwise_work(X, Y, tm: int, tk: int, tn: int) -> np.ndarray:
    """Row-wise products of every block pair (SPMM mode, Algorithm 6): for pair (i, t, j), the
    sum over the nonzeros X[r][c] of block (i, t) of the nonzeros of row c of Y in column
    block j. Returns an int64 array (I, T, J). Not collective."""
    m, k = X.shape
    n_i, n_t = int(-(-m // tm)), int(-(-k // tk))
    row_nnz = block_nnz(Y, 1, tn)  # (k, J): nonzeros of each row of Y per column block
    if sp.issparse(X):
        coo = X.tocoo()
        keep = coo.data != 0
        r, c = coo.row[keep], coo.col[keep]
    else:
        r, c = np.nonzero(X)
    pair = (r.astype(np.int64) // tm) * n_t + c // tk
    hits = sp.csr_matrix((np.ones(pair.size, dtype=np.int64), (pair, c)),
                         shape=(n_i * n_t, k))
    return np.asarray(hits @ row_nnz, dtype=np.int64).reshape(n_i, n_t, row_nnz.shape[1])


def simulate_kernel(X, Y, kind: str = "aggregate", config: DynaspaseConfig | None = None,
                    partition: tuple[int, int] | None = None) -> KernelResult:
    """Simulate Z = X @ Y (X m x k, Y k x n; each a scipy sparse matrix or a dense array).

    ``kind`` is "aggregate" (X = adjacency, N1 x N1 blocks; Y = features, N1 x N2 fibers) or
    "update" (X = features, Y = weights, N2 x N2 blocks). ``partition`` fixes (N1, N2);
    by default Algorithm 9 picks it for this one kernel. Z has the dtype of Y when Y is
    floating point (float32 stays float32), else float64. Not collective.
    """
    config = config or DynaspaseConfig()
    X = _as_operand("X", X)
    Y = _as_operand("Y", Y)
    if X.shape[1] != Y.shape[0]:
        raise ValueError(f"X is {X.shape[0]} x {X.shape[1]} but Y has {Y.shape[0]} rows")
    m, k = X.shape
    n = Y.shape[1]
    shape = KernelShape(kind, m, k, n)
    if partition is None:
        partition = choose_partition([shape], config)
    n1, n2 = (int(v) for v in partition)
    if n1 < 1 or n2 < 1 or n1 % n2:
        raise ValueError(f"partition (N1, N2) = {partition} must be positive with N2 "
                         "dividing N1")
    dtype = np.dtype(Y.dtype if np.issubdtype(Y.dtype, np.floating) else np.float64)
    tm, tk, tn = tiles(kind, n1, n2)
    rows, inner, cols = block_sizes(m, tm), block_sizes(k, tk), block_sizes(n, tn)
    nnz_x = block_nnz(X, tm, tk)
    nnz_y = block_nnz(Y, tk, tn)
    work = (rowwise_work(X, Y, tm, tk, tn)
            if config.spmm_cost == "rowwise" and config.strategy == "dynamic" else None)
    prim, cycles, skip_x, skip_y = pair_plan(
        kind, config.strategy, nnz_x[:, :, None], nnz_y[None, :, :], rows[:, None, None],
        inner[None, :, None], cols[None, None, :], config.p_sys, work)
    Z = _product(_mask(X, skip_x, tm, tk), _mask(Y, skip_y, tk, tn), dtype)
    x_bytes = stored_bytes(nnz_x, rows[:, None], inner[None, :], config)
    y_bytes = stored_bytes(nnz_y, inner[:, None], cols[None, :], config)
    z_bytes = stored_bytes(block_nnz(Z, tm, tn), rows[:, None], cols[None, :], config)
    sched = schedule(prim, cycles, x_bytes, y_bytes, z_bytes, config)
    counts = {name: int((prim == code).sum()) for code, name in PRIMITIVES.items()}
    live = prim != EMPTY
    # multiply-accumulates with the nonzeros of X over the pairs that ran (nnz_X d per pair):
    # the work left once X's zeros are skipped; reported, not used for timing
    macs = int((nnz_x[:, :, None] * cols[None, None, :] * live).sum())
    seconds = sched.makespan / (config.freq_mhz * 1e6)
    return KernelResult(Z, sched.makespan, seconds, counts, sched.busy, (n1, n2),
                        len(sched.core), macs, sched)
