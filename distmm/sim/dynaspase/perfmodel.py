"""The performance model (paper Table IV) and kernel-to-primitive mapping (Algorithm 7).

For Z = X @ Y with X m x n of density a_X and Y n x d of density a_Y on one Computation Core:
GEMM takes m n d / p^2 cycles, SpDMM a_min 2 m n d / p^2, SPMM a_X a_Y m n d / p (section VI-A).
In counts: a_X m n d = nnz_X d, a_Y m n d = nnz_Y m and a_X a_Y m n d = nnz_X nnz_Y / n, which
is how they are computed here (integers, rounded up to whole cycles per block pair).
"""

from __future__ import annotations

import numpy as np

from distmm.sim.dynaspase.partition import cdiv

IntArray = int | np.ndarray

EMPTY, GEMM, SPDMM, SPMM = 0, 1, 2, 3
PRIMITIVES = {EMPTY: "empty", GEMM: "gemm", SPDMM: "spdmm", SPMM: "spmm"}


def k2p(nnz_x: IntArray, size_x: IntArray, nnz_y: IntArray, size_y: IntArray,
        p_sys: int) -> np.ndarray:
    """Algorithm 7 on arrays of block pairs: the primitive code of each pair.

    a_min = 0 -> EMPTY (skipped, line 6); a_min >= 1/2 -> GEMM (line 8); else a_max >= 2/p_sys
    -> SpDMM (line 12); else SPMM. The thresholds are compared in integers (2 nnz >= size,
    p nnz >= 2 size), so a density of exactly 1/2 or 2/p_sys is never lost to rounding:
    a_min >= 1/2 iff both operands are, a_max >= 2/p iff either is.
    """
    nnz_x, size_x, nnz_y, size_y = np.broadcast_arrays(nnz_x, size_x, nnz_y, size_y)
    half = (2 * nnz_x >= size_x) & (2 * nnz_y >= size_y)
    wide = (p_sys * nnz_x >= 2 * size_x) | (p_sys * nnz_y >= 2 * size_y)
    prim = np.where(half, GEMM, np.where(wide, SPDMM, SPMM))
    return np.where((nnz_x == 0) | (nnz_y == 0), EMPTY, prim).astype(np.int8)


def gemm_cycles(m: IntArray, n: IntArray, d: IntArray, p_sys: int) -> IntArray:
    """Table IV, GEMM: m n d / p^2 (p^2 MACs per cycle on the systolic array)."""
    return cdiv(m * n * d, p_sys * p_sys)


def spdmm_cycles(sparse_work: IntArray, p_sys: int) -> IntArray:
    """Table IV, SpDMM: 2 (nnz of the sparse operand) (its partner's other side) / p^2
    (p^2 / 2 MACs per cycle); ``sparse_work`` is nnz_X d or nnz_Y m."""
    return cdiv(2 * sparse_work, p_sys * p_sys)


def spmm_cycles(nnz_x: IntArray, nnz_y: IntArray, n: IntArray, p_sys: int) -> IntArray:
    """Table IV, SPMM: a_X a_Y m n d / p = nnz_X nnz_Y / (n p) (p MACs per cycle)."""
    return cdiv(nnz_x * nnz_y, np.maximum(n, 1) * p_sys)


def pair_plan(kind: str, strategy: str, nnz_x: np.ndarray, nnz_y: np.ndarray, m: np.ndarray,
              n: np.ndarray, d: np.ndarray, p_sys: int, spmm_work: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Primitive and compute cycles of every block pair of one kernel under one strategy.

    ``nnz_x`` (I, T, 1), ``nnz_y`` (1, T, J) and the block sides ``m`` (I, 1, 1),
    ``n`` (1, T, 1), ``d`` (1, 1, J) broadcast to (I, T, J). Returns ``(prim, cycles, skip_x,
    skip_y)`` where skip_x (I, T) / skip_y (T, J) mark the blocks whose pairs are skipped.
    ``spmm_work`` (I, T, J), if given, replaces Table IV's SPMM estimate by the pairs' actual
    row-wise products (charged at p per cycle).

    * dynamic: Algorithm 7; SpDMM treats the sparser operand as the sparse one.
    * s1 (HyGCN, BoostGCN): Aggregate on SpDMM with A sparse, Update on GEMM; no profiling,
      so an Update pair is never skipped and an Aggregate pair only when its A block is
      empty (SpDMM then has no nonzero to scatter).
    * s2 (AWB-GCN): both on SpDMM with X (A, resp. H) sparse, skipped when X's block is empty.
    """
    nnz_x = np.asarray(nnz_x, dtype=np.int64)
    nnz_y = np.asarray(nnz_y, dtype=np.int64)
    shape = np.broadcast_shapes(nnz_x.shape, nnz_y.shape, np.shape(m), np.shape(n),
                                np.shape(d))
    x_empty = np.broadcast_to(nnz_x == 0, shape)
    if strategy == "dynamic":
        prim = k2p(nnz_x, m * n, nnz_y, n * d, p_sys)
        cycles = np.select(
            [prim == GEMM, prim == SPDMM, prim == SPMM],
            [gemm_cycles(m, n, d, p_sys),
             spdmm_cycles(np.minimum(nnz_x * d, nnz_y * m), p_sys),
             spmm_cycles(nnz_x, nnz_y, n, p_sys) if spmm_work is None
             else cdiv(spmm_work, p_sys)], 0)
        return (prim, np.broadcast_to(cycles, shape).astype(np.int64), (nnz_x == 0)[:, :, 0],
                (nnz_y == 0)[0])
    if strategy == "s1" and kind == "update":
        prim = np.full(shape, GEMM, dtype=np.int8)
        cycles = np.broadcast_to(gemm_cycles(m, n, d, p_sys), shape).astype(np.int64)
        never_x = np.zeros(nnz_x.shape[:2], dtype=bool)
        return prim, cycles, never_x, np.zeros(nnz_y.shape[1:], dtype=bool)
    if strategy not in ("s1", "s2"):
        raise ValueError(f"unknown strategy {strategy!r}")
    prim = np.where(x_empty, EMPTY, SPDMM).astype(np.int8)
    cycles = np.where(x_empty, 0, spdmm_cycles(nnz_x * d, p_sys))
    return (prim, np.broadcast_to(cycles, shape).astype(np.int64), (nnz_x == 0)[:, :, 0],
            np.zeros(nnz_y.shape[1:], dtype=bool))
