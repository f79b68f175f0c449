"""A GAT layer's products with sparse node features, through distmm's own SpMM kernels.

The first layer of a GAT on a citation graph multiplies the node features (sparse bag-of-words
rows, scipy CSR) by the weights: ``Z = X W^T`` in the forward pass and ``X^T dZ`` for the
weight gradient. scipy runs both on one thread (and ``X @ W.T`` on a transposed, strided
operand); the reference node model's SpMM kernels (:mod:`distmm.kernels.reference`) run them on
the rank's numba threads. The feature structure is read once; every product takes the values
as they are then (the stored values, or those times a dropout mask).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.core.aligned import aligned_empty
from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.errors import InputError
from distmm.kernels.numba_util import prepared_layout
from distmm.kernels.reference import ReferenceModel


class SparseFeatures:
    """One rank's sparse node features as a node-model block. Not collective.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix or csr_array
        The rank's feature rows, in canonical form (sorted column indices, no duplicates),
        its values in the model's dtype (see :meth:`of`).
    """

    def __init__(self, X) -> None:
        self.source = X
        self._structure = (X.indptr, X.indices, X.shape)
        self.block = CSRBlock(shape=(int(X.shape[0]), int(X.shape[1])),
                              indptr=X.indptr.astype(INDPTR_DTYPE),
                              indices=X.indices.astype(INDEX_DTYPE),
                              data=X.data)
        self.dtype = X.data.dtype
        self.model = ReferenceModel()
        self._runs: dict[tuple, object] = {}

    @classmethod
    def of(cls, X, dtype, kept: SparseFeatures | None = None) -> SparseFeatures | None:
        """``X`` as features for the kernels (``kept`` itself if it was made from this very
        matrix and its structure arrays are the same objects), or None where ``X`` is not a
        canonical CSR matrix of ``dtype`` (dense features, other formats and dtypes keep
        numpy's and scipy's products)."""
        if not sp.issparse(X) or X.format != "csr" or X.dtype != np.dtype(dtype):
            return None
        if kept is not None and kept.source is X and kept._structure[0] is X.indptr \
                and kept._structure[1] is X.indices and kept._structure[2] == X.shape:
            return kept
        if not X.has_canonical_format:
            return None
        return cls(X)

    def times_t(self, values: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``X(values) @ W^T``, shape (rows, W.shape[0]): ``values`` aligned with X's stored
        entries, ``W`` (out, features) as a layer's weight."""
        Wt = np.ascontiguousarray(W.T, dtype=self.dtype)
        out = aligned_empty((self.block.shape[0], Wt.shape[1]), self.dtype)
        return self._run("spmm_a", values, Wt, out)

    def t_times(self, values: np.ndarray, D: np.ndarray) -> np.ndarray:
        """``X(values)^T @ D``, shape (features, D.shape[1]): ``D`` (rows, width)."""
        D = np.ascontiguousarray(D, dtype=self.dtype)
        out = aligned_empty((self.block.shape[1], D.shape[1]), self.dtype)
        return self._run("spmm_b", values, D, out)

    def _run(self, op: str, values: np.ndarray, D: np.ndarray, out: np.ndarray) -> np.ndarray:
        """One kernel call, its preparation kept per operation, plan state and the layouts of
        ``D`` and ``values`` (:func:`~distmm.kernels.numba_util.prepared_layout`: a prepared
        call runs its first call's compiled code); later calls pass new arrays."""
        values = np.ascontiguousarray(values, dtype=self.dtype)
        key = (op, self.model.plan_state(), prepared_layout(D), prepared_layout(values))
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self.model.prepare(op, self.block, values, D, None, out,
                                                      accumulate=False)
        run(values, D, out)
        return out


# ---------------------------------------------------------------------------------- reading
# A row is refused by the row normalisation when its sum is at most this fraction of the sum
# of its entries' absolute values: zero, negative, or so small against the row's size that
# scaling it to sum 1 would blow its entries up by more than 1 / NORMALIZE_TINY.
NORMALIZE_TINY = 1e-6


