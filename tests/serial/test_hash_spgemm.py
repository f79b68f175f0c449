"""The hash-spgemm node model (CPU path) against scipy: SpGEMM structure and values, the binning
and hash machinery on awkward matrices, SpMM/SDDMM with sparse "dense" operands, and options."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.kernels import make_node_model
from distmm.kernels.hash_spgemm import (
    DENSE_MAX_BYTES,
    NUM_TABLES,
    SYM_TABLES,
    _bin_rows,
    _chunk_bounds,
    _tag_dtype,
    _unbinned,
    binning_ranges,
    dense_phases,
    dense_to_csr,
    hash_spgemm,
)

# small tables push small matrices through every bin, the symbolic fallback and the per-row
# numeric tables
SMALL = {"sym_tables": [4, 8, 16, 32, 64, 96, 128, 160],
         "num_tables": [4, 8, 16, 32, 48, 64, 96]}


def _block(M, dtype=np.float64) -> CSRBlock:
    return CSRBlock.from_scipy(sp.coo_matrix(M), dtype)


def _check(X, Y, dtype=np.float64, **opts):
    """Multiply with the model and compare with scipy in float64; return the model's counters.

    Without an explicit ``dense_max_bytes`` the product is checked twice: with hash tables
    only (whose counters are returned) and with the default budget, under which these small
    matrices take the dense accumulator."""
    if "dense_max_bytes" in opts:
        return _check_one(X, Y, dtype, **opts)
    st = _check_one(X, Y, dtype, dense_max_bytes=0, **opts)
    assert st["sym_dense_rows"] == st["num_dense_rows"] == 0
    dense = _check_one(X, Y, dtype, **opts)
    n, itemsize = Y.shape[1], np.dtype(dtype).itemsize
    if n * (itemsize + 1) <= DENSE_MAX_BYTES:
        assert dense["sym_dense_rows"] == dense["num_dense_rows"] == X.shape[0]
        assert dense["sym_probes"] == dense["num_probes"] == 0
        assert dense["sym_fallback_rows"] == 0
        # a dense phase sizes no tables, so it bins no rows
        assert not any(v for k, v in dense.items() if "_bin" in k and "seconds" not in k)
    return st


def _check_one(X, Y, dtype, **opts):
    model = make_node_model("hash-spgemm", **opts)
    Xb, Yb = _block(X, dtype), _block(Y, dtype)
    C = model.spgemm(Xb, Yb)
    ref = (Xb.to_scipy().astype(np.float64) @ Yb.to_scipy().astype(np.float64)).tocsr()
    ref.sort_indices()
    assert C.shape == ref.shape
    assert C.indptr.dtype == np.int64 and C.indices.dtype == np.int32 and C.data.dtype == dtype
    np.testing.assert_array_equal(C.indptr, ref.indptr)
    np.testing.assert_array_equal(C.indices, ref.indices)
    rtol = 1e-6 if dtype == np.float64 else 2e-5
    # error bound relative to the sum of |products| of each entry (cancellation-proof)
    scale = (abs(Xb.to_scipy()).astype(np.float64) @ abs(Yb.to_scipy()).astype(np.float64)).tocsr()
    scale.sort_indices()
    np.testing.assert_array_less(np.abs(C.data - ref.data), rtol * scale.data + 1e-300)
    st = model.stats.as_dict()["spgemm"]
    assert st["fallback_calls"] == 0
    assert st["products"] * 2 == st["flops"]
    assert st.get("nnz_c", 0) == ref.nnz
    if model.device == "cpu":
        _check_unsorted(model, Xb, Yb, C)
    return st


def _check_unsorted(model, Xb, Yb, C):
    """The same product with unsorted rows: the same entries with the same values in every
    row (so no duplicates); no row is sorted except the flag-scanned dense ones, which come
    out sorted at no cost."""
    U, st = hash_spgemm(Xb, Yb, model.sym_tables, model.sym_ranges, model.num_tables,
                        model.num_ranges, None, model.dense_max_bytes, sort_output=False)
    np.testing.assert_array_equal(U.indptr, C.indptr)
    Us = U.to_scipy()
    Us.sort_indices()
    np.testing.assert_array_equal(Us.indices, C.indices)
    np.testing.assert_array_equal(Us.data, C.data)
    if C.nnz:
        assert st["sort_skipped_rows"] + st["sort_dense_scan_rows"] + st["sort_direct_rows"] \
            + st["sort_y_bitmap_rows"] == np.count_nonzero(np.diff(C.indptr))
        # a row is written straight from its products exactly when no two share a column
        pattern = sp.csr_matrix((np.ones(Xb.nnz, np.int64), Xb.indices, Xb.indptr), Xb.shape)
        products = pattern @ np.diff(Yb.indptr)
        assert st["sort_direct_rows"] == np.count_nonzero((products == np.diff(C.indptr))
                                                          & (products > 0))
        if model.dense_max_bytes == 0:
            assert st["num_insertions"] == products[products > np.diff(C.indptr)].sum()
        assert st["sort_rank_rows"] == st["sort_bitmap_rows"] == st["sort_bucket_rows"] \
            == st["sort_dense_bitmap_rows"] == 0


def _rand(m, n, density, seed):
    rng = np.random.default_rng(seed)
    return sp.random(m, n, density=density, random_state=rng,
                     data_rvs=lambda k: rng.uniform(-1, 1, k), format="csr")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m,k,n,density", [(40, 30, 50, 0.1), (300, 200, 250, 0.04),
                                           (64, 64, 64, 0.5)])
def test_random_matches_scipy(m, k, n, density, dtype):
    st = _check(_rand(m, k, density, 1), _rand(k, n, density, 2), dtype)
    assert st["sym_probes"] >= st["sym_insertions"] and st["num_probes"] >= st["num_insertions"]


def test_every_bin_fallback_and_per_row_tables():
    """With small tables the rows spread over all 8 bins; rows too big for the last symbolic
    table are recomputed with their own (kernel8), the last numeric bin sizes per row."""
    rng = np.random.default_rng(3)
    row_nnz = np.repeat([1, 2, 3, 5, 8, 12, 20, 40], 4)
    rows = np.repeat(np.arange(row_nnz.size), row_nnz)
    cols = np.concatenate([rng.choice(400, c, replace=False) for c in row_nnz])
    X = sp.csr_matrix((rng.uniform(0.5, 1, rows.size), (rows, cols)), shape=(row_nnz.size, 400))
    Y = _rand(400, 300, 0.03, 4)
    st = _check(X, Y, **SMALL)
    assert st["sym_fallback_rows"] > 0
    assert st["num_bin7_rows"] > 0
    assert sum(st[f"sym_bin{b}_rows"] > 0 for b in range(8)) >= 6
    assert st["sym_one_bin"] == 0 and st["num_one_bin"] == 0


def test_adversarial_shapes():
    rng = np.random.default_rng(5)
    # empty rows and columns in both operands
    X = _rand(60, 40, 0.1, 6).tolil()
    X[::3] = 0
    Y = _rand(40, 70, 0.1, 7).tolil()
    Y[5:20] = 0
    _check(X.tocsr(), Y.tocsr())
    # one dense row among sparse ones (it lands in the per-row tables with small tables)
    X = _rand(50, 80, 0.02, 8).tolil()
    X[7] = rng.uniform(0.1, 1, 80)
    _check(X.tocsr(), _rand(80, 90, 0.3, 9), **SMALL)
    _check(X.tocsr(), _rand(80, 90, 0.3, 9))
    # every row in the largest bin: a dense product
    st = _check(_rand(20, 30, 1.0, 10), _rand(30, 200, 1.0, 11), **SMALL)
    assert st["num_bin7_rows"] == 20
    # 1 x 1, rectangular, vector-like
    _check(sp.csr_matrix([[2.5]]), sp.csr_matrix([[-4.0]]))
    _check(_rand(1, 50, 0.5, 12), _rand(50, 1, 0.5, 13))
    _check(_rand(50, 1, 0.5, 14), _rand(1, 50, 0.5, 15))
    # products that cancel to an exact zero stay stored (the symbolic phase fixes the structure,
    # as in OpSparse and cuSPARSE); scipy drops them, and agrees once they are eliminated
    for budget in (0, DENSE_MAX_BYTES):
        C = make_node_model("hash-spgemm", dense_max_bytes=budget).spgemm(
            _block(sp.csr_matrix([[1.0, 1.0], [0.0, 2.0]])), _block(sp.csr_matrix([[1.0], [-1.0]])))
        np.testing.assert_array_equal(C.indptr, [0, 1, 2])
        np.testing.assert_array_equal(C.data, [0.0, -2.0])


@pytest.mark.parametrize("shapes", [((0, 5), (5, 4)), ((3, 0), (0, 4)), ((3, 5), (5, 0)),
                                    ((4, 6), (6, 3))])
def test_empty_operands(shapes):
    (m, k), (_, n) = shapes
    X, Y = sp.csr_matrix((m, k)), sp.csr_matrix((k, n))
    C = make_node_model("hash-spgemm").spgemm(_block(X), _block(Y))
    assert C.shape == (m, n) and C.nnz == 0 and C.indptr.shape == (m + 1,)
    assert not C.indptr.any()


def test_one_bin_shortcut_and_default_ranges():
    # Tables 1 and 2 of the paper, from the nominal table sizes and ratios 1.2 and 2
    assert binning_ranges(SYM_TABLES, 1.2)[:7] == (26, 426, 853, 1706, 3413, 6826, 10240)
    assert binning_ranges(NUM_TABLES, 2.0) == (16, 128, 256, 512, 1024, 2048, 4096)
    st = _check(sp.eye(30, format="csr"), _rand(30, 30, 0.2, 16))
    assert st["sym_one_bin"] == 1 and st["num_one_bin"] == 1 and st["sym_bin0_rows"] == 30


def test_bin_rows_matches_numpy():
    rng = np.random.default_rng(17)
    sizes = rng.integers(0, 300, 500)
    ranges = np.array([3, 10, 40, 100, 200], dtype=np.int64)
    order, offsets, one = _bin_rows(sizes, ranges, 6)
    which = np.searchsorted(ranges, sizes, side="left")
    assert not one
    np.testing.assert_array_equal(offsets, np.concatenate(([0], np.cumsum(
        np.bincount(which, minlength=6)))))
    np.testing.assert_array_equal(np.sort(order), np.arange(500))
    for b in range(6):
        assert (which[order[offsets[b]:offsets[b + 1]]] == b).all()


@pytest.mark.parametrize("nchunks", [1, 2, 3, 7])
def test_chunk_bounds_balance_work(nchunks):
    """Each bin is cut into nchunks consecutive runs covering it exactly, and no run holds more
    than its share of the work plus one row (rows are not split)."""
    rng = np.random.default_rng(18)
    work = np.concatenate((rng.integers(0, 5, 300), rng.integers(1000, 20000, 40), [0, 0]))
    sizes = np.where(work > 100, 500, rng.integers(0, 100, work.size))
    order, offsets, _ = _bin_rows(sizes, np.array([10, 50, 400], dtype=np.int64), 4)
    bounds = _chunk_bounds(order, offsets, work.astype(np.int64), nchunks)
    assert bounds.shape == (4, nchunks + 1)
    for b in range(4):
        np.testing.assert_array_equal(bounds[b, [0, -1]], offsets[b:b + 2])
        assert (np.diff(bounds[b]) >= 0).all()
        w = work[order[offsets[b]:offsets[b + 1]]] + 1
        runs = [w[bounds[b, c] - offsets[b]:bounds[b, c + 1] - offsets[b]].sum()
                for c in range(nchunks)]
        assert max(runs) <= w.sum() / nchunks + (w.max() if w.size else 0)
        # the cut rule itself, by a plain scan: run c starts at the first row whose preceding
        # rows of the bin hold at least c / nchunks of its work
        before = np.concatenate(([0], np.cumsum(w)))
        for c in range(1, nchunks):
            first = int(np.argmax(before * nchunks >= w.sum() * c))
            assert bounds[b, c] == offsets[b] + first


@pytest.mark.parametrize("m", [0, 1, 5, 342])
def test_unbinned_groups_rows_in_order(m):
    """Under the dense accumulator the rows keep their order, in 8 consecutive groups of about
    equal work (each at most its share plus one row), and no binning is reported."""
    rng = np.random.default_rng(19)
    work = np.sort(rng.integers(0, 20000, m)).astype(np.int64)  # work drifting along the rows
    order, offsets, one_bin, bounds = _unbinned(work, 8, 3)
    np.testing.assert_array_equal(order, np.arange(m))
    assert not one_bin and offsets.shape == (9,) and offsets[0] == 0 and offsets[-1] == m
    assert (np.diff(offsets) >= 0).all()
    w = work + 1
    share = w.sum() / 8 + (w.max() if m else 0)
    assert all(w[offsets[g]:offsets[g + 1]].sum() <= share for g in range(8))
    # each group's thread runs are what _chunk_bounds makes of the groups
    np.testing.assert_array_equal(bounds, _chunk_bounds(order, offsets, work, 3))


@pytest.mark.parametrize("num_ratio", [1.0, 1.5, 3.0])
def test_binning_ratio_changes_speed_not_result(num_ratio):
    X = _rand(120, 120, 0.1, 18)
    st = _check(X, X, num_ratio=num_ratio, **SMALL)
    assert st["num_probes"] >= st["num_insertions"]
    # full tables (ratio 1) with long rows: the bucket sort with as many keys as buckets
    st = _check(_rand(30, 40, 0.5, 30), _rand(40, 300, 0.3, 31), num_ratio=num_ratio)
    assert st["num_bin2_rows"] + st["num_bin3_rows"] > 0


def _two_run_rows(key_sets, ncols, seed):
    """X, Y such that row r of X @ Y unions the keys of two rows of Y, key_sets[r] split
    between them with overlap: the row's keys are inserted as two interleaved sorted runs, so
    the numeric phase really has to sort them."""
    rng = np.random.default_rng(seed)
    rows, cols = [], []
    for r, ks in enumerate(key_sets):
        ks = np.unique(ks)
        first = rng.random(ks.size) < 0.5
        both = rng.random(ks.size) < 0.2
        for y, sel in ((2 * r, first | both), (2 * r + 1, ~first | both)):
            rows.append(np.full(sel.sum(), y))
            cols.append(ks[sel])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    Y = sp.csr_matrix((rng.uniform(0.5, 1, rows.size), (rows, cols)),
                      shape=(2 * len(key_sets), ncols))
    X = sp.csr_matrix((rng.uniform(0.5, 1, 2 * len(key_sets)),
                       (np.repeat(np.arange(len(key_sets)), 2), np.arange(2 * len(key_sets)))))
    return X, Y


def test_every_sort_way():
    """Rows of up to 32 keys are rank-sorted, longer rows with keys dense in their range go
    through the bitmap, sparse ones through the counting sort (or the radix sort when the keys
    cluster in one bucket); a range wider than the bitmap's 2^24 bits never uses it."""
    rng = np.random.default_rng(40)
    n = (1 << 24) + 3000
    sets = [rng.choice(1000, 20, replace=False),                     # rank
            rng.choice(300, 200, replace=False) + 5000,              # bitmap, dense range
            np.arange(0, 4096 * 40, 4096),                            # bitmap, 1 key per word
            rng.choice(n, 50, replace=False),                        # counting sort, sparse
            np.concatenate((rng.choice(200, 60, replace=False), [n - 1])),  # radix
            np.concatenate((np.arange(5000), [1 << 24, n - 1])),     # range > 2^24: no bitmap
            np.array([0, 63, 64, 4095, 4096, 4097] + list(range(100, 140)))]  # word edges
    X, Y = _two_run_rows(sets, n, 41)
    st = _check(X, Y)
    assert st["sort_rank_rows"] == 1
    assert st["sort_bitmap_rows"] == 3
    assert st["sort_bucket_rows"] == 3


