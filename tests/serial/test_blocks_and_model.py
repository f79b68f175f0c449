"""CSR blocks, block layout arithmetic and the cost model's closed forms (serial)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.layout import block_of, block_offsets, block_sizes
from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.perf import costmodel


def test_from_coo_sums_duplicates_and_sorts():
    rows = np.array([2, 0, 2, 0, 2, 1])
    cols = np.array([1, 3, 1, 0, 0, 2])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    blk = CSRBlock.from_coo(rows, cols, vals, (4, 5), np.float64)
    ref = sp.coo_matrix((vals, (rows, cols)), shape=(4, 5)).tocsr()
    ref.sum_duplicates()
    ref.sort_indices()
    np.testing.assert_array_equal(blk.indptr, ref.indptr)
    np.testing.assert_array_equal(blk.indices, ref.indices)
    np.testing.assert_array_equal(blk.data, ref.data)
    assert blk.nnz == 5 and blk.indices.dtype == np.int32 and blk.indptr.dtype == np.int64


@pytest.mark.parametrize("shape", [(0, 0), (5, 0), (0, 4), (6, 7), (1, 30)])
def test_transpose_structure_matches_scipy(shape):
    rng = np.random.default_rng(sum(shape))
    m = sp.random(*shape, density=0.3, random_state=rng, format="coo")
    blk = CSRBlock.from_scipy(m, np.float64)
    indptr_t, indices_t, perm = blk.transpose()
    t = sp.csr_matrix((blk.data[perm], indices_t, indptr_t), shape=shape[::-1])
    np.testing.assert_array_equal(t.toarray(), m.toarray().T)
    assert blk.transpose()[2] is perm  # cached


def test_float32_values_are_summed_in_float64():
    vals = np.array([1e8, 1.0, -1e8], dtype=np.float64)
    blk = CSRBlock.from_coo([0, 0, 0], [0, 0, 0], vals, (1, 1), np.float32)
    assert blk.data.dtype == np.float32 and blk.data[0] == 1.0


@pytest.mark.parametrize("n,p", [(10, 3), (7, 8), (0, 4), (64, 8), (1, 1)])
def test_block_offsets_cover_and_balance(n, p):
    off = block_offsets(n, p)
    sizes = block_sizes(off)
    assert off[0] == 0 and off[-1] == n and len(off) == p + 1
    assert sizes.max() - sizes.min() <= 1 if p else True
    idx = np.arange(n)
    b = block_of(idx, off)
    assert np.all((off[b] <= idx) & (idx < off[b + 1]))


@pytest.mark.parametrize("p", [2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("strategy", ["none", "reuse", "fusion"])
def test_exact_model_reduces_to_table3(p, strategy):
    """Table III less the last shift of each pass over an input Y (two passes without
    elision, one otherwise: n r / p words and one message each), which distmm does not send."""
    n, r = 1024 * p, 32
    passes = 2 if strategy == "none" else 1
    for c in [c for c in range(1, p) if p % c == 0]:
        exact = costmodel.exact("15d-dense-shift", "fusedmm_a", n, n, r, p, c, strategy)
        msgs, words = costmodel.table3("15d-dense-shift", strategy, n, r, p, c)
        assert costmodel.total(exact) == pytest.approx(words - passes * n * r / p)
        assert costmodel.total(exact, "messages") == pytest.approx(msgs - passes)
        assert costmodel.implemented("15d-dense-shift", strategy, n, r, p, c) == pytest.approx(
            (msgs - passes, words - passes * n * r / p))


def test_table4_best_c_is_the_minimiser():
    """Table IV's closed forms minimise Table III's words over real c (checked numerically)."""
    p, n, r = 64, 1 << 20, 64
    for strategy in ("none", "reuse", "fusion"):
        c_star = costmodel.table4_best_c("15d-dense-shift", strategy, p)
        grid = np.linspace(1, p, 20000)
        words = [costmodel.table3("15d-dense-shift", strategy, n, r, p, c)[1] for c in grid]
        assert grid[int(np.argmin(words))] == pytest.approx(c_star, rel=1e-3)
    # The paper's ordering (Figure 7): reuse >= none >= fusion.
    assert (costmodel.table4_best_c("15d-dense-shift", "reuse", p)
            > costmodel.table4_best_c("15d-dense-shift", "none", p)
            > costmodel.table4_best_c("15d-dense-shift", "fusion", p))
    assert costmodel.best_c_dense_shift_15d(n, r, p, "none") == math.isqrt(p)


def test_elision_saving_tends_to_one_over_sqrt2():
    """Section V-A: at each strategy's best c, words fall to ~1/sqrt(2) of no elision."""
    p, n, r = 1 << 20, 1 << 30, 64
    best = {s: costmodel.table3("15d-dense-shift", s, n, r, p,
                                costmodel.table4_best_c("15d-dense-shift", s, p))[1]
        for s in ("none", "reuse", "fusion")}
    assert best["reuse"] / best["none"] == pytest.approx(1 / math.sqrt(2), rel=2e-3)
    assert best["fusion"] / best["none"] == pytest.approx(1 / math.sqrt(2), rel=2e-3)


def test_model_rejects_bad_parameters():
    with pytest.raises(InputError):
        costmodel.exact("15d-dense-shift", "fusedmm_a", 8, 8, 2, 6, 4, "none")
    with pytest.raises(InputError):
        costmodel.exact("15d-dense-shift", "spgemm", 8, 8, 2, 4, 2)


@pytest.mark.parametrize("algorithm,strategy", costmodel.CONFIGS)
@pytest.mark.parametrize("phi", [0.05, 0.5, 4.0])
def test_table4_minimises_table3_for_every_family(algorithm, strategy, phi):
    """Table IV's closed forms (and the derived ones) are the minimisers of Table III."""
    p, n, r = 4096, 1 << 24, 128
    grid = np.geomspace(0.01, 4 * p, 200001)
    words = np.array([costmodel.table3(algorithm, strategy, n, r, p, c, phi)[1] for c in grid])
    assert grid[int(np.argmin(words))] == pytest.approx(
        costmodel.table4_best_c(algorithm, strategy, p, phi), rel=1e-3)


def test_valid_cs():
    assert costmodel.valid_cs("15d-dense-shift", 8) == [1, 2, 4, 8]
    assert costmodel.valid_cs("25d-dense-replicate", 8) == [2, 8]
    assert costmodel.valid_cs("15d-sparse-shift", 8, r=2) == [4, 8]
    assert costmodel.valid_cs("25d-sparse-replicate", 3) == [3]
