"""No call depends on its output starting at zero: the first local kernel step writes it.

Every family, every valid c, every op and FusedMM strategy, with ``out=`` buffers filled with
NaN before each call (a stale zero-fill would be needed for any NaN to survive or leak in), on
awkward shapes: m != n, sizes not multiples of p, empty rows, ranks whose blocks have no
nonzeros, and a matrix with none at all. Run with the reference model (which writes natively)
and the Sputnik model (which only accumulates: the interface zero-fills for it). Checked
against the scipy oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI
from oracle import check, problem

import distmm

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
CASES = [(a, c) for a in distmm.ALGORITHMS for c in grid_cs(a)]
SHAPES = {
    "empty_rows": dict(m=23, n=17, density=0.2, empty_rows=True),
    "very_sparse": dict(m=13, n=29, density=0.02),
    "no_nonzeros": dict(m=11, n=9, density=0.0),
}


def _gathered(obj, op, res):
    if op == "sddmm":
        return obj.gather_values(res)
    return obj.gather("a" if op in ("spmm-a", "fusedmm-a") else "b", res)


@pytest.mark.parametrize("node_model", ["reference", "sputnik"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("algorithm,c", CASES)
def test_outputs_written_not_accumulated(algorithm, c, shape, node_model):
    S, _, _ = problem(seed=3, r=1, **SHAPES[shape])
    S = sp.coo_matrix(S)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            node_model=node_model)
    r = obj.r_rule()[0] + 3
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((S.shape[0], r)), rng.standard_normal((S.shape[1], r))
    A_loc, B_loc = obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
    out_a, out_b = obj.dense("a", r), obj.dense("b", r)
    vals = np.empty_like(obj.values)

    def run(op, call, out):
        for buffer in (out, None):  # into a NaN-filled out=, and into a new array
            if buffer is not None:
                buffer[...] = np.nan
            res = call(buffer)
            check(op, _gathered(obj, op, res), S, A, B, rtol=1e-10)

    for strategy in obj.strategies:
        run("fusedmm-a", lambda o, s=strategy: obj.fusedmm_a(A_loc, B_loc, s, out=o), out_a)
        run("fusedmm-b", lambda o, s=strategy: obj.fusedmm_b(A_loc, B_loc, s, out=o), out_b)
    run("spmm-a", lambda o: obj.spmm_a(B_loc, out=o), out_a)
    run("spmm-b", lambda o: obj.spmm_b(A_loc, out=o), out_b)
    run("sddmm", lambda o: obj.sddmm(A_loc, B_loc, out=o), vals)
    obj.close()
