"""The serial oracle every algorithm family's MPI tests share.

Every rank builds the same global problem (fixed seeds); the distributed result is gathered on
rank 0 and compared with scipy in float64 on the gathered matrices.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.perf import bench

COMM = MPI.COMM_WORLD


def problem(m, n, r, density=0.2, seed=0, empty_rows=False):
    rng = np.random.default_rng(seed)
    S = sp.random(m, n, density=density, format="coo", random_state=rng,
                  data_rvs=lambda k: rng.uniform(0.5, 1.5, k))
    if empty_rows and m > 2:
        keep = S.row % 3 != 0
        S = sp.coo_matrix((S.data[keep], (S.row[keep], S.col[keep])), shape=(m, n))
    A = rng.standard_normal((m, r))
    B = rng.standard_normal((n, r))
    return S, A, B


def oracle(op, S, A, B):
    S = sp.csr_matrix(S, dtype=np.float64)
    if op == "sddmm":
        coo = S.tocoo()
        return coo.row, coo.col, coo.data * np.einsum("ij,ij->i", A[coo.row], B[coo.col])
    if op == "spmm-a":
        return S @ B
    if op == "spmm-b":
        return S.T @ A
    R = S.multiply(A @ B.T).tocsr()
    return R @ B if op == "fusedmm-a" else R.T @ A


def run_and_gather(obj, op, A, B, strategy=None):
    """Scatter A and B, run ``op`` (strategy None: the family's default), gather on rank 0."""
    A_loc = obj.scatter("a", A if COMM.rank == 0 else None)
    B_loc = obj.scatter("b", B if COMM.rank == 0 else None)
    out = bench.run_op(obj, op, A_loc, B_loc, strategy)
    if op == "sddmm":
        return obj.gather_values(out)
    return obj.gather("a" if op in ("spmm-a", "fusedmm-a") else "b", out)


def check(op, got, S, A, B, rtol):
    if COMM.rank != 0:
        assert got is None
        return
    ref = oracle(op, S, A, B)
    if op == "sddmm":
        rows, cols, vals = got
        order = np.lexsort((ref[1], ref[0]))
        np.testing.assert_array_equal(rows, ref[0][order])
        np.testing.assert_array_equal(cols, ref[1][order])
        np.testing.assert_allclose(vals, ref[2][order], rtol=rtol, atol=rtol)
    else:
        ref = np.asarray(ref)
        scale = max(1.0, float(np.abs(ref).max(initial=0)))
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale)
