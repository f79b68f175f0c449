"""The partitioners and partition files (distmm.core.partition): balanced parts whose SpMM
volume, counted independently here, beats the natural order on a graph with locality hidden
by a shuffle; files that round-trip, and refusals of files that do not fit or are corrupt."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.partition import (
    PARTITIONERS,
    Partition,
    default_method,
    load_partition,
    partition,
    save_partition,
    volume,
)
from distmm.errors import InputError


def grid_graph(k: int, seed: int = 0) -> sp.csr_matrix:
    """A k x k grid graph with its vertices shuffled: a good partition cuts O(k sqrt p)
    edges, the shuffled order almost all."""
    idx = np.arange(k * k).reshape(k, k)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel()]
    shuffle = np.random.default_rng(seed).permutation(k * k)
    S = sp.coo_matrix((np.ones(rows.size), (shuffle[rows], shuffle[cols])), shape=(k * k,) * 2)
    return (S + S.T).tocsr()


def brute_volume(S, parts):
    """Independent count: for each column, the parts holding it other than its owner's."""
    S = sp.csc_matrix(S)
    total = 0
    for j in range(S.shape[1]):
        holders = set(parts[S.indices[S.indptr[j]:S.indptr[j + 1]]].tolist())
        total += len(holders - {parts[j]})
    return total


@pytest.mark.parametrize("method", PARTITIONERS)
def test_partition_is_balanced_and_cuts_volume(method):
    pytest.importorskip(method)
    S = grid_graph(24)
    p = 8
    part = partition(S, p, method, imbalance=0.03)
    assert part.parts.shape == (S.shape[0],) and part.p == p and part.method == method
    assert set(np.unique(part.parts)) <= set(range(p))
    weights = np.bincount(part.parts, weights=np.diff(S.indptr) + 1, minlength=p)
    assert weights.max() <= 1.03 * weights.sum() / p + (np.diff(S.indptr).max() + 1)
    natural = np.arange(S.shape[0]) * p // S.shape[0]
    assert volume(S, part.parts) == brute_volume(S, part.parts)
    assert volume(S, natural) == brute_volume(S, natural)
    assert volume(S, part.parts) < 0.3 * volume(S, natural)
    perm, offsets = part.permutation()
    assert np.array_equal(np.sort(perm), np.arange(S.shape[0]))
    assert np.array_equal(np.diff(offsets), np.bincount(part.parts, minlength=p))
    assert (np.diff(part.parts[perm]) >= 0).all()


def test_partition_refuses_rectangular_and_unknown():
    pytest.importorskip("kahip")
    with pytest.raises(InputError, match="square"):
        partition(sp.random(5, 7, density=0.5, format="csr"), 2)
    with pytest.raises(InputError, match="unknown partitioner"):
        partition(grid_graph(4), 2, "metis")


def test_missing_package_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_kahip(name, *args, **kw):
        if name == "kahip":
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_kahip)
    with pytest.raises(InputError, match=r"distmm\[partition\]"):
        partition(grid_graph(4), 2, "kahip")


def test_default_method_is_kahip_where_it_applies(monkeypatch):
    """The sparsity-aware family's default order: KaHIP for a square S on p > 1 ranks when
    the package is installed; None (natural-order blocks) otherwise."""
    import builtins

    pytest.importorskip("kahip")
    assert default_method((10, 10), 4) == "kahip"
    assert default_method((10, 10), 1) is None
    assert default_method((10, 12), 4) is None
    real = builtins.__import__

    def no_kahip(name, *args, **kw):
        if name == "kahip":
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_kahip)
    assert default_method((10, 10), 4) is None


def test_file_round_trip_and_refusals(tmp_path):
    part = Partition(np.array([0, 1, 1, 0, 2], dtype=np.int64), 3, 5, 9, "kahip", 0.03, 0.5)
    path = tmp_path / "g.part.h5"
    save_partition(part, path)
    back = load_partition(path)
    assert np.array_equal(back.parts, part.parts)
    assert (back.p, back.n, back.nnz, back.method) == (3, 5, 9, "kahip")
    assert back.problem(5, 3, 9) is None
    assert "rows" in back.problem(6, 3, 9)
    assert "parts" in back.problem(5, 4, 9)
    assert "nonzeros" in back.problem(5, 3, 10)
    (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(InputError, match="cannot read"):
        load_partition(tmp_path / "junk.h5")
    with pytest.raises(InputError, match="cannot read"):
        load_partition(tmp_path / "missing.h5")
    bad = Partition(np.array([0, 5, 1], dtype=np.int64), 3, 3, 3, "kahip", 0.03, 0.0)
    save_partition(bad, tmp_path / "bad.h5")
    with pytest.raises(InputError, match="corrupt"):
        load_partition(tmp_path / "bad.h5")
