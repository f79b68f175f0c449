"""Ranks in different edge primitives never pair their collectives up (docs/reliability.md,
"Python API: ranks in different calls"): after the agreed first calls, rank 0 calls one
primitive and the others another (another primitive, the same one on the other dim or side,
or other heads), under every ``checks`` policy, on every family; every rank raises the same
InputError naming each rank's primitive, and the object still works afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from ops_oracle import compiled_segment_reduce, edge_fn, edge_problem, local_coords  # noqa: F401

import distmm
from distmm.errors import InputError
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
pytestmark = [pytest.mark.usefixtures("compiled_segment_reduce"),
              pytest.mark.skipif(COMM.Get_size() == 1, reason="one rank has no other call")]


def _calls(obj, vals, vals2):
    """name -> a call of one primitive on this rank's operands."""
    a = np.ones(obj.dense_rows("a", obj.rank).size, dtype=obj.dtype)
    b = np.ones(obj.dense_rows("b", obj.rank).size, dtype=obj.dtype)
    return {
        "row_sum": lambda: obj.row_sum(vals),
        "col_sum": lambda: obj.col_sum(vals),
        "row_max": lambda: obj.row_max(vals),
        "row_sum_heads": lambda: obj.row_sum(vals2),
        "edge_softmax": lambda: obj.edge_softmax(vals, dim="row"),
        "expand_a": lambda: obj.expand("a", a),
        "expand_b": lambda: obj.expand("b", b),
        "sddmm_add": lambda: obj.sddmm_add(a, b),
    }


PAIRS = [("row_sum", "col_sum"), ("row_sum", "row_max"), ("row_sum", "row_sum_heads"),
         ("edge_softmax", "row_sum"), ("expand_a", "expand_b"), ("expand_a", "sddmm_add")]


@pytest.mark.parametrize("checks", ["always", "once", "off"])
@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_ranks_in_different_primitives_all_raise(algorithm, checks):
    S = edge_problem(11, 11, seed=5)
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), 8)[0]
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=8, root=None, checks=checks,
                            dtype=np.float64)
    vals = edge_fn(*local_coords(obj), None)
    vals2 = edge_fn(*local_coords(obj), 2)
    calls = _calls(obj, vals, vals2)
    for name in calls:  # the first call of each: agreed under "once"
        calls[name]()
    for mine, theirs in PAIRS:
        # other heads under a full check: the check's own message, which names the widths
        expect = ("numbers of columns" if theirs == "row_sum_heads" and checks == "always"
                  else "different calls on one distributed matrix .*the edge primitive")
        with pytest.raises(InputError, match=expect):
            calls[mine if COMM.rank == 0 else theirs]()
    # nothing was left half-done: the same call on every rank still gives the sum
    assert np.isfinite(calls["row_sum"]()).all()
