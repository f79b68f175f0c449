"""The multi-head SDDMM (S.sddmm(A, B, heads=H), result (nnz_local, H)) against a serial
scipy oracle, one masked product per head, on every family at every valid c, at uneven
shapes with H = 1, 3, 8 and F = 1, 5 (widths at which a rank's column slice of a family that
cuts the dense width spans a head boundary, or holds no column of some heads): one pass of
the family's own SDDMM loop, never a fallback, whose words per phase equal sddmm_multi_words
exactly where the family's formula is exact (p divides the shapes), and elsewhere those of
one single-value SDDMM of width H F counted in the same run plus exactly the formula's extra
value words (H partial sums per nonzero where one call has one; none where the family keeps
whole rows). Bad operands raise the same InputError on every rank."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI

import distmm
from distmm.algorithms.multivalue import sddmm_multi_words
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
PHASES = ("replication", "propagation", "reduction", "other")


def _problem(m, n, seed=3):
    S = sp.random(m, n, density=0.3, random_state=seed, format="lil")
    S[1, :] = 0     # an empty row
    S[:, 2] = 0     # an empty column
    S = sp.csr_matrix(S)
    S.sum_duplicates()
    return S


def _words(obj):
    return {ph: obj.stats.words(ph) for ph in PHASES}


def _call(obj, S, heads, F, seed, dtype=np.float64):
    """The call on scattered A and B; checks the gathered result against the oracle on rank
    0; returns the counted words and the (calls, fallback calls) of sddmm_multi."""
    m, n = S.shape
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, heads * F))
    B = rng.standard_normal((n, heads * F))
    A_loc = obj.scatter("a", A.astype(dtype), root=None)
    B_loc = obj.scatter("b", B.astype(dtype), root=None)
    obj.stats.reset()
    obj.kernel.stats.reset()
    got = obj.sddmm(A_loc, B_loc, heads=heads)
    words = _words(obj)
    # one head runs the node model's own SDDMM kernel
    st = obj.kernel.stats.ops["sddmm_multi" if heads > 1 or obj.splits_r else "sddmm"]
    assert got.shape == (obj.values.shape[0], heads) and got.dtype == obj.dtype
    # this rank's values at their global (row, col): the oracle is S's value there times
    # head h's dot product
    rows, cols = obj.value_coordinates()
    rows, cols = obj.row_perm[rows], obj.col_perm[cols]
    parts = COMM.gather((rows, cols, np.asarray(got)), root=0)
    if COMM.rank == 0:
        r = np.concatenate([x[0] for x in parts])
        c = np.concatenate([x[1] for x in parts])
        v = np.concatenate([x[2] for x in parts])
        assert r.size == S.nnz
        for h in range(heads):
            cols_h = slice(h * F, (h + 1) * F)
            want = S.multiply(sp.csr_matrix(A[:, cols_h] @ B[:, cols_h].T)).tocsr()
            tol = 1e-11 if dtype == np.float64 else 3e-5
            np.testing.assert_allclose(v[:, h], np.asarray(want[r, c]).ravel(), rtol=tol,
                                       atol=tol)
    return words, (st.calls, st.fallback_calls)


def _single_words(obj, S, r, seed):
    """Counted words of one single-value SDDMM of width r (its checks done before)."""
    rng = np.random.default_rng(seed)
    A_loc = obj.scatter("a", rng.standard_normal((S.shape[0], r)), root=None)
    B_loc = obj.scatter("b", rng.standard_normal((S.shape[1], r)), root=None)
    obj.sddmm(A_loc, B_loc)
    obj.stats.reset()
    obj.sddmm(A_loc, B_loc)
    return _words(obj)


@pytest.mark.parametrize("heads,F", [(1, 1), (1, 5), (3, 1), (3, 5), (8, 1), (8, 5)])
@pytest.mark.parametrize("algorithm", distmm.ALGORITHMS)
def test_every_family_uneven(algorithm, heads, F):
    S = _problem(13, 11)
    r = heads * F
    for c in grid_cs(algorithm, r):
        # with overlap at H = 3 where the family offers it (the same counts)
        overlap = heads == 3 and distmm.algorithms.family(algorithm).supports_overlap
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None, seed=2, overlap=overlap)
        first_words, calls = _call(obj, S, heads, F, seed=5)
        again_words, _ = _call(obj, S, heads, F, seed=6)
        if not obj.splits_r:   # the first call's agreement only
            assert first_words["other"] == P - 1 and again_words["other"] == 0
        assert first_words["other"] == P - 1 and again_words["other"] == 0
        one = _single_words(obj, S, r, seed=7)
        # the H value words per nonzero, exact at any shape (the dense terms cancel)
        many, single = sddmm_multi_words(obj, heads, F), sddmm_multi_words(obj, 1, r)
        for ph in PHASES[:3]:
            extra = many[ph]["words"] - single[ph]["words"]
            assert again_words[ph] == first_words[ph] == one[ph] + extra, (c, ph)
            assert extra == 0 or obj.splits_r
        # one kernel per block the loop visits, none a fallback; the sparsity-aware family
        # runs no kernel on a block without nonzeros, so a rank that holds none of S's
        # nonzeros (at 8 ranks on this 13 x 11 S) runs none
        assert calls[1] == 0
        assert calls[0] >= 1 or (algorithm == "15d-sparse-aware" and obj.values.shape[0] == 0)
        obj.close()


@pytest.mark.parametrize("heads,F", [(4, 4), (8, 1)])
@pytest.mark.parametrize("algorithm", distmm.ALGORITHMS)
def test_words_equal_the_formula(algorithm, heads, F):
    # p divides m and n, and every column block count divides r: every family's exact
    # formula holds
    m, n = 8 * P, 4 * P
    S = _problem(m, n, seed=4)
    r = heads * F
    for c in grid_cs(algorithm, r):
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                root=None, seed=1)
        for first in (True, False):   # the second call of a kind is not agreed again
            words, _ = _call(obj, S, heads, F, seed=9)
            want = sddmm_multi_words(obj, heads, F, first)
            for ph in PHASES:
                assert words[ph] == want.get(ph, {"words": 0})["words"], (c, ph, first)
        obj.close()


def test_float32_values_and_out():
    S = _problem(17, 23)
    heads, F = 8, 2
    obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", dtype=np.float32,
                            root=None)
    out = np.empty((obj.values.shape[0], heads), dtype=np.float32)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((17, heads * F))
    B = rng.standard_normal((23, heads * F))
    w = np.linspace(0.5, 2.0, obj.values.shape[0]).astype(np.float32)
    res = obj.sddmm(obj.scatter("a", A.astype(np.float32), root=None),
                    obj.scatter("b", B.astype(np.float32), root=None), values=w, out=out,
                    heads=heads)
    assert res is out
    one = obj.sddmm(obj.scatter("a", A[:, 2:4].astype(np.float32), root=None),
                    obj.scatter("b", B[:, 2:4].astype(np.float32), root=None), values=w)
    np.testing.assert_allclose(res[:, 1], one, rtol=1e-5, atol=1e-5)
    obj.close()


def test_bad_operands_agreed():
    S = _problem(9, 9)
    obj = distmm.distribute(S, COMM, algorithm="15d-dense-shift", dtype=np.float64, root=None)
    nnz = obj.values.shape[0]
    rng = np.random.default_rng(1)
    A = obj.scatter("a", rng.standard_normal((9, 6)), root=None)
    B = obj.scatter("b", rng.standard_normal((9, 6)), root=None)
    with pytest.raises(InputError, match="multiple of 4 heads"):
        obj.sddmm(A, B, heads=4)
    with pytest.raises(InputError, match="heads must be a positive integer"):
        obj.sddmm(A, B, heads=0)
    bad = np.empty((nnz + (1 if COMM.rank == 0 else 0), 3))   # rank 0 only is wrong
    with pytest.raises(InputError, match="out must be"):
        obj.sddmm(A, B, heads=3, out=bad)
    with pytest.raises(InputError, match="values must be"):
        obj.sddmm(A, B, heads=2, values=np.ones(nnz, dtype=np.float32))
    obj.close()