def test_dense_accumulator_both_ways():
    """Dense-accumulator rows come out sorted without a sort: rows with a key per 32 columns
    or more by scanning their column flags, sparser rows through a bitmap and its summary;
    the accumulator is cleared for the next row (every set is used twice)."""
    rng = np.random.default_rng(44)
    n = 300_000
    sets = [rng.choice(n, 12_000, replace=False),                    # flag scan (n / 32 keys)
            np.arange(n - 9_400, n),                                 # flag scan, at the end
            rng.choice(n, 50, replace=False),                        # bitmap
            np.array([0, 1, 63, 64, 4095, 4096, 262143, 262144, n - 1]),  # word/summary edges
            np.array([7])]                                           # a single key
    X, Y = _two_run_rows(sets + sets[::-1], n, 45)
    st = _check(X, Y, dense_max_bytes=n * 9)
    assert st["sym_dense_rows"] == st["num_dense_rows"] == X.shape[0]
    assert st["sort_dense_scan_rows"] == 4 and st["sort_dense_bitmap_rows"] == 6
    assert st["sort_rank_rows"] == st["sort_bitmap_rows"] == st["sort_bucket_rows"] == 0
    assert st["sym_probes"] == st["num_probes"] == st["num_insertions"] == 0


@pytest.mark.parametrize("ncols,y_density,way,bitmaps", [
    (2000, 0.01, "sort_dense_scan_rows", 0),  # 20 keys per Y row, 32 words: flag scans
    (200, 0.5, "sort_y_bitmap_rows", 1),  # 100 keys per Y row, 4 words: Y row bitmaps
])
def test_dense_scans_do_not_rely_on_sorted_y_rows(ncols, y_density, way, bitmaps):
    """The flag scans take each row's column range from a pass over Y, not from its first and
    last entries, and the Y row bitmaps are built from every key, so a Y whose rows are
    stored in descending column order still gives the right product (rows dense enough to be
    scanned in both phases)."""
    X, Y = _rand(30, 40, 0.5, 50), _rand(40, ncols, y_density, 51)
    Y.sort_indices()
    spans = list(zip(Y.indptr[:-1], Y.indptr[1:], strict=True))
    rev = np.concatenate([Y.indices[a:b][::-1] for a, b in spans])
    vrev = np.concatenate([Y.data[a:b][::-1] for a, b in spans])
    Yb = CSRBlock(Y.shape, Y.indptr.astype(np.int64), rev.astype(np.int32), vrev)
    C, st = hash_spgemm(_block(X, np.float64), Yb)
    assert st[way] == 30 and st["y_bitmaps"] == bitmaps
    ref = (X @ Y).tocsr()
    ref.sort_indices()
    np.testing.assert_array_equal(C.indptr, ref.indptr)
    np.testing.assert_array_equal(C.indices, ref.indices)
    np.testing.assert_allclose(C.data, ref.data, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_y_row_bitmaps_with_skewed_and_empty_y_rows(dtype):
    """Y with as many keys as its bitmaps have words gets row bitmaps: long rows are ORed in
    whole, rows with fewer keys than a quarter of the 16 words set a bit per key, empty rows
    add nothing; every row of C is dense enough to be read out of the OR."""
    rng = np.random.default_rng(60)
    ncols = 1000
    lens = np.r_[np.full(25, 60), rng.integers(1, 4, 20), np.zeros(5, int)]
    rng.shuffle(lens)
    rows = [np.sort(rng.choice(ncols, k, replace=False)) for k in lens]
    Y = sp.csr_matrix((rng.uniform(-1, 1, lens.sum()), np.concatenate(rows),
                       np.r_[0, np.cumsum(lens)]), shape=(50, ncols))
    X = _rand(40, 50, 0.3, 61)
    st = _check(X, Y, dtype)
    dense = hash_spgemm(_block(X, dtype), _block(Y, dtype))[1]
    assert dense["y_bitmaps"] == 1 and st["y_bitmaps"] == 0
    assert dense["sort_y_bitmap_rows"] == np.count_nonzero(np.diff((X @ Y).tocsr().indptr))


def test_non_temporal_stores_write_the_same_c(monkeypatch):
    """With the size threshold at 0 every C is written with non-temporal stores (every row):
    every way a row is written (rank, bitmap and bucket sorts, dense flag scans,
    dense bitmaps, Y row bitmaps, direct, listed, with hash tables and the dense accumulator,
    sorted and not) gives the same product."""
    from distmm.kernels import hash_spgemm as module

    monkeypatch.setattr(module, "STREAM_MIN_BYTES", 0)
    ways: dict[str, int] = {}
    for seed, (m, k, n, x_density, y_density) in enumerate([
            (300, 200, 250, 0.04, 0.04), (64, 64, 64, 0.5, 0.5), (30, 40, 2000, 0.5, 0.01),
            (200, 100, 5000, 0.02, 0.01), (20, 100, 1_000_000, 0.02, 1e-4)]):
        X, Y = _rand(m, k, x_density, 70 + seed), _rand(k, n, y_density, 80 + seed)
        st = _check(X, Y)
        assert st["stream_stores"] == int(module.STREAM_STORES)
        for budget in (0, DENSE_MAX_BYTES):
            for sort_output in (True, False):
                counters = hash_spgemm(_block(X, np.float64), _block(Y, np.float64),
                                       dense_max_bytes=budget, sort_output=sort_output)[1]
                for key, v in counters.items():
                    if key.startswith("sort_"):
                        ways[key] = ways.get(key, 0) + v
    assert all(ways.values()), ways


def test_unsigned_index_views_and_other_index_dtypes():
    """The kernels read column indices through unsigned_view: a no-copy uint32 view of int32
    indices, a converted copy of other integer types. A block whose indices are int64 (built by
    hand, not by from_coo) multiplies to the same C as its int32 twin, sorted and not, with
    hash tables and the dense accumulator; row_range spans a row's entries (empty rows too)."""
    from numba import njit

    from distmm.kernels.numba_util import row_range, unsigned_view

    idx = np.array([0, 5, 2**31 - 1], dtype=np.int32)
    view = unsigned_view(idx)
    assert view.dtype == np.uint32 and np.shares_memory(view, idx)
    assert unsigned_view(idx.astype(np.int64)).tolist() == idx.tolist()

    @njit
    def spans(indptr):
        out = []
        for k in range(indptr.shape[0] - 1):
            for t in row_range(indptr, k):
                out.append((k, t))
        return out

    indptr = np.array([0, 2, 2, 5], dtype=np.int64)
    assert [(k, int(t)) for k, t in spans(indptr)] == [
        (0, 0), (0, 1), (2, 2), (2, 3), (2, 4)]

    X, Y = _rand(120, 90, 0.05, 3), _rand(90, 70, 0.06, 4)
    bx, by = _block(X), _block(Y)
    wide_x = CSRBlock(bx.shape, bx.indptr, bx.indices.astype(np.int64), bx.data)
    wide_y = CSRBlock(by.shape, by.indptr, by.indices.astype(np.int64), by.data)
    for budget in (0, DENSE_MAX_BYTES):
        for sort_output in (True, False):
            want = hash_spgemm(bx, by, dense_max_bytes=budget, sort_output=sort_output)[0]
            got = hash_spgemm(wide_x, wide_y, dense_max_bytes=budget,
                              sort_output=sort_output)[0]
            assert np.array_equal(got.indptr, want.indptr)
            assert np.array_equal(got.indices, want.indices)
            assert np.array_equal(got.data, want.data)


@pytest.mark.parametrize("dense_max_bytes", [0, DENSE_MAX_BYTES])
def test_unsorted_output_is_first_met_order(dense_max_bytes):
    """sort_output=False writes each row in the order its columns were first met, as scipy's
    SMMP does: row 0 meets 5, 70, 900 (Y row 0), then 5 again and 3 (Y row 1)."""
    n = 1000
    Y = sp.csr_matrix((np.arange(1.0, 6.0), [900, 5, 70, 5, 3], [0, 3, 5]), shape=(2, n))
    X = sp.csr_matrix(np.array([[2.0, 10.0], [0.0, 0.0], [0.0, 1.0]]))
    Xb, Yb = _block(X, np.float64), _block(Y, np.float64)
    U, st = hash_spgemm(Xb, Yb, dense_max_bytes=dense_max_bytes, sort_output=False)
    np.testing.assert_array_equal(U.indptr, [0, 4, 4, 6])
    np.testing.assert_array_equal(U.indices, [5, 70, 900, 3, 3, 5])
    np.testing.assert_array_equal(U.data, [4.0 + 40.0, 6.0, 2.0, 50.0, 5.0, 4.0])
    # row 2's products have distinct columns: it is written straight from them
    assert st["sort_skipped_rows"] == 1 and st["sort_direct_rows"] == 1
    C, _ = hash_spgemm(Xb, Yb, dense_max_bytes=dense_max_bytes)
    np.testing.assert_array_equal(C.indices, [3, 5, 70, 900, 3, 5])


@pytest.mark.parametrize("ncols,rows", [(1000, 700), (30000, 66000)])
def test_dense_symbolic_tags_survive_their_wraparound(ncols, rows):
    """The dense symbolic phase tags columns with the row's generation number, in bytes for
    few columns and 16 bits for many, and clears the tags when the number wraps (after 255
    or 65535 rows). On one thread row i has generation i % period + 1; rows 0, period,
    2 period, ... alone use Y row 0, so each of them meets columns whose tags, if the wrap
    left them, would equal its own generation and not be counted."""
    dtype = _tag_dtype(ncols)
    assert dtype == (np.uint8 if ncols == 1000 else np.uint16)
    period = np.iinfo(dtype).max
    pick = np.where(np.arange(rows) % period == 0, 0, 1 + np.arange(rows) % 7)
    X = sp.csr_matrix((np.ones(rows), pick, np.arange(rows + 1)), shape=(rows, 8))
    Y = _rand(8, ncols, 40 / ncols, 81)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        st = _check_one(X, Y, np.float64)
    finally:
        numba.set_num_threads(threads)
    assert st["sym_dense_rows"] == rows


def test_bin_rows_and_fill_counters_match_the_binning():
    """With hash tables only, each bin's rows and summed occupancy are those of the paper's
    binning recomputed here: symbolic bins by min(products, ncols) with the symbolic tables,
    numeric bins by the row nnz with the fixed numeric tables (the last bin, sized per row,
    only by its rows and an occupancy of at most 1 per row)."""
    X, Y = _rand(400, 300, 0.03, 70), _rand(300, 900, 0.04, 71)
    X = sp.vstack([X, _rand(3, 300, 0.9, 72)]).tocsr()  # a few rows past the fixed tables
    st = _check(X, Y, **SMALL)
    Xp, Yp = (X != 0).astype(np.int64), (Y != 0).astype(np.int64)
    products = Xp @ np.asarray(Yp.sum(axis=1)).ravel()
    nnz = np.diff((Xp @ Yp).tocsr().indptr)
    # occupancy is the row's nnz over its table in both phases; the symbolic bin is chosen
    # by the bound
    for phase, size, tables, ratio, fixed in (
            ("sym", np.minimum(products, Y.shape[1]), SMALL["sym_tables"], 1.2, 8),
            ("num", nnz, SMALL["num_tables"], 2.0, 7)):
        ranges = binning_ranges(tuple(tables), ratio)
        which = np.searchsorted(np.asarray(ranges[:fixed]), size)  # first range >= size
        which = np.minimum(which, 7)
        for b in range(8):
            rows = which == b
            assert st[f"{phase}_bin{b}_rows"] == rows.sum()
            fill = st[f"{phase}_bin{b}_fill"]
            if b < fixed:
                expect = np.minimum(nnz[rows], tables[b]).sum() / tables[b]
                np.testing.assert_allclose(fill, expect, rtol=1e-12)
            else:
                assert 0 < fill <= rows.sum()
    assert st["num_bin7_rows"] > 0 and st["sym_fallback_rows"] > 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dense_accumulator_budget_per_phase(dtype):
    """Each phase takes the dense accumulator when its per-thread arrays fit the budget: a
    2-byte tag per column (symbolic), a value and a flag (numeric); 0 means hash tables only."""
    item = np.dtype(dtype).itemsize
    assert dense_phases(1000, item, 0) == (False, False)
    assert dense_phases(1000, item, 1999) == (False, False)
    assert dense_phases(1000, item, 2000) == (True, False)
    assert dense_phases(1000, item, 1000 * (item + 1) - 1) == (True, False)
    assert dense_phases(1000, item, 1000 * (item + 1)) == (True, True)
    assert dense_phases(1001, item, 2001) == (False, False)
    X, Y = _rand(80, 60, 0.1, 46), _rand(60, 1000, 0.05, 47)
    st = _check(X, Y, dtype, dense_max_bytes=1000 * (item + 1) - 1)
    assert st["sym_dense_rows"] == 80 and st["num_dense_rows"] == 0
    assert st["sym_probes"] == 0 and st["num_probes"] >= st["num_insertions"] > 0
    # table occupancy is reported for the phase that used tables only
    assert sum(st[f"sym_bin{b}_fill"] for b in range(8)) == 0
    assert sum(st[f"num_bin{b}_fill"] for b in range(8)) > 0
    st = _check(X, Y, dtype, dense_max_bytes=1000 * (item + 1))
    assert st["num_dense_rows"] == 80 and st["num_probes"] == 0


def test_symbolic_bins_by_column_bound():
    """Rows with more products than C has columns get the table of their bound
    min(products, ncols), not the last bin's."""
    X = _rand(40, 300, 0.5, 42)
    Y = _rand(300, 20, 0.9, 43)  # 20 columns, about 150 x 18 products per row
    st = _check(X, Y)
    assert st["sym_bin0_rows"] == 40 and st["sym_one_bin"] == 1


def _relu_dense(m, r, density, seed, dtype):
    rng = np.random.default_rng(seed)
    D = rng.standard_normal((m, r)) * (rng.random((m, r)) < density)
    return np.ascontiguousarray(D, dtype=dtype)


@pytest.mark.parametrize("spmm", ["hash", "direct"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("density", [0.0, 0.05, 1.0])
def test_spmm_and_sddmm_with_sparse_dense_operands(dtype, density, spmm):
    rng = np.random.default_rng(19)
    m, n, r = 37, 23, 9
    S = _block(_rand(m, n, 0.2, 20).tolil(), dtype)
    vals = rng.uniform(0.5, 1.5, S.nnz).astype(dtype)
    A = _relu_dense(m, r, density, 21, dtype)
    B = _relu_dense(n, r, density, 22, dtype)
    Sv = S.to_scipy(vals).astype(np.float64)
    model = make_node_model("hash-spgemm", spmm=spmm)
    tol = 1e-10 if dtype == np.float64 else 2e-5
    out_a = np.ones((m, r), dtype)
    model.spmm_a(S, vals, B, out_a)
    np.testing.assert_allclose(out_a, 1 + Sv @ B.astype(np.float64), rtol=tol, atol=tol)
    out_b = np.full((n, r), 2, dtype)
    model.spmm_b(S, vals, A, out_b)
    np.testing.assert_allclose(out_b, 2 + Sv.T @ A.astype(np.float64), rtol=tol, atol=tol)
    out_s = np.full(S.nnz, 0.5, dtype)
    model.sddmm(S, vals, A, B, out_s)
    rows, cols = S.row_ids(), S.indices
    want = 0.5 + vals * np.einsum("ij,ij->i", A[rows].astype(np.float64), B[cols])
    np.testing.assert_allclose(out_s, want, rtol=tol, atol=tol)
    st = model.stats.as_dict()
    assert st["spmm_a"]["dense_entries"] == n * r
    assert st["spmm_a"]["dense_nonzeros"] == np.count_nonzero(B)
    assert st["sddmm"]["dense_nonzeros"] == np.count_nonzero(A) + np.count_nonzero(B)
    assert all(st[op]["fallback_calls"] == 0 for op in ("spmm_a", "spmm_b", "sddmm"))


def test_fusedmm_falls_back_and_is_correct():
    rng = np.random.default_rng(23)
    S = _block(_rand(15, 12, 0.3, 24))
    vals = rng.uniform(size=S.nnz)
    A, B = _relu_dense(15, 4, 0.5, 25, np.float64), _relu_dense(12, 4, 0.5, 26, np.float64)
    model = make_node_model("hash-spgemm")
    out = np.zeros((15, 4))
    model.fusedmm_a(S, vals, A, B, out)
    R = S.to_scipy(vals).multiply(A @ B.T)
    np.testing.assert_allclose(out, R @ B, rtol=1e-12, atol=1e-12)
    assert model.stats.as_dict()["fusedmm_a"]["fallback_calls"] == 1


def test_dense_to_csr():
    D = _relu_dense(11, 7, 0.3, 27, np.float32)
    C = dense_to_csr(D)
    np.testing.assert_array_equal(C.to_scipy().toarray(), D)


@pytest.mark.parametrize("opts,msg", [
    ({"device": "gpu"}, "device"),
    ({"num_ratio": 0.5}, "num_ratio"),
    ({"sym_ratio": "x"}, "sym_ratio"),
    ({"sym_tables": [32, 64]}, "8 entries"),
    ({"num_tables": [8, 4, 16, 32, 64, 128, 256]}, "increase"),
    ({"num_ranges": [100, 128, 256, 512, 1024, 2048, 4096]}, "table size"),
    ({"cuda_block": 0}, "cuda_block"),
    ({"spmm": "dense"}, "spmm"),
    ({"dense_max_bytes": -1}, "dense_max_bytes"),
    ({"dense_max_bytes": 1.5}, "dense_max_bytes"),
    ({"tile": 4}, "tile"),
])
def test_bad_options(opts, msg):
    with pytest.raises(InputError, match=msg):
        make_node_model("hash-spgemm", **opts)


def test_bad_operands():
    model = make_node_model("hash-spgemm")
    X = _block(_rand(4, 5, 0.5, 28))
    with pytest.raises(ValueError, match="rows"):
        model.spgemm(X, X)
    with pytest.raises(ValueError, match="float32"):
        model.spgemm(X, _block(_rand(5, 3, 0.5, 29), np.float32))
    with pytest.raises(ValueError, match="shape"):
        model.spmm_a(X, X.data, np.zeros((4, 2)), np.zeros((4, 2)))
    assert model.options()["sym_ranges"][:2] == [26, 426]
