"""Serial oracles shared by the tests of distmm.ops (edge values, dense blocks).

Every rank builds the same global problem; edge values are a fixed function of a nonzero's
original (row, column), so the distributed result on each rank can be checked against numpy
on the global matrix at that rank's own coordinates. :func:`expected_sizes` recomputes, from
the global layout and every rank's nonzeros, the plan sizes that the word formulas take, by
plain loops that follow the documented rules (not the library's vectorised plan).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import distmm
from distmm.ops import segment_reduce
from distmm.ops.edges import EdgeSizes
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD


def edge_problem(m: int, n: int, seed: int = 0, density: float = 0.3) -> sp.coo_matrix:
    """A random m x n S with empty rows (every third) and an empty column (column 1)."""
    rng = np.random.default_rng(seed)
    S = sp.random(m, n, density=density, format="coo", random_state=rng,
                  data_rvs=lambda k: rng.uniform(0.5, 1.5, k))
    keep = (S.row % 3 != 0) & (S.col != 1)
    return sp.coo_matrix((S.data[keep], (S.row[keep], S.col[keep])), shape=(m, n))


def objects(S, r: int, dtype=np.float64):
    """Every family at every valid c for p ranks and width r: yields distributed objects."""
    for algorithm in distmm.ALGORITHMS:
        for c in costmodel.valid_cs(algorithm, COMM.Get_size(), r):
            yield distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=dtype,
                                    root=None)


def edge_fn(i: np.ndarray, j: np.ndarray, h: int | None) -> np.ndarray:
    """Deterministic edge values of original coordinates: (k,) if h is None, else (k, h)."""
    heads = np.arange(1 if h is None else h)
    v = np.sin(1.3 * i[:, None] + 0.7 * j[:, None] + 2.1 * heads[None, :]) * (1 + heads)
    return v[:, 0] if h is None else v


def local_coords(obj) -> tuple[np.ndarray, np.ndarray]:
    """Original (row, col) of this rank's values, in value order."""
    rows, cols = obj.value_coordinates()
    return obj.row_perm[rows], obj.col_perm[cols]


def global_reduce(S, values: np.ndarray, dim: str, op: str) -> np.ndarray:
    """Per-row (or per-column) sum or max of global edge values (COO order of S)."""
    idx = S.row if dim == "row" else S.col
    size = S.shape[0] if dim == "row" else S.shape[1]
    out = np.full((size,) + values.shape[1:], 0.0 if op == "sum" else -np.inf)
    (np.add if op == "sum" else np.maximum).at(out, idx, values)
    return out


def expected_sizes(obj, dim: str) -> EdgeSizes:
    """This rank's plan sizes, from the layout and every rank's nonzeros (collective).

    Rules (docs/primitives.md): the ranks with identical non-empty dense blocks form a row
    group; the group's rows, in block order, are cut into near-equal contiguous chunks, chunk t
    (positions [t len // g, (t+1) len // g)) combined by the t-th member in rank order.
    """
    side = "a" if dim == "row" else "b"
    rows, cols = obj.value_coordinates()
    mine = set(np.unique(rows if dim == "row" else cols).tolist())
    everyone = COMM.allgather(mine)
    p, me = obj.p, obj.rank
    blocks = [tuple(obj.dense_rows(side, k).tolist()) for k in range(p)]
    groups: dict[tuple, list[int]] = {}
    for k in range(p):
        if blocks[k]:
            groups.setdefault(blocks[k], []).append(k)
    combiner, group_of = {}, {}
    for block, members in groups.items():
        g, length = len(members), len(block)
        for pos, row in enumerate(block):
            t = max(t for t in range(g) if pos >= t * length // g)
            combiner[row] = members[t]
            group_of[row] = members
    own_block = set(blocks[me])
    return EdgeSizes(
        distinct=len(mine),
        to_others=sum(combiner[x] != me for x in mine),
        from_others=sum(combiner[x] == me for k in range(p) if k != me for x in everyone[k]),
        remote=sum(x not in own_block for x in mine),
        serve=sum(combiner[x] == me and k not in group_of[x]
                  for k in range(p) for x in everyone[k]),
        block_rows=len(blocks[me]),
        chunk_rows=sum(combiner[x] == me for x in blocks[me]),
        group_size=len(groups[blocks[me]]) if blocks[me] else 1,
    )


def counted(obj, phase: str) -> dict[str, int]:
    """Words this rank sent and received under ``phase``."""
    return {"words_sent": obj.stats.words(phase),
            "words_received": obj.stats.words(phase, "words_received")}


@pytest.fixture
def compiled_segment_reduce(monkeypatch):
    """The compiled per-segment reductions at every size: these problems are small enough for
    numpy's reduceat otherwise (the GAT tests keep the default, and so that path)."""
    monkeypatch.setattr(segment_reduce, "MIN_PARALLEL_VALUES", 0)
