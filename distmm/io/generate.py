"""Distributed random sparse matrices whose global content does not depend on the rank count.

Both generators cut the work into fixed chunks (of rows for Erdos-Renyi, of edges for R-MAT),
draw chunk t from its own random stream ``np.random.default_rng([seed, ..., t])`` and give
chunk t to rank t mod p. A chunk's content depends only on the parameters, the seed and t,
so the union of all shares -- the global matrix -- is the same for every p, and each rank
generates only its own chunks. The chunk size is part of the definition: changing it changes
the matrix.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.core.hashing import hash_normal
from distmm.errors import agree, require

__all__ = ["erdos_renyi", "erdos_renyi_chunk", "planted_low_rank", "planted_low_rank_chunk",
           "planted_factors", "rmat", "rmat_chunk"]

# Stream tag that keeps R-MAT streams apart from Erdos-Renyi streams with the same seed.
_RMAT_STREAM = 0x524D4154
# Stream and hash tags of the planted low-rank generator.
_PLANTED_STREAM = 0x504C4E54
_PLANTED_A, _PLANTED_B = 11, 12
PATTERNS = ("erdos-renyi", "power-law")

Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]


def _check_seed(seed: int) -> int:
    require(
        isinstance(seed, (int, np.integer)) and int(seed) >= 0,
        f"seed must be a non-negative integer, got {seed!r}",
    )
    return int(seed)


def _check_same(comm: MPI.Comm, name: str, params: tuple) -> None:
    """Raise InputError on every rank unless every rank passed the same ``params``. Collective."""
    reference = comm.bcast(params, root=0)
    agree(
        comm,
        None
        if reference == params
        else f"{name}: ranks disagree on the parameters: {params!r} here, {reference!r} on rank 0",
    )


def _concat(chunks: list[Chunk]) -> Chunk:
    if not chunks:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    return tuple(np.concatenate(parts) for parts in zip(*chunks, strict=True))  # type: ignore[return-value]


def erdos_renyi_chunk(
    m: int, n: int, nnz_per_row: int, seed: int, chunk: int, chunk_rows: int = 4096
) -> Chunk:
    """The entries of row chunk ``chunk`` of :func:`erdos_renyi`'s matrix as (rows, cols, vals).

    Not collective. Chunk t covers rows [t*chunk_rows, min(m, (t+1)*chunk_rows)); its stream is
    ``default_rng([seed, t])``, from which all the chunk's column indices are drawn first (row
    by row, ``nnz_per_row`` each, uniform in [0, n)) and then all its values (uniform in
    [0, 1)). Entries come row by row.
    """
    lo = chunk * chunk_rows
    hi = min(m, lo + chunk_rows)
    nrows = max(hi - lo, 0)
    rng = np.random.default_rng([seed, chunk])
    cols = rng.integers(0, n, size=nrows * nnz_per_row, dtype=np.int64)
    vals = rng.random(nrows * nnz_per_row)
    rows = np.repeat(np.arange(lo, lo + nrows, dtype=np.int64), nnz_per_row)
    return rows, cols, vals


def erdos_renyi(
    m: int,
    n: int,
    nnz_per_row: int,
    seed: int,
    comm: MPI.Comm,
    chunk_rows: int = 4096,
) -> CooShare:
    """This rank's share of an m x n Erdos-Renyi-style random sparse matrix.

    Collective over ``comm`` (only to check that every rank passed the same parameters). Every
    row gets ``nnz_per_row`` column indices drawn independently and uniformly from [0, n), so
    a row can draw a column twice: duplicates are kept in the shares and summed when the matrix
    is assembled (a row then has fewer than ``nnz_per_row`` distinct nonzeros). Values are
    uniform in [0, 1). Rows are generated in chunks of ``chunk_rows`` (see
    :func:`erdos_renyi_chunk`) and chunk t belongs to rank t mod p, so the global matrix is the
    same for every number of ranks (given the same ``chunk_rows``).
    """
    seed = _check_seed(seed)
    require(m >= 0 and n >= 0, f"erdos_renyi: shape must be non-negative, got {m} x {n}")
    require(nnz_per_row >= 0, f"erdos_renyi: nnz_per_row must be >= 0, got {nnz_per_row}")
    require(chunk_rows >= 1, f"erdos_renyi: chunk_rows must be >= 1, got {chunk_rows}")
    require(
        n > 0 or m == 0 or nnz_per_row == 0,
        f"erdos_renyi: cannot place {nnz_per_row} entries per row in a matrix with 0 columns",
    )
    m, n, nnz_per_row, chunk_rows = int(m), int(n), int(nnz_per_row), int(chunk_rows)
    _check_same(comm, "erdos_renyi", (m, n, nnz_per_row, seed, chunk_rows))
    p, rank = comm.Get_size(), comm.Get_rank()
    nchunks = -(-m // chunk_rows)
    parts = [
        erdos_renyi_chunk(m, n, nnz_per_row, seed, t, chunk_rows) for t in range(rank, nchunks, p)
    ]
    rows, cols, vals = _concat(parts)
    return CooShare(shape=(m, n), rows=rows, cols=cols, vals=vals)


def rmat_chunk(
    scale: int,
    edge_factor: int,
    seed: int,
    chunk: int,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    chunk_edges: int = 1 << 16,
) -> Chunk:
    """The entries of edge chunk ``chunk`` of :func:`rmat`'s matrix as (rows, cols, vals).

    Not collective. Chunk t covers edges [t*chunk_edges, min(E, (t+1)*chunk_edges)) of the
    E = edge_factor * 2**scale edges; its stream is ``default_rng([seed, tag, t])``. Each
    edge descends ``scale`` levels of the recursive quadrant split: per level one uniform draw u
    picks the top-left quadrant (u < a), top-right (u < a+b), bottom-left (u < a+b+c) or
    bottom-right, which sets the next bit of the row and column index (most significant
    first). All levels' draws come first (level by level, all edges of the chunk each), then
    one value per edge, uniform in [0, 1).
    """
    total = edge_factor * (1 << scale)
    lo = chunk * chunk_edges
    count = max(min(total, lo + chunk_edges) - lo, 0)
    rng = np.random.default_rng([seed, _RMAT_STREAM, chunk])
    rows = np.zeros(count, dtype=np.int64)
    cols = np.zeros(count, dtype=np.int64)
    ab, abc = a + b, a + b + c
    for _level in range(scale):
        u = rng.random(count)
        row_bit = u >= ab
        col_bit = ((u >= a) & (u < ab)) | (u >= abc)
        rows = (rows << 1) | row_bit
        cols = (cols << 1) | col_bit
    vals = rng.random(count)
    return rows, cols, vals


def rmat(
    scale: int,
    edge_factor: int,
    seed: int,
    comm: MPI.Comm,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    chunk_edges: int = 1 << 16,
) -> CooShare:
    """This rank's share of a 2**scale x 2**scale R-MAT random sparse matrix.

    Collective over ``comm`` (only to check that every rank passed the same parameters). The
    matrix has edge_factor * 2**scale entries, each placed by the recursive R-MAT quadrant
    choice with probabilities a, b, c and d = 1 - a - b - c (see :func:`rmat_chunk`); no noise
    is added and no vertices are permuted. Repeated coordinates are kept as duplicates (summed
    when the matrix is assembled), and values are uniform in [0, 1). Edges are generated in
    chunks of ``chunk_edges`` and chunk t belongs to rank t mod p, so the global matrix is the
    same for every number of ranks (given the same ``chunk_edges``).
    """
    seed = _check_seed(seed)
    require(0 <= scale <= 40, f"rmat: scale must be in [0, 40], got {scale}")
    require(edge_factor >= 0, f"rmat: edge_factor must be >= 0, got {edge_factor}")
    require(chunk_edges >= 1, f"rmat: chunk_edges must be >= 1, got {chunk_edges}")
    require(
        min(a, b, c) >= 0 and a + b + c <= 1.0 + 1e-12,
        f"rmat: need a, b, c >= 0 and a + b + c <= 1, got a={a}, b={b}, c={c}",
    )
    scale, edge_factor, chunk_edges = int(scale), int(edge_factor), int(chunk_edges)
    a, b, c = float(a), float(b), float(c)
    _check_same(comm, "rmat", (scale, edge_factor, seed, a, b, c, chunk_edges))
    p, rank = comm.Get_size(), comm.Get_rank()
    total = edge_factor * (1 << scale)
    nchunks = -(-total // chunk_edges)
    parts = [
        rmat_chunk(scale, edge_factor, seed, t, a, b, c, chunk_edges)
        for t in range(rank, nchunks, p)
    ]
    rows, cols, vals = _concat(parts)
    n = 1 << scale
    return CooShare(shape=(n, n), rows=rows, cols=cols, vals=vals)


def planted_factors(side: str, ids: np.ndarray, rank: int, seed: int) -> np.ndarray:
    """Rows ``ids`` of the planted factor A* (side "a") or B* ("b"), shape (len(ids), rank).

    Not collective. Entry (i, k) is a standard normal hashed from (seed, side, i, k) (see
    :mod:`distmm.core.hashing`) divided by rank**0.25, so that a_i . b_j has unit variance and any
    rank can compute any row alone.
    """
    tag = _PLANTED_A if side == "a" else _PLANTED_B
    ids = np.asarray(ids, dtype=np.int64)
    return hash_normal(seed, tag, ids[:, None], np.arange(rank)[None, :]) / rank ** 0.25


def planted_low_rank_chunk(m: int, n: int, rank: int, nnz_per_row: int, seed: int, chunk: int,
                           noise: float = 0.1, pattern: str = "erdos-renyi",
                           chunk_rows: int = 4096) -> Chunk:
    """The entries of row chunk ``chunk`` of :func:`planted_low_rank`'s matrix.

    Not collective. Chunk t covers rows [t*chunk_rows, min(m, (t+1)*chunk_rows)); its stream
    is ``default_rng([seed, tag, t])``, from which the column draws come first (row by row,
    ``nnz_per_row`` each) and then one noise value per kept entry. "erdos-renyi" draws columns
    uniformly; "power-law" draws column ``floor(n * u**3)`` for uniform u, so low column ids are
    popular (item popularity with a heavy head). A column drawn twice in a row is kept once,
    so no coordinate repeats. Values are ``A*[i] . B*[j] + noise * N(0, 1)``
    (:func:`planted_factors`). Entries come sorted by (row, col).
    """
    lo = chunk * chunk_rows
    hi = min(m, lo + chunk_rows)
    nrows = max(hi - lo, 0)
    rng = np.random.default_rng([seed, _PLANTED_STREAM, chunk])
    u = rng.random(nrows * nnz_per_row)
    cols = np.minimum((n * (u if pattern == "erdos-renyi" else u ** 3)).astype(np.int64), n - 1)
    rows = np.repeat(np.arange(lo, lo + nrows, dtype=np.int64), nnz_per_row)
    keys = np.unique(rows * n + cols)
    rows, cols = keys // n, keys % n
    vals = np.einsum("ij,ij->i", planted_factors("a", rows, rank, seed),
                     planted_factors("b", cols, rank, seed))
    vals += noise * rng.standard_normal(keys.size)
    return rows, cols, vals


def planted_low_rank(m: int, n: int, rank: int, nnz_per_row: int, seed: int, comm: MPI.Comm,
                     noise: float = 0.1, pattern: str = "erdos-renyi",
                     chunk_rows: int = 4096) -> CooShare:
    """This rank's share of a planted low-rank ratings matrix R = A* B*^T + noise, observed
    on a random pattern (a synthetic ALS problem with a known answer).

    Collective over ``comm`` (only to check that every rank passed the same parameters). A* is
    m x rank and B* n x rank (:func:`planted_factors`); each row observes up to
    ``nnz_per_row`` distinct columns drawn by ``pattern`` ("erdos-renyi" or "power-law", see
    :func:`planted_low_rank_chunk`), with Gaussian noise of standard deviation ``noise``. Rows
    come in chunks of ``chunk_rows`` and chunk t belongs to rank t mod p, so the global matrix
    does not depend on p.
    """
    seed = _check_seed(seed)
    require(m >= 0 and n >= 1, f"planted_low_rank: need m >= 0 and n >= 1, got {m} x {n}")
    require(rank >= 1, f"planted_low_rank: rank must be >= 1, got {rank}")
    require(nnz_per_row >= 0, f"planted_low_rank: nnz_per_row must be >= 0, got {nnz_per_row}")
    require(noise >= 0 and np.isfinite(noise),
            f"planted_low_rank: noise must be finite and >= 0, got {noise}")
    require(pattern in PATTERNS,
            f"planted_low_rank: pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    require(chunk_rows >= 1, f"planted_low_rank: chunk_rows must be >= 1, got {chunk_rows}")
    m, n, rank, nnz_per_row = int(m), int(n), int(rank), int(nnz_per_row)
    params = (m, n, rank, nnz_per_row, seed, float(noise), pattern, int(chunk_rows))
    _check_same(comm, "planted_low_rank", params)
    p, me = comm.Get_size(), comm.Get_rank()
    nchunks = -(-m // chunk_rows)
    parts = [planted_low_rank_chunk(m, n, rank, nnz_per_row, seed, t, noise, pattern,
                                    chunk_rows) for t in range(me, nchunks, p)]
    rows, cols, vals = _concat(parts)
    return CooShare(shape=(m, n), rows=rows, cols=cols, vals=vals)
