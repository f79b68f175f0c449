"""The GAT-layer example of docs/primitives.md, run as written, against a dense numpy GAT.

The code block is read from the page, so the documentation cannot drift from what works.
Every c of 1.5D dense shifting; a graph with self-loops on most nodes, one node without
in-edges (an empty row: its output is zero) and m = n not a multiple of p.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import distmm
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
PAGE = Path(__file__).resolve().parents[2] / "docs" / "primitives.md"


def example():
    code = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace["gat_layer"]


def dense_gat(adj, H, W, att_src, att_dst, slope=0.2):
    heads, F = att_src.shape
    Z = H @ W
    mask = adj.toarray() != 0
    out = np.zeros((adj.shape[0], heads * F))
    for h in range(heads):
        z = Z[:, h * F:(h + 1) * F]
        E = (z @ att_dst[h])[:, None] + (z @ att_src[h])[None, :]
        E = np.where(E > 0, E, slope * E)
        E = np.where(mask, E, -np.inf)
        live = mask.any(axis=1)
        P = np.zeros_like(E)
        P[live] = np.exp(E[live] - E[live].max(axis=1, keepdims=True))
        P[live] /= P[live].sum(axis=1, keepdims=True)
        out[:, h * F:(h + 1) * F] = P @ z
    return out


def test_gat_layer_example_matches_dense():
    n, f_in, heads, F = 19, 6, 3, 4
    rng = np.random.default_rng(30)
    adj = sp.random(n, n, density=0.2, format="coo", random_state=rng) + sp.eye(n)
    adj = sp.coo_matrix(adj)
    keep = adj.row != 5  # node 5 aggregates from nobody
    adj = sp.coo_matrix((np.ones(keep.sum()), (adj.row[keep], adj.col[keep])), shape=(n, n))
    H = rng.standard_normal((n, f_in))
    W = rng.standard_normal((f_in, heads * F))
    att_src, att_dst = rng.standard_normal((heads, F)), rng.standard_normal((heads, F))
    ref = dense_gat(adj, H, W, att_src, att_dst)
    gat_layer = example()
    for c in costmodel.valid_cs("15d-dense-shift", COMM.Get_size()):
        S = distmm.distribute(adj, COMM, algorithm="15d-dense-shift", c=c, dtype=np.float64,
                              root=None)
        out, alpha = gat_layer(S, S.scatter("b", H, root=None), W, att_src, att_dst)
        assert np.isfinite(alpha).all()
        got = S.gather("a", out)
        if COMM.rank == 0:
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
            assert not got[5].any()
