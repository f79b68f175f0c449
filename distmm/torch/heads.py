"""SpMM with one set of edge values per head, in one distributed call.

``Y[i, k, :] = sum_j alpha[(i, j), k] Z[j, k, :]`` for heads k = 0 .. h-1 (GAT's aggregation):
:func:`spmm_heads`, the one entry point (``graph.spmm_heads`` and ``GATConv`` call it), so that
how the heads are computed is this module's business alone. distmm's SpMM takes one value per
nonzero, so this builds once, per head count, the matrix ``S_h`` in which node i's head k is
its own row and column: ``S_h[(i, k), (j, k)]`` for every nonzero (i, j) of S. One SpMMA on
S_h, with the attention flattened into S_h's value order and ``Z`` seen as (nodes * heads, F),
is then the whole per-head aggregation, and its backward (one SpMMB and one SDDMM on S_h) too.
S_h stores h times S's nonzeros; an SpMM taking (nnz, h) values would need none of it.

S_h is laid out so that each rank's rows of S_h are exactly its nodes of S, every head
consecutive, on the graph's family:

* ``15d-dense-shift`` (:func:`_padded`): with ``P`` the largest row block of S
  (``ceil(N / p)``) and node i at position l of block b (after S's load-balancing
  permutation), ``(i, k)`` is row ``b P h + l h + k`` of S_h, whose p near-equal blocks
  (``permute="none"``) are then exactly ``[b P h, (b + 1) P h)``. A rank whose block has fewer
  than P nodes pads its (nodes * heads, F) block with zero rows.
* ``15d-sparse-aware`` (:func:`_by_parts`), whose blocks may be a partition's parts of any
  sizes: ``(i, k)`` is row ``h pos(i) + k`` (pos: S's permuted index), placed by a
  :class:`~distmm.core.partition.Partition` that puts it in node i's block.

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
from distmm.torch.graphs import NP_DTYPES


class HeadLayout:
    """S_h for one pattern of a graph, one head count and one dtype (collective to build)."""

    def __init__(self, graph, pattern, h: int, np_dtype) -> None:
        obj = pattern.obj(np_dtype)
        n = graph.num_nodes
        pos = np.empty(n, dtype=np.int64)
        pos[obj.row_perm] = np.arange(n, dtype=np.int64)  # each node's permuted index
        heads = np.arange(h, dtype=np.int64)
        place = _padded if graph.algorithm == "15d-dense-shift" else _by_parts
        first, self.obj, to_s = place(graph, pattern, obj, pos, h, np_dtype)
        self.h, self.n_local = h, graph.num_local
        self.pad = self.obj.local_rows("a").size - self.n_local * h
        # value order of S_h -> (S's value index, head), flattened as e * h + k
        r_h, c_h = self.obj.value_coordinates()
        pr, k = to_s(r_h)
        pc, _ = to_s(c_h)
        rs, cs = obj.value_coordinates()
        keys = rs.astype(np.int64) * n + cs
        order = np.argsort(keys, kind="stable")
        want = pr * n + pc
        at = np.searchsorted(keys[order], want)
        ok = (at < keys.size).all() and np.array_equal(keys[order][np.minimum(
            at, keys.size - 1)], want) and want.size == keys.size * h
        rows = (first[graph.nodes][:, None] + heads).reshape(-1)  # this rank's (node, head)
        ok = ok and np.array_equal(self.obj.dense_rows("a", self.obj.rank)[:rows.size],
                                   self.obj.row_inv[rows]) and self.pad >= 0
        if not graph.comm.allreduce(int(not ok)) == 0:
            raise InputError("internal: the per-head matrix's layout does not match the graph's"
                             " (a family or replication without aligned blocks)")
        index = order[at] * h + k  # a permutation: each (value, head) is one entry of S_h
        inverse = np.empty_like(index)
        inverse[index] = np.arange(index.size, dtype=index.dtype)
        self.index, self.inverse = torch.from_numpy(index), torch.from_numpy(inverse)

    def spmm(self, alpha, z):
        """``(n_local, h, F)``: every head's aggregation of ``z`` (n_local, h, F) with the
        attention ``alpha`` (local nnz of S, h) in S's value order. Collective."""
        F = z.shape[2]
        vals = Permute.apply(alpha.reshape(-1), self.index, self.inverse)
        zz = z.reshape(self.n_local * self.h, F)
        if self.pad:
            zz = torch.cat([zz, zz.new_zeros(self.pad, F)])
        y = fn.spmm_a(self.obj, zz, vals)
        if self.pad:
            y = y[:self.n_local * self.h]
        return y.reshape(self.n_local, self.h, F)


