"""The primitives as methods of every family's distributed object (delegating to distmm.ops).

Each method must give exactly what its function gives (the functions are tested against serial
oracles in the other test_ops_* files); here also the global row sums and X^T Y once more, so a
method wired to the wrong function fails on values too.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI
from ops_oracle import edge_fn, edge_problem, global_reduce, local_coords, objects

from distmm.ops import edges, rowwise, softmax, transfer, xty

COMM = MPI.COMM_WORLD


def test_methods_delegate_on_every_family():
    n, r = 10, 8
    S = edge_problem(n, n, seed=21)
    rng = np.random.default_rng(4)
    Xg, Yg = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    for obj in objects(S, r=r):
        i, j = local_coords(obj)
        v = edge_fn(i, j, 2)
        for name, dim, op in (("row_sum", "row", "sum"), ("row_max", "row", "max"),
                              ("col_sum", "col", "sum"), ("col_max", "col", "max")):
            got = getattr(obj, name)(v)
            np.testing.assert_array_equal(got, edges.reduce(obj, v, dim, op))
            np.testing.assert_array_equal(got, obj.reduce(v, dim, op))
        ref = global_reduce(S, edge_fn(S.row, S.col, 2), "row", "sum")
        np.testing.assert_allclose(obj.row_sum(v), ref[obj.local_rows("a")], rtol=1e-12,
                                   atol=1e-12)
        u = obj.row_max(v)
        np.testing.assert_array_equal(obj.expand("a", u), edges.expand(obj, "a", u))
        w = obj.col_sum(v)
        np.testing.assert_array_equal(obj.sddmm_add(u, w), edges.sddmm_add(obj, u, w))
        alpha = obj.edge_softmax(v, dim="col")
        np.testing.assert_array_equal(alpha, softmax.edge_softmax(obj, v, "col"))
        np.testing.assert_array_equal(obj.edge_softmax_backward(alpha, v, dim="col"),
                                      softmax.edge_softmax_backward(obj, alpha, v, "col"))
        X, Y = obj.scatter("a", Xg, root=None), obj.scatter("a", Yg, root=None)
        np.testing.assert_array_equal(obj.row_dot("a", X, Y), rowwise.row_dot(obj, "a", X, Y))
        np.testing.assert_allclose(obj.xty(X, Y, side="a"), Xg.T @ Yg, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(obj.xty(X, Y, side="a"), xty.xty(obj, X, Y, "a"))
        np.testing.assert_array_equal(obj.transfer(X, "b"), transfer.transfer(obj, X, "b"))
        np.testing.assert_array_equal(obj.transfer(X, "b"), obj.scatter("b", Xg, root=None))
