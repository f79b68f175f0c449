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
from distmm.ops.groups import row_group, row_group_color
from distmm.ops.holders import column_range
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


@pytest.mark.parametrize("checks", ["once", "off"])
@pytest.mark.parametrize("algorithm", [a for a, f in distmm.ALGORITHMS.items()
                                       if getattr(f, "splits_r", False)])
def test_row_dot_of_different_widths_raises_in_every_row_group(algorithm, checks):
    """row_dot over a row group of several ranks (the families that split r, S placed for
    r = 6): rank 0 passing a block one column wider than its piece of r = 6 (a block of
    another call), the others their pieces, raises on every rank of its group instead of
    adding up pieces of two matrices. (A block whose shape fits cannot be told from the
    right one; with r per call, untyped pieces do not tell their matrix's width either:
    pieces of widths 4 and 6 can make up a valid r = 5. Typed blocks, ``S.dense``, carry it.)"""
    S = edge_problem(12, 12, seed=7)
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), 6)[0]
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=6, root=None, checks=checks,
                            dtype=np.float64)
    rows = obj.dense_rows("a", obj.rank).size

    def piece(r):
        return np.ones((rows, len(column_range(obj, "a", obj.rank, r))))

    X = piece(6)
    assert np.allclose(obj.row_dot("a", X, X), 6.0)  # the agreed first call
    groups = COMM.allgather(row_group(obj, "a").size)
    mine = np.ones((rows, X.shape[1] + 1)) if COMM.rank == 0 else X
    if max(groups) == 1:
        pytest.skip("no row group of several ranks on this grid")
    try:
        got = obj.row_dot("a", mine, mine)
    except InputError as err:
        assert "different calls" in str(err)
    else:  # a result only from the pieces of r = 6: the sums of ones
        assert 0 not in _group_ranks(obj) and np.allclose(got, 6.0)


def _group_ranks(obj) -> list[int]:
    """World ranks of this rank's row group on side "a"."""
    me = row_group_color(obj, "a", COMM.rank)
    return [k for k in range(COMM.Get_size()) if row_group_color(obj, "a", k) == me]
