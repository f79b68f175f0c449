"""SpMM with one set of edge values per head, in one distributed call.

``Y[i, k, :] = sum_j alpha[(i, j), k] Z[j, k, :]`` for heads k = 0 .. h-1 (GAT's aggregation).
distmm's SpMM takes one value per nonzero, so this builds once, per head count, the matrix
``S_h`` in which node i's head k is its own row and column: ``S_h[(i, k), (j, k)]`` for every
nonzero (i, j) of S. One SpMMA on S_h, with the attention flattened into S_h's value order and
``Z`` seen as (nodes * heads, F), is then the whole per-head aggregation, and its backward (one
SpMMB and one SDDMM on S_h) too.

S_h is laid out so that each rank's rows of S_h are exactly its nodes of S, every head
consecutive: with ``P`` the largest row block of S (``ceil(N / p)``) and node i at position l of
block b (after S's load-balancing permutation), ``(i, k)`` is row ``b P h + l h + k`` of S_h,
whose p near-equal blocks (``permute="none"``) are then exactly ``[b P h, (b + 1) P h)``. A
rank whose block has fewer than P nodes pads its (nodes * heads, F) block with zero rows.
The nonzero (i, j) of S and its copies in S_h sit on the same rank (ownership follows the row
and column blocks, which coincide); this is checked when S_h is built.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import distmm
from distmm.core.layout import block_of, block_offsets
from distmm.errors import InputError
from distmm.torch import functions as fn
from distmm.torch.functions import torch


class HeadLayout:
    """S_h for one pattern of a graph, one head count and one dtype (collective to build)."""

    def __init__(self, graph, pattern, h: int, np_dtype) -> None:
        obj = pattern.obj(np_dtype)
        n, p = graph.num_nodes, graph.p
        offsets = block_offsets(n, p)
        pos = np.empty(n, dtype=np.int64)
        pos[obj.row_perm] = np.arange(n, dtype=np.int64)  # each node's permuted index
        block = block_of(pos, offsets)
        P = int(np.diff(offsets).max())
        first = block * (P * h) + (pos - offsets[block]) * h  # S_h row of (node, head 0)
        heads = np.arange(h, dtype=np.int64)
        rows = (first[pattern.rows][:, None] + heads).reshape(-1)
        cols = (first[pattern.cols][:, None] + heads).reshape(-1)
        size = p * P * h
        Sh = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(size, size))
        self.obj = distmm.distribute(Sh, graph.comm, algorithm="15d-dense-shift", c=graph.c,
                                     dtype=np_dtype, permute="none", root=None)
        self.h, self.P = h, P
        self.n_local = graph.num_local
        self.pad = (P - self.n_local) * h
        # value order of S_h -> (S's value index, head), flattened as e * h + k
        r_h, c_h = self.obj.value_coordinates()

        def to_s(x):
            b, rest = np.divmod(x.astype(np.int64), P * h)
            return offsets[b] + rest // h, rest % h

        pr, k = to_s(r_h)
        pc, _ = to_s(c_h)
        rs, cs = obj.value_coordinates()
        keys = rs.astype(np.int64) * n + cs
        order = np.argsort(keys, kind="stable")
        want = pr * n + pc
        at = np.searchsorted(keys[order], want)
        ok = (at < keys.size).all() and np.array_equal(keys[order][np.minimum(
            at, keys.size - 1)], want) and want.size == keys.size * h
        mine = self.obj.dense_rows("a", self.obj.rank)
        ok = ok and mine.size == P * h and (self.n_local == 0 or block[graph.nodes[0]] * P * h
                                            == mine[0])
        if not graph.comm.allreduce(int(not ok)) == 0:
            raise InputError("internal: the per-head matrix's layout does not match the graph's"
                             " (a family or replication without aligned blocks)")
        self.index = torch.from_numpy(order[at] * h + k)

    def spmm(self, alpha, z):
        """``(n_local, h, F)``: every head's aggregation of ``z`` (n_local, h, F) with the
        attention ``alpha`` (local nnz of S, h) in S's value order. Collective."""
        F = z.shape[2]
        vals = alpha.reshape(-1)[self.index]
        zz = z.reshape(self.n_local * self.h, F)
        if self.pad:
            zz = torch.cat([zz, zz.new_zeros(self.pad, F)])
        y = fn.spmm_a(self.obj, zz, vals)
        if self.pad:
            y = y[:self.n_local * self.h]
        return y.reshape(self.n_local, self.h, F)


def head_layout(graph, pattern_name: str, h: int, np_dtype) -> HeadLayout:
    """The cached :class:`HeadLayout` (collective on first use)."""
    pattern = graph.pattern(pattern_name)
    key = (h, np.dtype(np_dtype).name)
    if key not in pattern.heads:
        pattern.heads[key] = HeadLayout(graph, pattern, h, np_dtype)
    return pattern.heads[key]
