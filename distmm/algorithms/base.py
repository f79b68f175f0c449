"""What every distributed algorithm shares: placing S, permutations, dense scatter/gather,
moving S's values between its two stored orientations, checks, and the run report.

An algorithm object binds a sparse matrix S (m x n) to a process grid, a replication factor, a
node model and a dtype. Dense operands live in the algorithm's own distribution: each rank holds
one block of A (m x r) and one of B (n x r); every operation takes and returns blocks in that
distribution, so training loops chain calls without reshuffling. SDDMM results and S's values
are flat arrays aligned with the rank's stored nonzeros of S ("value order").

Load balance (paper section VI): rows and columns are permuted before distribution (the same
permutation for both when S is square, so A and B of a graph share one layout). By default
(``permute="auto"``) rows go to blocks at random, as the paper's random permutation would put
them, but keep their natural order inside each block, so a real graph's locality survives in
the local kernels; one rank is not permuted at all (see :func:`distmm.permute.
balance_permutation`). The permutation is invisible to callers of the scatter/gather helpers;
callers that fill their blocks themselves read :meth:`local_rows` to learn which original rows
a block holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from distmm.comm import CommStats, CountingComm, gather_report, mpi_type
from distmm.coo import CooShare
from distmm.errors import InputError, agree, require
from distmm.kernels import NodeModel, make_node_model
from distmm.ops.mixin import EdgeOps
from distmm.permute import balance_permutation, inverse_permutation
from distmm.sparse import CSRBlock

SIDES = ("a", "b")
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass
class Orientation:
    """One stored orientation of S on this rank, as a list of CSR blocks.

    In orientation "a" the blocks are pieces of S (rows index A, columns index B); in
    orientation "b" they are pieces of S^T (rows index B, columns index A). ``values`` is the
    flat array of the blocks' values in value order; each block's ``data`` is a view into it.
    ``row_base`` is the global (permuted) index of local row 0 and ``col_bases[t]`` the global
    index of local column 0 of block t.
    """

    name: str
    blocks: list[CSRBlock]
    offsets: np.ndarray
    values: np.ndarray
    row_base: int
    col_bases: np.ndarray

    def block_values(self, values: np.ndarray, t: int) -> np.ndarray:
        return values[self.offsets[t]:self.offsets[t + 1]]

    @property
    def nnz(self) -> int:
        return int(self.offsets[-1])

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global (permuted) (row, col) in this orientation's frame of every stored nonzero."""
        rows = [blk.row_ids() + self.row_base for blk in self.blocks]
        cols = [blk.indices.astype(np.int64) + base
                for blk, base in zip(self.blocks, self.col_bases, strict=True)]
        return _cat(rows), _cat(cols)


