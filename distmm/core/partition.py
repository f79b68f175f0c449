"""Partitioning S's rows into p parts that minimise communication volume, balanced on work.

The sparsity-aware family (:mod:`distmm.algorithms.sparse_aware_15d`) sends, per call, the
distinct B rows each rank's nonzeros touch outside its own block: SpMM's volume under a 1D
row partition, which is exactly the connectivity-minus-one (km1) of the *column-net*
hypergraph of S (vertices: rows, nets: columns; Catalyurek and Aykanat 1999). Two real
partitioners from PyPI, both optional (``pip install distmm[partition]``):

* ``"kahip"`` (default): KaHIP's multilevel graph partitioner (``kahip.kaffpa``) on the
  graph of S + S^T; its edge cut is an upper bound of the volume, and it is fast.
* ``"kahypar"``: KaHyPar's direct k-way hypergraph partitioner on the column-net model,
  minimising km1 (with each column's net holding its own row, the owner of B's row), the
  volume itself.

Both balance the vertex weights, each row's nonzeros plus one (the work of its kernels, and a
row's own cost so that empty rows spread too), within ``imbalance`` (default 3%). A square S
is a graph: rows and columns share one partition (one permutation). A rectangular S (ALS's
ratings, a features or bipartite matrix) gets a row partition and a column partition:

* the rows: ``"kahypar"`` on the column-net hypergraph of S (vertices: rows, nets: columns),
  whose km1 is the volume once every column sits in one of the parts touching it;
  ``"kahip"`` on the bipartite graph of S (rows and columns as vertices, one edge per
  nonzero; Hendrickson and Kolda 2000), the columns weighing nothing so that the rows
  balance on work alone;
* the columns (the owners of B's rows): :func:`assign_columns`, given the row parts, puts
  each column in one of the parts touching it (so that it costs the least volume, the
  parts touching it minus one) and, among those, in the part that sends least so far,
  columns in decreasing fan-out order (a greedy bound on the busiest rank's send, which
  the partitioners' total-volume objective leaves free), at most ``ceil((1 + imbalance)
  n / p)`` columns per part.

A :class:`Partition` (the part of each row and, for a rectangular S, of each column, p, the
shape, nnz, how it was made and how long it took) is saved to HDF5 and loaded again
(:func:`save_partition`, :func:`load_partition`), so a training job partitions once; a file
whose shape, p or nnz differ from the run's, or that is corrupt, is refused.
"""

from __future__ import annotations

import heapq
import math
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from distmm.errors import InputError, require

PARTITIONERS = ("kahip", "kahypar")
DEFAULT = "kahip"  # the faster of the two, for 3-8% more volume (docs/algorithms)
EXTRA = "partition"
IMBALANCE = 0.03
# rows of the busiest part a refinement step tries (refine_max_send); 64 gave the same sends
# on Cora at p = 16, 64 and 256 as trying every row
REFINE_CANDIDATES = 64
_FORMAT = "distmm-partition-1"  # col_parts added as an optional dataset


@dataclass(frozen=True)
class Partition:
    """The part (0 .. p - 1) of each of S's n rows, and how it was made. Not collective.

    ``nnz`` is S's entry count (duplicates not summed) when it was made (a cheap check that
    a file belongs to the matrix of a run); ``method`` the partitioner, ``seconds`` its time.
    ``col_parts``: the part of each column of a rectangular S (None: a square S, whose
    columns follow its rows)."""

    parts: np.ndarray
    p: int
    n: int
    nnz: int
    method: str
    imbalance: float
    seconds: float
    col_parts: np.ndarray | None = None

    is_partition = True  # recognised by distmm.core.permute.permute_mode

    @property
    def shape(self) -> tuple[int, int]:
        """The shape of the S it was made for."""
        return (self.n, self.n if self.col_parts is None else int(self.col_parts.size))

    def problem(self, shape: int | tuple[int, int], p: int, nnz: int | None = None
                ) -> str | None:
        """Why this partition does not fit S (``shape``, or n for n x n; ``nnz`` entries) on
        p ranks, or None."""
        shape = (shape, shape) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if self.shape != shape:
            return (f"the partition is of a matrix of {self.shape[0]} rows x {self.shape[1]} "
                    f"columns, S is {shape[0]} x {shape[1]}")
        if self.p != p:
            return (f"the partition has {self.p} parts but the run has {p} ranks "
                    f"(make one with `distmm partition ... -p {p}`)")
        if nnz is not None and self.nnz != nnz:
            return f"the partition was made for {self.nnz} nonzeros, S has {nnz}"
        return None

    def permutation(self) -> tuple[np.ndarray, np.ndarray]:
        """(perm, offsets): rows ordered by part, natural order inside a part (``perm[new] =
        old``), and the p + 1 offsets of the parts in that order."""
        perm = np.lexsort((np.arange(self.n), self.parts)).astype(np.int64)
        offsets = np.zeros(self.p + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.parts, minlength=self.p), out=offsets[1:])
        return perm, offsets

    def column_permutation(self) -> tuple[np.ndarray, np.ndarray]:
        """(perm, offsets) of S's columns, as :meth:`permutation` for its rows (the same
        arrays for a square S)."""
        if self.col_parts is None:
            return self.permutation()
        perm = np.lexsort((np.arange(self.col_parts.size), self.col_parts)).astype(np.int64)
        offsets = np.zeros(self.p + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.col_parts, minlength=self.p), out=offsets[1:])
        return perm, offsets


