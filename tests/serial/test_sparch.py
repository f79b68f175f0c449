"""SpArch simulator: exact products, scheduler, prefetch buffer and traffic counters."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.kernels import make_node_model
from distmm.sim.sparch import SpArchConfig, k_init, make_schedule, simulate
from distmm.sim.sparch.prefetch import POLICY_CODES, next_use, simulate_buffer
from distmm.sim.sparch.schedule import estimated_weight
from distmm.sim.sparch.structure import column_leaves, condensed_leaves, node_sizes

SWITCHES = [dict(), dict(condense=False), dict(scheduler="sequential"),
            dict(scheduler="random", condense=False), dict(pipeline=False),
            dict(prefetch="lru"), dict(prefetch="none"), dict(merge_tree_layers=1)]


def _rand(m, n, density, seed):
    rng = np.random.default_rng(seed)
    return sp.random(m, n, density=density, random_state=rng, format="csr",
                     data_rvs=lambda k: rng.uniform(-1, 1, k))


def _cases():
    X = _rand(40, 30, 0.15, 1)
    Y = _rand(30, 25, 0.15, 2)
    empty = X.tolil()
    empty[5:9, :] = 0
    empty[:, 3:6] = 0
    dense_row = X.tolil()
    dense_row[7, :] = 1.5
    yield "random", X, Y
    yield "empty rows and cols", empty.tocsr(), Y
    yield "one dense row", dense_row.tocsr(), Y
    yield "1x1", sp.csr_matrix([[2.5]]), sp.csr_matrix([[-3.0]])
    yield "no nonzeros", sp.csr_matrix((6, 4)), Y[:4, :]
    yield "no rows", sp.csr_matrix((0, 30)), Y
    yield "rectangular", _rand(7, 50, 0.3, 3), _rand(50, 3, 0.3, 4)


@pytest.mark.parametrize("kw", SWITCHES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in
                                                              kw.items()) or "default")
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_product_exact_and_counters_consistent(case, kw):
    _, X, Y = case
    C, rep = simulate(X, Y, **kw)
    ref = (X.astype(np.float64) @ Y.astype(np.float64)).toarray()
    np.testing.assert_allclose(C.to_scipy().toarray(), ref, rtol=1e-12, atol=1e-12)
    for i in range(C.shape[0]):
        assert np.all(np.diff(C.indices[C.indptr[i]:C.indptr[i + 1]]) > 0)
    c = rep["counters"]
    # structural nnz: the root of the merge tree is the final result
    assert c["output_nnz"] == C.nnz
    assert c["multiplications"] == np.diff(Y.indptr)[X.indices].sum()
    assert c["prefetch_hits"] <= c["prefetch_accesses"] == c["multiplications"]
    if X.nnz:
        # every left-matrix element is read exactly once, 12 bytes, plus pointers
        assert c["left_read_bytes"] >= 12 * X.nnz
        assert c["model_cycles"] > 0 and c["energy_nj"] > 0
    assert c["dram_read_bytes"] == pytest.approx(
        c["left_read_bytes"] + c["right_read_bytes"] + c["partial_read_bytes"])


def test_float32_blocks_stay_float32():
    X = CSRBlock.from_scipy(_rand(20, 20, 0.2, 5), np.float32)
    C, _ = simulate(X)
    assert C.dtype == np.float32
    ref = X.to_scipy().astype(np.float64) @ X.to_scipy().astype(np.float64)
    np.testing.assert_allclose(C.to_scipy().toarray(), ref.toarray(), rtol=1e-6, atol=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="rows"):
        simulate(_rand(4, 5, 0.5, 0), _rand(4, 5, 0.5, 0))
    with pytest.raises(ValueError, match="scipy sparse"):
        simulate(np.eye(3))
    with pytest.raises(ValueError, match="scheduler"):
        simulate(_rand(4, 4, 0.5, 0), scheduler="fifo")
    with pytest.raises(ValueError, match="unknown SpArch option"):
        simulate(_rand(4, 4, 0.5, 0), merge_ways=8)
    with pytest.raises(ValueError, match="positive integer"):
        SpArchConfig(prefetch_lines=-1, line_elements=0)
    with pytest.raises(InputError, match="sparch"):
        make_node_model("sparch", prefetch="fifo")


# ------------------------------------------------------------------- scheduler (II-C)

@pytest.mark.parametrize("L,ways,want", [(2, 2, 2), (64, 64, 64), (65, 64, 2), (100, 64, 37),
                                         (5, 4, 2), (6, 4, 3), (6, 3, 2), (127, 64, 64)])
def test_k_init_formula(L, ways, want):
    assert k_init(L, ways) == want


def test_k_init_fills_every_later_round():
    for L in range(2, 300, 7):
        for ways in (2, 3, 4, 64):
            tree = make_schedule("huffman", np.ones(L, dtype=np.int64), ways)
            sizes = np.diff(tree.child_ptr)
            assert sizes[0] == k_init(L, ways)
            assert np.all(sizes[1:] == ways), (L, ways)


def test_huffman_binary_by_hand():
    # 1+2 -> 3; 3(leaf)+3(node) -> 6; 4+5 -> 9; 6+9 -> 15: internal 33, all nodes 48
    tree = make_schedule("huffman", np.array([1, 2, 3, 4, 5]), 2)
    assert [list(tree.children(r)) for r in range(tree.rounds)] == [[0, 1], [2, 5], [3, 4],
                                                                     [6, 7]]
    assert estimated_weight(tree, np.array([1, 2, 3, 4, 5])) == 48


def test_huffman_ternary_by_hand():
    # k_init = (6-2) mod 2 + 2 = 2: {1,2} -> 3; {3 leaf, 3 node, 4} -> 10; {5,6,10} -> 21
    w = np.array([1, 2, 3, 4, 5, 6])
    tree = make_schedule("huffman", w, 3)
    assert [list(tree.children(r)) for r in range(tree.rounds)] == [[0, 1], [2, 6, 3],
                                                                     [4, 5, 7]]
    assert estimated_weight(tree, w) == 21 + (3 + 10 + 21)   # leaves + internal nodes


def test_huffman_beats_sequential_and_random():
    w = np.random.default_rng(0).integers(1, 1000, 500)
    best = estimated_weight(make_schedule("huffman", w, 8), w)
    assert best < estimated_weight(make_schedule("sequential", w, 8), w)
    assert best < estimated_weight(make_schedule("random", w, 8, seed=1), w)


def test_sequential_and_random_shapes():
    seq = make_schedule("sequential", np.ones(5), 2)
    assert [list(seq.children(r)) for r in range(seq.rounds)] == [[0, 1], [5, 2], [6, 3],
                                                                   [7, 4]]
    rnd = make_schedule("random", np.ones(200), 64, seed=3)
    kids = np.sort(rnd.child_idx)
    np.testing.assert_array_equal(kids, np.arange(rnd.nodes - 1))   # each node merged once
    assert make_schedule("huffman", np.ones(1), 64).rounds == 1
    assert make_schedule("huffman", np.ones(0), 64).rounds == 0


# ------------------------------------------------------------- exact node sizes (oracle)

def _brute_sizes(X, Y, elem_leaf, tree):
    sets = [set() for _ in range(tree.nodes)]
    Xc = X.tocsr()
    for i in range(Xc.shape[0]):
        for p in range(Xc.indptr[i], Xc.indptr[i + 1]):
            c = Xc.indices[p]
            for q in range(Y.indptr[c], Y.indptr[c + 1]):
                sets[elem_leaf[p]].add((i, Y.indices[q]))
    for r in range(tree.rounds):
        for ch in tree.children(r):
            sets[tree.leaves + r] |= sets[ch]
    return np.array([len(s) for s in sets])


@pytest.mark.parametrize("scheduler", ["huffman", "sequential", "random"])
@pytest.mark.parametrize("condense", [True, False])
def test_node_sizes_match_brute_force(scheduler, condense):
    X = _rand(25, 30, 0.2, 7)
    Y = _rand(30, 20, 0.2, 8)
    X.sort_indices()
    Y.sort_indices()
    if condense:
        elem_leaf, L = condensed_leaves(X.indptr, X.nnz)
    else:
        elem_leaf, L, _ = column_leaves(X.indices, X.shape[1])
    w = np.bincount(elem_leaf, weights=np.diff(Y.indptr)[X.indices], minlength=L)
    tree = make_schedule(scheduler, w.astype(np.int64), 3, seed=2)
    got = node_sizes(X.indptr, X.indices, elem_leaf, Y.indptr, Y.indices, tree)
    np.testing.assert_array_equal(got, _brute_sizes(X, Y, elem_leaf, tree))


# ------------------------------------------------------------------ prefetcher (II-D)

def _buffer(seq, row_lens, capacity, policy, lookahead=100, line=48):
    seq = np.asarray(seq, dtype=np.int64)
    y_ptr = np.concatenate(([0], np.cumsum(row_lens))).astype(np.int64)
    nxt = next_use(seq, len(row_lens))
    return simulate_buffer(seq, nxt, y_ptr, line, capacity, lookahead, POLICY_CODES[policy])


def test_next_use_backward_pass():
    assert list(next_use(np.array([0, 1, 0, 2, 1]), 3)) == [2, 4, 1 << 62, 1 << 62, 1 << 62]


# A B C A B D A, two one-line rows fit
SEQ = [0, 1, 2, 0, 1, 3, 0]


def test_belady_by_hand():
    # t2: C is never used again -> bypassed; t5: B and D never used again, B older -> B goes
    missed, fetched, hits, acc, ev = _buffer(SEQ, [1, 1, 1, 1], 2, "belady")
    assert (hits, acc, ev) == (3, 7, 2)
    assert list(missed) == [1, 1, 1, 0, 0, 1, 0]
    assert list(fetched) == [True, True, True, False, False, True, False]


def test_belady_with_short_lookahead_by_hand():
    # window of 1: t2 sees A's next use (3) but not B's (4): evicts B, the older far line;
    # t4 evicts C; t5 evicts B again (A's next use 6 is now in the window)
    _, _, hits, acc, ev = _buffer(SEQ, [1, 1, 1, 1], 2, "belady", lookahead=1)
    assert (hits, acc, ev) == (2, 7, 3)


def test_lru_by_hand():
    _, _, hits, acc, ev = _buffer(SEQ, [1, 1, 1, 1], 2, "lru")
    assert (hits, acc, ev) == (0, 7, 5)


def test_no_buffer_keeps_only_the_current_row():
    missed, _, hits, _, ev = _buffer([0, 0, 1, 0], [2, 3], 2, "none")
    assert list(missed) == [2, 0, 3, 2] and hits == 1 and ev == 0


def test_rows_spill_line_by_line():
    # row 0 = 3 elements = 2 lines of 2, row 1 = 1 line; 2 lines fit
    missed, _, hits, acc, ev = _buffer([0, 1, 0], [3, 1], 2, "belady", line=2)
    assert (list(missed), hits, acc, ev) == ([3, 1, 0], 2, 5, 1)
    missed, _, hits, acc, ev = _buffer([0, 1, 0], [3, 1], 2, "lru", line=2)
    assert (list(missed), hits, ev) == ([3, 1, 3], 0, 3)


def test_belady_never_worse_than_lru():
    rng = np.random.default_rng(4)
    seq = rng.zipf(1.3, 3000) % 200
    lens = rng.integers(0, 120, 200)
    b = _buffer(seq, lens, 16, "belady", lookahead=10**6)
    lru = _buffer(seq, lens, 16, "lru")
    assert b[0].sum() <= lru[0].sum()


# ---------------------------------------------------------- traffic by hand (Table I)

@pytest.mark.parametrize("condense", [True, False])
def test_diagonal_traffic_and_cycles_by_hand(condense):
    D = sp.diags([1.0, 2.0, 3.0, 4.0]).tocsr()
    C, rep = simulate(D, condense=condense)
    c = rep["counters"]
    # X: 4 elements x 12 B + two 4-byte pointers per CSR row (condensed) or CSC column
    assert c["left_read_bytes"] == 4 * 12 + 4 * 8
    # Y: four distinct one-element rows, all misses, each with its two pointers
    assert c["right_read_bytes"] == 4 * 12 + 4 * 8
    assert c["partial_read_bytes"] == 0 and c["partial_write_bytes"] == 0
    assert c["final_write_bytes"] == 4 * 12 + 5 * 4
    assert c["partial_matrices"] == (1 if condense else 4) and c["merge_rounds"] == 1
    # one round: max(compute 1, DRAM 228/128) + latency 100 + 6 layers x 6 + fill + drain
    assert c["model_cycles"] == pytest.approx(228 / 128 + 100 + 36 + 48 / 128 + 48 / 128)
    assert c["energy_nj"] == pytest.approx(8 * 0.6 + 228 * 0.055)
    np.testing.assert_allclose(C.to_scipy().toarray(), np.diag([1.0, 4.0, 9.0, 16.0]))


def test_partial_matrix_traffic_by_hand():
    # one row [1 1 1] times Y rows {0}, {0,1}, {1}; 2-way sequential: round 0 merges
    # columns 0 and 1 into {(0,0),(0,1)} (written, 16 B each), round 1 reads it back
    X = sp.csr_matrix(np.ones((1, 3)))
    Y = sp.csr_matrix(np.array([[1.0, 0], [1, 1], [0, 1]]))
    _, rep = simulate(X, Y, condense=False, scheduler="sequential", merge_tree_layers=1)
    c = rep["counters"]
    assert c["merge_rounds"] == 2 and c["partial_matrices"] == 3
    assert c["partial_write_bytes"] == 2 * 16 and c["partial_read_bytes"] == 2 * 16
    assert c["merge_input_elements"] == 3 + 2 + 1
    assert c["final_write_bytes"] == 2 * 12 + 2 * 4
    # unpipelined: all 4 products written then read back, plus the same round structure
    _, rep = simulate(X, Y, condense=False, scheduler="sequential", merge_tree_layers=1,
                      pipeline=False)
    c = rep["counters"]
    assert c["partial_write_bytes"] == (4 + 2) * 16
    assert c["partial_read_bytes"] == (4 + 2) * 16


def test_techniques_reduce_traffic_on_a_power_law_matrix():
    rng = np.random.default_rng(9)
    n = 400
    rows = rng.integers(0, n, 4000)
    cols = (rng.zipf(1.6, 4000) - 1) % n
    A = sp.csr_matrix((np.ones(4000), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    cfgs = [dict(condense=False, scheduler="random", prefetch="none"),
            dict(scheduler="random", prefetch="none"), dict(prefetch="none"), dict()]
    partial = [simulate(A, merge_tree_layers=3, **kw)[1]["counters"] for kw in cfgs]
    part = [c["partial_read_bytes"] + c["partial_write_bytes"] for c in partial]
    assert part[1] < part[0] and part[2] <= part[1]
    assert partial[3]["right_read_bytes"] < partial[2]["right_read_bytes"]
    assert partial[3]["partial_matrices"] < partial[0]["partial_matrices"]


# ------------------------------------------------------------------ as a node model

def test_node_model_spmm_and_fallback():
    model = make_node_model("sparch", prefetch="lru")
    assert model.options()["prefetch"] == "lru"
    S = CSRBlock.from_scipy(_rand(13, 9, 0.3, 11), np.float64)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((13, 5)), rng.standard_normal((9, 5))
    out_a, out_b = np.ones((13, 5)), np.ones((9, 5))
    model.spmm_a(S, S.data, B, out_a)
    model.spmm_b(S, S.data, A, out_b)
    np.testing.assert_allclose(out_a, 1 + S.to_scipy() @ B, rtol=1e-12)
    np.testing.assert_allclose(out_b, 1 + S.to_scipy().T @ A, rtol=1e-12)
    vals = np.zeros(S.nnz)
    model.sddmm(S, S.data, A, B, vals)
    st = model.stats.as_dict()
    assert st["spmm_a"]["fallback_calls"] == 0 and st["sddmm"]["fallback_calls"] == 1
    assert "model_seconds" not in st["sddmm"]
    for op in ("spmm_a", "spmm_b"):
        assert st[op]["model_seconds"] > 0 and st[op]["dram_read_bytes"] > 0
        assert st[op]["multiplications"] == S.nnz * 5
    # the dense fast path gives the same counters as the general sparse path
    _, rep = simulate(S.to_scipy(), sp.csr_matrix(B), prefetch="lru")
    assert rep["counters"]["model_cycles"] == pytest.approx(st["spmm_a"]["model_cycles"])
    C = model.spgemm(S, CSRBlock.from_scipy(_rand(9, 4, 0.5, 12), np.float64))
    assert model.stats.as_dict()["spgemm"]["merge_rounds"] >= 1 and C.shape == (13, 4)
    with pytest.raises(ValueError, match="rows"):
        model.spmm_a(S, S.data, A, np.zeros((13, 5)))
