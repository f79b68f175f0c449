"""The counting communicator: every word the algorithms send passes through here.

Words are matrix elements (one float, or one index), messages are point-to-point messages. For
collectives the counts follow the bandwidth-optimal algorithms the paper's cost model assumes
(section V, citing Chan et al.): a ring all-gather or reduce-scatter among c ranks moves c - 1
messages per rank, and each rank sends its own block to the c - 1 others (all-gather) or its
contribution to the c - 1 other blocks (reduce-scatter). A cyclic shift is one message each way.
A communicator of one rank moves nothing and counts nothing. Blocks of ``PAIRWISE_BYTES`` or
more are sent exactly so, as c - 1 pairwise exchanges; smaller ones go through MPI's
all-gather and reduce-scatter, whose own algorithms may route them otherwise (the counts are
then the model's, for the same words delivered).

Each phase is also timed: ``replication`` (all-gather of an input along the fiber),
``propagation`` (cyclic shifts inside a layer), ``reduction`` (reduce-scatter of an output along
the fiber), ``compute`` (local kernels), ``distribute`` (placing S once), ``values`` (moving
edge values into the stored S^T's order), ``other`` (agreement on input checks); the edge-value
primitives of :mod:`distmm.ops` name phases of their own.

Ranks in different calls never pair up (docs/reliability.md, "Python API: ranks in different
calls"). The operation's checks agree on the first call of each operation only (under
``checks="once"``; on none under ``"off"``), so later calls are told apart by their messages:
each point-to-point message carries the call's tag (:attr:`CommStats.call_tag`: operation and
FusedMM strategy) and its received size is checked against the size the receiving call
expects (a call of another width); and the first collective of each call on each
communicator (and its first shift, in the families whose shifts do not show the width:
:attr:`CountingComm.sizes_show_width`) is preceded by one small all-gather of the call's tag
and width (:meth:`CountingComm._same_call`), so that ranks in different calls raise one error there
instead of pairing their collectives. Neither check is counted: like the calls' agreement,
they are not words of the paper's model.
"""

from __future__ import annotations

import functools
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from distmm.errors import InputError
from distmm.runtime import watchdog

PHASES = ("distribute", "replication", "propagation", "reduction", "compute", "values",
          "other")
COUNTERS = ("words_sent", "words_received", "messages_sent", "messages_received")


class PhaseTimer:
    """Adds the wall-clock time of a ``with`` body to ``seconds[phase]`` (also when the body
    raises). A plain class: every message of a call enters one, and a generator-based context
    manager costs more than twice as much to enter and leave."""

    __slots__ = ("seconds", "phase", "t0")

    def __init__(self, seconds: dict[str, float], phase: str) -> None:
        self.seconds = seconds
        self.phase = phase

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.seconds[self.phase] += time.perf_counter() - self.t0


@dataclass
class CommStats:
    """Per-phase counters and wall-clock seconds of one rank. Not collective."""

    counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: dict.fromkeys(COUNTERS, 0))
    )
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # Added to the point-to-point tags of the counting communicators that count into these
    # stats: the current call's (distmm.algorithms.calls.call_tag), so that ranks in
    # different calls never receive each other's messages. Not a counter (no annotation);
    # nor are the call's width, name and serial number (set_call), which the first collective
    # of each call compares across ranks (CountingComm._same_call).
    call_tag = 0
    call_width = 0
    call_name = "no call"
    call_serial = 0

    def set_call(self, tag: int, width: int, name: str) -> None:
        """Start a call: its point-to-point tag offset, its dense width r and a name for
        messages (``"fusedmm_a (strategy reuse)"``). Not collective."""
        self.call_tag = tag
        self.call_width = int(width)
        self.call_name = name
        self.call_serial += 1
        self.__dict__.pop("_receives", None)  # expected sizes of an unfinished call's receives

    def add(self, phase: str, sent: int, received: int, msgs_sent: int, msgs_received: int) -> None:
        c = self.counts[phase]
        c["words_sent"] += int(sent)
        c["words_received"] += int(received)
        c["messages_sent"] += int(msgs_sent)
        c["messages_received"] += int(msgs_received)

    def timer(self, phase: str) -> PhaseTimer:
        """Context manager: add the wall-clock time of the ``with`` body to ``phase``."""
        return PhaseTimer(self.seconds, phase)

    def words(self, phase: str | None = None, kind: str = "words_sent") -> int:
        """Words (or messages, with ``kind``) of one phase, or of all communication phases."""
        if phase is not None:
            return self.counts[phase][kind] if phase in self.counts else 0
        return sum(c[kind] for ph, c in self.counts.items() if ph != "distribute")

    def reset(self) -> None:
        self.counts.clear()
        self.seconds.clear()

    def as_dict(self) -> dict:
        phases = sorted(set(self.counts) | set(self.seconds), key=_phase_key)
        return {
            ph: {**(dict(self.counts[ph]) if ph in self.counts else dict.fromkeys(COUNTERS, 0)),
                 "seconds": self.seconds.get(ph, 0.0)}
            for ph in phases
        }