def _require_module(method: str):
    """The partitioner's module, or an InputError naming the extra that installs it."""
    try:
        if method == "kahip":
            import kahip
            return kahip
        import kahypar
        return kahypar
    except ImportError:
        raise InputError(f"partitioning with {method} needs the Python package {method!r}: "
                         f"pip install 'distmm[{EXTRA}]' (or pip install {method})") from None


def default_method(shape: tuple[int, int], p: int) -> str | None:
    """The partitioner the sparsity-aware family's default order (``permute="auto"``) uses
    for an S of ``shape`` on p ranks: :data:`DEFAULT` when p > 1, S has a row and a
    column, and its package is installed, else None (the family then takes the
    natural-order blocks of ``"auto"``). The same on every rank of one installation. Not
    collective.

    Why a partitioner at every p > 1: on the development matrices, square and rectangular,
    its order cuts the busiest rank's exchanged rows at every p measured
    (docs/algorithms/15d-sparse-aware.md), for seconds once per placement, which a saved
    partition (``--partition``) also saves."""
    if p <= 1 or min(shape) == 0:
        return None
    try:
        _require_module(DEFAULT)
    except InputError:
        return None
    return DEFAULT


def check_method(method: str) -> None:
    """InputError unless ``method`` is a partitioner whose package is installed (call it on
    every rank: the answer is the same everywhere on one installation)."""
    require(method in PARTITIONERS,
            f"unknown partitioner {method!r}; choose one of {', '.join(PARTITIONERS)}")
    _require_module(method)


def partition(S: sp.spmatrix, p: int, method: str = "kahip", imbalance: float = IMBALANCE,
              seed: int = 0) -> Partition:
    """Partition the rows of S (and, for a rectangular S, its columns) into p parts (see the
    module docstring).

    Not collective (the partitioners are serial); the result depends only on the arguments.
    """
    check_method(method)
    require(isinstance(p, (int, np.integer)) and p >= 1, f"p must be >= 1, got {p!r}")
    require(0 < imbalance < 1, f"imbalance must be in (0, 1), got {imbalance}")
    m, n = S.shape
    square = m == n
    entries = int(sp.coo_matrix(S).nnz)  # as a run counts them: duplicates not yet summed
    csr = sp.csr_matrix(S)
    csr.sum_duplicates()
    weights = (np.diff(csr.indptr) + 1).astype(np.int64)
    t0 = time.perf_counter()
    if p == 1 or m == 0 or csr.nnz == 0:
        parts = np.arange(m, dtype=np.int64) * p // max(m, 1)
    elif method == "kahip":
        parts = (_kahip if square else _kahip_bipartite)(csr, p, weights, imbalance, seed)
    else:
        parts = _kahypar(csr, p, weights, imbalance, seed, own_nets=square)
    parts = np.asarray(parts, dtype=np.int64)
    if square and p > 1 and csr.nnz:
        parts = refine_max_send(csr, parts, p, weights, imbalance)
    col_parts = None if square else assign_columns(csr, parts, p, imbalance)
    seconds = time.perf_counter() - t0
    return Partition(parts, int(p), m, entries, method, float(imbalance), seconds, col_parts)


