"""Serial ALS references for the ALS tests and benchmark (not part of the library).

* :func:`exact_als`: every row's normal equations solved directly with numpy.linalg.solve.
* :func:`scipy_cg_als`: the plain single-node code a user would write -- the same batched CG
  as distmm.apps.als (same warm start, masks and stopping rule) with scipy.sparse products --
  so that the distributed result at any p can be compared iteration for iteration, and timed.

Both start from :func:`distmm.apps.als.initial_factors` (hashes of global ids) and use the same
hash split, so they see exactly the problem the distributed code sees.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from distmm.apps.als import initial_factors, split_ratings
from distmm.core.coo import CooShare


def split(S: sp.spmatrix, test_fraction: float, seed: int) -> tuple[sp.csr_matrix,
                                                                      sp.csr_matrix]:
    """(train, test) CSR matrices by the library's hash split (duplicates summed)."""
    coo = sp.coo_matrix(S)
    train, test = split_ratings(CooShare(coo.shape, coo.row, coo.col, coo.data), test_fraction,
                                seed)
    return train.to_scipy().tocsr(), test.to_scipy().tocsr()


def init(m: int, n: int, rank: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return (initial_factors(np.arange(m), np.arange(rank), "a", seed, rank),
            initial_factors(np.arange(n), np.arange(rank), "b", seed, rank))


def _lam(S: sp.csr_matrix, lam: float, weighted: bool) -> np.ndarray:
    counts = np.diff(S.indptr).astype(np.float64)
    return lam * (counts if weighted else np.ones_like(counts))


def rmse(S: sp.spmatrix, A: np.ndarray, B: np.ndarray) -> float:
    coo = sp.coo_matrix(S)
    err = coo.data - np.einsum("ij,ij->i", A[coo.row], B[coo.col])
    return float(np.sqrt(err @ err / max(coo.nnz, 1)))


def _solve_rows(S: sp.csr_matrix, Y: np.ndarray, X: np.ndarray, lam: np.ndarray) -> None:
    for i in range(S.shape[0]):
        lo, hi = S.indptr[i], S.indptr[i + 1]
        if lo == hi:
            continue  # no rating: keep the factor
        Yi = Y[S.indices[lo:hi]]
        G = Yi.T @ Yi + lam[i] * np.eye(Y.shape[1])
        X[i] = np.linalg.solve(G, Yi.T @ S.data[lo:hi])


def exact_als(S: sp.csr_matrix, A: np.ndarray, B: np.ndarray, lam: float, epochs: int,
              weighted: bool = False, callback=None) -> tuple[np.ndarray, np.ndarray]:
    """Exact ALS from (A, B): per epoch, solve every user row, then every item row."""
    A, B = A.copy(), B.copy()
    St = S.T.tocsr()
    la, lb = _lam(S, lam, weighted), _lam(St, lam, weighted)
    for epoch in range(1, epochs + 1):
        _solve_rows(S, B, A, la)
        _solve_rows(St, A, B, lb)
        if callback is not None:
            callback(epoch, A, B)
    return A, B


def _cg(S: sp.csr_matrix, Y: np.ndarray, X: np.ndarray, lam: np.ndarray, iters: int,
        tol: float) -> None:
    pattern = S.copy()
    pattern.data[:] = 1.0
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    has = np.diff(S.indptr) > 0

    def apply(P):
        pattern.data[:] = np.einsum("ij,ij->i", P[rows], Y[pattern.indices])
        return pattern @ Y + lam[:, None] * P

    rhs = S @ Y
    R = rhs - apply(X)
    R[~has] = 0
    P = R.copy()
    rr = np.einsum("ij,ij->i", R, R)
    limit = tol ** 2 * np.einsum("ij,ij->i", rhs, rhs)
    for _ in range(iters):
        active = has & (rr > limit)
        if tol > 0 and not active.any():
            break
        AP = apply(P)
        pap = np.einsum("ij,ij->i", P, AP)
        step = active & (pap > 0)
        alpha = np.where(step, rr / np.where(step, pap, 1), 0)
        X += alpha[:, None] * P
        R -= alpha[:, None] * AP
        rr_new = np.einsum("ij,ij->i", R, R)
        beta = np.where(step, rr_new / np.where(step, rr, 1), 0)
        P = R + beta[:, None] * P
        rr = rr_new


def scipy_cg_als(S: sp.csr_matrix, A: np.ndarray, B: np.ndarray, lam: float, epochs: int,
                 cg_iters: int, cg_tol: float = 0.0, weighted: bool = False, callback=None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Single-node ALS with batched CG (scipy.sparse SDDMM + SpMM as the operator)."""
    A, B = A.copy(), B.copy()
    St = S.T.tocsr()
    la, lb = _lam(S, lam, weighted), _lam(St, lam, weighted)
    for epoch in range(1, epochs + 1):
        _cg(S, B, A, la, cg_iters, cg_tol)
        _cg(St, A, B, lb, cg_iters, cg_tol)
        if callback is not None:
            callback(epoch, A, B)
    return A, B