def _phase_key(ph: str) -> tuple[int, str]:
    return (PHASES.index(ph) if ph in PHASES else len(PHASES), ph)


def gather_report(comm: MPI.Comm, per_rank: dict, root: int = 0) -> dict | None:
    """Gather every rank's ``{phase: {counter: value}}`` dict and summarise on ``root``.

    Collective. Returns, on root only, ``{phase: {counter: {"max", "mean", "sum"}}}`` plus
    ``"ranks"``: the per-rank dicts; ``None`` elsewhere. Runs once per report, off the hot path,
    so it uses a pickle-based gather.
    """
    everything = comm.gather(per_rank, root=root)
    if comm.Get_rank() != root:
        return None
    phases = sorted({ph for d in everything for ph in d}, key=_phase_key)
    summary: dict = {}
    for ph in phases:
        keys = sorted({k for d in everything for k in d.get(ph, {})})
        summary[ph] = {}
        for k in keys:
            vals = [float(d.get(ph, {}).get(k, 0.0)) for d in everything]
            summary[ph][k] = {"max": max(vals), "mean": sum(vals) / len(vals), "sum": sum(vals)}
    return {"phases": summary, "ranks": everything}


_MPI_TYPES = {
    np.dtype(np.float32): MPI.FLOAT,
    np.dtype(np.float64): MPI.DOUBLE,
    np.dtype(np.int32): MPI.INT32_T,
    np.dtype(np.int64): MPI.INT64_T,
}


def mpi_type(dtype: np.dtype) -> MPI.Datatype:
    """The predefined MPI datatype of a numpy dtype (predefined, so reductions work)."""
    return _MPI_TYPES[np.dtype(dtype)]


def _displs(counts: Sequence[int]) -> np.ndarray:
    d = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(np.asarray(counts[:-1], dtype=np.int64), out=d[1:])
    return d


PAIRWISE_VARIABLE = "DISTMM_PAIRWISE_BYTES"


def _pairwise_bytes() -> tuple[int, str | None]:
    """(the pairwise-exchange threshold, a problem with its setting or None):
    ``DISTMM_PAIRWISE_BYTES`` if set to a non-negative integer, else 256 KiB. A bad value is
    reported by the next agreement (:func:`pairwise_setting`), on every rank alike."""
    default = 256 * 1024
    raw = os.environ.get(PAIRWISE_VARIABLE)
    if raw is None:
        return default, None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        return default, (f"{PAIRWISE_VARIABLE}={raw!r}: expected a number of bytes, 0 or more "
                         "(unset it for the default, 256 KiB)")
    return value, None


#: Block size from which :meth:`CountingComm.allgatherv` and :meth:`CountingComm.reduce_scatter`
#: exchange blocks pairwise instead of calling MPI's collective: the largest block's bytes.
#: Below it MPI's algorithms, which take fewer steps, were as fast or faster on the
#: development machine; from it on the exchanges were faster (docs/performance.md). Set by
#: the environment variable ``DISTMM_PAIRWISE_BYTES`` when distmm is imported (a value above
#: any block keeps MPI's collectives); it must be the same on every rank, which
#: ``distmm.distribute`` and ``distmm calibrate`` check (:func:`pairwise_setting`).
PAIRWISE_BYTES, _PAIRWISE_PROBLEM = _pairwise_bytes()


