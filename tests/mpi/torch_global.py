"""Global views of distributed tensors, so that torch.autograd.gradcheck runs under MPI.

gradcheck perturbs its inputs one entry at a time and calls the function twice per entry, then
calls backward once per output entry. Every one of those calls is collective here, so every
rank must make the same number of them in the same order. The inputs are therefore *global*
tensors (the whole A, B, values, ...), identical on every rank and perturbed identically; each
rank extracts its own block (:class:`Extract`), runs distmm.torch, and all-gathers the blocks
of the result into a global output (:class:`Gather`), identical on every rank. gradcheck then
sees one serial function on every rank, and its pass/fail decisions agree.

Gradients: the backward of :class:`Gather` hands each rank its own slice of the (identical)
output gradient; the backward of :class:`Extract` scatters the local gradient into a global
buffer and sums it over the ranks. Partitioned operands (dense blocks, edge values) have each
entry on one rank, so the sum is the gradient. Per-node arrays in the column-split families
are replicated over a row group and distmm.torch gives every replica the full gradient, so
only one member per group (its lowest rank) contributes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from families import grid_cs
from mpi4py import MPI

import distmm
from distmm.ops.groups import row_group_color

COMM = MPI.COMM_WORLD


class Extract(torch.autograd.Function):
    """This rank's block ``X.reshape(-1)[index].reshape(shape)`` of a global tensor X."""

    @staticmethod
    def forward(ctx, X, index, shape, contribute, comm):
        ctx.index, ctx.contribute, ctx.comm, ctx.numel, ctx.xshape = (
            index, contribute, comm, X.numel(), X.shape)
        return X.reshape(-1)[index].reshape(shape)

    @staticmethod
    def backward(ctx, G):
        total = torch.zeros(ctx.numel, dtype=G.dtype)
        if ctx.contribute:
            total.index_add_(0, ctx.index, G.reshape(-1))
        ctx.comm.Allreduce(MPI.IN_PLACE, total.numpy(), op=MPI.SUM)
        return total.reshape(ctx.xshape), None, None, None, None


class Gather(torch.autograd.Function):
    """The global tensor whose entries ``index`` (flat) are this rank's block ``X``."""

    @staticmethod
    def forward(ctx, X, index, all_index, counts, shape, comm):
        ctx.index, ctx.shape = index, X.shape
        recv = np.empty(int(sum(counts)), dtype=np.float64)
        comm.Allgatherv(np.ascontiguousarray(X.detach().numpy().reshape(-1)),
                        [recv, counts])
        out = torch.empty(int(np.prod(shape)), dtype=X.dtype)
        out[all_index] = torch.from_numpy(recv)
        return out.reshape(shape)

    @staticmethod
    def backward(ctx, G):
        return G.reshape(-1)[ctx.index].reshape(ctx.shape), None, None, None, None, None


