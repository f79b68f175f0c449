"""The reference node model against an independent float64 scipy/numpy oracle.

Every operation is checked on random and adversarial blocks, for both dtypes and several dense
widths, with ``out`` starting nonzero (the operations accumulate), and in write mode
(``accumulate=False``) with ``out`` starting as NaN. Each case runs with the
default model and with a model whose cache budget is tiny, so the column-panel path of the
kernels is exercised as well, and with one and with all numba threads (the row split into chunks).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import distmm.kernels.reference as reference
from distmm.core.sparse import CSRBlock
from distmm.kernels.base import kernel_bytes
from distmm.kernels.reference import ReferenceModel

DTYPES = (np.float32, np.float64)
WIDTHS = (1, 3, 5, 17, 128)
OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


# --------------------------------------------------------------------------------------------
# blocks


def _random_block(m: int, n: int, density: float, seed: int, dtype) -> CSRBlock:
    rng = np.random.default_rng(seed)
    nnz = int(round(density * m * n))
    rows = rng.integers(0, max(m, 1), size=nnz) if m else np.zeros(0, np.int64)
    cols = rng.integers(0, max(n, 1), size=nnz) if n else np.zeros(0, np.int64)
    vals = rng.standard_normal(nnz)
    return CSRBlock.from_coo(rows, cols, vals, (m, n), dtype=dtype)


def _empty_rows_block(dtype) -> CSRBlock:
    rng = np.random.default_rng(11)
    rows = rng.choice(np.arange(0, 40, 3), size=60)  # only every third row has entries
    cols = rng.integers(0, 25, size=60)
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(60), (40, 25), dtype=dtype)


def _dense_row_block(dtype) -> CSRBlock:
    rng = np.random.default_rng(12)
    n = 45
    rows = np.full(n, 17)
    cols = np.arange(n)
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(n), (50, n), dtype=dtype)


def _dense_last_row_block(dtype) -> CSRBlock:
    """The last row holds most entries, so a thread's chunk of rows can come out empty."""
    rng = np.random.default_rng(19)
    rows = np.concatenate([np.full(30, 9), [0, 4]])
    cols = np.concatenate([np.arange(30), [3, 29]])
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(32), (10, 30), dtype=dtype)


def _duplicates_block(dtype) -> CSRBlock:
    rng = np.random.default_rng(13)
    rows = rng.integers(0, 6, size=80)  # many repeated coordinates in a 6 x 5 block
    cols = rng.integers(0, 5, size=80)
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(80), (6, 5), dtype=dtype)


def _skewed_block(dtype) -> CSRBlock:
    """A few very heavy rows and one heavy column among light ones (load balance, panels)."""
    rng = np.random.default_rng(14)
    m, n = 120, 90
    rows = [rng.integers(0, m, 300), np.full(n, 3), np.full(n, 100), rng.integers(0, m, 80)]
    cols = [rng.integers(0, n, 300), np.arange(n), np.arange(n), np.full(80, 7)]
    rows = np.concatenate(rows)
    cols = np.concatenate(cols)
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(rows.size), (m, n), dtype=dtype)


BLOCKS = {
    "random_rect": lambda dt: _random_block(37, 23, 0.2, 1, dt),
    "random_tall": lambda dt: _random_block(64, 9, 0.4, 2, dt),
    "empty_rows": _empty_rows_block,
    "empty_matrix": lambda dt: _random_block(7, 5, 0.0, 3, dt),
    "zero_rows": lambda dt: _random_block(0, 6, 0.0, 4, dt),
    "zero_cols": lambda dt: _random_block(6, 0, 0.0, 5, dt),
    "one_column": lambda dt: _random_block(30, 1, 0.5, 6, dt),
    "one_row": lambda dt: _random_block(1, 40, 0.5, 7, dt),
    "one_entry": lambda dt: CSRBlock.from_coo([2], [3], [1.5], (4, 5), dtype=dt),
    "duplicates": _duplicates_block,
    "dense_row": _dense_row_block,
    "dense_last_row": _dense_last_row_block,
    "skewed": _skewed_block,
}


# --------------------------------------------------------------------------------------------
# oracle: float64, scipy / numpy only


