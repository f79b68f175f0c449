"""The load-balancing permutations: "blocks" has the random permutation's blocks, in order."""

from __future__ import annotations

import numpy as np
import pytest

from distmm.core.layout import block_offsets
from distmm.core.permute import (
    balance_permutation,
    block_imbalance,
    block_sorted_permutation,
    inverse_permutation,
    locality_permutation,
    random_permutation,
)
from distmm.errors import InputError


@pytest.mark.parametrize("n,nblocks", [(0, 3), (1, 1), (7, 3), (100, 8), (5, 8), (1000, 7)])
def test_blocks_keep_the_random_sets_in_natural_order(n, nblocks):
    rand = random_permutation(n, 11)
    blocks = block_sorted_permutation(n, nblocks, 11)
    inverse_permutation(blocks)  # raises unless it is a permutation
    off = block_offsets(n, nblocks)
    for b in range(nblocks):
        mine, theirs = blocks[off[b]:off[b + 1]], rand[off[b]:off[b + 1]]
        np.testing.assert_array_equal(mine, np.sort(theirs))


def test_modes():
    n = 50
    np.testing.assert_array_equal(balance_permutation("none", n, 4, 0), np.arange(n))
    np.testing.assert_array_equal(balance_permutation(False, n, 4, 0), np.arange(n))
    np.testing.assert_array_equal(balance_permutation("random", n, 4, 3),
                                  random_permutation(n, 3))
    np.testing.assert_array_equal(balance_permutation("auto", n, 4, 3),
                                  block_sorted_permutation(n, 4, 3))
    np.testing.assert_array_equal(balance_permutation(True, n, 4, 3),
                                  block_sorted_permutation(n, 4, 3))
    # one block balances nothing: auto keeps the natural order
    np.testing.assert_array_equal(balance_permutation("auto", n, 1, 3), np.arange(n))
    with pytest.raises(InputError, match="unknown permutation"):
        balance_permutation("shuffle", n, 4, 0)


def _runs(perm: np.ndarray) -> float:
    """Mean length of the runs of consecutive ids in ``perm``."""
    breaks = np.count_nonzero(np.diff(perm) != 1) + 1
    return perm.size / breaks


def test_locality_keeps_runs_on_a_banded_matrix_and_balances():
    n, p = 20000, 4
    weights = np.full(n, 5, dtype=np.int64)  # a regular mesh-like matrix
    perm = locality_permutation([weights, weights], p, seed=2)
    inverse_permutation(perm)
    assert _runs(perm) > 100  # long runs of neighbouring rows stay together
    single = block_sorted_permutation(n, p, 2)
    assert block_imbalance(perm, weights, p) <= 1.05 * block_imbalance(single, weights, p)


def test_locality_falls_back_on_skewed_rows():
    """Heavy rows clustered by id (a sorted power law): long runs would unbalance the blocks,
    so the permutation must stay within 5% of the random blocks' imbalance."""
    n, p = 4096, 8
    weights = (1e5 / (1 + np.arange(n)) ** 1.2).astype(np.int64) + 1
    perm = locality_permutation([weights], p, seed=0)
    single = block_sorted_permutation(n, p, 0)
    assert block_imbalance(perm, weights, p) <= 1.05 * block_imbalance(single, weights, p)
    assert block_imbalance(np.arange(n), weights, p) > 2  # natural order would be far worse
