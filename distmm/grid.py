"""Process grids: 1.5D ((p/c) x c) and 2.5D (sqrt(p/c) x sqrt(p/c) x c), with sub-communicators.

Naming follows the paper (section V): the *fiber* axis is the one along which a matrix is
replicated (all-gathered) or reduced; a *layer* is the set of ranks that share a fiber index and
propagate (cyclically shift) blocks among themselves.

Rank order decides which world ranks share a layer. ``"fiber"`` order puts the c ranks of a
fiber on consecutive world ranks (so replication traffic stays on a node when c divides the
ranks per node); ``"layer"`` order puts a layer's ranks on consecutive world ranks (so shifts
stay on a node). The paper found the choice matters on real machines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mpi4py import MPI

from distmm.errors import require

RANK_ORDERS = ("fiber", "layer")


def _check_common(p: int, c: int, order: str) -> None:
    require(isinstance(c, int) and c >= 1,
            f"replication factor c must be an integer >= 1, got {c!r}")
    require(p % c == 0, f"replication factor c={c} does not divide the number of ranks p={p}")
    require(order in RANK_ORDERS,
            f"unknown rank order {order!r}; choose one of {', '.join(RANK_ORDERS)}")


@dataclass
class ProcessGrid15D:
    """A (p/c) x c grid: c layers of q = p/c ranks each, and q fibers of c ranks each.

    This rank sits at (u, v): position u in its layer (0 <= u < q) and layer v (0 <= v < c).
    ``layer_comm`` holds the q ranks of layer v ordered by u; ``fiber_comm`` the c ranks of
    fiber u ordered by v. Construction is collective over ``comm`` and checks p and c the same
    way on every rank before communicating.
    """

    comm: MPI.Comm
    c: int
    order: str
    p: int
    q: int
    u: int
    v: int
    layer_comm: MPI.Comm
    fiber_comm: MPI.Comm

    @classmethod
    def create(cls, comm: MPI.Comm, c: int, order: str = "fiber") -> ProcessGrid15D:
        """Build the grid on ``comm`` (collective). Raises InputError if c does not divide p."""
        p = comm.Get_size()
        _check_common(p, c, order)
        q = p // c
        rank = comm.Get_rank()
        u, v = (rank // c, rank % c) if order == "fiber" else (rank % q, rank // q)
        layer = comm.Split(color=v, key=u)
        fiber = comm.Split(color=u, key=v)
        return cls(comm, c, order, p, q, u, v, layer, fiber)

    def world_rank(self, u: int, v: int) -> int:
        """World rank (in ``comm``) of grid position (u, v)."""
        return u * self.c + v if self.order == "fiber" else v * self.q + u

    def free(self) -> None:
        """Release the sub-communicators (collective)."""
        self.layer_comm.Free()
        self.fiber_comm.Free()


@dataclass
class ProcessGrid25D:
    """A s x s x c grid with s = sqrt(p/c): c layers, each an s x s square of ranks.

    This rank sits at (i, j, k): row i, column j of layer k. ``row_comm`` holds the s ranks of
    row i in layer k (ordered by j), ``col_comm`` the s ranks of column j in layer k (ordered by
    i), ``layer_comm`` the s*s ranks of layer k, ``fiber_comm`` the c ranks at (i, j).
    Collective over ``comm``; p/c must be a perfect square.
    """

    comm: MPI.Comm
    c: int
    order: str
    p: int
    s: int
    i: int
    j: int
    k: int
    row_comm: MPI.Comm
    col_comm: MPI.Comm
    layer_comm: MPI.Comm
    fiber_comm: MPI.Comm

    @classmethod
    def create(cls, comm: MPI.Comm, c: int, order: str = "fiber") -> ProcessGrid25D:
        """Build the grid on ``comm`` (collective). Raises InputError if p/c is not a square."""
        p = comm.Get_size()
        _check_common(p, c, order)
        s = math.isqrt(p // c)
        require(s * s * c == p,
                f"a 2.5D grid needs p/c to be a perfect square; p={p}, c={c} gives p/c={p // c}")
        rank = comm.Get_rank()
        if order == "fiber":
            pos, k = divmod(rank, c)
        else:
            k, pos = divmod(rank, s * s)
        i, j = divmod(pos, s)
        layer = comm.Split(color=k, key=pos)
        fiber = comm.Split(color=pos, key=k)
        row = comm.Split(color=k * s + i, key=j)
        col = comm.Split(color=k * s + j, key=i)
        return cls(comm, c, order, p, s, i, j, k, row, col, layer, fiber)

    def world_rank(self, i: int, j: int, k: int) -> int:
        """World rank (in ``comm``) of grid position (i, j, k)."""
        pos = i * self.s + j
        return pos * self.c + k if self.order == "fiber" else k * self.s * self.s + pos

    def free(self) -> None:
        """Release the sub-communicators (collective)."""
        for sub in (self.row_comm, self.col_comm, self.layer_comm, self.fiber_comm):
            sub.Free()
