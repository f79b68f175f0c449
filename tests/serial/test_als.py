"""The p-independent pieces of ALS: counter-based hashes, the hash split, the initial factors
and the planted generator's chunks."""

from __future__ import annotations

import numpy as np
import pytest

from distmm.apps.als import initial_factors, split_ratings
from distmm.core.coo import CooShare
from distmm.core.hashing import hash_normal, hash_uniform, mix64
from distmm.errors import InputError
from distmm.io import generate


def test_mix64_matches_splitmix64_reference_values():
    # SplitMix64 outputs for state 0 (the mixer applied to 0 + golden gamma), as published
    # with the generator (e.g. the first output of Java's SplittableRandom(0)).
    assert int(mix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    assert int(mix64(np.uint64(0x9E3779B97F4A7C15))) == 0x6E789E6AA1B965F4


def test_hashes_depend_only_on_keys():
    ids = np.arange(1000)
    u = hash_uniform(7, 3, ids)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.05
    perm = np.random.default_rng(0).permutation(1000)
    np.testing.assert_array_equal(hash_uniform(7, 3, ids[perm]), u[perm])
    assert not np.array_equal(hash_uniform(8, 3, ids), u)
    assert not np.array_equal(hash_uniform(7, 4, ids), u)
    z = hash_normal(1, 2, np.arange(20000))
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05


def test_split_is_a_partition_by_pair_not_by_position():
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, 500, 4000), rng.integers(0, 300, 4000)
    share = CooShare((500, 300), rows, cols, rng.random(4000))
    train, test = split_ratings(share, 0.2, 5)
    assert train.nnz + test.nnz == 4000 and 0.15 < test.nnz / 4000 < 0.25
    # Any subset of the entries (another rank's share) splits the same way.
    half = CooShare((500, 300), rows[::2], cols[::2], share.vals[::2])
    _, test_half = split_ratings(half, 0.2, 5)
    held = set(zip(test.rows.tolist(), test.cols.tolist(), strict=True))
    assert set(zip(test_half.rows.tolist(), test_half.cols.tolist(), strict=True)) <= held
    none_held = split_ratings(share, 0.0, 5)[1]
    assert none_held.nnz == 0


def test_initial_factors_are_per_entry():
    full = initial_factors(np.arange(10), np.arange(6), "a", 3, 6)
    piece = initial_factors(np.array([7, 2]), np.arange(2, 5), "a", 3, 6)
    np.testing.assert_array_equal(piece, full[[7, 2]][:, 2:5])
    assert not np.array_equal(initial_factors(np.arange(10), np.arange(6), "b", 3, 6), full)
    assert full.min() >= 0 and full.max() < 1 / np.sqrt(6)


def test_planted_chunk_power_law_favours_low_columns_and_checks_parameters():
    rows, cols, _ = generate.planted_low_rank_chunk(400, 100, 2, 10, 0, 0, pattern="power-law")
    assert np.mean(cols < 20) > 0.5  # u**3: P(col < n/5) = (1/5)**(1/3), about 0.58
    assert np.all(np.diff(rows * 100 + cols) > 0)  # sorted, no duplicates
    from mpi4py import MPI

    with pytest.raises(InputError, match="pattern"):
        generate.planted_low_rank(5, 5, 2, 2, 0, MPI.COMM_SELF, pattern="zipf")
    with pytest.raises(InputError, match="rank"):
        generate.planted_low_rank(5, 5, 0, 2, 0, MPI.COMM_SELF)
