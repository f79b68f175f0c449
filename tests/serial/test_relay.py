"""The relay tree of the sparsity-aware exchange (:func:`distmm.core.exchange.relay_parents`)
against its definition: depth at most 2, relays among the row's own destinations, the order
of the pairs irrelevant, the busiest load never higher and lower where a hub allows it; and
the pattern model's counts built on it (:func:`distmm.core.exchange.exchange_model`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.exchange import exchange_model, plan_words, relay_parents


def random_pairs(q: int, rows: int, seed: int, hub: int = 0):
    """(rows, dests, owners): each row needed by a few ranks, ``hub`` rows by most."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(rows):
        owner = g * q // rows
        k = rng.integers(q // 2, q) if g < hub else rng.integers(0, 4)
        dests = rng.choice(np.setdiff1d(np.arange(q), [owner]), size=min(k, q - 1),
                           replace=False)
        out += [(g, int(x), owner) for x in dests]
    a = np.array(out, dtype=np.int64).reshape(-1, 3)
    return a[:, 0], a[:, 1], a[:, 2]


def check_tree(rows, dests, owners, parent):
    for i in range(rows.size):
        if parent[i] == owners[i]:
            continue
        # the relay needs the row itself and gets it from the owner (depth 2)
        at = np.flatnonzero((rows == rows[i]) & (dests == parent[i]))
        assert at.size == 1, "a relay is one of the row's destinations"
        assert parent[at[0]] == owners[i], "a relay is at level 1"
        assert parent[i] != dests[i]


@pytest.mark.parametrize("q,seed,hub", [(3, 0, 1), (8, 1, 2), (16, 2, 3), (40, 3, 5),
                                        (16, 4, 0)])
def test_tree_is_shallow_among_destinations_and_lowers_the_busiest(q, seed, hub):
    rows, dests, owners = random_pairs(q, 5 * q, seed, hub)
    parent = relay_parents(rows, dests, owners, q)
    check_tree(rows, dests, owners, parent)
    before = np.bincount(owners, minlength=q)
    after = np.bincount(parent, minlength=q)
    assert after.sum() == before.sum()  # one send per pair
    assert after.max() <= before.max()
    if hub:
        assert after.max() < before.max()
    # the same set of pairs in another order: the same tree
    shuffle = np.random.default_rng(seed).permutation(rows.size)
    again = relay_parents(rows[shuffle], dests[shuffle], owners[shuffle], q)
    assert np.array_equal(again, parent[shuffle])


@pytest.mark.parametrize("q", [3, 5, 9, 17, 33, 65])
def test_one_hub_reaches_the_best_tree_of_depth_two(q):
    """A hub needed by all q - 1 other ranks, nothing else: the busiest sender of the best
    tree of depth 2 (the owner sends to k relays, each forwards to about (q - 1 - k) / k)."""
    rows, dests = np.zeros(q - 1, dtype=np.int64), np.arange(1, q)
    owners = np.zeros(q - 1, dtype=np.int64)
    parent = relay_parents(rows, dests, owners, q)
    check_tree(rows, dests, owners, parent)
    best = min(max(k, -(-(q - 1 - k) // k)) for k in range(1, q))
    assert np.bincount(parent, minlength=q).max() == best


def test_nothing_to_relay():
    empty = np.empty(0, dtype=np.int64)
    assert relay_parents(empty, empty, empty, 4).size == 0
    # every row needed by one rank: nobody can relay
    rows, dests, owners = np.arange(6), np.array([1, 2, 0, 2, 0, 1]), np.array([0, 0, 1, 1, 2, 2])
    assert np.array_equal(relay_parents(rows, dests, owners, 3), owners)


def test_model_counts_follow_the_tree():
    """The pattern model with and without relays: the same rows received, the same total
    sent, a lower busiest sender on a hub, and the plan's words by the formula."""
    n, p = 60, 6
    rng = np.random.default_rng(5)
    rows = np.r_[rng.integers(0, n, 120), np.arange(n)]
    cols = np.r_[rng.integers(0, n, 120), np.zeros(n, int)]
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    for c in (1, 2):
        on = exchange_model(S.row, S.col, S.shape, p, c, relay=True)
        off = exchange_model(S.row, S.col, S.shape, p, c, relay=False)
        assert np.array_equal(on.recv_rows, off.recv_rows)
        assert on.send_rows.sum() == off.send_rows.sum()
        assert on.send_rows.max() < off.send_rows.max()
        assert on.relay_rows.sum() > 0 and off.relay_rows.sum() == 0
        q = p // c
        for k in range(p):
            assert off.plan_words[k] == plan_words(q, int(off.recv_rows[k]),
                                                   int(off.recv_peers[k]))["words"]
    # the plan of the relay tree on a layer's rank 0 and on another rank
    assert plan_words(4, 5, 2, relay=True) == {"words": 3 + 5 + 1 + 5, "messages": 3 + 2 + 2}
    assert plan_words(4, 0, 0, relay=True, root_rows=7) == {"words": 3 + 3 + 7,
                                                             "messages": 3 + 3}
    assert plan_words(2, 5, 1, relay=True) == plan_words(2, 5, 1)
    assert plan_words(1, 0, 0, relay=True) == {"words": 0, "messages": 0}