def _oracle(op: str, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """What ``op`` adds to ``out``, in float64, from scipy/numpy alone."""
    v = vals.astype(np.float64)
    A = A.astype(np.float64)
    B = B.astype(np.float64)
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    cols = S.indices.astype(np.int64)
    M = sp.csr_matrix((v, cols, S.indptr), shape=S.shape)
    if op == "spmm_a":
        return np.asarray(M @ B)
    if op == "spmm_b":
        return np.asarray(M.T @ A)
    sampled = v * np.einsum("ij,ij->i", A[rows], B[cols])
    if op == "sddmm":
        return sampled
    W = sp.csr_matrix((sampled, cols, S.indptr), shape=S.shape)
    if op == "fusedmm_a":
        return np.asarray(W @ B)
    return np.asarray(W.T @ A)


def _operands(S: CSRBlock, r: int, dtype, seed: int):
    rng = np.random.default_rng(seed)
    m, n = S.shape
    vals = rng.standard_normal(S.nnz).astype(dtype)
    A = rng.standard_normal((m, r)).astype(dtype)
    B = rng.standard_normal((n, r)).astype(dtype)
    return vals, A, B


def _out_shape(op: str, S: CSRBlock, r: int) -> tuple[int, ...]:
    m, n = S.shape
    return {"sddmm": (S.nnz,), "spmm_a": (m, r), "spmm_b": (n, r),
            "fusedmm_a": (m, r), "fusedmm_b": (n, r)}[op]


def _call(model: ReferenceModel, op: str, S, vals, A, B, out, accumulate: bool = True) -> None:
    if op == "spmm_a":
        model.spmm_a(S, vals, B, out, accumulate=accumulate)
    elif op == "spmm_b":
        model.spmm_b(S, vals, A, out, accumulate=accumulate)
    else:
        getattr(model, op)(S, vals, A, B, out, accumulate=accumulate)


def _check(op, S, vals, A, B, out0, got, dtype) -> None:
    """got == out0 + oracle, to a tolerance scaled by the magnitudes of the summed terms."""
    want = out0.astype(np.float64) + _oracle(op, S, vals, A, B)
    scale = np.abs(out0).astype(np.float64) + _oracle(op, S, np.abs(vals), np.abs(A), np.abs(B))
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    err = np.abs(got.astype(np.float64) - want)
    assert got.dtype == dtype
    assert got.shape == want.shape
    assert np.all(err <= rtol * scale + 1e-30), (
        f"{op}: max error {err.max():.3g}, worst relative {np.max(err / (scale + 1e-30)):.3g}")


@pytest.fixture(params=["threads=1", "threads=all"])
def threads(request):
    old = numba.get_num_threads()
    numba.set_num_threads(1 if request.param == "threads=1" else numba.config.NUMBA_NUM_THREADS)
    yield numba.get_num_threads()
    numba.set_num_threads(old)


MODELS = {"default": lambda: ReferenceModel(), "panels": lambda: ReferenceModel(panel_bytes=64)}


# --------------------------------------------------------------------------------------------
# correctness


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("block", sorted(BLOCKS))
@pytest.mark.parametrize("model_kind", sorted(MODELS))
def test_all_ops_adversarial_blocks(block, dtype, model_kind, threads):
    S = BLOCKS[block](dtype)
    model = MODELS[model_kind]()
    for r in (1, 5, 17):
        vals, A, B = _operands(S, r, dtype, seed=r)
        for op in OPS:
            out0 = np.random.default_rng(99).standard_normal(_out_shape(op, S, r)).astype(dtype)
            got = out0.copy()
            _call(model, op, S, vals, A, B, got)
            _check(op, S, vals, A, B, out0, got, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("r", WIDTHS)
@pytest.mark.parametrize("model_kind", sorted(MODELS))
def test_all_ops_random_widths(r, dtype, model_kind, threads):
    S = _random_block(150, 110, 0.08, 21, dtype)
    model = MODELS[model_kind]()
    vals, A, B = _operands(S, r, dtype, seed=3)
    for op in OPS:
        out0 = np.random.default_rng(5).standard_normal(_out_shape(op, S, r)).astype(dtype)
        got = out0.copy()
        _call(model, op, S, vals, A, B, got)
        _check(op, S, vals, A, B, out0, got, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_three_width_and_zero_width(dtype):
    S = _random_block(20, 30, 0.3, 8, dtype)
    model = ReferenceModel()
    for r in (3, 0):
        vals, A, B = _operands(S, r, dtype, seed=4)
        for op in OPS:
            out0 = np.ones(_out_shape(op, S, r), dtype)
            got = out0.copy()
            _call(model, op, S, vals, A, B, got)
            _check(op, S, vals, A, B, out0, got, dtype)


def test_panels_and_chunks_agree_with_plain_kernel():
    """Many panels, many threads: same result as one panel on one thread, to rounding."""
    dtype = np.float64
    S = _skewed_block(dtype)
    vals, A, B = _operands(S, 17, dtype, seed=6)
    plain, panelled = ReferenceModel(panel_bytes=2**40), ReferenceModel(panel_bytes=8)
    old = numba.get_num_threads()
    try:
        for op in OPS:
            numba.set_num_threads(1)
            a = np.zeros(_out_shape(op, S, 17), dtype)
            _call(plain, op, S, vals, A, B, a)
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
            b = np.zeros_like(a)
            _call(panelled, op, S, vals, A, B, b)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    finally:
        numba.set_num_threads(old)
    assert panelled._panels(S.shape[1], 17, 8, S.nnz, S.shape[0], 1) > 1


def test_default_panel_budget_is_half_the_rank_share_of_the_cache(monkeypatch):
    """Half of (the last-level cache / the node's ranks that share it), within [1 MiB, 64 MiB];
    8 MiB where sysfs says nothing; the ranks as settle counted them; a budget given is kept;
    the thread count changes nothing."""
    from distmm.kernels import threads

    size, sharing = reference._last_level_cache()  # this machine's, whatever it is
    assert size >= 0 and sharing >= 0
    assert reference._count_cpus("0-1\n") == 2
    assert reference._count_cpus("0-3,8-11") == 8
    assert reference._count_cpus("5") == 1
    MiB = 2**20
    monkeypatch.setattr(reference, "node_cpus", lambda: 64)
    monkeypatch.setattr(reference, "_last_level_cache", lambda: (32 * MiB, 8))  # 8 caches
    assert reference.cache_share(1)["panel_bytes"] == 16 * MiB
    assert reference.cache_share(8)["panel_bytes"] == 16 * MiB  # one rank per cache
    assert reference.cache_share(16)["panel_bytes"] == 8 * MiB
    assert reference.cache_share(64)["panel_bytes"] == 2 * MiB
    monkeypatch.setattr(reference, "_last_level_cache", lambda: (32 * MiB, 64))  # one cache
    assert reference.cache_share(2)["panel_bytes"] == 8 * MiB
    assert reference.cache_share(64)["panel_bytes"] == MiB  # never below 1 MiB
    monkeypatch.setattr(reference, "_last_level_cache", lambda: (512 * MiB, 0))
    assert reference.cache_share(1)["panel_bytes"] == 64 * MiB  # never above 64 MiB
    assert reference.cache_share(16)["panel_bytes"] == 16 * MiB  # sharing unknown: the whole node
    monkeypatch.setattr(reference, "_last_level_cache", lambda: (0, 0))
    assert reference.cache_share(4)["panel_bytes"] == 8 * MiB
    monkeypatch.setattr(reference, "_last_level_cache", lambda: (32 * MiB, 64))
    monkeypatch.setitem(threads.STATE, "ranks_on_node", 4)
    model, fixed = ReferenceModel(), ReferenceModel(panel_bytes=3 * MiB)
    assert model.options() == {"panel_bytes": None} and fixed.options() == {"panel_bytes": 3 * MiB}
    old = numba.get_num_threads()
    try:
        for n in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(n)
            assert model.panel_bytes == 4 * MiB and fixed.panel_bytes == 3 * MiB
    finally:
        numba.set_num_threads(old)
    monkeypatch.setitem(threads.STATE, "ranks_on_node", 1)
    assert model.panel_bytes == 16 * MiB


def test_prefetch_plan_by_size_and_row_length():
    """Prefetch only short gathered rows of a matrix larger than a quarter of the panel
    budget."""
    model = ReferenceModel(panel_bytes=2**20)
    big, small = 2**16, 2**8  # gathered rows: 4 MiB and 16 KiB at r = 16 in float32
    assert model._plan(big, 16, 4, 10**6, 1000, 2)[0] > 0
    assert model._plan(small, 16, 4, 10**6, 1000, 2)[0] == 0
    long_row = reference._PREFETCH_MAX_ROW_BYTES // 8 + 1  # float64 columns
    assert model._plan(big, long_row, 8, 10**6, 1000, 2)[0] == 0
    assert model._plan(big, long_row - 1, 8, 10**6, 1000, 2)[0] > 0


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("block", sorted(BLOCKS))
@pytest.mark.parametrize("model_kind", sorted(MODELS))
def test_write_mode_overwrites_everything(block, dtype, model_kind, threads):
    """accumulate=False writes every output value (empty rows and empty blocks as zeros, every
    panel path), bit for bit what accumulating into zeros gives."""
    S = BLOCKS[block](dtype)
    model = MODELS[model_kind]()
    for r in (0, 1, 5, 17):
        vals, A, B = _operands(S, r, dtype, seed=r + 40)
        for op in OPS:
            got = np.full(_out_shape(op, S, r), np.nan, dtype)
            _call(model, op, S, vals, A, B, got, accumulate=False)
            zeros = np.zeros_like(got)
            _check(op, S, vals, A, B, zeros, got, dtype)
            _call(model, op, S, vals, A, B, zeros)
            assert np.array_equal(got, zeros), op


def test_write_mode_records_written_bytes():
    """A writing call moves its output once, an accumulating one reads and writes it."""
    dtype = np.float64
    S = _random_block(30, 20, 0.2, 17, dtype)
    vals, A, B = _operands(S, 8, dtype, seed=10)
    model = ReferenceModel()
    model.spmm_a(S, vals, B, np.zeros((30, 8), dtype), accumulate=False)
    model.sddmm(S, vals, A, B, np.zeros(S.nnz, dtype), accumulate=False)
    stats = model.stats.as_dict()
    assert stats["spmm_a"]["bytes"] == kernel_bytes(S, 8, 20, 30, accumulate=False)
    assert stats["spmm_a"]["bytes"] == kernel_bytes(S, 8, 20, 30) - 30 * 8 * 8
    assert stats["sddmm"]["bytes"] == kernel_bytes(S, 8, 50, 0, S.nnz) - S.nnz * 8


def test_accumulates_twice():
    """Two calls add twice: nothing is overwritten."""
    dtype = np.float64
    S = _random_block(25, 18, 0.3, 9, dtype)
    vals, A, B = _operands(S, 5, dtype, seed=7)
    model = ReferenceModel()
    for op in OPS:
        out = np.zeros(_out_shape(op, S, 5), dtype)
        _call(model, op, S, vals, A, B, out)
        _call(model, op, S, vals, A, B, out)
        np.testing.assert_allclose(out, 2 * _oracle(op, S, vals, A, B), rtol=1e-12, atol=1e-12)


def test_transpose_ops_follow_new_values():
    """The cached transpose is structure only: new values are picked up through perm."""
    dtype = np.float64
    S = _random_block(30, 20, 0.25, 10, dtype)
    model = ReferenceModel()
    for seed in (1, 2):
        vals, A, B = _operands(S, 4, dtype, seed=seed)
        for op in ("spmm_b", "fusedmm_b"):
            out = np.zeros(_out_shape(op, S, 4), dtype)
            _call(model, op, S, vals, A, B, out)
            np.testing.assert_allclose(out, _oracle(op, S, vals, A, B), rtol=1e-12, atol=1e-12)


def test_sddmm_output_feeds_spmm():
    """sddmm then spmm_a equals fusedmm_a (the unfused composition)."""
    dtype = np.float64
    S = _random_block(40, 35, 0.15, 15, dtype)
    vals, A, B = _operands(S, 6, dtype, seed=8)
    model = ReferenceModel()
    w = np.zeros(S.nnz, dtype)
    model.sddmm(S, vals, A, B, w)
    unfused = np.zeros((40, 6), dtype)
    model.spmm_a(S, w, B, unfused)
    fused = np.zeros((40, 6), dtype)
    model.fusedmm_a(S, vals, A, B, fused)
    np.testing.assert_allclose(fused, unfused, rtol=1e-12, atol=1e-12)


def test_nan_propagates():
    """fast-math here is reassociation/contraction only: a NaN input gives NaN outputs."""
    dtype = np.float64
    S = _random_block(10, 8, 0.5, 16, dtype)
    vals, A, B = _operands(S, 3, dtype, seed=9)
    A[2, 1] = np.nan
    out = np.zeros(S.nnz, dtype)
    ReferenceModel().sddmm(S, vals, A, B, out)
    row2 = slice(S.indptr[2], S.indptr[3])
    assert S.indptr[3] > S.indptr[2]
    assert np.all(np.isnan(out[row2]))
    assert not np.any(np.isnan(np.delete(out, np.arange(S.indptr[2], S.indptr[3]))))


# --------------------------------------------------------------------------------------------
# statistics


def test_stats_record_calls_flops_and_bytes():
    dtype = np.float32
    S = _random_block(30, 20, 0.2, 17, dtype)
    r = 8
    vals, A, B = _operands(S, r, dtype, seed=10)
    model = ReferenceModel()
    for op in OPS:
        for _ in range(2):
            _call(model, op, S, vals, A, B, np.zeros(_out_shape(op, S, r), dtype))
    stats = model.stats.as_dict()
    assert sorted(stats) == sorted(OPS)
    for op in OPS:
        factor = 4 if op.startswith("fusedmm") else 2
        assert stats[op]["calls"] == 2
        assert stats[op]["flops"] == 2 * factor * S.nnz * r
        assert stats[op]["fallback_calls"] == 0
        assert stats[op]["seconds"] > 0
    m, n = S.shape
    assert stats["spmm_a"]["bytes"] == 2 * kernel_bytes(S, r, n, m)
    assert stats["spmm_b"]["bytes"] == 2 * kernel_bytes(S, r, m, n)
    # SDDMM reads and writes its nnz outputs besides the sparse structure and A, B
    assert stats["sddmm"]["bytes"] == 2 * (kernel_bytes(S, r, m + n, 0)
                                           + 2 * S.nnz * np.dtype(dtype).itemsize)
    model.stats.reset()
    assert model.stats.as_dict() == {}


# --------------------------------------------------------------------------------------------
# validation


def _good(dtype=np.float32, r=4):
    S = _random_block(12, 9, 0.3, 18, dtype)
    vals, A, B = _operands(S, r, dtype, seed=11)
    return S, vals, A, B


@pytest.mark.parametrize("op", OPS)
def test_dtype_mismatch_raises(op):
    S, vals, A, B = _good()
    model = ReferenceModel()
    out = np.zeros(_out_shape(op, S, 4), np.float32)
    with pytest.raises(ValueError, match="dtype"):
        _call(model, op, S, vals, A.astype(np.float64), B.astype(np.float64), out)
    with pytest.raises(ValueError, match="dtype"):
        _call(model, op, S, vals, A, B, out.astype(np.float64))
    with pytest.raises(ValueError, match="dtype"):
        _call(model, op, S, vals.astype(np.float64), A, B, out)
    assert model.stats.as_dict() == {}  # nothing recorded for calls that failed


@pytest.mark.parametrize("op", OPS)
def test_shape_mismatch_raises(op):
    S, vals, A, B = _good()
    model = ReferenceModel()
    out = np.zeros(_out_shape(op, S, 4), np.float32)
    with pytest.raises(ValueError, match="vals"):
        _call(model, op, S, vals[:-1], A, B, out)
    bad_out = np.zeros((out.shape[0] + 1,) + out.shape[1:], np.float32)
    with pytest.raises(ValueError, match="out"):
        _call(model, op, S, vals, A, B, bad_out)
    wrong = "A" if op in ("sddmm", "spmm_b", "fusedmm_a", "fusedmm_b") else "B"
    A2 = A[:-1].copy() if wrong == "A" else A
    B2 = B[:-1].copy() if wrong == "B" else B
    with pytest.raises(ValueError, match=f"^{wrong} has"):
        _call(model, op, S, vals, A2, B2, out)


def test_width_mismatch_and_layout_raise():
    S, vals, A, B = _good()
    model = ReferenceModel()
    with pytest.raises(ValueError, match="width"):
        model.sddmm(S, vals, A, B[:, :3].copy(), np.zeros(S.nnz, np.float32))
    with pytest.raises(ValueError, match="width"):
        model.spmm_a(S, vals, B, np.zeros((12, 3), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        model.spmm_a(S, vals, np.asfortranarray(B), np.zeros((12, 4), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        model.spmm_a(S, vals, B, np.zeros(12 * 4, np.float32))
    with pytest.raises(ValueError, match="float32 and float64"):
        model.spmm_a(S, vals.astype(np.int32), B, np.zeros((12, 4), np.float32))
    with pytest.raises(ValueError, match="panel_bytes"):
        ReferenceModel(panel_bytes=0)


def test_block_dtype_must_match_vals():
    S, vals, A, B = _good(np.float32)
    S64 = _random_block(12, 9, 0.3, 18, np.float64)
    with pytest.raises(ValueError, match="block"):
        ReferenceModel().spmm_a(S64, vals, B, np.zeros((12, 4), np.float32))
