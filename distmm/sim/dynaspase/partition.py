"""Data partitioning (paper section IV-C, Algorithm 9) and sparsity profiling of blocks.

A kernel Z = X @ Y (X m x k, Y k x n) is cut into tasks, one per output block, each a loop
over the inner blocks (Algorithm 4). An Aggregate kernel (X = A, Y = H; Algorithm 2) uses
N1 x N1 blocks of A and N1 x N2 fibers of H; an Update kernel (X = H, Y = W; Algorithm 3)
uses N2 x N2 subfibers of H and N2 x N2 blocks of W. Edge blocks are ragged (smaller).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distmm.sim.dynaspase.config import DynaspaseConfig

KINDS = ("aggregate", "update")


@dataclass(frozen=True)
class KernelShape:
    """One kernel of a GNN's IR: ``kind`` Aggregate or Update, X m x k times Y k x n."""

    kind: str
    m: int
    k: int
    n: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kernel kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if min(self.m, self.k, self.n) < 0:
            raise ValueError(f"kernel dimensions must be non-negative, got {self}")


def cdiv(a: int | np.ndarray, b: int | np.ndarray) -> int | np.ndarray:
    """Ceiling division for non-negative integers (or integer arrays)."""
    return -(-a // b)


def tiles(kind: str, n1: int, n2: int) -> tuple[int, int, int]:
    """(rows of an X block, inner size, columns of a Y block) of a kernel kind."""
    return (n1, n1, n2) if kind == "aggregate" else (n2, n2, n2)


def num_tasks(shape: KernelShape, n1: int, n2: int) -> int:
    """Tasks of a kernel: one per output block (Algorithms 2 and 3, lines 2-3)."""
    tm, _, tn = tiles(shape.kind, n1, n2)
    return int(cdiv(shape.m, tm) * cdiv(shape.n, tn))


def _largest(tasks_of, target: int, n_max: int) -> int:
    """Largest N in [1, n_max] with tasks_of(N) >= target (tasks_of is non-increasing in N);
    1 when even N = 1 gives fewer tasks (a kernel too small to feed every core)."""
    if tasks_of(1) < target:
        return 1
    lo, hi = 1, n_max
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tasks_of(mid) >= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


def choose_partition(kernels: list[KernelShape], config: DynaspaseConfig) -> tuple[int, int]:
    """(N1, N2) by Algorithm 9: the largest sizes (data locality) such that every kernel has at
    least eta * N_CC tasks (load balance) and no side exceeds N_max (on-chip memory).

    Step 1 takes N2 from the Update kernels, step 2 N1 from the Aggregate kernels given N2.
    If N1 comes out smaller than N2 (an Aggregate on few columns while N2 is still large),
    N1 = N2 = the largest square side that satisfies every Aggregate kernel; N1 is then
    rounded down to a multiple of N2 (a fiber holds N1/N2 subfibers). The
    config's ``n1``/``n2`` override the choice. Not collective.
    """
    n_max = config.max_partition
    target = config.eta * config.n_cc
    n2 = n_max
    for s in kernels:
        if s.kind == "update":
            n2 = min(n2, _largest(lambda N, s=s: cdiv(s.m, N) * cdiv(s.n, N), target, n_max))
    if config.n2:
        n2 = config.n2
    n1 = n_max
    for s in kernels:
        if s.kind == "aggregate":
            n1 = min(n1, _largest(lambda N, s=s: cdiv(s.m, N) * cdiv(s.n, n2), target, n_max))
    if n1 < n2 and not config.n2:
        # an Aggregate kernel needs short fibers (few columns, e.g. a lone Aggregate whose N2
        # is still N_max): take square blocks N1 = N2 = N, the largest N that gives every
        # Aggregate kernel enough tasks (more tasks never break an Update's constraint)
        for s in kernels:
            if s.kind == "aggregate":
                n2 = min(n2, _largest(lambda N, s=s: cdiv(s.m, N) * cdiv(s.n, N), target,
                                      n_max))
        n1 = max(n1, n2)
    if config.n1:
        n1 = config.n1
        if not config.n2:
            n2 = min(n2, n1)
            while n1 % n2:
                n2 -= 1
    n2 = min(n2, n1)
    n1 -= n1 % n2
    return n1, n2


def block_sizes(length: int, tile: int) -> np.ndarray:
    """Sizes of the ceil(length / tile) consecutive blocks of an axis (the last may be short)."""
    count = int(cdiv(length, tile))
    return np.minimum(tile, length - tile * np.arange(count, dtype=np.int64))


def block_nnz(M, tile_rows: int, tile_cols: int) -> np.ndarray:
    """Nonzeros of every (tile_rows x tile_cols) block of M: the Sparsity Profiler (section
    V-B2) counts elements that compare unequal to zero, so stored zeros do not count.

    M is a scipy sparse matrix or a 2-D ndarray; returns an int64 array of shape
    (ceil(rows / tile_rows), ceil(cols / tile_cols)). Not collective.
    """
    rows, cols = M.shape
    br, bc = int(cdiv(rows, tile_rows)), int(cdiv(cols, tile_cols))
    if sp.issparse(M):
        coo = M.tocoo()
        keep = coo.data != 0
        key = (coo.row[keep].astype(np.int64) // tile_rows) * bc + coo.col[keep] // tile_cols
        return np.bincount(key, minlength=br * bc).reshape(br, bc).astype(np.int64)
    nz = np.asarray(M) != 0
    padded = np.zeros((br * tile_rows, bc * tile_cols), dtype=bool)
    padded[:rows, :cols] = nz
    return padded.reshape(br, tile_rows, bc, tile_cols).sum(axis=(1, 3), dtype=np.int64)


def stored_bytes(nnz: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                 config: DynaspaseConfig) -> np.ndarray:
    """DDR bytes of blocks kept in the smaller of their two formats (section V-A): COO with a
    (col, row, value) triple per nonzero, or dense. The Format Transformation Module converts
    while streaming (section V-B2), so the primitive's format costs no extra traffic."""
    coo = nnz * (config.value_bytes + 2 * config.index_bytes)
    dense = rows * cols * config.value_bytes
    return np.minimum(coo, dense).astype(np.int64)
