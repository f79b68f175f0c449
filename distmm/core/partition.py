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
row's own cost so that empty rows spread too), within ``imbalance`` (default 3%). S must be
square (a graph: rows and columns share one permutation). A :class:`Partition` (the part of
each row, p, n, nnz, how it was made and how long it took) is saved to HDF5 and loaded again
(:func:`save_partition`, :func:`load_partition`), so a training job partitions once; a file
whose n, p or nnz differ from the run's, or that is corrupt, is refused.
"""

from __future__ import annotations

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
_FORMAT = "distmm-partition-1"


@dataclass(frozen=True)
class Partition:
    """The part (0 .. p - 1) of each of S's n rows, and how it was made. Not collective.

    ``nnz`` is S's entry count (duplicates not summed) when it was made (a cheap check that
    a file belongs to the matrix of a run); ``method`` the partitioner, ``seconds`` its time."""

    parts: np.ndarray
    p: int
    n: int
    nnz: int
    method: str
    imbalance: float
    seconds: float

    is_partition = True  # recognised by distmm.core.permute.permute_mode

    def problem(self, n: int, p: int, nnz: int | None = None) -> str | None:
        """Why this partition does not fit S (n x n, ``nnz`` nonzeros) on p ranks, or None."""
        if self.n != n:
            return f"the partition is of a matrix with {self.n} rows, S has {n}"
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
    for an S of ``shape`` on p ranks: :data:`DEFAULT` when S is square, p > 1 and its
    package is installed, else None (the family then takes the natural-order blocks of
    ``"auto"``). The same on every rank of one installation. Not collective.

    Why a partitioner at every p > 1: on the development graphs its order cuts the busiest
    rank's exchanged rows several-fold at every p measured (docs/algorithms/15d-sparse-aware.md),
    for seconds once per placement, which a saved partition (``--partition``) also saves."""
    if p <= 1 or shape[0] != shape[1]:
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
    """Partition the rows of the square matrix S into p parts (see the module docstring).

    Not collective (the partitioners are serial); the result depends only on the arguments.
    """
    check_method(method)
    require(S.shape[0] == S.shape[1],
            f"the partitioner orders a graph: S must be square, it is {S.shape[0]} x "
            f"{S.shape[1]} (use --permute auto for a rectangular S)")
    require(isinstance(p, (int, np.integer)) and p >= 1, f"p must be >= 1, got {p!r}")
    require(0 < imbalance < 1, f"imbalance must be in (0, 1), got {imbalance}")
    n = S.shape[0]
    entries = int(sp.coo_matrix(S).nnz)  # as a run counts them: duplicates not yet summed
    csr = sp.csr_matrix(S)
    csr.sum_duplicates()
    weights = (np.diff(csr.indptr) + 1).astype(np.int64)
    t0 = time.perf_counter()
    if p == 1 or n == 0:
        parts = np.zeros(n, dtype=np.int64)
    elif method == "kahip":
        parts = _kahip(csr, p, weights, imbalance, seed)
    else:
        parts = _kahypar(csr, p, weights, imbalance, seed)
    seconds = time.perf_counter() - t0
    return Partition(np.asarray(parts, dtype=np.int64), int(p), n, entries, method,
                     float(imbalance), seconds)


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
             seed: int) -> np.ndarray:
    kahypar = _require_module("kahypar")
    n = csr.shape[0]
    # column-net model: net j holds the rows with a nonzero in column j and row j itself,
    # the owner of B's row j, so that its connectivity minus one is exactly the parts that
    # must receive row j (the volume); nets on one row are dropped
    pattern = sp.csr_matrix((np.ones(csr.nnz), csr.indices, csr.indptr), shape=csr.shape)
    csc = sp.csc_matrix(pattern + sp.identity(n, format="csr"))
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


def volume(S: sp.spmatrix, parts: np.ndarray) -> int:
    """SpMM's communication volume of a row partition: over every column j, the number of
    parts other than j's own that hold a nonzero of column j (km1 of the column-net model,
    with each B row owned by its own row's part). Not collective."""
    coo = sp.coo_matrix(S)
    key = np.unique(parts[coo.row] * S.shape[1] + coo.col)
    return int(np.count_nonzero(key // S.shape[1] != parts[key % S.shape[1]]))


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
            method = str(f.attrs["method"])
            imbalance, seconds = float(f.attrs["imbalance"]), float(f.attrs["seconds"])
    except InputError:
        raise
    except Exception as exc:  # missing, unreadable or corrupt: one clear message
        raise InputError(f"{path}: cannot read the partition file ({exc})") from None
    require(parts.shape == (n,) and p >= 1 and (n == 0 or (parts.min() >= 0
                                                          and parts.max() < p)),
            f"{path}: corrupt partition file (parts must be n = {n} numbers in 0 .. {p - 1})")
    return Partition(parts, p, n, nnz, method, imbalance, seconds)


__all__ = ["DEFAULT", "PARTITIONERS", "Partition", "check_method", "default_method",
           "load_partition", "partition",
           "save_partition", "volume"]
