"""Row/column reductions, expansion and the additive SDDMM: every family, every valid c.

Oracle: numpy on the global matrix at each rank's own coordinates (ops_oracle). Plan sizes are
recomputed independently from the layout and every rank's nonzeros, and the counted words of
each primitive equal its formula on those sizes exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import grid_cs
from mpi4py import MPI
from ops_oracle import (  # noqa: F401  (compiled_segment_reduce: a fixture)
    compiled_segment_reduce,
    counted,
    edge_fn,
    edge_problem,
    expected_sizes,
    global_reduce,
    local_coords,
    objects,
)

import distmm
from distmm.core.layout import block_offsets
from distmm.ops.edges import (
    EXPAND_PHASE,
    REDUCE_PHASE,
    SDDMM_ADD_PHASE,
    edge_plan,
    expand,
    expand_words,
    reduce,
    reduce_words,
    sddmm_add,
    sddmm_add_words,
)
from distmm.ops.softmax import edge_softmax

COMM = MPI.COMM_WORLD
pytestmark = pytest.mark.usefixtures("compiled_segment_reduce")
SIDE = {"row": "a", "col": "b"}


@pytest.mark.parametrize("h", [None, 3])
@pytest.mark.parametrize("shape", [(13, 10), (5, 17)])
def test_reduce_matches_global(shape, h):
    m, n = shape
    S = edge_problem(m, n, seed=3)
    ref_vals = edge_fn(S.row, S.col, h)
    H = 1 if h is None else h
    for obj in objects(S, r=8):
        vals = edge_fn(*local_coords(obj), h)
        for dim in ("row", "col"):
            sizes = expected_sizes(obj, dim)
            assert edge_plan(obj, dim).sizes == sizes
            for op in ("sum", "max"):
                obj.stats.reset()
                got = reduce(obj, vals, dim, op)
                ref = global_reduce(S, ref_vals, dim, op)[obj.local_rows(SIDE[dim])]
                assert got.shape == ref.shape
                np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
                assert counted(obj, REDUCE_PHASE[dim]) == reduce_words(sizes, H)


@pytest.mark.parametrize("h", [None, 2])
def test_expand_and_sddmm_add_match_global(h):
    m, n = 11, 14
    S = edge_problem(m, n, seed=4)
    rng = np.random.default_rng(7)
    width = () if h is None else (h,)
    U = rng.standard_normal((m,) + width)
    V = rng.standard_normal((n,) + width)
    H = 1 if h is None else h
    for obj in objects(S, r=8):
        i, j = local_coords(obj)
        u, v = U[obj.local_rows("a")], V[obj.local_rows("b")]
        sizes = {dim: expected_sizes(obj, dim) for dim in ("row", "col")}
        for side, X, idx, dim in (("a", u, i, "row"), ("b", v, j, "col")):
            obj.stats.reset()
            got = expand(obj, side, X)
            np.testing.assert_array_equal(got, (U if side == "a" else V)[idx])
            assert counted(obj, EXPAND_PHASE) == expand_words(sizes[dim], H)
        obj.stats.reset()
        got = sddmm_add(obj, u, v)
        np.testing.assert_allclose(got, U[i] + V[j], rtol=1e-14)
        assert counted(obj, SDDMM_ADD_PHASE) == sddmm_add_words(sizes["row"], sizes["col"], H)


def test_reduce_then_expand_is_the_row_total_on_every_edge():
    """Round trip in float32: the A-side sums, expanded, are each nonzero's row total."""
    S = edge_problem(9, 9, seed=5)
    for obj in objects(S, r=8, dtype=np.float32):
        i, j = local_coords(obj)
        vals = edge_fn(i, j, None).astype(np.float32)
        totals = reduce(obj, vals, "row")
        ref = global_reduce(S, edge_fn(S.row, S.col, None), "row", "sum")
        np.testing.assert_allclose(expand(obj, "a", totals), ref[i], rtol=1e-5, atol=1e-5)


