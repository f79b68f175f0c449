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

Both run as point-to-point messages with the plan's peers only (non-blocking ``Irecv`` and
``Isend``, :meth:`~distmm.core.comm.CountingComm.start_exchange`, through the counting
wrapper), each carrying the call's tag and checked for its size, as the dense shifting
family's shifts are. Why not ``Ialltoallv``: a collective is preceded in every call by the
all-gather that compares the ranks' calls (:meth:`~distmm.core.comm.CountingComm._same_call`),
and MPICH's ``Ialltoallv`` costs more than ``Isend``/``Irecv`` pairs even with one peer:
together, at a few ranks, the latency that the family's fewer words did not repay
(measured in docs/algorithms/15d-sparse-aware.md). A rank with no peer makes no MPI call; no
request or communicator is kept between calls.

A rank that needs :data:`WHOLE_FRACTION` or more of a peer's block receives the whole block
(:func:`whole_pairs`, in a layer that relays nothing): its owner sends it straight from the
caller's array, without the packing copy, and the receiver's compact numbering covers the
whole block. Both ends decide from the count of rows asked at planning, so no message is
added.

Counted words (exact): a gather sends ``r`` words per row of ``send_rows`` (a whole block's
rows where it sends the whole block) and one message per peer with a non-zero count; a
scatter sends ``r`` words per received row back. Building the plan sends one count to every
other rank of the communicator and the ids of the needed rows (phase "plan").
:func:`exchange_model` computes the same numbers for every rank from the global pattern
alone, without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distmm.core.comm import CountingComm
from distmm.core.layout import block_of, block_offsets
from distmm.core.relay_rule import RELAY_MIN_SAVING, RelayRule  # noqa: F401 (re-exported)

# A rank that needs at least this fraction of a peer's block gets the whole block, sent straight
# from the caller's array: no packing copy on the sender, for at most 1/0.9 - 1 = 11% more
# words on that pair (where nearly every row is needed, as in a dense region of S, the copy
# costs more than the few extra rows).
WHOLE_FRACTION = 0.9

# channels of CountingComm.start_exchange: the exchanges one call may have in flight
_CHANNELS = {"gather": 0, "gather-relay": 1, "scatter-relay": 2, "scatter": 3}


