"""Edge softmax by rows and columns and its backward: every family, every valid c.

Oracle: scipy's softmax applied row by row (column by column) of the global matrix, masked
edges (-inf) included and one row entirely masked; the backward pass against central finite
differences of the distributed forward. Counted words equal the formulas exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from mpi4py import MPI
from ops_oracle import (  # noqa: F401  (compiled_segment_reduce: a fixture)
    compiled_segment_reduce,
    counted,
    edge_fn,
    edge_problem,
    expected_sizes,
    local_coords,
    objects,
)

import distmm
from distmm.ops.softmax import (
    PHASE,
    edge_softmax,
    edge_softmax_backward,
    softmax_backward_words,
    softmax_words,
)

COMM = MPI.COMM_WORLD
pytestmark = pytest.mark.usefixtures("compiled_segment_reduce")


def scores(i, j, h, masked_row):
    e = edge_fn(i, j, h)
    e[(i + j) % 4 == 0] = -np.inf
    e[i == masked_row] = -np.inf
    return e


def serial_softmax(S, e, dim):
    """Softmax of the global scores within each row (column), by groups, with scipy."""
    idx = S.row if dim == "row" else S.col
    out = np.zeros_like(e)
    for x in np.unique(idx):
        sel = idx == x
        block = e[sel]
        live = ~np.isneginf(block).all(axis=0)  # columns (heads) with an unmasked edge
        if live.any():
            part = block[..., live] if block.ndim == 2 else block
            res = np.zeros_like(block)
            if block.ndim == 2:
                res[:, live] = scipy.special.softmax(part, axis=0)
            else:
                res = scipy.special.softmax(part)
            out[sel] = res
    return out


def global_positions(S, i, j):
    keys = S.row.astype(np.int64) * S.shape[1] + S.col
    order = np.argsort(keys)
    return order[np.searchsorted(keys[order], i.astype(np.int64) * S.shape[1] + j)]


@pytest.mark.parametrize("h", [None, 2])
@pytest.mark.parametrize("shape", [(12, 9), (5, 16)])
def test_softmax_matches_serial(shape, h):
    m, n = shape
    S = edge_problem(m, n, seed=8, density=0.4)
    masked_row = int(S.row[0])
    H = 1 if h is None else h
    e_global = scores(S.row, S.col, h, masked_row)
    ref = {dim: serial_softmax(S, e_global, dim) for dim in ("row", "col")}
    for obj in objects(S, r=8):
        i, j = local_coords(obj)
        pos = global_positions(S, i, j)
        e = scores(i, j, h, masked_row)
        for dim in ("row", "col"):
            obj.stats.reset()
            alpha = edge_softmax(obj, e, dim)
            assert alpha.shape == e.shape
            assert np.isfinite(alpha).all()
            np.testing.assert_allclose(alpha, ref[dim][pos], rtol=1e-12, atol=1e-14)
            sizes = expected_sizes(obj, dim)
            assert counted(obj, PHASE) == softmax_words(sizes, H)
            grad = np.cos(3.0 * e_global[pos].clip(-5, 5) + 1.0)
            obj.stats.reset()
            edge_softmax_backward(obj, alpha, grad, dim)
            assert counted(obj, PHASE) == softmax_backward_words(sizes, H)


@pytest.mark.parametrize("dim", ["row", "col"])
def test_backward_matches_finite_differences(dim):
    S = edge_problem(10, 7, seed=9, density=0.5)
    for obj in objects(S, r=8):
        i, j = local_coords(obj)
        e = edge_fn(i, j, 2)
        g = np.cos(2.0 * i[:, None] + j[:, None] + np.arange(2))
        d = np.sin(5.0 * i[:, None] - j[:, None] + np.arange(2))

        def loss(x, obj=obj, g=g):
            return COMM.allreduce(float(np.sum(g * edge_softmax(obj, x, dim))))

        alpha = edge_softmax(obj, e, dim)
        grad = edge_softmax_backward(obj, alpha, g, dim)
        eps = 1e-6
        fd = (loss(e + eps * d) - loss(e - eps * d)) / (2 * eps)
        assert abs(COMM.allreduce(float(np.sum(grad * d))) - fd) < 1e-7


def test_softmax_refuses_nan_and_plus_inf():
    S = edge_problem(8, 8, seed=6)
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    nnz = obj.values.shape[0]
    somewhere = COMM.allreduce(int(COMM.rank == 0 and nnz > 0))
    for bad_value, match in ((np.inf, r"\+inf"), (np.nan, "NaN")):
        e = np.zeros(nnz)
        if COMM.rank == 0 and nnz:
            e[0] = bad_value
        if somewhere:
            with pytest.raises(distmm.InputError, match=match):
                edge_softmax(obj, e)
    with pytest.raises(distmm.InputError, match="dim must be"):
        edge_softmax(obj, np.zeros(nnz), dim="both")
