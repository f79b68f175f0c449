"""Partial matrices and the order in which the merge tree merges them (paper II-B, II-C).

A *leaf* is one partial matrix produced by the multipliers: with matrix condensing, condensed
column j of the left matrix X (the j-th stored element of every CSR row) times the right matrix
Y; without it, one original column c of X times row c of Y (the outer product of OuterSPACE).
A *round* is one pass of the merge tree: it merges up to ``ways`` nodes (leaves, computed on the
fly, or earlier rounds' results, read back from DRAM) into one new node. The rounds form a tree
whose root is the final result C.

The tree is returned in arrays: nodes ``0 .. L-1`` are the leaves and node ``L + r`` is the
output of round ``r``; ``child_ptr``/``child_idx`` list each round's inputs (CSR), rounds are in
execution order and every child has a smaller id than its parent.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass
class MergeTree:
    """The merge schedule: ``rounds`` rounds over ``leaves`` leaves (see the module doc)."""

    leaves: int
    child_ptr: np.ndarray     # int64, rounds + 1
    child_idx: np.ndarray     # int64, node ids
    parent: np.ndarray        # int64, leaves + rounds; the root is its own parent

    @property
    def rounds(self) -> int:
        return int(self.child_ptr.size - 1)

    @property
    def nodes(self) -> int:
        return self.leaves + self.rounds

    def children(self, r: int) -> np.ndarray:
        """Node ids merged by round r."""
        return self.child_idx[self.child_ptr[r]:self.child_ptr[r + 1]]


def k_init(num_leaves: int, ways: int) -> int:
    """Inputs of the first round of a ``ways``-way Huffman tree (paper Formula 1).

    ``(num_leaves - 2) mod (ways - 1) + 2`` makes every later round, and so the root, merge
    exactly ``ways`` nodes. Defined for ``num_leaves >= 2`` and ``ways >= 2``.
    """
    if num_leaves < 2 or ways < 2:
        raise ValueError(f"k_init needs at least 2 leaves and 2 ways, got {num_leaves}, {ways}")
    return (num_leaves - 2) % (ways - 1) + 2


def _build(leaves: int, groups: list[list[int]]) -> MergeTree:
    ptr = np.zeros(len(groups) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(g) for g in groups])
    idx = np.fromiter((c for g in groups for c in g), dtype=np.int64, count=int(ptr[-1]))
    parent = np.empty(leaves + len(groups), dtype=np.int64)
    parent[:] = -1
    for r in range(len(groups)):
        parent[idx[ptr[r]:ptr[r + 1]]] = leaves + r
    if groups:
        parent[-1] = leaves + len(groups) - 1
    if (parent < 0).any():
        raise AssertionError("merge schedule left a node unmerged")
    return MergeTree(leaves, ptr, idx, parent)


def huffman_schedule(weights: np.ndarray, ways: int) -> MergeTree:
    """The k-ary Huffman merge order (paper II-C): the first round merges the k_init lightest
    leaves, every later round the ``ways`` lightest nodes; a merged node's weight is the sum of
    its children's (the paper's estimate). Ties go to the lower node id.

    A single leaf still takes one round (it streams through the tree to the writer)."""
    weights = np.asarray(weights, dtype=np.int64)
    L = int(weights.size)
    if L == 0:
        return _build(0, [])
    if L == 1:
        return _build(1, [[0]])
    heap = [(int(w), i) for i, w in enumerate(weights)]
    heapq.heapify(heap)
    groups: list[list[int]] = []
    take = k_init(L, ways)
    while len(heap) > 1:
        popped = [heapq.heappop(heap) for _ in range(min(take, len(heap)))]
        groups.append([i for _, i in popped])
        heapq.heappush(heap, (sum(w for w, _ in popped), L + len(groups) - 1))
        take = ways
    return _build(L, groups)


def sequential_schedule(num_leaves: int, ways: int) -> MergeTree:
    """The sequential order of the paper's Fig. 8: the first round merges the first ``ways``
    leaves, every later round the previous result and the next ``ways - 1`` leaves."""
    if num_leaves == 0:
        return _build(0, [])
    groups = [list(range(min(ways, num_leaves)))]
    nxt = len(groups[0])
    while nxt < num_leaves:
        stop = min(nxt + ways - 1, num_leaves)
        groups.append([num_leaves + len(groups) - 1, *range(nxt, stop)])
        nxt = stop
    return _build(num_leaves, groups)


def random_schedule(num_leaves: int, ways: int, seed: int) -> MergeTree:
    """The baseline of the paper's ablation (III-C): every round merges ``ways`` nodes drawn
    uniformly from the unmerged ones (the premise of the paper's Formula 2)."""
    if num_leaves == 0:
        return _build(0, [])
    if num_leaves == 1:
        return _build(1, [[0]])
    rng = np.random.default_rng(seed)
    pool = list(range(num_leaves))
    groups: list[list[int]] = []
    while len(pool) > 1:
        k = min(ways, len(pool))
        # swap k random picks to the end of the pool and cut them off: O(k) per round
        for t in range(k):
            j = int(rng.integers(0, len(pool) - t))
            pool[j], pool[len(pool) - 1 - t] = pool[len(pool) - 1 - t], pool[j]
        picked = sorted(pool[len(pool) - k:])
        del pool[len(pool) - k:]
        groups.append(picked)
        pool.append(num_leaves + len(groups) - 1)
    return _build(num_leaves, groups)


def make_schedule(kind: str, weights: np.ndarray, ways: int, seed: int = 0) -> MergeTree:
    """The merge tree of scheduler ``kind`` (huffman, sequential or random) over the leaves."""
    if ways < 2:
        raise ValueError(f"a merge tree must merge at least 2 ways, got {ways}")
    if kind == "huffman":
        return huffman_schedule(weights, ways)
    if kind == "sequential":
        return sequential_schedule(int(np.size(weights)), ways)
    if kind == "random":
        return random_schedule(int(np.size(weights)), ways, seed)
    raise ValueError(f"unknown scheduler {kind!r}")


def estimated_weight(tree: MergeTree, weights: np.ndarray) -> int:
    """Sum of all nodes' weights with merged weights estimated as sums (the quantity the
    Huffman tree minimises, Fig. 8); leaves included."""
    w = np.zeros(tree.nodes, dtype=np.int64)
    w[:tree.leaves] = weights
    for r in range(tree.rounds):
        w[tree.leaves + r] = w[tree.children(r)].sum()
    return int(w.sum())