def relay_parents(rows: np.ndarray, dests: np.ndarray, owners: np.ndarray, q: int,
                  tries: int = 64, min_saving: float | None = None,
                  rule: RelayRule | None = None) -> np.ndarray:
    """The relay tree of one layer's exchange: the parent of every (row, destination) pair.

    ``rows``: global ids of the rows needed; ``dests``: the layer rank needing each;
    ``owners``: the layer rank owning each (one pair per row and destination, any order).
    Returns, per pair, the rank that sends it the row: its owner (level 1) or another
    destination of the same row that the owner sends it to (level 2; a relay). Depth is at
    most 2 and relays are chosen only among a row's own destinations, so no rank receives a
    row it does not need.

    Greedy on the load (rows sent per call, forwarding included). In passes over every
    rank, busiest first (the lower rank on a tie), each moves, row by row, one pair of each
    row it sends, where it can, to the least-loaded other possible sender of that row,
    provided that one stays below it after taking the row: an owner hands a level-1
    destination that relays nothing to another level-1 destination (a relay of the row
    already where one fits, else the least loaded); a relay hands a level-2 destination
    back to the owner or to another relay of the row. Rows are tried widest
    first (most pairs the rank sends; the ``tries`` widest). It stops when a pass moves
    nothing. Moving from every rank, not only the busiest, matters: the busiest rank's
    destinations are often loaded nearly as much (a partition's neighbourhood), and only
    once they have handed rows on can they take the busiest's. Every move lowers a load and
    raises a smaller one by one, so the sum of squared loads falls strictly and it stops;
    the busiest load never rises. The tree is kept only where ``rule``
    (:class:`~distmm.core.relay_rule.RelayRule`) says so: by default where it lowers the
    busiest load by at least ``min_saving`` (a fraction of it; default
    :data:`RELAY_MIN_SAVING`); otherwise every pair's parent is its owner. Deterministic:
    the result depends on the set of pairs alone (not their order), so every rank and the
    planner get the same tree. Not collective."""
    rows = np.asarray(rows, dtype=np.int64)
    dests = np.asarray(dests, dtype=np.int64)
    owners = np.asarray(owners, dtype=np.int64)
    order = np.lexsort((dests, rows))
    r, d, o = rows[order], dests[order], owners[order]
    parent = o.copy()
    if r.size == 0:
        return parent
    load = np.bincount(o, minlength=q).astype(np.int64)
    start = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    group = np.cumsum(np.r_[True, r[1:] != r[:-1]]) - 1  # each pair's row (start's index)
    end = np.r_[start[1:], r.size]
    relays = np.zeros(r.size, dtype=np.int64)  # level-2 children of each pair's destination
    multi = (end - start)[group] >= 2  # pairs of rows with two or more destinations
    # the pairs each rank may send: as an owner, its rows' pairs; as a relay, the other
    # pairs of the rows it needs (only rows with two or more destinations can move)
    ys = np.flatnonzero(multi)
    owned = ys[np.argsort(o[ys], kind="stable")]
    owned_at = np.searchsorted(o[owned], np.arange(q + 1))
    lens = (end - start)[group[ys]]
    cand = np.repeat(start[group[ys]], lens) + (
        np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
    who = np.repeat(d[ys], lens)
    keep = cand != np.repeat(ys, lens)
    cand, who = cand[keep], who[keep]
    srt = np.argsort(who, kind="stable")
    relayed, relayed_at = cand[srt], np.searchsorted(who[srt], np.arange(q + 1))

    def move(b: int) -> bool:
        if load[b] - 1 <= load.min():  # nobody could take a row from it
            return False
        a = owned[owned_at[b]:owned_at[b + 1]]
        z = relayed[relayed_at[b]:relayed_at[b + 1]]
        sent = np.concatenate((a[parent[a] == b], z[parent[z] == b]))
        if sent.size == 0:
            return False
        g, counts = np.unique(group[sent], return_counts=True)
        moved = False
        for i in g[np.argsort(-counts, kind="stable")[:tries]]:
            s, e = int(start[i]), int(end[i])
            owner = int(o[s])
            level1 = s + np.flatnonzero(parent[s:e] == owner)
            if b == owner:  # hand a level-1 destination to another level-1 destination
                fits = level1[load[d[level1]] + 1 < load[b]]
                # a relay of this row already, where one fits: a fresh relay would use up a
                # level-1 destination that could itself have been moved
                fits = fits[relays[fits] > 0] if np.any(relays[fits] > 0) else fits
                if fits.size == 0:
                    continue
                new = fits[np.argmin(load[d[fits]])]  # the first of the least loaded
                free = level1[(relays[level1] == 0) & (level1 != new)]
                if free.size == 0:
                    continue
                x, to = free[-1], int(d[new])
                relays[new] += 1
            else:  # a relay hands a level-2 destination to the owner or another relay
                mine = s + int(np.flatnonzero(d[s:e] == b)[0])
                # only to the owner or to a relay of this row already (as above)
                fits = level1[(level1 != mine) & (load[d[level1]] + 1 < load[b])
                              & (relays[level1] > 0)]
                best = fits[np.argmin(load[d[fits]])] if fits.size else -1
                if best >= 0 and (load[owner] + 1 >= load[b] or load[d[best]] < load[owner]):
                    to, new = int(d[best]), best
                elif load[owner] + 1 < load[b]:
                    to, new = owner, -1
                else:
                    continue
                x = s + np.flatnonzero(parent[s:e] == b)[-1]
                relays[mine] -= 1
                if new >= 0:
                    relays[new] += 1
            parent[x] = to
            load[b] -= 1
            load[to] += 1
            moved = True  # and on to the next row (one move per row and call)
        return moved

    before = int(load.max())
    while True:
        moved = False
        for b in np.argsort(-load, kind="stable"):
            moved |= move(int(b))
        if not moved:
            break
    # kept by ``rule`` (distmm.core.relay_rule), given the busiest relay's phase-2 messages
    rule = rule if isinstance(rule, RelayRule) else RelayRule(
        RELAY_MIN_SAVING if min_saving is None else min_saving)
    second = np.unique(parent[parent != o] * q + d[parent != o]) // q
    if not rule.keeps(before, int(load.max()), int(np.bincount(second).max(initial=0))):
        parent = o
    out = np.empty_like(parent)
    out[order] = parent
    return out


class Transfer:
    """A started gather or scatter of a :class:`RowExchange` (finish it with
    :meth:`RowExchange.finish`)."""

    __slots__ = ("kind", "requests", "send", "recv")

    def __init__(self, kind: str, requests: list, send: np.ndarray, recv: np.ndarray) -> None:
        self.kind, self.requests, self.send, self.recv = kind, requests, send, recv


@dataclass
class RowExchange:
    """The exchange plan of one rank (see the module docstring).

    Phase 1 (direct): ``send_rows``, local rows of this rank's dense block, grouped by
    destination in rank order (``sendcounts`` rows to each); ``recvcounts``: rows received
    from each owner. Phase 2 (relayed; empty on every rank of the layer unless ``relayed``):
    ``relay_rows``, positions in this rank's receive buffer of rows it got in phase 1 and
    forwards, grouped by destination (``relay_sendcounts``); ``relay_recvcounts``: rows
    received from each relay. The receive buffer holds phase 1's rows (by source rank, sorted
    ids within), then phase 2's (likewise): ``buffer_ids`` are their global ids, the compact
    numbering of the CSR block. ``comm`` is the counting communicator the exchange runs on.
    """

    comm: CountingComm
    send_rows: np.ndarray
    sendcounts: np.ndarray
    recvcounts: np.ndarray
    relay_rows: np.ndarray
    relay_sendcounts: np.ndarray
    relay_recvcounts: np.ndarray
    buffer_ids: np.ndarray
    relayed: bool = False
    whole: np.ndarray | None = None

    def __post_init__(self) -> None:
        # what every call reads, once: the buffers' sizes and, per exchange and width, the
        # peers and their rows in the buffers (_start)
        q = self.sendcounts.size
        if self.whole is None:
            self.whole = np.zeros(q, dtype=bool)
        self.nrecv = int(self.recvcounts.sum() + self.relay_recvcounts.sum())
        self.nsend = int(self.send_rows.size + self.relay_rows.size)
        self._n1r, self._n1s = int(self.recvcounts.sum()), int(self.send_rows.size)
        # a gather packs the rows of the destinations that do not take the whole block:
        # (rows of send_rows, rows of the send buffer) of each such destination
        bounds = np.r_[0, np.cumsum(self.sendcounts)]
        packed = np.where(self.whole, 0, self.sendcounts)
        pack_at = np.r_[0, np.cumsum(packed)]
        self._packs = [(int(bounds[k]), int(bounds[k + 1]), int(pack_at[k]),
                        int(pack_at[k + 1])) for k in np.flatnonzero(packed)]
        self._any_whole = bool(self.whole.any())
        if not self._any_whole:  # one copy of all rows sent
            self._packs = [(0, self._n1s, 0, self._n1s)]
        self._rows = {
            "gather": ([(int(k), -1 if self.whole[k] else int(pack_at[k]), int(pack_at[k + 1]))
                        for k in np.flatnonzero(self.sendcounts)],
                       _segments(self.recvcounts)),
            "gather-relay": (_segments(self.relay_sendcounts),
                             _segments(self.relay_recvcounts)),
            "scatter": (_segments(self.recvcounts),
                        [(int(k), int(bounds[k]), int(bounds[k + 1]))
                         for k in np.flatnonzero(self.sendcounts)]),
            "scatter-relay": (_segments(self.relay_recvcounts),
                              _segments(self.relay_sendcounts))}

    @classmethod
    def build(cls, comm: CountingComm, needed: np.ndarray, owners: np.ndarray,
              own_base: int, phase: str = "plan", relay: bool = False,
              owner_of=None, blocks: np.ndarray | None = None) -> RowExchange:
        """Build the plan from the rows this rank needs (collective over ``comm``).

        ``needed``: sorted global ids of the rows this rank needs from others; ``owners``:
        the rank in ``comm`` holding each. ``own_base``: the global id of this rank's local
        row 0. With ``relay`` (and three or more ranks), rank 0 first gathers every rank's
        needed ids (a count, then the ids), builds the relay tree (:func:`relay_parents`;
        ``owner_of`` maps global ids to owners) and sends each rank whether the layer relays
        at all and the parent of each row it needs. Then every rank sends one count to every
        other rank and the needed ids to their parents (owners or relays). All of it is
        counted under ``phase``: :func:`plan_words`.

        ``blocks`` (q x 2: the global ids [start, stop) of each rank's block), where given
        and the layer does not relay: a rank needing at least :data:`WHOLE_FRACTION` of a
        peer's block receives all of it (:func:`whole_pairs`; both ends decide alike from the
        count of rows asked, with no further message)."""
        q, me = comm.size, comm.rank
        needed = np.ascontiguousarray(needed, dtype=np.int64)
        owners = np.asarray(owners, dtype=np.int64)
        parents, relayed = owners, False
        if relay and q >= 3:
            to_root = np.zeros(q, dtype=np.int64)
            to_root[0] = 1
            counts = np.empty(q if me == 0 else 0, dtype=np.int64)
            from_all = np.ones(q, dtype=np.int64) if me == 0 else np.zeros(q, dtype=np.int64)
            comm.alltoallv(np.array([needed.size], dtype=np.int64), to_root, counts,
                           from_all, phase=phase)
            counts = counts if me == 0 else np.zeros(q, dtype=np.int64)
            to_root[0] = needed.size
            everyone = np.empty(int(counts.sum()), dtype=np.int64)
            comm.alltoallv(needed, to_root, everyone, counts, phase=phase)
            reply = np.empty(0, dtype=np.int64)
            if me == 0:
                dests = np.repeat(np.arange(q, dtype=np.int64), counts)
                tree = relay_parents(everyone, dests, owner_of(everyone), q,
                                     rule=relay if isinstance(relay, RelayRule) else None)
                flag = int(np.any(tree != owner_of(everyone)))
                bounds = np.r_[0, np.cumsum(counts)]
                reply = np.concatenate([np.r_[flag, tree[bounds[k]:bounds[k + 1]]]
                                        for k in range(q)]).astype(np.int64)
            back = np.empty(1 + needed.size, dtype=np.int64)
            from_root = np.zeros(q, dtype=np.int64)
            from_root[0] = 1 + needed.size
            comm.alltoallv(reply, counts + 1 if me == 0 else np.zeros(q, dtype=np.int64),
                           back, from_root, phase=phase)
            relayed, parents = bool(back[0]), back[1:]
        second = parents != owners
        # phase 1's rows (by owner, sorted ids), then phase 2's (by relay, sorted ids)
        order = np.lexsort((needed, parents, second))
        buffer_ids = needed[order]
        sizes = None if blocks is None or relayed else np.diff(blocks, axis=1)[:, 0]
        need = np.bincount(parents[~second], minlength=q).astype(np.int64)
        whole_from = (np.zeros(q, dtype=bool) if sizes is None
                      else whole_pairs(need, sizes))
        if whole_from.any():  # whole blocks in place of their needed rows
            at = np.r_[0, np.cumsum(need)]
            buffer_ids = np.concatenate([
                np.arange(blocks[k, 0], blocks[k, 1], dtype=np.int64) if whole_from[k]
                else buffer_ids[at[k]:at[k + 1]] for k in range(q)])
            need = np.where(whole_from, sizes, need)
        asks = np.lexsort((needed, second, parents))  # to each parent: owned rows first
        askcounts = np.bincount(parents, minlength=q).astype(np.int64)
        sendcounts = np.empty(q, dtype=np.int64)
        ones = [1] * q
        comm.alltoallv(askcounts, ones, sendcounts, ones, phase=phase)
        asked = np.empty(int(sendcounts.sum()), dtype=np.int64)
        comm.alltoallv(needed[asks], askcounts, asked, sendcounts, phase=phase)
        source = np.repeat(np.arange(q, dtype=np.int64), sendcounts)
        owned = np.ones(asked.size, dtype=bool)
        relay_rows = np.empty(0, dtype=np.int64)
        if relayed:  # asked rows this rank does not own: it relays them (from phase 1's)
            owned = owner_of(asked) == me
            first = buffer_ids[:int(np.count_nonzero(~second))]
            srt = np.argsort(first, kind="stable")
            relay_rows = srt[np.searchsorted(first, asked[~owned], sorter=srt)].astype(np.int64)
        send_rows = asked[owned] - own_base
        sendcounts = np.bincount(source[owned], minlength=q).astype(np.int64)
        whole_to = (np.zeros(q, dtype=bool) if sizes is None
                    else whole_pairs(sendcounts, np.full(q, sizes[me])))
        if whole_to.any():
            at = np.r_[0, np.cumsum(sendcounts)]
            send_rows = np.concatenate([
                np.arange(sizes[me], dtype=np.int64) if whole_to[k]
                else send_rows[at[k]:at[k + 1]] for k in range(q)])
            sendcounts = np.where(whole_to, sizes[me], sendcounts)
        return cls(comm, send_rows, sendcounts, need,
                   relay_rows, np.bincount(source[~owned], minlength=q).astype(np.int64),
                   np.bincount(parents[second], minlength=q).astype(np.int64),
                   buffer_ids, relayed, whole_to)

    def _start(self, kind: str, sendbuf: np.ndarray, recvbuf: np.ndarray,
               Y: np.ndarray | None = None, phase: str = "propagation",
               wait: bool = False) -> list:
        """Start one exchange of rows: ``kind`` names its peers and their rows in the
        buffers (``self._rows``) and its channel; a gather's destinations that take the
        whole block get ``Y`` itself. A rank with no peer in it makes no MPI call. With
        ``wait`` the exchange is complete on return (:meth:`CountingComm.exchange`) and
        there is no request to finish."""
        sends, recvs = self._rows[kind]
        if not sends and not recvs:
            return []
        sends = [(k, Y if lo < 0 else sendbuf[lo:hi]) for k, lo, hi in sends]
        recvs = [(k, recvbuf[lo:hi]) for k, lo, hi in recvs]
        if wait:
            self.comm.exchange(sends, recvs, _CHANNELS[kind], phase)
            return []
        return self.comm.start_exchange(sends, recvs, _CHANNELS[kind], phase)

    def start_gather(self, Y: np.ndarray, sendbuf: np.ndarray, recvbuf: np.ndarray,
                     phase: str = "propagation", wait: bool = False) -> Transfer:
        """Send the planned rows of ``Y`` (this rank's block, n_local x r) and receive the
        needed rows into ``recvbuf`` (nrecv x r, in ``buffer_ids`` order), via ``sendbuf``
        (nsend x r). Starts phase 1; :meth:`finish` completes it and runs phase 2 (the
        relays forward what they received). Collective over the communicator (point to
        point with the peers of the plan). ``wait``: phase 1 is complete on return (a
        caller with nothing to overlap it with; a single ``Sendrecv`` where this rank has
        one peer each way); :meth:`finish` is still called for phase 2."""
        # mode "clip" writes straight into sendbuf ("raise", the default, buffers a copy);
        # the rows are valid by construction
        rows = self.send_rows
        for a, b, lo, hi in self._packs:
            np.take(Y, rows[a:b], axis=0, out=sendbuf[lo:hi], mode="clip")
        if self._any_whole and not Y.flags.c_contiguous:
            Y = np.ascontiguousarray(Y)
        reqs = self._start("gather", sendbuf, recvbuf, Y, phase, wait)
        return Transfer("gather", reqs, sendbuf, recvbuf)

    def start_scatter(self, partial: np.ndarray, recvbuf: np.ndarray,
                      phase: str = "propagation", wait: bool = False) -> Transfer:
        """Send the partial rows in ``partial`` (nrecv x r, ``buffer_ids`` order) back up the
        tree: phase 2's rows to their relays, which add their own and, in :meth:`finish`,
        send the sums with phase 1's rows to the owners; this rank's rows arrive in
        ``recvbuf`` (nsend x r). Collective over the communicator; finish with
        :meth:`finish`, then :meth:`add_received`. ``wait`` as :meth:`start_gather`'s."""
        if self.relayed:
            reqs = self._start("scatter-relay", partial[self._n1r:], recvbuf[self._n1s:],
                               phase, wait=wait)
            return Transfer("scatter-relay", reqs, partial, recvbuf)
        reqs = self._start("scatter", partial, recvbuf, phase=phase, wait=wait)
        return Transfer("scatter", reqs, partial, recvbuf)

    def finish(self, transfer: Transfer, phase: str = "propagation") -> None:
        """Wait for a started gather or scatter, and run its relayed phase (a gather's
        phase 2 after phase 1; a scatter's direct phase after the relays' sums)."""
        self.comm.finish(transfer.requests, phase=phase)
        if not self.relayed or transfer.kind == "scatter":
            return
        n1r, n1s = self._n1r, self._n1s
        if transfer.kind == "gather":
            send, recv = transfer.send, transfer.recv
            np.take(recv, self.relay_rows, axis=0, out=send[n1s:], mode="clip")
            self.comm.finish(self._start("gather-relay", send[n1s:], recv[n1r:],
                                         phase=phase), phase=phase)
            return
        partial, back = transfer.send, transfer.recv
        _add_by_source(partial, self.relay_rows, self.relay_sendcounts, back[n1s:])
        self.comm.finish(self._start("scatter", partial[:n1r], back[:n1s], phase=phase),
                         phase=phase)

    def add_received(self, out: np.ndarray, recvbuf: np.ndarray) -> None:
        """Add the partial rows received by a scatter into ``out`` (this rank's block), in
        the order of the sources (the same on every run). Not collective."""
        _add_by_source(out, self.send_rows, self.sendcounts, recvbuf)


def _segments(counts: np.ndarray) -> list[tuple[int, int, int]]:
    """(peer, first row, end row) of each peer with a non-zero count, rows in peer order."""
    at = np.r_[0, np.cumsum(counts)]
    return [(int(k), int(at[k]), int(at[k + 1])) for k in np.flatnonzero(counts)]


def whole_pairs(rows: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Which of a rank's exchanges move a whole block: ``rows[k]`` rows needed of a block
    of ``sizes[k]`` rows, at least :data:`WHOLE_FRACTION` of it (and not none). The sender
    and the receiver decide alike from the same two counts. Not collective."""
    rows = np.asarray(rows, dtype=np.int64)
    return (rows > 0) & (rows >= WHOLE_FRACTION * np.asarray(sizes, dtype=np.int64))


def _add_by_source(out: np.ndarray, rows: np.ndarray, counts: np.ndarray,
                   recvbuf: np.ndarray) -> None:
    """out[rows] += recvbuf, one source's rows (``counts`` of them, in order) at a time."""
    lo = 0
    for k in counts:
        hi = lo + int(k)
        if hi > lo:  # rows of one source are distinct: a fancy-index sum is exact
            out[rows[lo:hi]] += recvbuf[lo:hi]
        lo = hi


def plan_words(q: int, recv_rows: int, ask_peers: int, relay: bool = False,
               root_rows: int | None = None) -> dict[str, int]:
    """Words and messages one rank sends building the exchange plan (:meth:`RowExchange.build`,
    phase "plan"), exact: one count to each other rank of its layer of q ranks, and the ids of
    the ``recv_rows`` rows it needs to their ``ask_peers`` distinct parents. With ``relay``
    and q >= 3 also the relay tree's: a rank other than the layer's rank 0 sends it a count
    and its needed ids; rank 0 (``root_rows``: the rows the layer's other ranks need, summed)
    sends each other rank a flag and the parents of its rows. Not collective."""
    if q == 1:
        return {"words": 0, "messages": 0}
    words, msgs = (q - 1) + recv_rows, (q - 1) + ask_peers
    if relay and q >= 3:
        if root_rows is None:
            words, msgs = words + 1 + recv_rows, msgs + 1 + int(recv_rows > 0)
        else:
            words, msgs = words + (q - 1) + root_rows, msgs + (q - 1)
    return {"words": words, "messages": msgs}


@dataclass(frozen=True)
class ExchangeCounts:
    """Per world rank (arrays of length p), from the pattern alone (:func:`exchange_model`).

    ``recv_rows``/``send_rows``: rows received/sent by one gather (forwarded rows included);
    ``recv_peers``/``send_peers``: messages it receives/sends in one gather (one per source
    or destination and phase: a rank that is both an owner and a relay of another counts
    twice); ``a_rows``: rows of the rank's A block; ``super_rows``: rows of its fiber's A
    superblock; ``nnz``: its stored nonzeros (after summing duplicates); ``plan_words``/
    ``plan_messages``: what building the plan sends (:func:`plan_words`); ``relay_rows``:
    the rows it forwards in phase 2."""

    recv_rows: np.ndarray
    send_rows: np.ndarray
    recv_peers: np.ndarray
    send_peers: np.ndarray
    a_rows: np.ndarray
    super_rows: np.ndarray
    nnz: np.ndarray
    local_nnz: np.ndarray
    plan_words: np.ndarray
    plan_messages: np.ndarray
    relay_rows: np.ndarray

    def rank(self, k: int) -> dict[str, int]:
        """Rank k's counts, as keyword arguments of the family's ``exact_words``."""
        return {"a_rows": int(self.a_rows[k]), "super_rows": int(self.super_rows[k]),
                "gather_rows": int(self.send_rows[k]), "gather_peers": int(self.send_peers[k]),
                "scatter_rows": int(self.recv_rows[k]),
                "scatter_peers": int(self.recv_peers[k])}


def _distinct(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """Per value of a (0 .. p-1), the distinct values of b paired with it."""
    return np.bincount(np.unique(a * p + b) // p, minlength=p)


def exchange_model(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int, c: int,
                   order: str = "fiber", offsets: np.ndarray | None = None,
                   relay: bool = True) -> ExchangeCounts:
    """The exchange of every rank of the 1.5D sparsity-aware layout, from the pattern alone.

    ``rows``/``cols``: S's nonzeros in permuted global coordinates (duplicates allowed).
    Not collective; no MPI. ``offsets``: the p blocks of a square S's rows and columns when
    a partition sets them, or a pair (rows' blocks, columns' blocks) for a rectangular S's
    (else p near-equal blocks). Rank (u, v) (``order`` as
    :class:`~distmm.core.grid.ProcessGrid15D`) stores the nonzeros of row superblock u
    (A blocks uc .. uc + c - 1) in the column blocks j with j mod c = v; it holds B block
    uc + v and needs, from the owner (j // c, v) of every other such block, the distinct
    columns its nonzeros touch there. With ``relay`` (the family's default), each layer's
    rows reach their destinations through :func:`relay_parents`' tree, as the run builds it."""
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
    layer, owner = pjb % c, pjb // c
    parent = owner.copy()
    if relay and q >= 3:
        for v in range(c):
            sel = np.flatnonzero(layer == v)
            parent[sel] = relay_parents(pc[sel], pu[sel], owner[sel], q,
                                        rule=relay if isinstance(relay, RelayRule) else None)
    recv_pos = pu * c + layer
    send_pos = parent * c + layer  # who sends the row to recv_pos (owner or relay)
    first = parent == owner
    need_rows = np.bincount(recv_pos, minlength=p)
    recv_rows = need_rows.copy()
    send_rows = np.bincount(send_pos, minlength=p)
    # whole blocks (RowExchange.build's ``blocks``): pairs of a layer that relays nothing
    # where the receiver needs most of the owner's block
    relays = np.bincount(layer[~first], minlength=c) > 0
    pair, count = np.unique(recv_pos * p + pjb, return_counts=True)
    kr, kb = pair // p, pair % p  # receiver's position; owner's block (= its position)
    whole = whole_pairs(count, np.diff(ob)[kb]) & ~relays[kb % c]
    extra = np.diff(ob)[kb[whole]] - count[whole]
    recv_rows += np.bincount(kr[whole], weights=extra, minlength=p).astype(np.int64)
    send_rows += np.bincount(kb[whole], weights=extra, minlength=p).astype(np.int64)
    relay_rows = np.bincount(send_pos[~first], minlength=p)
    send_peers = (_distinct(send_pos[first], recv_pos[first], p)
                  + _distinct(send_pos[~first], recv_pos[~first], p))
    recv_peers = (_distinct(recv_pos[first], send_pos[first], p)
                  + _distinct(recv_pos[~first], send_pos[~first], p))
    ask_peers = _distinct(recv_pos, send_pos, p)
    sizes = np.diff(oa)
    a_rows = sizes.copy()  # A block uc + v sits at position uc + v
    super_rows = np.repeat(sizes.reshape(q, c).sum(axis=1), c)
    # the plan's words: a layer's rank 0 (u = 0) gathers the others' needed ids
    gu, gv = np.arange(p) // c, np.arange(p) % c
    layer_rows = np.bincount(gv, weights=need_rows, minlength=c).astype(np.int64)
    plans = [plan_words(q, int(need_rows[k]), int(ask_peers[k]), relay,
                        int(layer_rows[gv[k]] - need_rows[k]) if gu[k] == 0 else None)
             for k in range(p)]
    plan_w = np.array([x["words"] for x in plans], dtype=np.int64)
    plan_m = np.array([x["messages"] for x in plans], dtype=np.int64)
    # positions (u, v) -> world ranks
    world = gu * c + gv if order == "fiber" else gv * q + gu
    inv = np.empty(p, dtype=np.int64)
    inv[world] = np.arange(p)
    return ExchangeCounts(*(np.asarray(x, dtype=np.int64)[inv] for x in (
        recv_rows, send_rows, recv_peers, send_peers, a_rows, super_rows, nnz, local_nnz,
        plan_w, plan_m, relay_rows)))


__all__ = ["WHOLE_FRACTION", "ExchangeCounts", "RowExchange", "Transfer", "exchange_model",
           "plan_words", "relay_parents", "whole_pairs"]