def pairwise_setting() -> tuple[str | None, dict[str, object]]:
    """(a problem with ``DISTMM_PAIRWISE_BYTES`` on this rank or None, the setting that every
    rank must share): the ``message`` and ``same`` of :func:`distmm.errors.agree`."""
    return _PAIRWISE_PROBLEM, {PAIRWISE_VARIABLE: PAIRWISE_BYTES}


_TAG_GATHER, _TAG_REDUCE = 19, 20
# CountingComm.start_exchange's messages: this tag plus its channel (0 .. 7)
_TAG_EXCHANGE = 21

# The phases of an operation's call: a collective in one of them is the call's
# (CountingComm._same_call); distribution, agreement and the edge-value primitives are not.
CALL_PHASES = frozenset(("replication", "propagation", "reduction"))
# First word of the per-call comparison (CountingComm._same_call): a rank in another
# collective of the same communicator sends something else.
_CALL_CHECK = 0x64697374  # "dist"


def pairwise_block(nbytes: int) -> bool:
    """Whether a fiber collective whose largest block has ``nbytes`` bytes exchanges its
    blocks pairwise (:data:`PAIRWISE_BYTES`). Not collective."""
    return nbytes >= PAIRWISE_BYTES


def _pairwise(counts: list[int], itemsize: int) -> bool:
    """Whether a collective over blocks of ``counts`` elements exchanges them pairwise (the
    same answer on every rank: counts are the same everywhere)."""
    return pairwise_block(max(counts) * itemsize)


def _flat(buf: np.ndarray) -> np.ndarray:
    """A 1-D view of a C-contiguous buffer (never a copy, which would lose what MPI writes)."""
    if not buf.flags.c_contiguous:
        raise ValueError("communication buffers must be C-contiguous")
    return buf.reshape(-1)