def assign_columns(S: sp.spmatrix, parts: np.ndarray, p: int, imbalance: float = IMBALANCE
                   ) -> np.ndarray:
    """The part of each column of S given the part of each row (``parts``): the owner of B's
    row j, which sends it to every other part holding a nonzero of column j. Not collective.

    Columns in decreasing order of the parts touching them (ties by id); each goes to the
    touching part that sends least so far (then the one with fewest columns, then the
    lowest), at the volume's minimum (parts touching it minus one); only when every touching
    part is full (``ceil((1 + imbalance) n / p)`` columns) to the least-sending part with
    room, which sends it to all of them. Columns one part touches go to it while it has
    room (in id order), the others after them as above. Empty columns fill the parts with
    fewest columns.
    The greedy largest-first rule bounds the busiest rank's send (LPT scheduling)."""
    coo = sp.coo_matrix(S)
    n = S.shape[1]
    cap = max(1, math.ceil((1 + imbalance) * n / p))
    key = np.unique(coo.col.astype(np.int64) * p + parts[coo.row])
    fan = np.bincount(key // p, minlength=n)
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(fan, out=start[1:])
    cand, start_l, fan_l = (key % p).tolist(), start.tolist(), fan.tolist()
    load, count = [0] * p, [0] * p
    out = np.empty(n, dtype=np.int64)
    heap = [(0, 0, k) for k in range(p)]  # (load, count, part), refreshed lazily

    def least(load: list[int], count: list[int]) -> int:
        """The part with room that sends least (then fewest columns, then lowest id)."""
        while True:
            key_ = heapq.heappop(heap)
            k = key_[2]
            if count[k] >= cap:
                continue  # full for good
            if key_ != (load[k], count[k], k):  # stale: loads and counts only grow
                heapq.heappush(heap, (load[k], count[k], k))
                continue
            # the caller adds to it: it comes back with its new key
            heapq.heappush(heap, (load[k], count[k] + 1, k))
            return k
    order = np.argsort(-fan, kind="stable")
    touched = int(np.count_nonzero(fan))
    shared = int(np.count_nonzero(fan > 1))
    for j in order[:shared].tolist():
        f, best = fan_l[j], -1
        for k in cand[start_l[j]:start_l[j + 1]]:
            if count[k] < cap and (best < 0 or (load[k], count[k]) < (load[best], count[best])):
                best = k
        if best < 0:  # every touching part is full
            best = least(load, count)
            load[best] += f
        else:
            load[best] += f - 1
        count[best] += 1
        out[j] = best
    # columns one part touches (most of a skewed matrix's): each to that part while it has
    # room, in id order (no volume, no send), done at once; the rest as above
    single = order[shared:touched]
    if single.size:
        home = key[start[single]] % p
        by_part = np.lexsort((single, home))
        single, home = single[by_part], home[by_part]
        room = np.maximum(0, cap - np.asarray(count))
        fits = _rank_within(home) < room[home]
        out[single[fits]] = home[fits]
        count = (np.asarray(count) + np.bincount(home[fits], minlength=p)).tolist()
        for j in np.sort(single[~fits]).tolist():
            best = least(load, count)
            load[best] += 1
            count[best] += 1
            out[j] = best
    empty = order[touched:]
    if empty.size:
        # fill the parts with fewest columns first, up to a level they all reach
        fill = np.repeat(np.arange(p), np.maximum(0, cap - np.asarray(count)))
        fill = fill[np.argsort(np.asarray(count)[fill] + _rank_within(fill), kind="stable")]
        out[np.sort(empty)] = fill[:empty.size]
    return out


def send_rows(S: sp.spmatrix, parts: np.ndarray, p: int,
              col_parts: np.ndarray | None = None) -> np.ndarray:
    """Rows each part sends in one exchange of B's rows (c = 1): over the columns it owns
    (``col_parts``, by default a square S's row parts), the other parts holding one of the
    column's nonzeros. Not collective."""
    coo = sp.coo_matrix(S)
    owner = parts if col_parts is None else col_parts
    key = np.unique(coo.col.astype(np.int64) * p + parts[coo.row])
    col, holder = key // p, key % p
    return np.bincount(owner[col[holder != owner[col]]], minlength=p)


def refine_max_send(S: sp.spmatrix, parts: np.ndarray, p: int, weights: np.ndarray,
                    imbalance: float = IMBALANCE, max_moves: int | None = None
                    ) -> np.ndarray:
    """Lower the busiest part's send of a square S's row partition (rows and columns share
    parts) by moving single rows out of it. Not collective; deterministic.

    The partitioners minimise the total volume, and leave the maximum a part sends free: on a
    power-law graph the busiest part sends about twice the mean. Each step takes the part P that
    sends most (:func:`send_rows`, c = 1), and among its :data:`REFINE_CANDIDATES` rows that
    most other parts need, the move of a row to a part Q needing it after which every part whose
    send changes sends less than P did (the least such maximum, then the least total), keeping
    every part's weight within ``(1 + imbalance)`` of the mean (or the partition's own maximum,
    if higher); it stops when no move qualifies or after ``max_moves`` (default 16p + 64) moves.
    It only finds a local optimum: on Cora it lowers the busiest part's send by 6-10% at p = 16
    and 64 (docs/algorithms/15d-sparse-aware.md); a part that owns a hub row sends it to every
    part needing it whatever the partition. A move of row v changes only the sends of the owners
    of v's columns (whose set of holders may change) and of v itself, which are recomputed
    exactly."""
    csr = sp.csr_matrix(S)
    csc = sp.csc_matrix(S)
    n = csr.shape[0]
    parts = np.asarray(parts, dtype=np.int64).copy()
    # holders[j]: part -> rows of that part with a nonzero in column j
    holders: list[dict[int, int]] = []
    for j in range(n):
        d: dict[int, int] = {}
        for i in parts[csc.indices[csc.indptr[j]:csc.indptr[j + 1]]].tolist():
            d[i] = d.get(i, 0) + 1
        holders.append(d)
    part_l = parts.tolist()

    def fan(j: int) -> int:
        h = holders[j]
        return len(h) - (part_l[j] in h)

    send = [0] * p
    for j in range(n):
        send[part_l[j]] += fan(j)
    weight = np.bincount(parts, weights=weights, minlength=p).tolist()
    cap = max(max(weight), (1 + imbalance) * float(np.sum(weights)) / p)
    wl = weights.tolist()
    rows_of = [csr.indices[csr.indptr[v]:csr.indptr[v + 1]].tolist() for v in range(n)]
    members: list[set[int]] = [set() for _ in range(p)]
    for v, k in enumerate(part_l):
        members[k].add(v)

    def move(v: int, dest: int) -> dict[int, int]:
        """Move row v to ``dest``; return the change of each part's send."""
        delta: dict[int, int] = {}
        cols = set(rows_of[v]) | {v}
        for j in cols:
            delta[part_l[j]] = delta.get(part_l[j], 0) - fan(j)
        src = part_l[v]
        for j in rows_of[v]:
            h = holders[j]
            h[src] -= 1
            if not h[src]:
                del h[src]
            h[dest] = h.get(dest, 0) + 1
        part_l[v] = dest
        for j in cols:
            delta[part_l[j]] = delta.get(part_l[j], 0) + fan(j)
        return delta

    limit = 16 * p + 64 if max_moves is None else max_moves
    for _ in range(limit):
        top = max(range(p), key=lambda k: (send[k], -k))
        worst, best = send[top], None
        # the rows other parts need most: a move lowers the part's send by at most the
        # row's fan, and evaluating every row of the part made a step cost O(nnz/p) Python
        # operations (minutes at 10^5 rows)
        for v in sorted(heapq.nsmallest(REFINE_CANDIDATES, members[top],
                                        key=lambda u: (-fan(u), u))):
            if fan(v) == 0:
                continue  # a row no other part needs: moving it only adds volume
            needers = sorted(k for k in holders[v] if k != top)
            for dest in needers:
                if weight[dest] + wl[v] > cap:
                    continue
                delta = move(v, dest)
                move(v, top)
                after = {k: send[k] + d for k, d in delta.items() if d}
                if after.get(top, worst) >= worst or any(x >= worst for x in after.values()):
                    continue
                score = (max(after.values()), sum(delta.values()), v, dest)
                if best is None or score < best:
                    best = score
        if best is None:
            break
        _, _, v, dest = best
        for k, d in move(v, dest).items():
            send[k] += d
        weight[top] -= wl[v]
        weight[dest] += wl[v]
        members[top].discard(v)
        members[dest].add(v)
    return np.asarray(part_l, dtype=np.int64)


def _rank_within(groups: np.ndarray) -> np.ndarray:
    """For a sorted array of group ids, each element's position inside its group."""
    if groups.size == 0:
        return groups
    first = np.r_[0, np.flatnonzero(np.diff(groups)) + 1]
    return np.arange(groups.size) - np.repeat(first, np.diff(np.r_[first, groups.size]))


def _kahip(csr: sp.csr_matrix, p: int, weights: np.ndarray, imbalance: float,
           seed: int) -> np.ndarray:
    kahip = _require_module("kahip")
    pattern = sp.csr_matrix((np.ones(csr.nnz), csr.indices, csr.indptr), shape=csr.shape)
    graph = (pattern + pattern.T).tocsr()
    graph.setdiag(0)
    graph.eliminate_zeros()
    graph.sort_indices()
    # edge weight: how many of S's two directions the edge stands for (1 or 2)
    _, parts = kahip.kaffpa(weights.tolist(), graph.indptr.tolist(),
                            graph.data.astype(np.int64).tolist(), graph.indices.tolist(),
                            int(p), float(imbalance), True, int(seed), 1)  # 1: ECO
    return np.asarray(parts, dtype=np.int64)


def _kahip_bipartite(csr: sp.csr_matrix, p: int, weights: np.ndarray, imbalance: float,
                     seed: int) -> np.ndarray:
    """The row parts of a KaHIP partition of S's bipartite graph (vertices: the m rows, then
    the n columns weighing nothing; an edge per nonzero): its cut bounds the volume. KaHIP's
    FAST preset: ECO took 6-7x as long on MovieLens's dense bipartite graph."""
    kahip = _require_module("kahip")
    m, n = csr.shape
    pattern = sp.csr_matrix((np.ones(csr.nnz), csr.indices, csr.indptr), shape=csr.shape)
    graph = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    graph.sort_indices()
    vw = np.r_[weights, np.zeros(n, dtype=np.int64)]
    _, parts = kahip.kaffpa(vw.tolist(), graph.indptr.tolist(),
                            np.ones(graph.nnz, dtype=np.int64).tolist(), graph.indices.tolist(),
                            int(p), float(imbalance), True, int(seed), 0)  # 0: FAST
    return np.asarray(parts[:m], dtype=np.int64)


# KaHyPar's direct k-way km1 preset, as its own configuration keys.
_KAHYPAR_CONFIG = {
    "mode": "direct", "objective": "km1", "seed": "-1", "cmaxnet": "1000", "vcycles": "0",
    "p-use-sparsifier": "false", "p-detect-communities": "true",
    "p-detect-communities-in-ip": "true", "p-reuse-communities": "false",
    "p-max-louvain-pass-iterations": "100", "p-min-eps-improvement": "0.0001",
    "p-louvain-edge-weight": "hybrid", "p-large-he-threshold": "1000",
    "p-smallest-maxnet-threshold": "50000", "p-maxnet-removal-factor": "0.01",
    "c-type": "ml_style", "c-s": "1", "c-t": "160", "c-rating-score": "heavy_edge",
    "c-rating-use-communities": "true", "c-rating-heavy_node_penalty": "no_penalty",
    "c-rating-acceptance-criterion": "best_prefer_unmatched",
    "c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed",
    "i-mode": "recursive", "i-technique": "multi", "i-c-type": "ml_style", "i-c-s": "1",
    "i-c-t": "150", "i-c-rating-score": "heavy_edge", "i-c-rating-use-communities": "true",
    "i-c-rating-heavy_node_penalty": "no_penalty",
    "i-c-rating-acceptance-criterion": "best_prefer_unmatched",
    "i-c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed", "i-algo": "pool",
    "i-runs": "20", "i-bp-algorithm": "worst_fit", "i-bp-heuristic-prepacking": "false",
    "i-bp-early-restart": "true", "i-bp-late-restart": "true", "i-r-type": "twoway_fm",
    "i-r-runs": "-1", "i-r-fm-stop": "simple", "i-r-fm-stop-i": "50",
    "r-type": "kway_fm_km1", "r-runs": "-1", "r-fm-stop": "adaptive_opt",
    "r-fm-stop-alpha": "1", "r-fm-stop-i": "350",
}


def _kahypar(csr: sp.csr_matrix, p: int, weights: np.ndarray, imbalance: float,
             seed: int, own_nets: bool = True) -> np.ndarray:
    kahypar = _require_module("kahypar")
    n = csr.shape[0]
    # column-net model: net j holds the rows with a nonzero in column j and (``own_nets``,
    # a square S) row j itself, the owner of B's row j, so that its connectivity minus one
    # is exactly the parts that must receive row j (the volume); for a rectangular S the
    # column's owner is chosen afterwards among the parts touching it (assign_columns), so
    # km1 is again the volume; nets on one row are dropped
    pattern = sp.csr_matrix((np.ones(csr.nnz), csr.indices, csr.indptr), shape=csr.shape)
    csc = sp.csc_matrix(pattern + sp.identity(n, format="csr") if own_nets else pattern)
    csc.sort_indices()
    sizes = np.diff(csc.indptr)
    keep = np.flatnonzero(sizes >= 2)  # a net on one row never crosses parts
    index = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(sizes[keep], out=index[1:])
    pins = np.concatenate([csc.indices[csc.indptr[j]:csc.indptr[j + 1]] for j in keep]) \
        if keep.size else np.zeros(0, np.int64)
    if keep.size == 0:
        return np.arange(n, dtype=np.int64) * p // max(n, 1)
    graph = kahypar.Hypergraph(n, int(keep.size), index.tolist(), pins.tolist(), int(p),
                               [1] * int(keep.size), weights.tolist())
    context = kahypar.Context()
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write("\n".join(f"{k}={v}" for k, v in _KAHYPAR_CONFIG.items()) + "\n")
    try:
        context.loadINIconfiguration(f.name)
    finally:
        os.unlink(f.name)
    context.setK(int(p))
    context.setEpsilon(float(imbalance))
    context.setSeed(int(seed))
    context.suppressOutput(True)
    kahypar.partition(graph, context)
    return np.array([graph.blockID(i) for i in range(n)], dtype=np.int64)


def volume(S: sp.spmatrix, parts: np.ndarray, col_parts: np.ndarray | None = None) -> int:
    """SpMM's communication volume of a row partition: over every column j, the number of
    parts other than j's owner that hold a nonzero of column j (km1 of the column-net model,
    with B's row j owned by ``col_parts[j]``, by default by row j's part). Not collective."""
    coo = sp.coo_matrix(S)
    owner = parts if col_parts is None else col_parts
    key = np.unique(parts[coo.row] * S.shape[1] + coo.col)
    return int(np.count_nonzero(key // S.shape[1] != owner[key % S.shape[1]]))


def save_partition(part: Partition, path: str | os.PathLike) -> None:
    """Write ``part`` to the HDF5 file ``path`` (the command line writes it through
    :func:`distmm.cli.files.write_output`, atomically). Not collective."""
    import h5py

    with h5py.File(os.fspath(path), "w") as f:
        f.attrs["format"] = _FORMAT
        for key in ("p", "n", "nnz"):
            f.attrs[key] = int(getattr(part, key))
        f.attrs["method"] = part.method
        f.attrs["imbalance"] = float(part.imbalance)
        f.attrs["seconds"] = float(part.seconds)
        f.create_dataset("parts", data=part.parts.astype(np.int32))
        if part.col_parts is not None:
            f.create_dataset("col_parts", data=part.col_parts.astype(np.int32))


def load_partition(path: str | os.PathLike) -> Partition:
    """Read a file written by :func:`save_partition`; InputError naming the file if it is
    missing, not such a file or inconsistent (a part outside 0 .. p - 1, a length other
    than n). Not collective."""
    try:
        import h5py

        with h5py.File(os.fspath(path), "r") as f:
            require(f.attrs.get("format") == _FORMAT, f"{path}: not a distmm partition file")
            p, n, nnz = (int(f.attrs[k]) for k in ("p", "n", "nnz"))
            parts = np.asarray(f["parts"][...], dtype=np.int64)
            col_parts = (np.asarray(f["col_parts"][...], dtype=np.int64)
                         if "col_parts" in f else None)
            method = str(f.attrs["method"])
            imbalance, seconds = float(f.attrs["imbalance"]), float(f.attrs["seconds"])
    except InputError:
        raise
    except Exception as exc:  # missing, unreadable or corrupt: one clear message
        raise InputError(f"{path}: cannot read the partition file ({exc})") from None
    require(parts.shape == (n,) and p >= 1 and (n == 0 or (parts.min() >= 0
                                                          and parts.max() < p)),
            f"{path}: corrupt partition file (parts must be n = {n} numbers in 0 .. {p - 1})")
    require(col_parts is None or (col_parts.ndim == 1 and (col_parts.size == 0 or (
        col_parts.min() >= 0 and col_parts.max() < p))),
            f"{path}: corrupt partition file (column parts must be numbers in 0 .. {p - 1})")
    return Partition(parts, p, n, nnz, method, imbalance, seconds, col_parts)


# Rank 0's partitioning step at distribute (order_by_partition in
# distmm.algorithms.sparse_aware_15d): bytes it allocates beyond the gathered pattern, per
# nonzero of S, per vertex of the partitioned graph (n for a square S, m + n for a rectangular
# one, whose bipartite graph KaHIP partitions), per nonzero and part, and fixed. What they pay
# for: the pattern's copies (the concatenated coordinates, S's COO and CSR, the graph S + S^T
# and its casts), the graph handed to KaHIP as Python lists and KaHIP's own multilevel copies,
# the refinement's per-row Python lists, dicts and sets (refine_max_send), and the two orders
# the default compares with their exchange models; the per-part term grows with p (1.4-11
# bytes per nonzero and part measured, MovieLens the most). Upper bounds of the resident set
# measured by experiments/partition_memory.py at p = 2, 8 and 64 (docs/memory.md: the table).
PARTITION_BYTES_PER_NNZ = 420
PARTITION_BYTES_PER_VERTEX = 640
PARTITION_BYTES_PER_NNZ_PART = 12
PARTITION_BYTES_FIXED = 2 << 20


def partition_scratch_bytes(m: int, n: int, nnz: int, p: int) -> int:
    """Bytes rank 0 allocates while it partitions an m x n S of ``nnz`` entries into p parts
    at distribute, beyond the pattern gathered to it (see :data:`PARTITION_BYTES_PER_NNZ`).
    Not collective."""
    vertices = n if m == n else m + n
    return int(PARTITION_BYTES_PER_NNZ * nnz + PARTITION_BYTES_PER_VERTEX * vertices
               + PARTITION_BYTES_PER_NNZ_PART * nnz * p + PARTITION_BYTES_FIXED)


def partition_peak_bytes(m: int, n: int, nnz: int, p: int, share: int | None = None) -> int:
    """Rank 0's peak bytes while it partitions S at distribute: its own COO share (``share``
    entries, default ceil(nnz / p), 24 bytes each), the coordinates gathered from the other
    ranks (int64 rows and columns, 16 bytes an entry) and :func:`partition_scratch_bytes`.
    0 when p = 1 (nothing is partitioned). Not collective."""
    if p <= 1 or nnz == 0:
        return 0
    share = -(-int(nnz) // int(p)) if share is None else int(share)
    return int(24 * share + 16 * (nnz - share) + partition_scratch_bytes(m, n, nnz, p))


def partitioner_at_distribute(permute, shape: tuple[int, int], p: int) -> str | None:
    """The partitioner rank 0 runs when the sparsity-aware family places an S of ``shape``
    on p ranks with ``permute`` (distribute's argument): ``"kahip"``/``"kahypar"`` when given
    one, the default's (:func:`default_method`) for ``"auto"``, None for a saved partition
    (``--partition FILE``), another order (``"blocks"``...) or p = 1. Not collective."""
    if p <= 1 or getattr(permute, "is_partition", False):
        return None
    if isinstance(permute, (bool, np.bool_)):
        permute = "auto" if permute else "none"
    if permute == "auto":
        return default_method(tuple(shape), p)
    return permute if permute in PARTITIONERS else None


def partitioner_counts(family, permute, m: int, n: int, nnz: int, p: int
                       ) -> dict[str, int] | None:
    """The ``local`` counts that set rank 0's partitioner in a family's ``memory_bytes``
    (``{"partitioner": bytes}``, 0 where distribute will not partition S with ``permute``),
    for a family that orders S by a partition (``needs_pattern``); None for the others.
    Not collective."""
    if not getattr(family, "needs_pattern", False):
        return None
    method = partitioner_at_distribute(permute, (m, n), p)
    return {"partitioner": partition_peak_bytes(m, n, nnz, p) if method else 0}


__all__ = ["DEFAULT", "PARTITIONERS", "Partition", "assign_columns", "check_method",
           "default_method", "partition_peak_bytes", "partition_scratch_bytes",
           "partitioner_at_distribute", "partitioner_counts", "refine_max_send", "send_rows",
           "load_partition", "partition",
           "save_partition", "volume"]