def test_bad_operands_raise_on_every_rank():
    S = edge_problem(8, 8, seed=6)
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    nnz = obj.values.shape[0]
    with pytest.raises(distmm.InputError, match="rows on this rank"):
        reduce(obj, np.zeros(nnz + 1))
    with pytest.raises(distmm.InputError, match="dtype"):
        reduce(obj, np.zeros(nnz, dtype=np.float32))
    with pytest.raises(distmm.InputError, match="dim must be"):
        reduce(obj, obj.values, dim="diag")
    with pytest.raises(distmm.InputError, match="op must be"):
        reduce(obj, obj.values, op="min")
    # Only rank 0 passes a NaN: every rank raises.
    bad = obj.values.copy()
    if COMM.rank == 0 and nnz:
        bad[0] = np.nan
    if COMM.allreduce(int(COMM.rank == 0 and nnz > 0)):
        with pytest.raises(distmm.InputError, match="NaN"):
            reduce(obj, bad)
    # Ranks disagreeing on the number of heads.
    if COMM.size > 1:
        h = 2 if COMM.rank == 0 else 3
        with pytest.raises(distmm.InputError, match="numbers of columns"):
            reduce(obj, np.zeros((nnz, h)))
    rows_a = obj.dense_rows("a", COMM.rank).size
    with pytest.raises(distmm.InputError, match="different shapes"):
        sddmm_add(obj, np.zeros((rows_a, 2)), np.zeros(obj.dense_rows("b", COMM.rank).size))


def test_dense_shift_bounds_stated_in_the_docs():
    """docs/primitives.md bounds the additive SDDMM and the softmax in 1.5D dense shifting by
    the rows of the rank's row superblock and the columns of its stored column blocks."""
    n, p = 16, COMM.Get_size()
    S = edge_problem(n, n, seed=15, density=0.9)
    off = block_offsets(n, p)
    for c in grid_cs("15d-dense-shift"):
        obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", c=c, dtype=np.float64,
                                root=None)
        u, v, q = obj.grid.u, obj.grid.v, p // c
        own = obj.dense_rows("a", COMM.rank).size
        superblock = int(off[u * c + c] - off[u * c])
        stored_cols = sum(int(off[t * c + v + 1] - off[t * c + v]) for t in range(q))
        rows, cols = edge_plan(obj, "row").sizes, edge_plan(obj, "col").sizes
        assert rows.remote <= superblock - own
        assert cols.remote <= stored_cols - own
        assert rows.to_others <= superblock - own
        assert rows.from_others <= (c - 1) * own
        if c == 1:
            assert rows.to_others == rows.from_others == 0


def test_checks_policy_and_close():
    """checks="once": the first call of each primitive is checked in full and agreed; later
    calls check shapes locally and do not scan for NaN. "always" scans every time. A closed
    object refuses every primitive on every rank."""
    S = edge_problem(9, 9, seed=17)
    for policy in ("once", "always"):
        obj = distmm.distribute(S, COMM, dtype=np.float64, root=None, checks=policy)
        nnz = obj.values.shape[0]
        nnz_any = COMM.allreduce(int(nnz > 0))
        reduce(obj, obj.values)  # the first call: full check, passes
        bad = obj.values.copy()
        bad[:] = np.nan
        if policy == "always" and nnz_any:
            with pytest.raises(distmm.InputError, match="NaN"):
                reduce(obj, bad)
        elif policy == "once":
            got = reduce(obj, bad)  # not scanned: NaN propagates into the sums
            assert np.isnan(got).sum() == np.count_nonzero(
                global_reduce(S, np.ones(S.nnz), "row", "sum")[obj.local_rows("a")])
        with pytest.raises(distmm.InputError, match="rows on this rank"):
            reduce(obj, np.zeros(nnz + 1))  # wrong on every rank: raises everywhere either way
        obj.close()
        with pytest.raises(distmm.InputError, match="closed"):
            edge_softmax(obj, obj.values)
