"""Exact sizes of every partial matrix, from the row structures alone (no comparator simulated).

The merge tree's traffic depends on how many distinct coordinates (i, j) each merged node holds
(the adders fold same-coordinate elements, paper II-A). A node holds (i, j) when at least one
of the leaves in its subtree produced a product at (i, j). For every output coordinate we know
the leaves that produce it (one per stored X[i, k] with Y[k, j] stored), so the number of nodes
holding it is the size of the union of those leaves' paths to the root. Summed over all
coordinates with the classic "distinct values per subtree" identity -- +1 at every producing
leaf, -1 at the lowest common ancestor of every two producing leaves that are consecutive in
depth-first order -- the subtree sums of these marks are the exact node sizes. Cost:
one sort of each output row's products plus one O(log depth) LCA query per product.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distmm.kernels.numba_util import row_products
from distmm.sim.sparch.schedule import MergeTree


def condensed_leaves(indptr: np.ndarray, nnz: int) -> tuple[np.ndarray, int]:
    """Leaf of every stored X element with matrix condensing (paper II-B): the i-th element of
    a CSR row lies in condensed column i. Returns (leaf per element, number of leaves)."""
    lens = np.diff(indptr)
    if nnz == 0:
        return np.zeros(0, dtype=np.int64), 0
    leaf = np.arange(nnz, dtype=np.int64) - np.repeat(indptr[:-1].astype(np.int64), lens)
    return leaf, int(lens.max())


def column_leaves(indices: np.ndarray, ncols: int) -> tuple[np.ndarray, int, np.ndarray]:
    """Leaf of every stored X element without condensing: one leaf per non-empty column, in
    column order. Returns (leaf per element, number of leaves, column of each leaf)."""
    present = np.zeros(ncols, dtype=bool)
    present[indices] = True
    cols = np.flatnonzero(present).astype(np.int64)
    rank = np.full(ncols, -1, dtype=np.int64)
    rank[cols] = np.arange(cols.size, dtype=np.int64)
    return rank[indices], int(cols.size), cols


@njit(cache=True, nogil=True)
def _tree_tables(parent, child_ptr, child_idx, leaves):
    nodes = parent.size
    depth = np.zeros(nodes, dtype=np.int64)
    for v in range(nodes - 2, -1, -1):
        depth[v] = depth[parent[v]] + 1
    maxd = 0
    for v in range(nodes):
        if depth[v] > maxd:
            maxd = depth[v]
    log = 1
    while (1 << log) <= maxd:
        log += 1
    up = np.empty((log, nodes), dtype=np.int64)
    up[0, :] = parent
    for k in range(1, log):
        for v in range(nodes):
            up[k, v] = up[k - 1, up[k - 1, v]]
    # depth-first (pre-order) rank of the leaves: every subtree's leaves are contiguous
    rank = np.empty(leaves, dtype=np.int64)
    by_rank = np.empty(leaves, dtype=np.int64)
    stack = np.empty(nodes, dtype=np.int64)
    top = 0
    stack[0] = nodes - 1
    top = 1
    pos = 0
    while top > 0:
        top -= 1
        v = stack[top]
        if v < leaves:
            rank[v] = pos
            by_rank[pos] = v
            pos += 1
        else:
            r = v - leaves
            for q in range(child_ptr[r + 1] - 1, child_ptr[r] - 1, -1):
                stack[top] = child_idx[q]
                top += 1
    return depth, up, rank, by_rank


@njit(cache=True, nogil=True, inline="always")
def _lca(a, b, depth, up):
    if depth[a] < depth[b]:
        a, b = b, a
    diff = depth[a] - depth[b]
    k = 0
    while diff > 0:
        if diff & 1:
            a = up[k, a]
        diff >>= 1
        k += 1
    if a == b:
        return a
    for k in range(up.shape[0] - 1, -1, -1):
        if up[k, a] != up[k, b]:
            a = up[k, a]
            b = up[k, b]
    return up[0, a]


@njit(cache=True, nogil=True)
def _node_sizes(x_ptr, x_idx, elem_leaf, y_ptr, y_idx, parent, depth, up, rank, by_rank,
                leaves):
    nodes = parent.size
    delta = np.zeros(nodes, dtype=np.int64)
    m = x_ptr.size - 1
    most = 0
    for i in range(m):
        most = max(most, row_products(x_ptr, x_idx, y_ptr, i))
    keys = np.empty(most, dtype=np.int64)
    L = np.int64(max(leaves, 1))
    for i in range(m):
        t = 0
        for p in range(x_ptr[i], x_ptr[i + 1]):
            c = x_idx[p]
            rk = rank[elem_leaf[p]]
            for q in range(y_ptr[c], y_ptr[c + 1]):
                keys[t] = np.int64(y_idx[q]) * L + rk
                t += 1
        row = np.sort(keys[:t])
        prev_col = -1
        prev_leaf = -1
        for s in range(t):
            col = row[s] // L
            leaf = by_rank[row[s] - col * L]
            delta[leaf] += 1
            if col == prev_col:
                delta[_lca(prev_leaf, leaf, depth, up)] -= 1
            prev_col = col
            prev_leaf = leaf
    # subtree sums; children have smaller ids than their parents
    size = delta.copy()
    for v in range(nodes - 1):
        size[parent[v]] += size[v]
    return size


def node_sizes(x_ptr: np.ndarray, x_idx: np.ndarray, elem_leaf: np.ndarray, y_ptr: np.ndarray,
               y_idx: np.ndarray, tree: MergeTree) -> np.ndarray:
    """Exact number of distinct coordinates in every node of ``tree`` (leaves, then rounds).

    ``elem_leaf`` gives the leaf of every stored element of X (CSR ``x_ptr``/``x_idx``); Y is
    CSR ``y_ptr``/``y_idx``. The root's size is the structural nnz of X @ Y. Not collective."""
    if tree.nodes == 0:
        return np.zeros(0, dtype=np.int64)
    depth, up, rank, by_rank = _tree_tables(tree.parent, tree.child_ptr, tree.child_idx,
                                            tree.leaves)
    return _node_sizes(x_ptr.astype(np.int64, copy=False), x_idx, elem_leaf,
                       y_ptr.astype(np.int64, copy=False), y_idx, tree.parent, depth, up, rank,
                       by_rank, tree.leaves)