def _cat(parts: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class DistributedAlgorithm(EdgeOps):
    """Base class: S placed on a grid, with the helpers every algorithm family uses.

    Subclasses define the grid, the owner of each nonzero in each orientation, the dense
    blocks each rank holds, and the operations. Construction is collective over ``comm``.
    """

    name = "abstract"
    strategies: tuple[str, ...] = ()
    # Families that split A and B by columns fix r at construction; the others leave it None
    # and take r from each call's blocks.
    r: int | None = None

    def __init__(self, source: CooShare, comm: MPI.Comm, node_model: str | NodeModel = "reference",
                 dtype=np.float32, permute: bool | str = "auto", seed: int = 0,
                 check_finite: bool = True) -> None:
        dtype = np.dtype(dtype)
        require(dtype in FLOAT_DTYPES, f"dtype must be float32 or float64, got {dtype}")
        self.comm = comm
        self.p = comm.Get_size()
        self.rank = comm.Get_rank()
        self.dtype = dtype
        self.shape = (int(source.shape[0]), int(source.shape[1]))
        self.check_finite = check_finite
        self.stats = CommStats()
        self.world = CountingComm(comm, self.stats)
        # A name makes a fresh model with default options; an instance (configured by the
        # caller, e.g. from --node-config) is used as it is.
        self.kernel = (node_model if isinstance(node_model, NodeModel)
                       else make_node_model(node_model))
        self.node_model = self.kernel.name
        m, n = self.shape
        self._agree(_check_share(source, check_finite))  # before the weights index by it
        # Rows are assigned to the p finest row blocks any family uses (the 1.5D families'
        # blocks; each 2.5D block is a union of consecutive ones), so "blocks" keeps the
        # natural order inside every 1.5D block and inside each p-th of a 2.5D block.
        self.permute = permute
        mode = _permute_name(permute, self.p)
        row_w = col_w = None
        if mode == "blocks":
            row_w, col_w = self._row_weights(source)
        if m == n:
            w = None if row_w is None else [row_w, col_w]
            self.row_perm = balance_permutation(mode, m, self.p, seed, w)
            self.col_perm = self.row_perm
        else:
            self.row_perm = balance_permutation(mode, m, self.p, seed,
                                                None if row_w is None else [row_w])
            self.col_perm = balance_permutation(mode, n, self.p, seed + 1,
                                                None if col_w is None else [col_w])
        self.row_inv = inverse_permutation(self.row_perm)
        self.col_inv = self.row_inv if self.col_perm is self.row_perm else inverse_permutation(
            self.col_perm)

    def _row_weights(self, source: CooShare) -> tuple[np.ndarray, np.ndarray]:
        """Global nonzeros per row and per column of S (collective: one all-reduce of m + n
        integers, counted under "distribute"), the weights the permutation balances."""
        m, n = self.shape
        local = np.concatenate((np.bincount(source.rows, minlength=m),
                                np.bincount(source.cols, minlength=n))).astype(np.int64)
        total = np.empty_like(local)
        self.world.allreduce(local, total, phase="distribute")
        return total[:m], total[m:]

    # ----------------------------------------------------------------- subclass hooks
    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        """Global permuted rows of ``side``'s dense block on ``rank`` (local order)."""
        raise NotImplementedError

    def dense_cols(self, side: str, rank: int) -> slice:
        """Columns (of r) of ``side``'s dense block on ``rank``."""
        return slice(None)

    # ----------------------------------------------------------------- placing S
    def _place(self, name: str, owners: np.ndarray, rows: np.ndarray, cols: np.ndarray,
               vals: np.ndarray, layout: callable) -> Orientation:
        """Send each entry to its owner and build the owner's blocks (collective).

        ``rows``/``cols`` are permuted global coordinates in the orientation's frame and
        ``layout(rows, cols)`` returns, on the owner, ``(block_index, local_row, local_col,
        nblocks, block_shapes, row_base, col_bases)``.
        """
        rows, cols, vals = self._exchange(owners, (rows, cols, vals))
        t, lr, lc, nblocks, shapes, row_base, col_bases = layout(rows, cols)
        order = np.argsort(t, kind="stable")
        bounds = np.searchsorted(t[order], np.arange(nblocks + 1))
        blocks = []
        for b in range(nblocks):
            sel = order[bounds[b]:bounds[b + 1]]
            blocks.append(CSRBlock.from_coo(lr[sel], lc[sel], vals[sel], shapes[b], self.dtype))
        offsets = np.zeros(nblocks + 1, dtype=np.int64)
        np.cumsum([blk.nnz for blk in blocks], out=offsets[1:])
        values = np.empty(int(offsets[-1]), dtype=self.dtype)
        for b, blk in enumerate(blocks):
            values[offsets[b]:offsets[b + 1]] = blk.data
            blk.data = values[offsets[b]:offsets[b + 1]]
        return Orientation(name, blocks, offsets, values, row_base, np.asarray(col_bases))

    def _exchange(self, owners: np.ndarray, arrays: tuple[np.ndarray, ...]
                  ) -> tuple[np.ndarray, ...]:
        """Route entry k of every array to rank ``owners[k]`` (collective, phase distribute)."""
        order = np.argsort(owners, kind="stable")
        sendcounts = np.bincount(owners, minlength=self.p).astype(np.int64)
        recvcounts = np.empty(self.p, dtype=np.int64)
        with self.stats.timer("distribute"):
            self.comm.Alltoall(sendcounts, recvcounts)
        self.stats.add("distribute", self.p - 1, self.p - 1, self.p - 1, self.p - 1)
        out = []
        for arr in arrays:
            send = np.ascontiguousarray(arr[order])
            recv = np.empty(int(recvcounts.sum()), dtype=send.dtype)
            self.world.alltoallv(send, sendcounts, recv, recvcounts, phase="distribute")
            out.append(recv)
        return tuple(out)

    def _value_plan(self, src: Orientation, dst: Orientation, src_owner, dst_owner):
        """How to move values from ``src`` value order to ``dst`` value order.

        Both sides sort their nonzeros by (other side's owner, global key) without
        communicating, so the k-th value sent from rank a to rank b is the k-th nonzero of b
        that a owns. ``src_owner(rows, cols)`` gives the owner in ``src``'s orientation of
        entries given in S's frame; likewise ``dst_owner``.
        """
        n = self.shape[1]
        si, sj = self._s_frame(src)
        di, dj = self._s_frame(dst)
        s_to = dst_owner(si, sj)
        d_from = src_owner(di, dj)
        send_order = np.lexsort((si * n + sj, s_to))
        recv_order = np.lexsort((di * n + dj, d_from))
        sendcounts = np.bincount(s_to, minlength=self.p)
        recvcounts = np.bincount(d_from, minlength=self.p)
        return send_order, sendcounts, recv_order, recvcounts

    @staticmethod
    def _s_frame(o: Orientation) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = o.coordinates()
        return (rows, cols) if o.name == "a" else (cols, rows)

    def _move_values(self, plan, src_values: np.ndarray, dst_values: np.ndarray) -> None:
        send_order, sendcounts, recv_order, recvcounts = plan
        recv = np.empty(recv_order.size, dtype=src_values.dtype)
        self.world.alltoallv(np.ascontiguousarray(src_values[send_order]), sendcounts, recv,
                             recvcounts, phase="values")
        dst_values[recv_order] = recv

    # ----------------------------------------------------------------- checks
    def _agree(self, message: str | None) -> None:
        """Collective check: raise the same InputError everywhere if any rank has a message.

        A small allgather, counted under phase "other"."""
        if self.p > 1:
            self.stats.add("other", self.p - 1, self.p - 1, self.p - 1, self.p - 1)
        agree(self.comm, message)

    def _check_dense(self, side: str, X: np.ndarray, what: str) -> str | None:
        """Local check of one dense block; returns a message or None."""
        expect_rows = self.dense_rows(side, self.rank).size
        if not isinstance(X, np.ndarray) or X.ndim != 2:
            return f"{what} must be a 2-D numpy array"
        if X.shape[0] != expect_rows:
            return (f"{what} has {X.shape[0]} rows on this rank but the distribution gives it "
                    f"{expect_rows}")
        if X.dtype != self.dtype:
            return f"{what} has dtype {X.dtype}, but this matrix was distributed as {self.dtype}"
        if not X.flags.c_contiguous:
            return f"{what} must be C-contiguous (np.ascontiguousarray)"
        if self.check_finite and not np.isfinite(X).all():
            return f"{what} contains NaN or infinite values"
        return None

    def check_inputs(self, *pairs: tuple[str, np.ndarray, str],
                     values: np.ndarray | None = None) -> int:
        """Check dense blocks given as (side, array, name) and optional values of S.

        Collective: one small allgather, so that a problem found on any rank raises the same
        InputError on every rank before the operation communicates. Returns the dense width r
        (the local block width; every rank must agree on it).
        """
        msg = None
        widths = set()
        for side, X, what in pairs:
            msg = msg or self._check_dense(side, X, what)
            if msg is None and self.r is not None:
                cols = range(self.r)[self.dense_cols(side, self.rank)]
                if X.shape[1] != len(cols):
                    msg = (f"{what} has {X.shape[1]} columns on this rank but the distribution "
                           f"gives it {len(cols)} (columns {cols.start}..{cols.stop - 1} of "
                           f"r={self.r})")
            if isinstance(X, np.ndarray) and X.ndim == 2:
                widths.add(X.shape[1])
        if values is not None:
            msg = msg or self._check_values(values)
        if self.r is not None:
            self._agree(msg)
            return self.r
        if len(widths) > 1:
            msg = msg or f"the dense operands have different widths {sorted(widths)}"
        width = widths.pop() if len(widths) == 1 else -1
        gathered = self.comm.allgather((width, msg))
        if self.p > 1:
            self.stats.add("other", self.p - 1, self.p - 1, self.p - 1, self.p - 1)
        bad = [(k, m) for k, (_, m) in enumerate(gathered) if m is not None]
        all_widths = sorted({w for w, _ in gathered})
        if not bad and len(all_widths) > 1:
            bad = [(0, f"dense blocks disagree on r across ranks: {all_widths}")]
        if not bad and all_widths[0] < 1:
            bad = [(0, "dense operands need r >= 1 columns")]
        if bad:
            k, m = bad[0]
            suffix = f" (reported by rank {k})" if self.p > 1 else ""
            raise InputError(m + suffix)
        return all_widths[0]

    def _check_values(self, values: np.ndarray) -> str | None:
        nnz = self.values.size
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.size != nnz:
            return f"values must be a 1-D array of this rank's {nnz} stored nonzeros"
        if values.dtype != self.dtype:
            return f"values have dtype {values.dtype}, expected {self.dtype}"
        if self.check_finite and not np.isfinite(values).all():
            return "values contain NaN or infinite entries"
        return None

    # ----------------------------------------------------------------- public operations
    # Families that store S in orientations "a" (S) and "b" (S^T) implement the loop pieces
    # _sddmm_in / _spmm_x_in / _spmm_y_in and _fusedmm; the others override these methods.
    def sddmm(self, A_loc: np.ndarray, B_loc: np.ndarray,
              values: np.ndarray | str | None = None) -> np.ndarray:
        """R = S(values) * (A B^T) at S's nonzeros; returns this rank's R in value order.

        Collective. ``values`` (value order, or the name of a vector registered with
        :meth:`set_named_values`) defaults to S's current values."""
        values = self._named_or(values)
        self.check_inputs(("a", A_loc, "A"), ("b", B_loc, "B"), values=values)
        vals = self.values if values is None else values
        return self._sddmm_in("a", A_loc, B_loc, vals)[0]

    def spmm_a(self, B_loc: np.ndarray, values: np.ndarray | str | None = None) -> np.ndarray:
        """A-side output S(values) @ B (m x r); returns this rank's block. Collective.

        ``values``: as in :meth:`sddmm`."""
        values = self._named_or(values)
        self.check_inputs(("b", B_loc, "B"), values=values)
        vals = self.values if values is None else values
        return self._spmm_x_in("a", B_loc, vals)

    def spmm_b(self, A_loc: np.ndarray, values: np.ndarray | str | None = None) -> np.ndarray:
        """B-side output S(values)^T @ A (n x r); returns this rank's block. Collective.

        ``values``: as in :meth:`sddmm`."""
        values = self._named_or(values)
        self.check_inputs(("a", A_loc, "A"), values=values)
        vals = self.values if values is None else values
        return self._spmm_y_in("a", A_loc, vals)

    def fusedmm_a(self, A_loc: np.ndarray, B_loc: np.ndarray, strategy: str | None = None,
                  values: np.ndarray | str | None = None) -> np.ndarray:
        """FusedMMA: (S(values) * (A B^T)) @ B, m x r. Collective.

        ``strategy`` is one of :attr:`strategies` ("none": SDDMM then SpMM as two calls;
        "reuse": replication reuse; "fusion": local kernel fusion, where the family has it);
        default: the family's most eliding one (the last of :attr:`strategies`).
        ``values`` (value order, or a name from :meth:`set_named_values`) defaults to S's
        current values. A strategy that runs on the stored S^T needs the values in S^T's
        order: S's own and named vectors are moved there once and kept; an explicit array is
        moved at every call (one all-to-all of this rank's nonzero values, phase "values"), so
        a loop that reuses a vector should register it by name."""
        return self._fusedmm("a", A_loc, B_loc, strategy or self.strategies[-1],
                             self._named_or(values))

    def fusedmm_b(self, A_loc: np.ndarray, B_loc: np.ndarray, strategy: str | None = None,
                  values: np.ndarray | str | None = None) -> np.ndarray:
        """FusedMMB: (S(values) * (A B^T))^T @ A, n x r; the mirror of :meth:`fusedmm_a`.
        Collective."""
        return self._fusedmm("b", A_loc, B_loc, strategy or self.strategies[-1],
                             self._named_or(values))

    # ----------------------------------------------------------------- values of S
    @property
    def values(self) -> np.ndarray:
        """S's current values on this rank, in value order (a view: do not resize)."""
        raise NotImplementedError

    def set_values(self, values: np.ndarray) -> None:
        """Replace S's values (this rank's, in value order) without redistributing S.

        Collective: every rank calls it with its own values; they are checked everywhere."""
        self._agree(self._check_values(values))
        self._store_values(values)

    def _store_values(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def set_named_values(self, name: str, values: np.ndarray) -> None:
        """Keep another vector of edge values under ``name``, beside S's own.

        Collective (checked everywhere, like :meth:`set_values`). Every operation's ``values=``
        then accepts ``name``; where a strategy runs on the stored S^T, the vector is moved
        into S^T's order on first use and kept, so alternating between named vectors (ALS:
        ratings for the right-hand side, ones for the matvec) moves nothing after that.
        Registering a name again replaces its vector and its moved copies."""
        require(isinstance(name, str) and name != "",
                f"a value vector's name must be a non-empty string, got {name!r}")
        self._agree(self._check_values(values))
        named = self.__dict__.setdefault("_named", {})
        named[name] = {"a": np.array(values, dtype=self.dtype, copy=True)}

    def named_values(self, name: str) -> np.ndarray:
        """The vector registered as ``name`` (value order; a view: do not resize). Not
        collective."""
        named = self.__dict__.get("_named", {})
        require(name in named, f"no value vector named {name!r}; registered: "
                               f"{', '.join(sorted(named)) or 'none'} (see set_named_values)")
        return named[name]["a"]

    def drop_named_values(self, name: str) -> None:
        """Forget the vector registered as ``name`` and its moved copies. Not collective."""
        self.__dict__.get("_named", {}).pop(name, None)

    def _named_or(self, values: np.ndarray | str | None) -> np.ndarray | None:
        """``values`` with a registered name replaced by its vector (value order)."""
        return self.named_values(values) if isinstance(values, str) else values

    # ----------------------------------------------------------------- dense data in and out
    def local_rows(self, side: str) -> np.ndarray:
        """Original row ids of ``side``'s block on this rank ("a": rows of A, "b": rows of B)."""
        perm = self.row_perm if side == "a" else self.col_perm
        return perm[self.dense_rows(side, self.rank)]

    def scatter(self, side: str, X: np.ndarray | None, root: int | None = 0) -> np.ndarray:
        """Distribute a global dense matrix (m x r for "a", n x r for "b", original order).

        Collective. With ``root=None`` every rank passes the whole matrix and takes its block
        without communicating; otherwise only ``root``'s ``X`` is read. Returns this rank's
        block, C-contiguous in the algorithm's dtype.
        """
        require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
        nrows = self.shape[0] if side == "a" else self.shape[1]
        perm = self.row_perm if side == "a" else self.col_perm
        if self.r is not None:
            msg = None
            if (root is None or self.rank == root) and isinstance(X, np.ndarray) \
                    and X.ndim == 2 and X.shape[1] != self.r:
                msg = (f"the global matrix for side {side!r} has {X.shape[1]} columns, but "
                       f"this matrix was distributed for r={self.r}")
            self._agree(msg)
        if root is None:
            # Every rank reads only its own rows (X may be a memory-mapped file), so the
            # finiteness check runs on the local block, then all ranks agree.
            msg = _check_global(X, nrows, side, check_finite=False)
            block = None
            if msg is None:
                block = np.ascontiguousarray(
                    X[np.sort(perm[self.dense_rows(side, self.rank)])], dtype=self.dtype)
                order = np.argsort(np.argsort(perm[self.dense_rows(side, self.rank)]))
                block = np.ascontiguousarray(block[order][:, self.dense_cols(side, self.rank)])
                if not np.isfinite(block).all():
                    msg = f"the global matrix for side {side!r} contains NaN or infinite values"
            self._agree(msg)
            return block
        msg = _check_global(X, nrows, side) if self.rank == root else None
        self._agree(msg)
        r = self.comm.bcast(X.shape[1] if self.rank == root else None, root=root)
        blocks, counts = None, None
        if self.rank == root:
            parts = [np.ascontiguousarray(X[perm[self.dense_rows(side, k)]]
                                          [:, self.dense_cols(side, k)], dtype=self.dtype)
                     for k in range(self.p)]
            counts = [part.size for part in parts]
            blocks = np.concatenate([part.reshape(-1) for part in parts])
        mine = self.dense_rows(side, self.rank).size
        ncols = len(range(r)[self.dense_cols(side, self.rank)])
        out = np.empty((mine, ncols), dtype=self.dtype)
        t = mpi_type(self.dtype)
        if self.rank == root:
            displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
            self.comm.Scatterv([blocks, (counts, displs), t], [out, out.size, t], root=root)
        else:
            self.comm.Scatterv(None, [out, out.size, t], root=root)
        return out

    def gather(self, side: str, X_loc: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Collect a distributed dense matrix on ``root`` in original row order (collective).

        Returns the global (m or n) x r matrix on ``root`` and None elsewhere."""
        require(side in SIDES, f"side must be 'a' or 'b', got {side!r}")
        r = self.check_inputs((side, X_loc, "dense block"))
        nrows = self.shape[0] if side == "a" else self.shape[1]
        perm = self.row_perm if side == "a" else self.col_perm
        t = mpi_type(self.dtype)
        send = np.ascontiguousarray(X_loc)
        if self.rank != root:
            self.comm.Gatherv([send, send.size, t], None, root=root)
            return None
        shapes = [(self.dense_rows(side, k).size, len(range(r)[self.dense_cols(side, k)]))
                  for k in range(self.p)]
        counts = [a * b for a, b in shapes]
        recv = np.empty(sum(counts), dtype=self.dtype)
        displs = np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.comm.Gatherv([send, send.size, t], [recv, (counts, displs), t], root=root)
        out = np.zeros((nrows, r), dtype=self.dtype)
        for k in range(self.p):
            block = recv[displs[k]:displs[k] + counts[k]].reshape(shapes[k])
            out[np.ix_(perm[self.dense_rows(side, k)],
                       np.arange(r)[self.dense_cols(side, k)])] = block
        return out

    def gather_values(self, values: np.ndarray | None = None, root: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Collect values in value order (S's own if None) on ``root`` as COO in original
        coordinates, sorted by (row, col). Collective; None on other ranks."""
        if values is None:
            values = self.values
        self._agree(self._check_values(values))
        rows, cols = self.value_coordinates()
        rows = self.row_perm[rows]
        cols = self.col_perm[cols]
        parts = self.comm.gather((rows, cols, np.asarray(values)), root=root)
        if self.rank != root:
            return None
        R = _cat([pr[0] for pr in parts])
        C = _cat([pr[1] for pr in parts])
        V = np.concatenate([pr[2] for pr in parts]) if parts else np.zeros(0, self.dtype)
        order = np.lexsort((C, R))
        return R[order], C[order], V[order]

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global permuted (row, col) of S for each stored nonzero in value order."""
        raise NotImplementedError

    # ----------------------------------------------------------------- reports
    def reset_stats(self) -> None:
        """Zero the communication and kernel counters (not collective)."""
        self.stats.reset()
        self.kernel.stats.reset()

    def report(self, root: int = 0) -> dict | None:
        """Per-phase words, messages and seconds, and kernel stats, summarised over ranks.

        Collective; returns the report on ``root`` and None elsewhere."""
        per_rank = self.stats.as_dict()
        for op, st in self.kernel.stats.as_dict().items():
            per_rank[f"kernel:{op}"] = st
        rep = gather_report(self.comm, per_rank, root=root)
        if rep is not None:
            rep["config"] = self.describe()
        return rep

    def describe(self) -> dict:
        """The configuration as a JSON-ready dict."""
        return {"algorithm": self.name, "p": self.p, "m": self.shape[0], "n": self.shape[1],
                "node_model": self.node_model, "node_options": self.kernel.options(),
                "dtype": str(self.dtype), "permute": _permute_name(self.permute, self.p)}


def _permute_name(mode: str | bool, p: int) -> str:
    """The permutation actually applied, by name (for reports)."""
    mode = {True: "auto", False: "none"}.get(mode, mode) if isinstance(mode, bool) else mode
    if mode == "auto":
        return "none" if p == 1 else "blocks"
    return mode


def _check_share(source: CooShare, check_finite: bool) -> str | None:
    """Local check of a rank's COO share (a hand-made one may hold anything)."""
    m, n = source.shape
    if min(m, n) < 0:
        return f"the sparse matrix has a negative dimension {source.shape}"
    if source.nnz and (source.rows.min() < 0 or source.rows.max() >= m
                       or source.cols.min() < 0 or source.cols.max() >= n):
        return f"a nonzero of the sparse matrix lies outside its shape {source.shape}"
    if check_finite and not np.isfinite(source.vals).all():
        return "the sparse matrix has NaN or infinite values"
    return None


def _check_global(X, nrows: int, side: str, check_finite: bool = True) -> str | None:
    if not isinstance(X, np.ndarray) or X.ndim != 2:
        return f"the global matrix for side {side!r} must be a 2-D numpy array"
    if X.shape[0] != nrows:
        return f"the global matrix for side {side!r} has {X.shape[0]} rows, expected {nrows}"
    if X.shape[1] < 1:
        return "dense operands need r >= 1 columns"
    if check_finite and not np.isfinite(X).all():
        return f"the global matrix for side {side!r} contains NaN or infinite values"
    return None




class TwoOrientationAlgorithm(DistributedAlgorithm):
    """A family that stores S as orientation "a" (S) and, built on first use, "b" (S^T).

    Subclasses fill ``self._o["a"]`` at construction, define ``_owner(name, rows, cols)``
    (the rank storing each entry of S in an orientation) and ``_build_b(rows, cols, vals)``
    (place S^T's entries, given in S's frame, as ``self._o["b"]``). S's values live in
    orientation "a"; after :meth:`set_values` they reach "b" with one all-to-all of the values.
    """

    _plan = None
    _b_stale = False

    def _build_b(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        raise NotImplementedError

    def _orientation(self, name: str) -> Orientation:
        """The stored orientation, building "b" (S^T) from "a" on first use (collective)."""
        if name not in self._o:
            a = self._o["a"]
            rows, cols = a.coordinates()
            self._build_b(rows, cols, a.values)
            self._b_stale = False
        elif name == "b" and self._b_stale:
            self._move_values(self._b_plan(), self._o["a"].values, self._o["b"].values)
            self._b_stale = False
        return self._o[name]

    def _b_plan(self):
        """How values move from orientation "a"'s order to "b"'s (built once; collective
        only in that orientation "b" must exist)."""
        if self._plan is None:
            self._orientation("b")
            self._plan = self._value_plan(
                self._o["a"], self._o["b"], lambda i, j: self._owner("a", i, j),
                lambda i, j: self._owner("b", i, j))
        return self._plan

    def _values_for(self, name: str, values: np.ndarray | None) -> np.ndarray:
        """Values in orientation ``name``'s order (collective when they must move).

        ``values`` is None (S's own), or a vector in value order ("a"): a registered vector
        (:meth:`set_named_values`) is moved to "b" once and kept; any other array is moved at
        every call."""
        o = self._orientation(name)
        if values is None:
            return o.values
        if name == "a":
            return values
        for entry in self.__dict__.get("_named", {}).values():
            if entry["a"] is values:
                if "b" not in entry:
                    entry["b"] = np.empty(o.nnz, dtype=self.dtype)
                    self._move_values(self._b_plan(), values, entry["b"])
                return entry["b"]
        moved = np.empty(o.nnz, dtype=self.dtype)
        self._move_values(self._b_plan(), values, moved)
        return moved

    @property
    def values(self) -> np.ndarray:
        """S's current values on this rank, in value order (orientation "a")."""
        return self._o["a"].values

    def _store_values(self, values: np.ndarray) -> None:
        self._o["a"].values[...] = values
        self._b_stale = "b" in self._o

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        return self._o["a"].coordinates()


__all__ = ["DistributedAlgorithm", "InputError", "Orientation", "TwoOrientationAlgorithm"]
