"""The Sputnik node model (CPU path and CUDA kernels in the simulator) against a float64 oracle.

The CPU kernels are compiled once per tile width and dtype, so the tests use one width (4) for
almost everything (r = 1, 3 and 5 cover a tile wider than r, the automatic width, and a residue
tile) and one other width once. The CUDA kernels run in numba's simulator (tests/serial/
conftest.py switches it on), one Python thread per GPU thread, so their blocks are tiny.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.kernels import make_node_model
from distmm.kernels.sputnik import SputnikModel, auto_tile_width, swizzle_order

DTYPES = (np.float32, np.float64)
OPS = ("sddmm", "spmm_a", "spmm_b")


# --------------------------------------------------------------------------------------------
# blocks


def _random(m, n, density, seed, dtype):
    M = sp.random(m, n, density=density, random_state=seed, format="coo")
    return CSRBlock.from_coo(M.row, M.col, M.data, (m, n), dtype=dtype)


def _from_lengths(lengths, n, seed, dtype):
    """A block whose row i has lengths[i] distinct random columns."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.concatenate([rng.choice(n, k, replace=False) for k in lengths] or [[]])
    return CSRBlock.from_coo(rows, cols.astype(np.int64), rng.uniform(0.5, 2.0, rows.size),
                             (len(lengths), n), dtype=dtype)


def _unaligned(dtype):
    """Row offsets 0, 1, 3, 6, 11, ...: most rows start off any multiple of 2 or 4, so the
    ROMA prefix of every row holds the previous row's entries (which must be masked)."""
    return _from_lengths([1, 2, 3, 5, 7, 1, 6, 3, 9, 2, 0, 5], 14, 3, dtype)


def _dense_row(dtype):
    lengths = [0] * 12
    lengths[5] = 20
    lengths[0] = 1
    return _from_lengths(lengths, 20, 4, dtype)


def _empty_rows(dtype):
    return _from_lengths([0, 3, 0, 0, 4, 0, 1, 0, 0, 6, 0, 0], 10, 5, dtype)


BLOCKS = {
    "random": lambda dt: _random(23, 17, 0.25, 1, dt),
    "unaligned": _unaligned,
    "dense_row": _dense_row,
    "empty_rows": _empty_rows,
    "empty_block": lambda dt: _random(9, 7, 0.0, 2, dt),
    "skewed": lambda dt: _from_lengths([1, 1, 30, 2, 1, 25, 0, 3, 1, 1, 12, 2, 1, 4], 31, 6,
                                       dt),
}
SMALL = ("unaligned", "dense_row", "empty_rows", "empty_block")  # for the simulator


# --------------------------------------------------------------------------------------------
# oracle: float64 scipy / numpy


def _oracle(op, S, vals, A, B):
    v = vals.astype(np.float64)
    M = sp.csr_matrix((v, S.indices, S.indptr), shape=S.shape)
    if op == "spmm_a":
        return np.asarray(M @ B.astype(np.float64))
    if op == "spmm_b":
        return np.asarray(M.T @ A.astype(np.float64))
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    return v * np.einsum("ij,ij->i", A[rows].astype(np.float64),
                         B[S.indices].astype(np.float64))


def _operands(S, r, dtype, seed=0):
    rng = np.random.default_rng(seed)
    m, n = S.shape
    return (rng.standard_normal(S.nnz).astype(dtype), rng.standard_normal((m, r)).astype(dtype),
            rng.standard_normal((n, r)).astype(dtype))


def _out(op, S, r, dtype, seed=9):
    shape = {"sddmm": (S.nnz,), "spmm_a": (S.shape[0], r), "spmm_b": (S.shape[1], r)}[op]
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _call(model, op, S, vals, A, B, out):
    if op == "spmm_a":
        model.spmm_a(S, vals, B, out)
    elif op == "spmm_b":
        model.spmm_b(S, vals, A, out)
    else:
        model.sddmm(S, vals, A, B, out)