class Permute(torch.autograd.Function):
    """``x[index]`` for a permutation ``index``; backward ``G[inverse]`` (a gather, where
    indexing's own backward scatters with accumulation)."""

    @staticmethod
    def forward(ctx, x, index, inverse):
        ctx.inverse = inverse
        return x[index]

    @staticmethod
    def backward(ctx, G):
        return G[ctx.inverse], None, None


def _entries(pattern, first: np.ndarray, h: int, size: int) -> sp.coo_matrix:
    """S_h: ``((i, k), (j, k))`` for each nonzero (i, j) of the pattern and each head k, with
    ``first[i]`` the S_h index of (i, 0) and heads consecutive."""
    heads = np.arange(h, dtype=np.int64)
    rows = (first[pattern.rows][:, None] + heads).reshape(-1)
    cols = (first[pattern.cols][:, None] + heads).reshape(-1)
    return sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(size, size))


def _padded(graph, pattern, obj, pos: np.ndarray, h: int, np_dtype):
    """15d-dense-shift: S's p near-equal blocks of at most P nodes become S_h's equal blocks of
    P h rows (``permute="none"``), a short block padded. Returns (S_h index of (node, 0),
    S_h, its index -> (S's permuted index, head))."""
    n, p = graph.num_nodes, graph.p
    offsets = block_offsets(n, p)
    block = block_of(pos, offsets)
    P = int(np.diff(offsets).max())
    first = block * (P * h) + (pos - offsets[block]) * h
    Sh = distmm.distribute(_entries(pattern, first, h, p * P * h), graph.comm,
                           algorithm=graph.algorithm, c=graph.c, dtype=np_dtype,
                           permute="none", root=None)

    def to_s(x):
        b, rest = np.divmod(x.astype(np.int64), P * h)
        return offsets[b] + rest // h, rest % h
    return first, Sh, to_s


def _by_parts(graph, pattern, obj, pos: np.ndarray, h: int, np_dtype):
    """Families whose blocks may be a partition's parts (15d-sparse-aware): S_h's index of
    (node, k) is ``h * (node's permuted index) + k``, and a partition puts it in its node's
    block, so S_h's blocks are S's, h rows per node, in the same order (no padding)."""
    from distmm.core.partition import Partition
    n = graph.num_nodes
    first = pos * h
    parts = np.repeat(block_of(np.arange(n, dtype=np.int64), obj.offsets["a"]), h)
    layout = Partition(parts, graph.p, n * h, int(pattern.keys.size) * h, "heads", 0.0, 0.0)
    Sh = distmm.distribute(_entries(pattern, first, h, n * h), graph.comm,
                           algorithm=graph.algorithm, c=graph.c, dtype=np_dtype,
                           permute=layout, root=None)

    def to_s(x):
        return np.divmod(Sh.row_perm[x].astype(np.int64), h)
    return first, Sh, to_s


def head_layout(graph, pattern_name: str, h: int, np_dtype) -> HeadLayout:
    """The cached :class:`HeadLayout` (collective on first use)."""
    pattern = graph.pattern(pattern_name)
    key = (h, np.dtype(np_dtype).name)
    if key not in pattern.heads:
        pattern.heads[key] = HeadLayout(graph, pattern, h, np_dtype)
    return pattern.heads[key]


def spmm_heads(graph, pattern_name: str, alpha, z):
    """Every head's aggregation ``Y[i, k] = sum_j alpha[(i, j), k] z[j, k]``, differentiable in
    ``alpha`` ((this rank's nonzeros of the pattern, h), value order) and ``z`` ((num_local,
    h, F) node rows): (num_local, h, F). One distributed SpMM forward (one SpMMB and one SDDMM
    backward); one head is S's own SpMM. Collective (the first call per head count and dtype
    builds S_h). The arguments are the caller's to check."""
    h = int(z.shape[1])
    if h == 1:
        obj = graph.obj(z.dtype, pattern_name)
        out = fn.SpMMA.apply(obj, z.reshape(z.shape[0], z.shape[2]), alpha.reshape(-1))
        return out.reshape(z.shape)
    return head_layout(graph, pattern_name, h, NP_DTYPES[z.dtype]).spmm(alpha, z)
