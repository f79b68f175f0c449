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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from distmm.errors import require

RANK_ORDERS = ("fiber", "layer")


def check_grid(p: int, c, order: str, allows: Callable[[int, int], bool] | None = None,
               needs: str = "", who: str = "the grid") -> None:
    """Rank-independent checks of a grid's arguments: InputError, the same on every rank.

    c must be an integer >= 1 that divides p, and ``order`` one of :data:`RANK_ORDERS`;
    ``allows(p, c)``, when given, is the grid's further rule (``needs`` says it in words, for
    the message, which then also lists the c that ``who`` accepts for this p). Not collective.
    """
    require(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1,
            f"replication factor c must be an integer >= 1, got {c!r}")
    valid = "" if allows is None else (
        f" ({who} accepts c in {{{', '.join(str(d) for d in range(1, p + 1) if allows(p, d))}}}"
        f" for p={p})")
    require(p % c == 0,
            f"replication factor c={c} does not divide the number of ranks p={p}{valid}")
    require(allows is None or allows(p, c),
            f"{who} needs {needs}; p={p}, c={c} gives p/c={p // c}{valid}")
    require(order in RANK_ORDERS,
            f"unknown rank order {order!r}; choose one of {', '.join(RANK_ORDERS)}")


def fits_15d(p: int, c: int) -> bool:
    """Whether p ranks form a (p/c) x c grid: c | p."""
    return c >= 1 and p % c == 0


def fits_25d(p: int, c: int) -> bool:
    """Whether p ranks form an s x s x c grid: c | p and p/c a perfect square."""
    return fits_15d(p, c) and math.isqrt(p // c) ** 2 == p // c


@dataclass
class ProcessGrid15D:
    """A (p/c) x c grid: c layers of q = p/c ranks each, and q fibers of c ranks each.

    This rank sits at (u, v): position u in its layer (0 <= u < q) and layer v (0 <= v < c).
    ``layer_comm`` holds the q ranks of layer v ordered by u; ``fiber_comm`` the c ranks of
    fiber u ordered by v. Construction is collective over ``comm`` and checks p and c the same
    way on every rank before communicating.
    """

    rule = "c to divide p"  # the rule for c, in words

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
        check_grid(p, c, order)
        q = p // c
        u, v = cls.locate(comm.Get_rank(), c, q, order)
        layer = comm.Split(color=v, key=u)
        fiber = comm.Split(color=u, key=v)
        return cls(comm, c, order, p, q, u, v, layer, fiber)

    @staticmethod
    def locate(rank, c: int, q: int, order: str) -> tuple:
        """Grid position (u, v) of world rank(s) ``rank`` (an int or an integer array)."""
        return (rank // c, rank % c) if order == "fiber" else (rank % q, rank // q)

    def position(self, rank) -> tuple:
        """Grid position (u, v) of world rank(s) ``rank`` (an int or an integer array)."""
        return self.locate(rank, self.c, self.q, self.order)

    def world_rank(self, u, v):
        """World rank (in ``comm``) of grid position(s) (u, v) (ints or integer arrays)."""
        return u * self.c + v if self.order == "fiber" else v * self.q + u

    def fiber_blocks(self, u: int | None = None) -> slice:
        """The c row blocks (of the p-way blocking) that fiber u holds, in fiber order.

        Table II's 1.5D layouts put row block b on grid position (b // c, b % c), so fiber u
        (default: this rank's) holds blocks uc .. uc + c - 1: what an all-gather along the
        fiber stacks, and what a reduce-scatter hands back."""
        u = self.u if u is None else u
        return slice(u * self.c, (u + 1) * self.c)

    def layer_blocks(self, v: int | None = None) -> slice:
        """The q row blocks (of the p-way blocking) that layer v holds, ordered by position u
        in the layer (blocks v, v + c, ...): those that pass around the layer in a shift."""
        return slice(self.v if v is None else v, self.p, self.c)

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

    rule = "p/c to be a perfect square"  # the rule for c, in words

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
        check_grid(p, c, order, fits_25d, cls.rule, "a 2.5D grid")
        s = math.isqrt(p // c)
        i, j, k = cls.locate(comm.Get_rank(), c, s, order)
        pos = i * s + j
        layer = comm.Split(color=k, key=pos)
        fiber = comm.Split(color=pos, key=k)
        row = comm.Split(color=k * s + i, key=j)
        col = comm.Split(color=k * s + j, key=i)
        return cls(comm, c, order, p, s, i, j, k, row, col, layer, fiber)

    @staticmethod
    def locate(rank, c: int, s: int, order: str) -> tuple:
        """Grid position (i, j, k) of world rank(s) ``rank`` (an int or an integer array)."""
        if order == "fiber":
            pos, k = divmod(rank, c)
        else:
            k, pos = divmod(rank, s * s)
        i, j = divmod(pos, s)
        return i, j, k

    def position(self, rank) -> tuple:
        """Grid position (i, j, k) of world rank(s) ``rank`` (an int or an integer array)."""
        return self.locate(rank, self.c, self.s, self.order)

    def world_rank(self, i, j, k):
        """World rank (in ``comm``) of grid position(s) (i, j, k) (ints or integer arrays)."""
        pos = i * self.s + j
        return pos * self.c + k if self.order == "fiber" else k * self.s * self.s + pos

    def free(self) -> None:
        """Release the sub-communicators (collective)."""
        for sub in (self.row_comm, self.col_comm, self.layer_comm, self.fiber_comm):
            sub.Free()
