"""The multi-value SpMM (S.spmm_a / S.spmm_b with values of shape (heads, nnz_local)) against
scipy, one product per head, on every family at every valid c: one pass on 1.5D dense
shifting and on the families that cut the dense width (never a fallback call), whose words
per phase equal multi_value_words exactly where the family's formula is (p divides the
shapes), and at uneven shapes (H = 1, 3, 8, F = 1, 5: column slices that span a head
boundary or hold no column of some heads) those of one single-value call of width H F plus
exactly the formula's extra value words; one pass on the sparsity-aware family too, with
the words of one call of width H F. Bad operands raise the same InputError on every rank."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI

import distmm
from distmm.algorithms.multivalue import multi_value_words
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


def _problem(m, n, seed=3):
    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=0.25, random_state=seed, format="csr")
    A = A.tolil()
    A[1, :] = 0     # an empty row
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    return A, rng


def _head_values(rows, cols, h):
    return np.cos(1.7 * rows + 0.3 * cols + h) + 0.2 * h


def _run(obj, S, heads, F, rng, side):
    m, n = S.shape
    rows, cols = obj.value_coordinates()
    V = np.stack([_head_values(obj.row_perm[rows], obj.col_perm[cols], h)
                  for h in range(heads)]).astype(obj.dtype)
    coo = S.tocoo()
    X = rng.standard_normal(((n if side == "a" else m), heads * F))
    X_loc = obj.scatter("b" if side == "a" else "a", X, root=None)
    obj.stats.reset()
    res = (obj.spmm_a if side == "a" else obj.spmm_b)(X_loc, values=V)
    words = {ph: obj.stats.words(ph) for ph in ("replication", "propagation", "reduction",
                                                "other")}
    # (1.5D sparse shifting's S^T blocks travel transposed: its SpMMB steps run the
    # spmm_multi_a kernel on them)
    ops = [obj.kernel.stats.ops["spmm_multi_" + k] for k in "ab"]
    calls = (sum(o.calls for o in ops), sum(o.fallback_calls for o in ops))
    got = obj.gather(side, res)
    if COMM.rank == 0:
        want = []
        for h in range(heads):
            Sh = sp.csr_matrix((_head_values(coo.row, coo.col, h), (coo.row, coo.col)),
                               shape=S.shape)
            Sh = Sh if side == "a" else Sh.T
            want.append(Sh @ X[:, h * F:(h + 1) * F])
        np.testing.assert_allclose(got, np.concatenate(want, axis=1), rtol=1e-11, atol=1e-12)
    return words, calls


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("heads,F", [(1, 3), (4, 1), (3, 5)])
def test_dense_shift_one_pass(side, heads, F):
    m, n = 8 * P, 4 * P   # p divides m and n: the exact formula holds on every rank
    S, rng = _problem(m, n)
    for c in grid_cs("15d-dense-shift"):
        obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", c=c, dtype=np.float64,
                                root=None, seed=1)
        for first in (True, False):   # the second call of a kind is not agreed again
            words, calls = _run(obj, S, heads, F, rng, side)
            want = multi_value_words(obj, "spmm_" + side, heads, F, first)
            for phase, d in want.items():
                assert words[phase] == d["words"], (c, phase, first)
            assert calls == (obj.q, 0)
        obj.close()


SPLIT = [a for a in distmm.ALGORITHMS if distmm.algorithms.family(a).splits_r]


def _single_words(obj, S, r, rng, side):
    """Counted words of one single-value SpMM of width r (its checks done before)."""
    X_loc = obj.scatter("b" if side == "a" else "a",
                        rng.standard_normal(((S.shape[1] if side == "a" else S.shape[0]), r)),
                        root=None)
    call = obj.spmm_a if side == "a" else obj.spmm_b
    call(X_loc)
    obj.stats.reset()
    call(X_loc)
    return {ph: obj.stats.words(ph) for ph in ("replication", "propagation", "reduction")}


@pytest.mark.parametrize("heads,F", [(1, 1), (1, 5), (3, 1), (3, 5), (8, 1), (8, 5)])
@pytest.mark.parametrize("algorithm", SPLIT)
def test_split_families_one_pass_uneven(algorithm, heads, F):
    S, rng = _problem(13, 11)
    r = heads * F
    for c in grid_cs(algorithm, r):
        # with overlap at H = 3 (sends posted before the kernels; the same counts)
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None, seed=2, overlap=heads == 3)
        for side in ("a", "b"):
            words, calls = _run(obj, S, heads, F, rng, side)
            assert words["other"] == P - 1  # the first call's agreement only
            assert calls[0] >= 1 and calls[1] == 0
            again, _ = _run(obj, S, heads, F, rng, side)
            assert again["other"] == 0
            one = _single_words(obj, S, r, rng, side)
            op = "spmm_" + side
            many, single = multi_value_words(obj, op, heads, F), \
                multi_value_words(obj, op, 1, r)
            for ph in one:  # the dense terms cancel: the extra value words, exact anywhere
                extra = many[ph]["words"] - single[ph]["words"]
                assert again[ph] == words[ph] == one[ph] + extra, (c, side, ph)
        obj.close()


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("heads,F", [(4, 4), (8, 1)])
@pytest.mark.parametrize("algorithm", SPLIT)
def test_split_families_words_equal_the_formula(algorithm, side, heads, F):
    m, n = 8 * P, 4 * P   # p divides m and n, every column block count divides r
    S, rng = _problem(m, n)
    r = heads * F
    for c in grid_cs(algorithm, r):
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None, seed=1)
        for first in (True, False):   # the second call of a kind is not agreed again
            words, _ = _run(obj, S, heads, F, rng, side)
            want = multi_value_words(obj, "spmm_" + side, heads, F, first)
            for phase, d in want.items():
                assert words[phase] == d["words"], (c, phase, first)
        obj.close()


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("heads,F", [(1, 3), (3, 4), (8, 1)])
def test_sparse_aware_one_pass(heads, F, overlap):
    """One exchange of width heads * F and the multi-value kernel on the family's two blocks
    (its own and the received rows): words exactly one single-value call's of that width
    with this rank's exchange counts, uneven shapes, every c."""
    S, rng = _problem(13, 11)
    for c in grid_cs("15d-sparse-aware"):
        obj = distmm.distribute(S, COMM, algorithm="15d-sparse-aware", c=c, dtype=np.float64,
                                root=None, seed=2, overlap=overlap)
        for side in ("a", "b"):
            for first in (True, False):
                words, calls = _run(obj, S, heads, F, rng, side)
                want = multi_value_words(obj, "spmm_" + side, heads, F, first)
                for phase, d in want.items():
                    assert words[phase] == d["words"], (c, side, phase, first)
                assert calls == (2, 0)  # one kernel call a block, no fallback
        obj.close()