class CountingComm:
    """A communicator wrapper that counts and times what passes through it.

    Wraps any mpi4py intracommunicator; all methods are collective over it, except
    :meth:`shift`, which pairs with the matching call on the two neighbours. Buffers are numpy
    arrays; counts are in elements (words), not bytes. Only upper-case (buffer) MPI calls.
    """

    def __init__(self, comm: MPI.Comm, stats: CommStats) -> None:
        self.comm = comm
        self.stats = stats
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        # the call (CommStats.call_serial) whose first collective here was compared
        self._compared = stats.call_serial
        self._status = MPI.Status()
        self._statuses: dict[int, list] = {}  # finish's, by the count of requests
        # False where a shift's size does not tell the call's width (a block of S, three
        # words a nonzero; a column block of r, which two widths can share): the first shift
        # of each call then compares the calls too (_same_call). Set by the family.
        self.sizes_show_width = True

    def _same_call(self, phase: str) -> None:
        """Before the first collective of a call on this communicator (or its first shift,
        where shifts' sizes do not show the width: :attr:`sizes_show_width`): all-gather the
        call's tag and width (:meth:`CommStats.set_call`) and raise one :class:`InputError` on every
        rank of the communicator if they differ, naming each rank's call. Collective.

        The collectives of a call carry no tag, so ranks in different calls (possible after
        the first call of each operation, which alone is agreed under ``checks="once"``)
        would otherwise pair them up: an all-gather of one call's blocks into another's.
        Once the ranks agree here, the rest of the call's collectives on this communicator
        follow from the same call and width alike. A rank still in the previous call's
        collectives (a rank that raised and was caught in the middle of a call) sends other
        words, which are refused too. Not counted: a check, not a word of the model."""
        st = self.stats
        if self._compared == st.call_serial or phase not in CALL_PHASES:
            return
        self.compare_call()

    def compare_call(self) -> None:
        """Compare the current call's tag and width across the ranks of this communicator
        now (what :meth:`_same_call` does before a call's first collective), for a call
        whose messages go around this wrapper (a raw gather). Collective."""
        st = self.stats
        self._compared = st.call_serial
        mine = np.array([_CALL_CHECK, st.call_tag, st.call_width], dtype=np.int64)
        every = np.zeros((self.size, 3), dtype=np.int64)
        self.comm.Allgather([mine, MPI.INT64_T], [every, MPI.INT64_T])
        if (every == mine).all():
            return
        names = self.comm.allgather(f"{st.call_name} at r = {st.call_width}"
                                    if (every[:, 0] == _CALL_CHECK).all() else None)
        calls = "; ".join(f"rank {k}: {'another collective' if n is None else n}"
                          for k, n in enumerate(names))
        raise InputError(
            f"the ranks are in different calls on one distributed matrix ({calls}; ranks of "
            "the communicator of this call's first collective, in its order): after the "
            "first call of each operation (checks='once') or always (checks='off') the "
            "ranks' calls are not compared, so every rank must make the same calls in the "
            "same order, with the same widths")

    def _wrong_size(self, got: int, expected: int, source: int) -> InputError:
        """The error of a receive of ``got`` elements where this rank's call expects
        ``expected`` (a message of another call's width). Not collective."""
        st = self.stats
        return InputError(
            f"a message of {got} numbers arrived from rank {source} of the communicator where "
            f"this rank's call ({st.call_name} at r = {st.call_width}) expects {expected}: "
            "the ranks are in calls of different widths; after the first call of each "
            "operation (checks='once') or always (checks='off') the ranks' calls are not "
            "compared, so every rank must make the same calls, with the same widths")

    def _received(self, t: MPI.Datatype, expected: int, source: int) -> None:
        """Raise unless the last blocking receive (into ``self._status``) brought
        ``expected`` elements of ``t``. Not collective."""
        got = self._status.Get_count(t)
        if got != expected:
            raise self._wrong_size(got, expected, source)

    def _phase(self, phase: str):
        """Time ``phase``; while a watchdog runs, also mark this rank as waiting in it."""
        timer = self.stats.timer(phase)
        dog = watchdog.ACTIVE
        return timer if dog is None else dog.watch(phase, timer)

    def shift(self, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int, source: int,
              phase: str = "propagation") -> None:
        """Send ``sendbuf`` to ``dest`` and receive ``recvbuf`` from ``source`` (one step of a
        cyclic shift). Both buffers are contiguous, of one dtype (given to MPI explicitly:
        mpi4py cannot map a misaligned array's buffer format); their sizes may differ
        (uneven blocks)."""
        with self._phase(phase):
            if dest == self.rank and source == self.rank:
                recvbuf[...] = sendbuf.reshape(recvbuf.shape)
                return
            if not self.sizes_show_width:
                self._same_call(phase)
            self._sendrecv(sendbuf, recvbuf, dest, source, 17 + self.stats.call_tag,
                           mpi_type(sendbuf.dtype))
        self.stats.add(phase, sendbuf.size, recvbuf.size, 1, 1)

    def _sendrecv(self, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int, source: int,
                  tag: int, t: MPI.Datatype) -> None:
        """One ``Sendrecv`` of buffers of MPI type ``t`` under ``tag`` both ways, a message
        of another size than ``recvbuf`` raising :class:`InputError` (:meth:`_truncated`,
        :meth:`_received`). Not timed or counted here: the caller's phase does both."""
        try:
            self.comm.Sendrecv([sendbuf, t], dest=dest, sendtag=tag, recvbuf=[recvbuf, t],
                               source=source, recvtag=tag, status=self._status)
        except MPI.Exception as e:
            raise self._truncated(e, recvbuf.size, source) from None
        self._received(t, recvbuf.size, source)

    def _truncated(self, error: MPI.Exception, expected: int, source: int) -> Exception:
        """The error to raise for an MPI error of a receive of ``expected`` elements: a
        truncated message (one of a wider call) as :meth:`_wrong_size`, any other as it
        is. Not collective."""
        if error.Get_error_class() != MPI.ERR_TRUNCATE:
            return error
        return self._wrong_size(f"more than {expected}", expected, source)

    def prepared_shift(self, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int, source: int,
                       phase: str = "propagation") -> Callable[[np.ndarray, np.ndarray], None]:
        """A call ``run(sendbuf, recvbuf)`` that makes :meth:`shift` with these ``dest``,
        ``source`` and ``phase`` again and again, on buffers of the sizes of the ones given
        here (the same ones, or others of those sizes): the same message, counted and timed
        alike, with the counts worked out once. Plans (:mod:`distmm.algorithms.plan`) replay
        the same shifts call after call, and the wrapper's own work is then a noticeable part
        of a small call; a replay on new operands passes their buffers. While a watchdog runs,
        the call goes through :meth:`shift` (which marks the rank as waiting). Pairs with the
        matching call on the two neighbours, as :meth:`shift`."""
        if dest == self.rank and source == self.rank:
            return functools.partial(self.shift, dest=dest, source=source, phase=phase)
        sendrecv, stats, clock = self.comm.Sendrecv, self.stats, time.perf_counter
        sent, received = int(sendbuf.size), int(recvbuf.size)
        t = mpi_type(sendbuf.dtype)
        tag = 17 + stats.call_tag  # the preparing call's: a replay runs that call again
        status = MPI.Status()

        def run(sendbuf: np.ndarray, recvbuf: np.ndarray) -> None:
            if watchdog.ACTIVE is not None:
                self.shift(sendbuf, recvbuf, dest, source, phase)
                return
            t0 = clock()
            try:
                sendrecv([sendbuf, t], dest, tag, [recvbuf, t], source, tag, status)
            except MPI.Exception as e:
                raise self._truncated(e, received, source) from None
            if status.Get_count(t) != received:
                raise self._wrong_size(status.Get_count(t), received, source)
            stats.seconds[phase] += clock() - t0
            c = stats.counts[phase]
            c["words_sent"] += sent
            c["words_received"] += received
            c["messages_sent"] += 1
            c["messages_received"] += 1

        return run

    def start_shift(self, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int, source: int,
                    phase: str = "propagation") -> list[MPI.Request]:
        """Non-blocking :meth:`shift`: returns requests for :meth:`finish`. Counted at start."""
        if dest == self.rank and source == self.rank:
            recvbuf[...] = sendbuf.reshape(recvbuf.shape)
            return []
        with self._phase(phase):
            if not self.sizes_show_width:
                self._same_call(phase)
            t = mpi_type(sendbuf.dtype)
            tag = 18 + self.stats.call_tag
            reqs = [self.comm.Irecv([recvbuf, t], source=source, tag=tag),
                    self.comm.Isend([sendbuf, t], dest=dest, tag=tag)]
        # the receive's expected size, checked by finish (on any of the object's
        # communicators: a caller may wait for several communicators' requests at once)
        receives = self.stats.__dict__.setdefault("_receives", {})
        receives[id(reqs[0])] = (reqs[0], t, recvbuf.size, source, self)
        self.stats.add(phase, sendbuf.size, recvbuf.size, 1, 1)
        return reqs

    def finish(self, requests: list[MPI.Request], phase: str = "propagation") -> None:
        """Wait for requests from :meth:`start_shift` (of any communicator counting into
        these stats) or :meth:`start_alltoallv`, timing the wait under ``phase``; a
        shift's message of another size than its receive expects (a call of another width
        on the sending rank) raises :class:`InputError`."""
        if not requests:
            return
        statuses = self._statuses.get(len(requests))
        if statuses is None:  # kept per count: a call's waits reuse them
            statuses = self._statuses[len(requests)] = [MPI.Status() for _ in requests]
        with self._phase(phase):
            try:
                MPI.Request.Waitall(requests, statuses)
            except MPI.Exception as e:
                truncated = {e.Get_error_class()} | {
                    MPI.Get_error_class(s.Get_error()) for s in statuses}
                if MPI.ERR_TRUNCATE not in truncated:
                    raise
                raise InputError(
                    f"a message larger than its receive arrived ({e.Get_error_string()}): "
                    f"this rank's call ({self.stats.call_name} at r = "
                    f"{self.stats.call_width}) and its neighbour's differ in width; after "
                    "the first call of each operation (checks='once') or always "
                    "(checks='off') the ranks' calls are not compared, so every rank must "
                    "make the same calls, with the same widths") from None
        receives = self.stats.__dict__.get("_receives")
        if receives:
            for req, status in zip(requests, statuses, strict=True):
                kept = receives.pop(id(req), None)
                if kept is not None and kept[0] is req:
                    _, t, expected, source, comm = kept
                    got = status.Get_count(t)
                    if got != expected:
                        raise comm._wrong_size(got, expected, source)

    def allgatherv(self, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
                   phase: str = "replication") -> None:
        """All-gather blocks of ``counts[k]`` elements into ``recvbuf`` in rank order.

        ``counts`` must be the same on every rank (as MPI requires); ``sendbuf`` holds at
        least this rank's count, ``recvbuf`` (C-contiguous) their sum. Blocks of
        :data:`PAIRWISE_BYTES` or more move as pairwise exchanges (:func:`_pairwise`)."""
        counts = [int(x) for x in counts]
        own, total, c = counts[self.rank], sum(counts), self.size
        with self._phase(phase):
            if c == 1:
                recvbuf.reshape(-1)[:own] = sendbuf.reshape(-1)[:own]
                return
            self._same_call(phase)
            t = mpi_type(recvbuf.dtype)
            displs = _displs(counts)
            if _pairwise(counts, recvbuf.itemsize):
                self._pairwise_allgatherv(_flat(sendbuf)[:own], _flat(recvbuf), counts,
                                          displs, t)
            else:
                self.comm.Allgatherv([sendbuf, own, t], [recvbuf, (counts, displs), t])
        self.stats.add(phase, own * (c - 1), total - own, c - 1, c - 1)

    def reduce_scatter(self, sendbuf: np.ndarray, recvbuf: np.ndarray, counts: Sequence[int],
                       phase: str = "reduction") -> None:
        """Sum ``sendbuf`` over ranks and leave block k (``counts[k]`` elements) on rank k.

        ``counts`` must be the same on every rank; ``sendbuf`` (C-contiguous) holds their sum,
        ``recvbuf`` at least this rank's count. Blocks of :data:`PAIRWISE_BYTES` or more move as
        pairwise exchanges (:func:`_pairwise`), which overwrite this rank's own block of
        ``sendbuf`` (the running sum) when the communicator has more than two ranks: treat
        ``sendbuf`` as scratch."""
        counts = [int(x) for x in counts]
        own, total, c = counts[self.rank], sum(counts), self.size
        with self._phase(phase):
            if c == 1:
                recvbuf.reshape(-1)[:own] = sendbuf.reshape(-1)[:own]
                return
            self._same_call(phase)
            t = mpi_type(recvbuf.dtype)
            if _pairwise(counts, recvbuf.itemsize):
                self._pairwise_reduce_scatter(_flat(sendbuf), _flat(recvbuf)[:own], counts,
                                              _displs(counts), t)
            else:
                self.comm.Reduce_scatter([sendbuf, total, t], [recvbuf, own, t], counts,
                                         op=MPI.SUM)
        self.stats.add(phase, total - own, own * (c - 1), c - 1, c - 1)

    # Pairwise exchanges: in step k = 1 .. c-1, rank i sends to i + k and receives from i - k
    # (mod c), one Sendrecv each, so every rank sends and receives exactly the words and the
    # c - 1 messages counted above, the counts of the bandwidth-optimal algorithms of the
    # paper's cost model (section V). On a node, MPICH's point-to-point messages take its
    # single-copy path (distmm.runtime.intranode) where its large all-gather and reduce-scatter
    # copied through shared memory at a fraction of that speed, and slowed down by far more
    # than point-to-point messages with MPIR_CVAR_ENABLE_HEAVY_YIELD
    # (docs/performance.md, "Replication and reduction as pairwise exchanges").
    def _pairwise_allgatherv(self, mine: np.ndarray, flat: np.ndarray, counts: list[int],
                             displs: np.ndarray, t: MPI.Datatype) -> None:
        me, c = self.rank, self.size
        lo = int(displs[me])
        slot = flat[lo:lo + counts[me]]
        if slot.ctypes.data != mine.ctypes.data:  # not already in place
            slot[...] = mine
        for k in range(1, c):
            dest, source = (me + k) % c, (me - k) % c
            lo = int(displs[source])
            tag = _TAG_GATHER + self.stats.call_tag
            self.comm.Sendrecv([mine, counts[me], t], dest, tag,
                               [flat[lo:lo + counts[source]], counts[source], t], source, tag)

    def _pairwise_reduce_scatter(self, flat: np.ndarray, out: np.ndarray, counts: list[int],
                                 displs: np.ndarray, t: MPI.Datatype) -> None:
        # The sum of block i is its own part plus the parts of ranks i - 1, i - 2, ... in that
        # order: the same on every run (docs/reliability.md, "Determinism").
        me, c = self.rank, self.size
        lo = int(displs[me])
        acc = flat[lo:lo + counts[me]]
        for k in range(1, c):
            dest, source = (me + k) % c, (me - k) % c
            lo = int(displs[dest])
            tag = _TAG_REDUCE + self.stats.call_tag
            self.comm.Sendrecv([flat[lo:lo + counts[dest]], counts[dest], t], dest,
                               tag, [out, counts[me], t], source, tag)
            np.add(acc, out, out=out if k == c - 1 else acc)

    def alltoallv(self, sendbuf: np.ndarray, sendcounts: Sequence[int], recvbuf: np.ndarray,
                  recvcounts: Sequence[int], phase: str = "distribute") -> None:
        """Personalised all-to-all: block k of ``sendbuf`` goes to rank k."""
        sendcounts = [int(x) for x in sendcounts]
        recvcounts = [int(x) for x in recvcounts]
        me = self.rank
        with self._phase(phase):
            if self.size > 1:
                self._same_call(phase)
            t = mpi_type(sendbuf.dtype)
            self.comm.Alltoallv([sendbuf, (sendcounts, _displs(sendcounts)), t],
                                [recvbuf, (recvcounts, _displs(recvcounts)), t])
        sent = sum(sendcounts) - sendcounts[me]
        received = sum(recvcounts) - recvcounts[me]
        self.stats.add(phase, sent, received,
                       sum(1 for k, x in enumerate(sendcounts) if x and k != me),
                       sum(1 for k, x in enumerate(recvcounts) if x and k != me))

    def start_alltoallv(self, sendbuf: np.ndarray, sendcounts: Sequence[int],
                        recvbuf: np.ndarray, recvcounts: Sequence[int],
                        phase: str = "propagation") -> list[MPI.Request]:
        """Non-blocking :meth:`alltoallv` (MPI-3 ``Ialltoallv``): returns the request for
        :meth:`finish`; both buffers must stay untouched until then. Counted at start, by the
        same exact formula: words sent = the counts to the other ranks, messages = the other
        ranks with a non-zero count (MPI sends nothing for a zero count); likewise received."""
        sendcounts = [int(x) for x in sendcounts]
        recvcounts = [int(x) for x in recvcounts]
        me = self.rank
        with self._phase(phase):
            if self.size > 1:
                self._same_call(phase)
            t = mpi_type(sendbuf.dtype)
            req = self.comm.Ialltoallv([_flat(sendbuf), (sendcounts, _displs(sendcounts)), t],
                                       [_flat(recvbuf), (recvcounts, _displs(recvcounts)), t])
        self.stats.add(phase, sum(sendcounts) - sendcounts[me],
                       sum(recvcounts) - recvcounts[me],
                       sum(1 for k, x in enumerate(sendcounts) if x and k != me),
                       sum(1 for k, x in enumerate(recvcounts) if x and k != me))
        return [req]

    def start_exchange(self, sends: Sequence[tuple[int, np.ndarray]],
                       recvs: Sequence[tuple[int, np.ndarray]], channel: int = 0,
                       phase: str = "propagation") -> list[MPI.Request]:
        """Irregular exchange with few peers by point-to-point messages: each ``(rank,
        buffer)`` of ``sends`` sends that C-contiguous buffer to that rank, each of ``recvs``
        receives one into its buffer (non-empty buffers of one dtype; no rank is this one).
        Returns the requests for :meth:`finish`, which checks every received size as a
        shift's; the buffers stay untouched until then.

        Pairs with the matching calls of the peers, as :meth:`start_shift` does: each message
        carries the call's tag (``channel``, 0 .. 7, tells apart exchanges that may be in
        flight within one call) and no collective compares the calls first, so ranks in
        different calls wait (a rank that receives nothing finishes its own call). Counted at
        start as :meth:`start_alltoallv` counts the same exchange: the elements sent and
        received, one message per peer."""
        tag = self._exchange_tag(channel)
        receives = self.stats.__dict__.setdefault("_receives", {})
        reqs, sent, received = [], 0, 0
        comm = self.comm
        # (written out, the buffers passed as they are, C-contiguous: a training loop makes
        # this exchange every call, and on a small graph its wrapper is much of the message)
        with self._phase(phase):
            for k, buf in recvs:
                if not buf.flags.c_contiguous:
                    raise ValueError("communication buffers must be C-contiguous")
                t = _MPI_TYPES[buf.dtype]
                req = comm.Irecv([buf, t], source=k, tag=tag)
                receives[id(req)] = (req, t, buf.size, k, self)
                reqs.append(req)
                received += buf.size
            for k, buf in sends:
                if not buf.flags.c_contiguous:
                    raise ValueError("communication buffers must be C-contiguous")
                reqs.append(comm.Isend([buf, _MPI_TYPES[buf.dtype]], dest=k, tag=tag))
                sent += buf.size
        self.stats.add(phase, sent, received, len(sends), len(recvs))
        return reqs

    def exchange(self, sends: Sequence[tuple[int, np.ndarray]],
                 recvs: Sequence[tuple[int, np.ndarray]], channel: int = 0,
                 phase: str = "propagation") -> None:
        """:meth:`start_exchange` and :meth:`finish` in one: the same messages, tags, counts
        and size checks. With one peer each way (the peers may differ) a single ``Sendrecv``,
        as :meth:`shift` makes: one MPI call where the non-blocking form makes three, and no
        request to keep. A peer may make either form: the messages match alike."""
        if len(sends) != 1 or len(recvs) != 1:
            self.finish(self.start_exchange(sends, recvs, channel, phase), phase)
            return
        tag = self._exchange_tag(channel)
        (dest, sendbuf), (source, recvbuf) = sends[0], recvs[0]
        if not (sendbuf.flags.c_contiguous and recvbuf.flags.c_contiguous):
            raise ValueError("communication buffers must be C-contiguous")
        with self._phase(phase):
            self._sendrecv(sendbuf, recvbuf, dest, source, tag, _MPI_TYPES[recvbuf.dtype])
        self.stats.add(phase, sendbuf.size, recvbuf.size, 1, 1)

    def _exchange_tag(self, channel: int) -> int:
        """The point-to-point tag of an exchange on ``channel`` (0 .. 7) in the current
        call; ValueError for another channel. Not collective."""
        if not 0 <= channel < 8:
            raise ValueError(f"channel must be 0 .. 7, got {channel}")
        return _TAG_EXCHANGE + channel + self.stats.call_tag

    def allreduce(self, sendbuf: np.ndarray, recvbuf: np.ndarray, phase: str = "other") -> None:
        """Sum-allreduce (counted as a reduce-scatter plus an all-gather of the buffer)."""
        n, c = sendbuf.size, self.size
        with self._phase(phase):
            if c == 1:
                recvbuf[...] = sendbuf
                return
            self._same_call(phase)
            self.comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)
        words = 2 * n * (c - 1) // c
        self.stats.add(phase, words, words, 2 * (c - 1), 2 * (c - 1))
