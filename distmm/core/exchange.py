"""Sparsity-aware row exchange: each rank receives only the dense rows its nonzeros touch.

A :class:`RowExchange` is the plan of one irregular exchange inside a communicator (a 1.5D
layer): which rows of its own dense block each rank sends to which peer, and how many rows it
receives from each. It is built once, collectively, from the sorted global ids of the rows a
rank needs and their owners (the pattern of S alone), and then reused by every call:

* :meth:`RowExchange.start_gather` moves the needed rows of the dense operand (the "Y" side)
  to the ranks whose nonzeros touch them, into a compact buffer whose row k is the k-th
  needed row (the local numbering the compact CSR block indexes);
* :meth:`RowExchange.start_scatter` moves the partial rows a rank produced for another
  rank's block (SpMMB's output on the Y side) back to that rank, which adds them
  (:meth:`RowExchange.add_received`).

Both run as one MPI ``Ialltoallv`` on the communicator, through the counting wrapper. Why
Alltoallv: the peers and counts are fixed by the plan, MPI sends nothing for a zero count (so
a rank that needs nothing sends and receives no message), it needs no extra communicator
(a neighbourhood collective needs a distributed-graph communicator per object) nor requests
kept between calls (persistent ones would fix every call's message tag), and its
non-blocking form lets the kernels on the rows already local run while the rows travel.
Neither alternative was faster in every measurement (docs/algorithms/15d-sparse-aware.md;
experiments/bench_exchange.py).

Counted words (exact): a gather sends ``r`` words per row of ``send_rows`` and one message
per peer with a non-zero count; a scatter sends ``r`` words per received row back. Building
the plan sends one count to every other rank of the communicator and the ids of the needed
rows (phase "plan"). :func:`exchange_model` computes the same numbers for every rank from the
global pattern alone, without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from distmm.core.comm import CountingComm
from distmm.core.layout import block_of, block_offsets


@dataclass
class RowExchange:
    """The exchange plan of one rank (see the module docstring).

    ``send_rows``: local rows of this rank's dense block to send, grouped by destination in
    rank order (``sendcounts`` rows to each); ``recvcounts``: rows received from each rank,
    in rank order, which fill the compact buffer in that order. ``comm`` is the counting
    communicator the exchange runs on.
    """

    comm: CountingComm
    send_rows: np.ndarray
    sendcounts: np.ndarray
    recvcounts: np.ndarray

    @property
    def nrecv(self) -> int:
        """Rows this rank receives (the compact buffer's rows)."""
        return int(self.recvcounts.sum())

    @property
    def nsend(self) -> int:
        """Rows this rank sends in a gather (with repeats: one per destination)."""
        return int(self.send_rows.size)

    @classmethod
    def build(cls, comm: CountingComm, needed: np.ndarray, owners: np.ndarray,
              own_base: int, phase: str = "plan") -> RowExchange:
        """Build the plan from the rows this rank needs (collective over ``comm``).

        ``needed``: sorted global ids of the rows this rank needs from others; ``owners``:
        the rank in ``comm`` holding each (non-decreasing along ``needed``). ``own_base``:
        the global id of this rank's local row 0. Sends one count to every other rank and the
        needed ids to their owners (both counted under ``phase``)."""
        q = comm.size
        recvcounts = np.bincount(owners, minlength=q).astype(np.int64)
        sendcounts = np.empty(q, dtype=np.int64)
        ones = [1] * q
        comm.alltoallv(recvcounts, ones, sendcounts, ones, phase=phase)
        asked = np.empty(int(sendcounts.sum()), dtype=np.int64)
        comm.alltoallv(np.ascontiguousarray(needed, dtype=np.int64), recvcounts, asked,
                       sendcounts, phase=phase)
        return cls(comm, asked - own_base, sendcounts, recvcounts)

    def start_gather(self, Y: np.ndarray, sendbuf: np.ndarray, recvbuf: np.ndarray,
                     phase: str = "propagation") -> list[MPI.Request]:
        """Send the planned rows of ``Y`` (this rank's block, n_local x r) and receive the
        needed rows into ``recvbuf`` (nrecv x r), via ``sendbuf`` (nsend x r). Collective over
        the communicator; finish with :meth:`finish`."""
        r = Y.shape[1]
        # mode "clip" writes straight into sendbuf ("raise", the default, buffers a copy);
        # the rows are valid by construction
        np.take(Y, self.send_rows, axis=0, out=sendbuf, mode="clip")
        return self.comm.start_alltoallv(sendbuf, self.sendcounts * r, recvbuf,
                                         self.recvcounts * r, phase=phase)

    def start_scatter(self, partial: np.ndarray, recvbuf: np.ndarray,
                      phase: str = "propagation") -> list[MPI.Request]:
        """Send the partial rows in ``partial`` (nrecv x r, compact order) back to their
        owners and receive this rank's into ``recvbuf`` (nsend x r). Collective over the
        communicator; finish with :meth:`finish`, then :meth:`add_received`."""
        r = partial.shape[1]
        return self.comm.start_alltoallv(partial, self.recvcounts * r, recvbuf,
                                         self.sendcounts * r, phase=phase)

    def finish(self, requests: list[MPI.Request], phase: str = "propagation") -> None:
        """Wait for a started gather or scatter."""
        self.comm.finish(requests, phase=phase)

    def add_received(self, out: np.ndarray, recvbuf: np.ndarray) -> None:
        """Add the partial rows received by a scatter into ``out`` (this rank's block), in
        the order of the sources (the same on every run). Not collective."""
        lo = 0
        for k in self.sendcounts:
            hi = lo + int(k)
            if hi > lo:  # rows of one source are distinct: a fancy-index sum is exact
                out[self.send_rows[lo:hi]] += recvbuf[lo:hi]
            lo = hi


@dataclass(frozen=True)
class ExchangeCounts:
    """Per world rank (arrays of length p), from the pattern alone (:func:`exchange_model`).

    ``recv_rows``/``send_rows``: rows received/sent by one gather; ``recv_peers``/
    ``send_peers``: ranks it receives from/sends to; ``a_rows``: rows of the rank's A block;
    ``super_rows``: rows of its fiber's A superblock; ``nnz``: its stored nonzeros (after
    summing duplicates)."""

    recv_rows: np.ndarray
    send_rows: np.ndarray
    recv_peers: np.ndarray
    send_peers: np.ndarray
    a_rows: np.ndarray
    super_rows: np.ndarray
    nnz: np.ndarray
    local_nnz: np.ndarray

    def rank(self, k: int) -> dict[str, int]:
        """Rank k's counts, as keyword arguments of the family's ``exact_words``."""
        return {"a_rows": int(self.a_rows[k]), "super_rows": int(self.super_rows[k]),
                "gather_rows": int(self.send_rows[k]), "gather_peers": int(self.send_peers[k]),
                "scatter_rows": int(self.recv_rows[k]),
                "scatter_peers": int(self.recv_peers[k])}


def exchange_model(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int, c: int,
                   order: str = "fiber", offsets: np.ndarray | None = None) -> ExchangeCounts:
    """The exchange of every rank of the 1.5D sparsity-aware layout, from the pattern alone.

    ``rows``/``cols``: S's nonzeros in permuted global coordinates (duplicates allowed).
    Not collective; no MPI. ``offsets``: the p blocks of a square S's rows and columns when
    a partition sets them, or a pair (rows' blocks, columns' blocks) for a rectangular S's
    (else p near-equal blocks). Rank (u, v) (``order`` as
    :class:`~distmm.core.grid.ProcessGrid15D`) stores the nonzeros of row superblock u
    (A blocks uc .. uc + c - 1) in the column blocks j with j mod c = v; it holds B block
    uc + v and needs, from the owner (j // c, v) of every other such block, the distinct
    columns its nonzeros touch there."""
    m, n = int(shape[0]), int(shape[1])
    q = p // c
    oa, ob = block_offsets(m, p), block_offsets(n, p)
    if isinstance(offsets, tuple):
        oa, ob = (np.asarray(x, dtype=np.int64) for x in offsets)
    elif offsets is not None:
        oa = ob = np.asarray(offsets, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    u = block_of(rows, oa) // c
    jb = block_of(cols, ob)
    t = jb // c  # the layer position holding column block jb
    # nonzeros per grid position (distinct coordinates)
    key = np.unique(rows * n + cols)
    ku = block_of(key // n, oa) // c
    kjb = block_of(key % n, ob)
    pos = ku * c + kjb % c  # grid position index u * c + v
    nnz = np.bincount(pos, minlength=p)
    local_nnz = np.bincount(pos[ku == kjb // c], minlength=p)
    remote = t != u
    pairs = np.unique(u[remote] * n + cols[remote])
    pu, pc = pairs // n, pairs % n
    pjb = block_of(pc, ob)
    recv_pos = pu * c + pjb % c
    send_pos = (pjb // c) * c + pjb % c
    recv_rows = np.bincount(recv_pos, minlength=p)
    send_rows = np.bincount(send_pos, minlength=p)
    links = np.unique(recv_pos * p + send_pos)
    recv_peers = np.bincount(links // p, minlength=p)
    send_peers = np.bincount(links % p, minlength=p)
    sizes = np.diff(oa)
    a_rows = sizes.copy()  # A block uc + v sits at position uc + v
    super_rows = np.repeat(sizes.reshape(q, c).sum(axis=1), c)
    # positions (u, v) -> world ranks
    gu, gv = np.arange(p) // c, np.arange(p) % c
    world = gu * c + gv if order == "fiber" else gv * q + gu
    inv = np.empty(p, dtype=np.int64)
    inv[world] = np.arange(p)
    return ExchangeCounts(*(np.asarray(x, dtype=np.int64)[inv] for x in (
        recv_rows, send_rows, recv_peers, send_peers, a_rows, super_rows, nnz, local_nnz)))


__all__ = ["ExchangeCounts", "RowExchange", "exchange_model"]