class GlobalLayout:
    """Where this rank's blocks of every kind of operand sit in the global tensors.

    ``S`` is the global sparse matrix (every rank holds it), ``obj`` its distribution, ``r``
    the dense width. Global edge arrays are in S's CSR order (row, then column).
    """

    def __init__(self, obj, S: sp.spmatrix, r: int) -> None:
        self.obj, self.r = obj, r
        m, n = obj.shape
        csr = sp.csr_matrix(S)
        csr.sort_indices()
        coo = csr.tocoo()
        self.keys = coo.row.astype(np.int64) * n + coo.col
        self.nnz = self.keys.size
        self.rows, self.cols = coo.row, coo.col
        rows, cols = obj.value_coordinates()
        key = obj.row_perm[rows] * n + obj.col_perm[cols]
        self.edge_ids = np.searchsorted(self.keys, key)
        assert np.array_equal(self.keys[self.edge_ids], key)
        self.shapes = {"a": (m, r), "b": (n, r)}
        self.nodes = {"a": m, "b": n}
        self._gather_plans: dict = {}

    # ------------------------------------------------------------------ indices
    def dense_index(self, side: str) -> tuple[torch.Tensor, tuple[int, int]]:
        rows = self.obj.local_rows(side)
        cols = np.arange(self.r)[self.obj.dense_cols(side, self.obj.rank)]
        flat = (rows[:, None] * self.r + cols[None, :]).reshape(-1)
        return torch.from_numpy(flat.astype(np.int64)), (rows.size, cols.size)

    def edge_index(self, h: int | None) -> tuple[torch.Tensor, tuple[int, ...]]:
        if h is None:
            return torch.from_numpy(self.edge_ids.astype(np.int64)), (self.edge_ids.size,)
        flat = (self.edge_ids[:, None] * h + np.arange(h)[None, :]).reshape(-1)
        return torch.from_numpy(flat.astype(np.int64)), (self.edge_ids.size, h)

    def node_index(self, side: str, h: int | None) -> tuple[torch.Tensor, tuple[int, ...]]:
        rows = self.obj.local_rows(side)
        if h is None:
            return torch.from_numpy(rows.astype(np.int64)), (rows.size,)
        flat = (rows[:, None] * h + np.arange(h)[None, :]).reshape(-1)
        return torch.from_numpy(flat.astype(np.int64)), (rows.size, h)

    # ------------------------------------------------------------------ global <-> local
    def extract(self, X: torch.Tensor, kind: str, side: str | None = None,
                h: int | None = None) -> torch.Tensor:
        """This rank's block of the global ``X``: kind "dense" (side's m x r or n x r),
        "edges" (nnz or nnz x h) or "nodes" (side's per-node array, replicated per row
        group)."""
        contribute = True
        if kind == "dense":
            index, shape = self.dense_index(side)
        elif kind == "edges":
            index, shape = self.edge_index(h)
        else:
            index, shape = self.node_index(side, h)
            contribute = row_group_color(self.obj, side, self.obj.rank) == self.obj.rank
        return Extract.apply(X, index, shape, contribute, COMM)

    def gather(self, X: torch.Tensor, kind: str, side: str | None = None,
               h: int | None = None) -> torch.Tensor:
        """The global tensor made of every rank's block ``X`` ("dense" or "edges")."""
        key = (kind, side, h)
        if key not in self._gather_plans:
            if kind == "dense":
                index, _ = self.dense_index(side)
                shape = self.shapes[side]
            else:
                index, _ = self.edge_index(h)
                shape = (self.nnz,) if h is None else (self.nnz, h)
            parts = COMM.allgather(index.numpy())
            counts = np.array([part.size for part in parts])
            self._gather_plans[key] = (index, torch.from_numpy(np.concatenate(parts)), counts,
                                       shape)
        index, all_index, counts, shape = self._gather_plans[key]
        return Gather.apply(X, index, all_index, counts, shape, COMM)


def problem(m: int, n: int, seed: int = 0, density: float = 0.35) -> sp.coo_matrix:
    """A small m x n S with values in [0.5, 1.5], an empty row (every third) and an empty
    column (column 1)."""
    rng = np.random.default_rng(seed)
    S = sp.random(m, n, density=density, format="coo", random_state=rng,
                  data_rvs=lambda k: rng.uniform(0.5, 1.5, k))
    keep = (S.row % 3 != 0) & (S.col != 1)
    return sp.coo_matrix((S.data[keep], (S.row[keep], S.col[keep])), shape=(m, n))


def configs(r: int) -> list[tuple[str, int]]:
    """(family, c) pairs to test at this p: every family, with the smallest and the largest
    c of :func:`families.grid_cs` (fewer gradcheck runs than every c; the layouts at c = 1
    and at the deepest replication bound the cases, and from p = 4 on grid_cs leaves out the
    grid shapes that p = 2 and 3 already gave). Above 4 ranks (beyond the p = 1..4 users are
    promised, and more ranks than this machine's cores) only the deepest of them."""
    out = []
    for algorithm in distmm.ALGORITHMS:
        cs = grid_cs(algorithm, r)
        chosen = {cs[0], cs[-1]} if COMM.Get_size() <= 4 else {cs[-1]}
        out.extend((algorithm, c) for c in sorted(chosen))
    return out


def full_jacobian(config: tuple[str, int], first: tuple[str, int]) -> bool:
    """Whether gradcheck compares full Jacobians (the first configuration, up to 4 ranks) or
    random projections of them (fast mode: a few collective calls instead of one per entry)."""
    return config == first and COMM.Get_size() <= 4


def width() -> int:
    """A dense width every family accepts at this p (1.5D sparse shifting needs r >= p / c,
    2.5D sparse replicating r >= s c)."""
    return max(4, COMM.Get_size())


def global_tensor(shape, seed: int, low: float | None = None, high: float | None = None):
    """A float64 tensor requiring grad, identical on every rank (fixed seed)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
    return torch.tensor(x, dtype=torch.float64, requires_grad=True)
