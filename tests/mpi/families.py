"""The algorithm families as the MPI tests see them, read from the registry.

Every family of :data:`distmm.ALGORITHMS`, with the replication factors its grid allows at this
run's p and widths at and above its minimum r, so that one test module per claim covers every
family, c and strategy without naming a family. Over the rank counts of ./tasks test
(1, 2, 3, 4, 8), ``FAMILY_C``, and :func:`grid_cs` for a module that loops over c itself,
meet every grid shape once: from p = 4 on they leave out the shapes that p = 2 and 3 already
gave (:func:`met_below`).
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

import distmm
from distmm.perf import bench, costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
FAMILIES = list(distmm.ALGORITHMS)
OPS = ("sddmm", "spmm-a", "spmm-b")
FUSED = ("fusedmm-a", "fusedmm-b")
# Every (family, c) (DISTMM_TEST_EVERY_RANK_COUNT=1), or at p >= 4 only those whose grid has a
# shape that p = 2 and 3 do not already give (tests/mpi/rank_counts.py)
EVERY_C = os.environ.get("DISTMM_TEST_EVERY_RANK_COUNT", "") not in ("", "0")


def met_below(name: str, c: int) -> bool:
    """Whether the family's grid at (P, c) has the shape of one at p = 2 or 3, where the family
    modules run too: layers of one rank (c = p, as c = 2 at p = 2 and c = 3 at p = 3), or one
    ring of all the ranks (c = 1 of a family whose layer is a ring: its grid takes 3 ranks at
    c = 1). At p = 4 that leaves the 2D grid of the 2.5D families (q = 2) and 1.5D layers of
    two ranks (c = 2); at p = 8 the true 2.5D grid (q = 2, c = 2) and 1.5D c = 2 and 4."""
    return P >= 4 and (c == P or (c == 1 and distmm.ALGORITHMS[name].model.grid_allows(3, 1)))


def grid_cs(name: str, r: int | None = None) -> list[int]:
    """Every c the family's grid allows at this p (and width r), less those met_below: the
    replication factors a module that loops over c needs at this p. All of them where that
    would leave none (a width that only the deepest c admits). Not collective."""
    cs = costmodel.valid_cs(name, P, r)
    return [c for c in cs if EVERY_C or not met_below(name, c)] or cs


# (family, c) for every c the family's grid allows at this p, less those met_below
FAMILY_C = [(name, c) for name in FAMILIES for c in grid_cs(name)]


def one_c(name: str) -> int:
    """One replication factor of the family: the middle valid c, leaning to the smaller one
    (so that c > 1 and layers of several ranks meet where p allows both)."""
    cs = costmodel.valid_cs(name, P)
    return cs[(len(cs) - 1) // 2]


def width(name: str, c: int, kind: str) -> int:
    """r for a test: the family's minimum at (p, c), or an awkward one above it that the
    family's column blocks do not divide."""
    low = distmm.ALGORITHMS[name].model.min_width(P, c)
    return low if kind == "min" else 2 * low + 3


def build(name: str, S, c: int, r: int | None, root: int | None = None, **kw):
    """Distribute S with family ``name`` (S held by ``root``, or by every rank: root=None)."""
    mine = S if root is None or COMM.rank == root else None
    return distmm.distribute(mine, COMM, algorithm=name, c=c, r=r, root=root, **kw)


def runs(name: str) -> list[tuple[str, str | None]]:
    """Every (op, strategy) of the family, in the CLI's spelling (strategy None: not fused)."""
    return ([(op, None) for op in OPS]
            + [(op, s) for op in FUSED for s in distmm.ALGORITHMS[name].strategies])


def gathered(obj, op: str, A_loc, B_loc, strategy: str | None = None):
    """Run ``op`` on the blocks and collect the result on rank 0 (None elsewhere)."""
    out = bench.run_op(obj, op, A_loc, B_loc, strategy)
    if op == "sddmm":
        return obj.gather_values(out)
    return obj.gather("a" if op in ("spmm-a", "fusedmm-a") else "b", out)


def scattered(obj, A: np.ndarray, B: np.ndarray):
    """(A's block, B's block) of this rank, every rank holding A and B."""
    return obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)