def read_mtx_rows(path: str, nodes_by_rank: list[np.ndarray], n: int, comm: MPI.Comm
                  ) -> tuple[sp.csr_matrix | None, str | None, int]:
    """This rank's rows of a Matrix Market feature matrix, the file read in parts.

    Every rank reads a share of the file's entries (:func:`distmm.io.matrix_market.
    read_matrix_market`), and each entry goes to every rank whose rows include its row
    (``nodes_by_rank[k]``: the original row ids rank k needs, in the order of its block; a row
    may be needed by several ranks, the members of a row group), in one all-to-all; ``n`` is
    the number of nodes. Collective
    over ``comm``; a malformed file raises the same InputError on every rank.

    Returns
    -------
    (X, problem, rows) : the rows ``nodes_by_rank[comm.rank]`` as a scipy CSR matrix of
        float64 (sorted indices, duplicates summed), or None with ``problem`` when the file's
        row count differs from the number of nodes (the same on every rank: the header is
        read by all); ``rows`` is the file's row count.
    """
    from distmm.io.matrix_market import read_matrix_market

    share = read_matrix_market(path, comm)
    rows_in_file, width = share.shape
    me, p = comm.Get_rank(), comm.Get_size()
    if rows_in_file != n:
        return None, f"--features has {rows_in_file} rows but the graph has {n} nodes", \
            rows_in_file
    ids = np.concatenate(nodes_by_rank).astype(np.int64)
    owner = np.repeat(np.arange(p, dtype=np.int64), [x.size for x in nodes_by_rank])
    order = np.argsort(ids, kind="stable")
    sid, sown = ids[order], owner[order]
    lo = np.searchsorted(sid, share.rows, "left")
    cnt = np.searchsorted(sid, share.rows, "right") - lo
    total = int(cnt.sum())
    entry = np.repeat(np.arange(share.rows.size, dtype=np.int64), cnt)
    first = np.repeat(np.cumsum(cnt) - cnt, cnt)
    dest = sown[np.repeat(lo, cnt) + (np.arange(total, dtype=np.int64) - first)]
    by_dest = np.argsort(dest, kind="stable")
    entry, dest = entry[by_dest], dest[by_dest]
    sendcounts = np.bincount(dest, minlength=p).astype(np.int64)
    recvcounts = np.empty(p, dtype=np.int64)
    comm.Alltoall(sendcounts, recvcounts)
    sd = np.concatenate(([0], np.cumsum(sendcounts)[:-1]))
    rd = np.concatenate(([0], np.cumsum(recvcounts)[:-1]))
    got = {}
    for name, arr, t in (("rows", share.rows, MPI.INT64_T), ("cols", share.cols, MPI.INT64_T),
                         ("vals", share.vals, MPI.DOUBLE)):
        send = np.ascontiguousarray(arr[entry])
        recv = np.empty(int(recvcounts.sum()), dtype=arr.dtype)
        comm.Alltoallv([send, (sendcounts, sd), t], [recv, (recvcounts, rd), t])
        got[name] = recv
    mine = np.asarray(nodes_by_rank[me], dtype=np.int64)
    pos_order = np.argsort(mine, kind="stable")
    local = pos_order[np.searchsorted(mine[pos_order], got["rows"])]
    X = sp.csr_matrix((got["vals"], (local, got["cols"])), shape=(mine.size, width))
    X.sum_duplicates()
    X.sort_indices()
    return X, None, rows_in_file


def normalize_rows(X, node_ids: np.ndarray, counted: np.ndarray, comm: MPI.Comm):
    """Each row of ``X`` scaled to sum 1 (the GAT paper's preprocessing; all-zero rows stay
    zero, as with PyG's ``NormalizeFeatures``), in X's dtype and format.

    Collective over ``comm``: a row with entries whose sum is zero, negative or at most
    :data:`NORMALIZE_TINY` times the sum of its absolute values (signed features: embeddings,
    standardised columns) raises the same InputError on every rank, naming the first such
    rows (original ids ``node_ids``) and their number; ``counted`` marks the rows this rank
    counts (each node once over the ranks holding it).
    """
    if sp.issparse(X):
        s = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
        a = np.asarray(abs(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        s = X.sum(axis=1, dtype=np.float64)
        a = np.abs(X).sum(axis=1, dtype=np.float64)
    bad = (a > 0) & (s <= NORMALIZE_TINY * a) & counted
    ids = np.sort(node_ids[bad])
    gathered = comm.allgather((ids[:10].tolist(), int(ids.size)))
    count = sum(c for _, c in gathered)
    if count:
        first = sorted(i for part, _ in gathered for i in part)[:10]
        more = f" and {count - len(first)} more" if count > len(first) else ""
        raise InputError(
            f"--normalize-features: {count} feature row(s) sum to zero, a negative number or "
            f"less than {NORMALIZE_TINY:g} times the sum of their absolute values, so scaling "
            f"them to sum 1 would blow them up or flip their sign: node(s) "
            f"{', '.join(map(str, first))}{more}; leave the features as they are (the "
            "default, as in PyG) or normalise them yourself")
    scale = 1.0 / np.where(s != 0, s, 1.0)
    if sp.issparse(X):
        out = (sp.diags(scale) @ X).astype(X.dtype).tocsr()
        out.sum_duplicates()
        return out
    return (X * scale[:, None]).astype(X.dtype)