@pytest.mark.parametrize("side", ["a", "b"])
def test_dense_shift_float32_and_odd_sizes(side):
    S, rng = _problem(17, 23)
    obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", dtype=np.float32, root=None)
    rows, cols = obj.value_coordinates()
    heads, F = 8, 2
    V = np.stack([_head_values(obj.row_perm[rows], obj.col_perm[cols], h)
                  for h in range(heads)]).astype(np.float32)
    X = rng.standard_normal(((23 if side == "a" else 17), heads * F))
    X_loc = obj.scatter("b" if side == "a" else "a", X.astype(np.float32), root=None)
    out = obj.dense(side, heads * F)
    res = (obj.spmm_a if side == "a" else obj.spmm_b)(X_loc, values=V, out=out)
    assert res is out
    got = obj.gather(side, res)
    if COMM.rank == 0:
        coo = S.tocoo()
        for h in range(heads):
            Sh = sp.csr_matrix((_head_values(coo.row, coo.col, h), (coo.row, coo.col)),
                               shape=S.shape)
            want = (Sh if side == "a" else Sh.T) @ X[:, h * F:(h + 1) * F]
            np.testing.assert_allclose(got[:, h * F:(h + 1) * F], want, rtol=2e-5, atol=2e-5)
    obj.close()


def test_bad_operands_agreed():
    S, rng = _problem(9, 9)
    obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", dtype=np.float64, root=None)
    nnz = obj.values.shape[0]
    B = obj.scatter("b", rng.standard_normal((9, 6)), root=None)
    with pytest.raises(InputError, match="multiple of the 4 heads"):
        obj.spmm_a(B, values=np.ones((4, nnz)))
    bad = np.ones((3, nnz + (1 if COMM.rank == 0 else 0)))
    with pytest.raises(InputError, match="stored nonzeros"):   # rank 0 only is wrong
        obj.spmm_a(B, values=bad)
    with pytest.raises(InputError, match="dtype"):
        obj.spmm_b(obj.scatter("a", np.ones((9, 6)), root=None),
                   values=np.ones((2, nnz), dtype=np.float32))
    obj.close()


@pytest.mark.skipif(P == 1, reason="one rank holds every column of the width")
def test_split_family_plain_block_refused():
    # a plain array's width is this rank's share, not r: refused on every rank, with a hint
    S, rng = _problem(9, 9)
    obj = distmm.distribute(S, COMM, algorithm="15d-sparse-shift", c=1, r=2 * P,
                            dtype=np.float64, root=None)
    B = np.ascontiguousarray(np.asarray(obj.scatter("b", rng.standard_normal((9, 2 * P)),
                                                    root=None)))
    with pytest.raises(InputError, match="typed block"):
        obj.spmm_a(B, values=np.ones((2, obj.values.shape[0])))
    obj.close()
