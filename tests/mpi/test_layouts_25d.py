"""What only one 2.5D family does with its layout (the claims every family shares are in
tests/mpi/test_family_*.py): 2.5D dense replicating stores Table II's layout with Algorithm 2's
skew applied once; 2.5D sparse replicating shares each block's values along its fiber."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import COMM, P, build
from oracle import problem

from distmm.perf import costmodel

DENSE = "25d-dense-replicate"
SPARSE = "25d-sparse-replicate"


@pytest.mark.parametrize("c", costmodel.valid_cs(DENSE, P))
def test_dense_replicate_layout_is_table2_with_skew(c):
    """A per Table II, B and S with Algorithm 2's skew."""
    s = int(round((P // c) ** 0.5))
    m, n, r = 5 * s * c + 3, 4 * s * c + 1, s + 2
    S, _, _ = problem(m, n, r, seed=7)
    obj = build(DENSE, S, c, r, permute=False)
    g = obj.grid
    a_off = np.arange(s * c + 1) * m // (s * c)
    b_off = np.arange(s * c + 1) * n // (s * c)
    r_off = np.arange(s + 1) * r // s
    blk_a, blk_b = g.i * c + g.k, ((g.i + g.j) % s) * c + g.k
    np.testing.assert_array_equal(obj.dense_rows("a", COMM.rank),
                                  np.arange(a_off[blk_a], a_off[blk_a + 1]))
    np.testing.assert_array_equal(obj.dense_rows("b", COMM.rank),
                                  np.arange(b_off[blk_b], b_off[blk_b + 1]))
    cols = obj.dense_cols("a", COMM.rank)
    assert (cols.start, cols.stop) == (r_off[g.j], r_off[g.j + 1])
    rows, cols = obj.value_coordinates()
    assert np.all((rows >= a_off[g.i * c]) & (rows < a_off[g.i * c + c]))
    assert np.all((cols >= b_off[blk_b]) & (cols < b_off[blk_b + 1]))
    assert obj.stats.describe()["s"] == s


def test_sparse_replicate_values_are_fiber_shares():
    """Each rank's value order is its 1/c share of its fiber's block, in CSR order."""
    c = costmodel.valid_cs(SPARSE, P)[-1]
    r = int(round((P * c) ** 0.5))
    S, _, _ = problem(21, 17, r, seed=12)
    obj = build(SPARSE, S, c, r, dtype=np.float64)
    share = obj.values.size
    assert share in (obj.block_nnz // c, -(-obj.block_nnz // c))
    assert COMM.allreduce(share) == sp.csr_matrix(S).nnz
    rows, cols = obj.value_coordinates()
    order = np.lexsort((cols, rows))
    np.testing.assert_array_equal(order, np.arange(share))