def _run_and_check(model, S, r, dtype, ops=OPS):
    """Every op accumulates onto a nonzero out; returns the results for further comparison."""
    vals, A, B = _operands(S, r, dtype, seed=r)
    results = {}
    for op in ops:
        out0 = _out(op, S, r, dtype)
        got = out0.copy()
        _call(model, op, S, vals, A, B, got)
        want = out0.astype(np.float64) + _oracle(op, S, vals, A, B)
        scale = np.abs(out0).astype(np.float64) + _oracle(op, S, np.abs(vals), np.abs(A),
                                                          np.abs(B))
        rtol = 2e-5 if dtype == np.float32 else 1e-12
        err = np.abs(got.astype(np.float64) - want)
        assert got.dtype == dtype
        assert np.all(err <= rtol * scale + 1e-30), f"{op} r={r}: max error {err.max():.3g}"
        results[op] = got
    return results


# --------------------------------------------------------------------------------------------
# CPU path


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_cpu_matches_oracle(block, dtype):
    S = BLOCKS[block](dtype)
    for swizzle in (True, False):
        for bundle in (1, 3):
            model = SputnikModel(tile_width=4, swizzle=swizzle, bundle_size=bundle)
            for r in (1, 5):  # one tile wider than r; a full tile plus a residue tile of 1
                _run_and_check(model, S, r, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cpu_swizzle_on_and_off_agree_exactly(dtype):
    """Each row is computed by the same code whatever the order: bitwise equal results."""
    S = BLOCKS["skewed"](dtype)
    on = _run_and_check(SputnikModel(tile_width=4, swizzle=True, bundle_size=2), S, 5, dtype)
    off = _run_and_check(SputnikModel(tile_width=4, swizzle=False, bundle_size=2), S, 5, dtype)
    for op in OPS:
        np.testing.assert_array_equal(on[op], off[op])


def test_cpu_automatic_and_other_tile_width():
    S = BLOCKS["skewed"](np.float64)
    assert auto_tile_width(3, "cpu") == 4 and auto_tile_width(1, "cpu") == 1
    assert auto_tile_width(100, "cpu") == 128 and auto_tile_width(1000, "cuda") == 64
    _run_and_check(SputnikModel(), S, 3, np.float64)  # automatic: width 4
    _run_and_check(SputnikModel(tile_width=2), S, 5, np.float64, ops=("spmm_a",))


def test_cpu_counters_and_fallback():
    S = BLOCKS["skewed"](np.float32)
    model = make_node_model("sputnik", tile_width=4, bundle_size=3)
    vals, A, B = _operands(S, 5, np.float32)
    out = np.zeros((S.shape[0], 5), np.float32)
    model.spmm_a(S, vals, B, out)
    fused = np.zeros((S.shape[0], 5), np.float32)
    model.fusedmm_a(S, vals, A, B, fused)  # not native: the reference model runs it
    W = sp.csr_matrix((_oracle("sddmm", S, vals, A, B), S.indices, S.indptr), shape=S.shape)
    np.testing.assert_allclose(fused, W @ B.astype(np.float64), rtol=1e-4, atol=1e-4)
    stats = model.stats.as_dict()
    a = stats["spmm_a"]
    nonempty = int(np.count_nonzero(np.diff(S.indptr)))
    assert a["tiles"] == nonempty * 2  # r = 5 in tiles of 4: two tiles per nonempty row
    assert a["bundles"] == -(-S.shape[0] // 3)
    assert a["swizzle"] == 1 and a["fallback_calls"] == 0
    assert a["thread_work_max"] >= a["thread_work_mean"] > 0
    assert a["load_imbalance"] >= 1.0
    assert stats["fusedmm_a"]["fallback_calls"] == 1
    assert model.options() == {"tile_width": 4, "swizzle": True, "bundle_size": 3,
                               "device": "cpu"}


def test_swizzle_order():
    indptr = np.array([0, 2, 2, 7, 8, 10, 15])  # lengths 2, 0, 5, 1, 2, 5
    np.testing.assert_array_equal(swizzle_order(indptr), [2, 5, 0, 4, 3, 1])
    model = SputnikModel()
    assert model._order(indptr) is model._order(indptr)  # computed once per structure


# --------------------------------------------------------------------------------------------
# CUDA kernels in the simulator


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("block", SMALL)
def test_cuda_matches_oracle(block, dtype):
    S = BLOCKS[block](dtype)
    # r = 1: scalar; r = 6: vector width 2 and a tile of 4 with one lane predicated off
    model = SputnikModel(device="cuda", tile_width=4, bundle_size=4)
    for r in (1, 6):
        _run_and_check(model, S, r, dtype)


def test_cuda_vector_width_and_roma_counters():
    """r = 8 in float32: 4-wide vectors; the unaligned block's rows need the prefix mask."""
    from distmm.kernels.sputnik_cuda import vector_width

    assert vector_width(8, 8, np.float32) == 4 and vector_width(8, 8, np.float64) == 2
    assert vector_width(6, 4, np.float32) == 2 and vector_width(5, 8, np.float32) == 1
    S = _unaligned(np.float32)
    assert np.any(S.indptr[:-1] % 4 != 0)
    model = SputnikModel(device="cuda", tile_width=8, bundle_size=2)
    _run_and_check(model, S, 8, np.float32, ops=("spmm_a", "sddmm"))
    stats = model.stats.as_dict()["spmm_a"]
    assert stats["blocks"] == 6 and stats["subwarp_steps"] > 0


def test_cuda_swizzle_on_and_off_agree():
    S = BLOCKS["dense_row"](np.float64)
    on = _run_and_check(SputnikModel(device="cuda", tile_width=2, swizzle=True), S, 2,
                        np.float64, ops=("spmm_a",))
    off = SputnikModel(device="cuda", tile_width=2, swizzle=False)
    got = _run_and_check(off, S, 2, np.float64, ops=("spmm_a",))
    np.testing.assert_array_equal(on["spmm_a"], got["spmm_a"])
    # without the swizzle the dense row idles the other subwarps of its block
    assert off.stats.as_dict()["spmm_a"]["subwarp_steps_idle"] > 0


def test_cuda_unavailable_raises(monkeypatch):
    from numba import cuda

    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="NUMBA_ENABLE_CUDASIM"):
        SputnikModel(device="cuda")


# --------------------------------------------------------------------------------------------
# bad options and bad input


@pytest.mark.parametrize("options", [
    {"tile_width": 3}, {"tile_width": 0}, {"tile_width": 512}, {"tile_width": True},
    {"bundle_size": 0}, {"bundle_size": 65}, {"bundle_size": 2.5}, {"swizzle": "yes"},
    {"device": "tpu"}, {"panel_bytes": 4},
])
def test_bad_options_raise(options):
    with pytest.raises(InputError, match="invalid options"):
        make_node_model("sputnik", **options)


def test_bad_input_raises():
    S = _random(12, 9, 0.3, 8, np.float32)
    vals, A, B = _operands(S, 4, np.float32)
    model = SputnikModel(tile_width=4)
    with pytest.raises(ValueError, match="dtype"):
        model.spmm_a(S, vals, B.astype(np.float64), np.zeros((12, 4), np.float32))
    with pytest.raises(ValueError, match="^B has"):
        model.spmm_a(S, vals, B[:-1].copy(), np.zeros((12, 4), np.float32))
    with pytest.raises(ValueError, match="width"):
        model.sddmm(S, vals, A, B[:, :3].copy(), np.zeros(S.nnz, np.float32))
    with pytest.raises(ValueError, match="out"):
        model.spmm_b(S, vals, A, np.zeros((8, 4), np.float32))
    assert model.stats.as_dict() == {}
