"""Dense matrices in and out of a distributed matrix's layout: new blocks, typed views,
scatter and gather (the ``dense``, ``wrap``, ``scatter``, ``gather``, ``gather_values`` and
``local_rows`` methods of :class:`~distmm.algorithms.base.DistributedMatrix`).

Each function takes the matrix as its first argument (the methods are these functions) and
uses only its layout: ``dense_rows``/``dense_cols``/``local_width`` (the family's), the
permutations, the dtype and the communicator. Every block they make is typed
(:class:`~distmm.core.dense.DenseBlock`) as the matrix's.
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms.placement import concat_ids
from distmm.core.aligned import aligned_copy, aligned_empty
from distmm.core.comm import mpi_type
from distmm.core.dense import FILL_CHUNK, SIDES, DenseBlock
from distmm.errors import InputError, require


def local_rows(S, side: str) -> np.ndarray:
    """Original row ids of ``side``'s block on this rank ("a": rows of A, "b": rows of B)."""
    perm = S.row_perm if side == "a" else S.col_perm
    return perm[S.dense_rows(side, S.rank)]


def dense(S, side: str, r: int | None = None, fill=0.0) -> DenseBlock:
    """A new width-r dense matrix on ``side``, as this rank's typed block.

    Parameters
    ----------
    side : {"a", "b"}
        "a": m x r, rows indexed like S's rows; "b": n x r, like S's columns.
    r : int, optional
        The dense width (default: the ``r`` given at construction). Every rank must pass
        the same r; it must satisfy :meth:`r_rule`.
    fill : float or callable
        A constant, or ``fill(rows, cols)`` returning the ``(len(rows), len(cols))``
        entries for the original row ids ``rows`` and global column indices ``cols`` of
        this rank's block (e.g. :func:`distmm.core.dense.hashed_normal`: the same matrix at
        every rank count). It is called on consecutive runs of the block's rows of about
        ``FILL_CHUNK`` entries each, so that its temporaries stay small beside the block;
        an entry must depend only on its row id and column.

    Not collective (no communication), but meant to be called on every rank.
    """
    S._require_open()
    require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
    r = S._check_r(S._default_r(r))
    block = aligned_empty(S.local_shape(side, r), S.dtype)
    if callable(fill):
        cols = np.arange(r, dtype=np.int64)[S.dense_cols(side, S.rank, r)]
        rows = S.local_rows(side)
        step = max(1, FILL_CHUNK // max(1, cols.size))
        for lo in range(0, max(rows.size, 1), step):  # an empty block still checks fill
            part = rows[lo:lo + step]
            values = np.asarray(fill(part, cols))
            require(values.shape == (part.size, cols.size),
                    f"fill returned shape {values.shape} for {part.size} rows and "
                    f"{cols.size} columns of this rank's block, expected "
                    f"{(part.size, cols.size)}")
            block[lo:lo + step] = values
    else:
        block.fill(fill)
    return S._block(side, r, block)


def wrap(S, side: str, X_loc: np.ndarray, r: int | None = None) -> DenseBlock:
    """Type this rank's block of a width-r matrix (no copy) as a DenseBlock of ``side``.

    For blocks filled by hand (with :meth:`local_rows` and :meth:`dense_cols`). ``r``
    defaults to the local width in families that keep whole rows and to the construction
    default in the others. Checks the local shape and dtype; not collective."""
    S._require_open()
    require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
    if r is None and not S.splits_r and isinstance(X_loc, np.ndarray) and X_loc.ndim == 2:
        r = X_loc.shape[1]
    r = S._check_r(S._default_r(r))
    msg = S._calls.block_problem(side, X_loc, "the block", scan=False)
    if msg is None and X_loc.shape[1] != S.local_width(r):
        msg = (f"the block has {X_loc.shape[1]} columns on this rank but its share of "
               f"r={r} is {S.local_width(r)}")
    if msg is not None:
        raise InputError(msg + f" (rank {S.rank})")
    return S._block(side, r, X_loc)


def scatter(S, side: str, X: np.ndarray | None, root: int | None = 0) -> DenseBlock:
    """Distribute a global dense matrix (m x r for "a", n x r for "b", original order).

    Collective. r is X's width (it must satisfy :meth:`r_rule`). With ``root=None`` every
    rank passes the whole matrix and takes its block without communicating; otherwise only
    ``root``'s ``X`` is read. Returns this rank's block, a C-contiguous
    :class:`~distmm.core.dense.DenseBlock` in the algorithm's dtype.
    """
    S._require_open()
    require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
    nrows = S.shape[0] if side == "a" else S.shape[1]
    perm = S.row_perm if side == "a" else S.col_perm
    if root is None:
        # Every rank reads only its own rows (X may be a memory-mapped file), so the
        # finiteness check runs on the local block, then all ranks agree.
        msg = check_global(X, nrows, side, check_finite=False)
        msg = msg or S._calls.r_problem(X.shape[1])
        block = None
        if msg is None:
            r = X.shape[1]
            block = np.ascontiguousarray(
                X[np.sort(perm[S.dense_rows(side, S.rank)])], dtype=S.dtype)
            order = np.argsort(np.argsort(perm[S.dense_rows(side, S.rank)]))
            block = aligned_copy(block[order][:, S.dense_cols(side, S.rank, r)])
            if not np.isfinite(block).all():
                msg = f"the global matrix for side {side!r} contains NaN or infinite values"
        S._agree(msg)
        return S._block(side, r, block)
    msg = check_global(X, nrows, side) if S.rank == root else None
    msg = msg or (S._calls.r_problem(X.shape[1]) if S.rank == root else None)
    S._agree(msg)
    r = S.comm.bcast(X.shape[1] if S.rank == root else None, root=root)
    blocks, counts = None, None
    if S.rank == root:
        parts = [np.ascontiguousarray(X[perm[S.dense_rows(side, k)]]
                                      [:, S.dense_cols(side, k, r)], dtype=S.dtype)
                 for k in range(S.p)]
        counts = [part.size for part in parts]
        blocks = np.concatenate([part.reshape(-1) for part in parts])
    out = aligned_empty(S.local_shape(side, r), S.dtype)
    t = mpi_type(S.dtype)
    if S.rank == root:
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        S.comm.Scatterv([blocks, (counts, displs), t], [out, out.size, t], root=root)
    else:
        S.comm.Scatterv(None, [out, out.size, t], root=root)
    return S._block(side, r, out)


def gather(S, side: str, X_loc: np.ndarray, root: int = 0) -> np.ndarray | None:
    """Collect a distributed dense matrix on ``root`` in original row order (collective).

    r is read from the blocks. Returns the global (m or n) x r matrix on ``root`` and None
    elsewhere."""
    require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
    r = S._begin("gather", ((side, X_loc, "dense block"),))
    nrows = S.shape[0] if side == "a" else S.shape[1]
    perm = S.row_perm if side == "a" else S.col_perm
    t = mpi_type(S.dtype)
    send = np.ascontiguousarray(X_loc)
    if S.p > 1:  # blocks of another width would be gathered silently short
        S.world.compare_call()
    if S.rank != root:
        S.comm.Gatherv([send, send.size, t], None, root=root)
        return None
    shapes = [(S.dense_rows(side, k).size, S.local_width(r, k))
              for k in range(S.p)]
    counts = [a * b for a, b in shapes]
    recv = np.empty(sum(counts), dtype=S.dtype)
    displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
    S.comm.Gatherv([send, send.size, t], [recv, (counts, displs), t], root=root)
    out = np.zeros((nrows, r), dtype=S.dtype)
    for k in range(S.p):
        block = recv[displs[k]:displs[k] + counts[k]].reshape(shapes[k])
        out[np.ix_(perm[S.dense_rows(side, k)],
                   np.arange(r)[S.dense_cols(side, k, r)])] = block
    return out


def gather_values(S, values: np.ndarray | None = None, root: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Collect values in value order (S's own if None) on ``root`` as COO in original
    coordinates, sorted by (row, col). Collective; None on other ranks."""
    S._require_open()
    if values is None:
        values = S.values
    S._agree(S._calls.check_values(values))
    rows, cols = S.value_coordinates()
    rows = S.row_perm[rows]
    cols = S.col_perm[cols]
    parts = S.comm.gather((rows, cols, np.asarray(values)), root=root)
    if S.rank != root:
        return None
    R = concat_ids([pr[0] for pr in parts])
    C = concat_ids([pr[1] for pr in parts])
    V = np.concatenate([pr[2] for pr in parts]) if parts else np.zeros(0, S.dtype)
    order = np.lexsort((C, R))
    return R[order], C[order], V[order]


def check_global(X, nrows: int, side: str, check_finite: bool = True) -> str | None:
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        return f"the global matrix for side {side!r} must be a 2-D numpy array"
    if X.shape[0] != nrows:
        return f"the global matrix for side {side!r} has {X.shape[0]} rows, expected {nrows}"
    if X.shape[1] < 1:
        return "dense operands need r >= 1 columns"
    if check_finite and not np.isfinite(X).all():
        return f"the global matrix for side {side!r} contains NaN or infinite values"
    return None


__all__ = ["dense", "gather", "gather_values", "local_rows", "scatter", "wrap"]
