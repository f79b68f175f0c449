"""Process grids and the counting communicator, at this run's rank count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI

from distmm.core.comm import CommStats, CountingComm, gather_report
from distmm.core.grid import ProcessGrid15D, ProcessGrid25D
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
RANK = COMM.Get_rank()


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("c", [c for c in (1, 2, 3, 4, 8) if P % c == 0])
def test_grid15d_membership(c, order):
    g = ProcessGrid15D.create(COMM, c, order)
    q = P // c
    assert (g.q, g.layer_comm.Get_size(), g.fiber_comm.Get_size()) == (q, q, c)
    assert g.world_rank(g.u, g.v) == RANK
    # Layer: same v, ordered by u. Fiber: same u, ordered by v.
    layer = g.layer_comm.allgather((g.u, g.v, RANK))
    assert [x[0] for x in layer] == list(range(q)) and {x[1] for x in layer} == {g.v}
    fiber = g.fiber_comm.allgather((g.u, g.v, RANK))
    assert [x[1] for x in fiber] == list(range(c)) and {x[0] for x in fiber} == {g.u}
    # Every position is taken exactly once.
    positions = COMM.allgather((g.u, g.v))
    assert sorted(positions) == [(u, v) for u in range(q) for v in range(c)]
    if order == "fiber":
        assert [x[2] for x in fiber] == list(range(g.u * c, g.u * c + c))
    else:
        assert [x[2] for x in layer] == list(range(g.v * q, g.v * q + q))
    g.free()


@pytest.mark.parametrize("order", ["fiber", "layer"])
@pytest.mark.parametrize("c", [c for c in (1, 2, 3, 4, 8) if P % c == 0
                               and math.isqrt(P // c) ** 2 == P // c])
def test_grid25d_membership(c, order):
    g = ProcessGrid25D.create(COMM, c, order)
    s = math.isqrt(P // c)
    assert g.s == s and g.world_rank(g.i, g.j, g.k) == RANK
    assert g.row_comm.Get_size() == s and g.col_comm.Get_size() == s
    assert g.layer_comm.Get_size() == s * s and g.fiber_comm.Get_size() == c
    row = g.row_comm.allgather((g.i, g.j, g.k))
    assert [x[1] for x in row] == list(range(s)) and {(x[0], x[2]) for x in row} == {(g.i, g.k)}
    col = g.col_comm.allgather((g.i, g.j, g.k))
    assert [x[0] for x in col] == list(range(s)) and {(x[1], x[2]) for x in col} == {(g.j, g.k)}
    fib = g.fiber_comm.allgather((g.i, g.j, g.k))
    assert [x[2] for x in fib] == list(range(c))
    assert sorted(COMM.allgather((g.i, g.j, g.k))) == [
        (i, j, k) for i in range(s) for j in range(s) for k in range(c)]
    g.free()


def test_grid_errors_on_every_rank():
    with pytest.raises(InputError, match="does not divide"):
        ProcessGrid15D.create(COMM, P + 1)
    with pytest.raises(InputError, match="integer >= 1"):
        ProcessGrid15D.create(COMM, 0)
    with pytest.raises(InputError, match="rank order"):
        ProcessGrid15D.create(COMM, 1, order="diagonal")
    if P in (2, 3, 8):
        with pytest.raises(InputError, match="perfect square"):
            ProcessGrid25D.create(COMM, 1)


def test_counted_collectives_uneven_blocks():
    stats = CommStats()
    cc = CountingComm(COMM, stats)
    counts = [k + 1 for k in range(P)]  # rank k contributes k + 1 elements
    mine = np.full(counts[RANK], RANK, dtype=np.float64)
    out = np.empty(sum(counts))
    cc.allgatherv(mine, out, counts)
    np.testing.assert_array_equal(out, np.repeat(np.arange(P), counts).astype(float))
    total = sum(counts)
    if P > 1:
        assert stats.words("replication", "words_sent") == counts[RANK] * (P - 1)
        assert stats.words("replication", "words_received") == total - counts[RANK]
        assert stats.words("replication", "messages_sent") == P - 1
    else:
        assert stats.words("replication") == 0

    send = np.arange(total, dtype=np.float32)
    red = np.empty(counts[RANK], dtype=np.float32)
    cc.reduce_scatter(send, red, counts)
    lo = sum(counts[:RANK])
    np.testing.assert_allclose(red, P * np.arange(lo, lo + counts[RANK]))
    if P > 1:
        assert stats.words("reduction", "words_sent") == total - counts[RANK]
        assert stats.words("reduction", "words_received") == counts[RANK] * (P - 1)

    # A cyclic shift of blocks of different sizes around the ring.
    left, right = (RANK - 1) % P, (RANK + 1) % P
    blk = np.full((counts[RANK], 3), RANK, dtype=np.float64)
    got = np.empty((counts[right], 3))
    cc.shift(blk, got, dest=left, source=right)
    assert (got == right).all()
    if P > 1:
        assert stats.words("propagation", "words_sent") == blk.size
        assert stats.words("propagation", "words_received") == got.size
        assert stats.words("propagation", "messages_sent") == 1
    else:
        assert stats.words("propagation") == 0
    assert stats.seconds["propagation"] >= 0.0

    rep = gather_report(COMM, stats.as_dict())
    if RANK == 0:
        assert rep["phases"]["replication"]["words_sent"]["sum"] == (
            sum(counts) * (P - 1) if P > 1 else 0)
        assert len(rep["ranks"]) == P
    else:
        assert rep is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pairwise_collectives_equal_mpis(monkeypatch, dtype):
    """Large blocks move as pairwise exchanges (comm.PAIRWISE_BYTES): the same gathered
    blocks and sums as MPI's Allgatherv and Reduce_scatter, with identical counters, on
    uneven blocks with an empty one, in both dtypes. The values are small integers, so every
    summation order gives the same bits; random values sum to float64's within rounding, and
    to the same bits on every run."""
    from distmm.core import comm as comm_mod

    counts = [(3 * k + 2) % 7 for k in range(P)]  # 2, 5, 1, 4, 0, 3, 6, 2 elements
    total = sum(counts)
    lo = sum(counts[:RANK])
    results = {}
    for name, limit in (("mpi", 1 << 60), ("pairwise", 0)):
        monkeypatch.setattr(comm_mod, "PAIRWISE_BYTES", limit)
        stats = CommStats()
        cc = CountingComm(COMM, stats)
        mine = np.arange(counts[RANK], dtype=dtype) + 100 * RANK
        gathered = np.full(total, -1, dtype=dtype)
        cc.allgatherv(mine, gathered, counts)
        send = ((np.arange(total) * (RANK + 1)) % 11).astype(dtype)
        summed = np.full(counts[RANK], -1, dtype=dtype)
        cc.reduce_scatter(send, summed, counts)
        results[name] = (gathered, summed, {ph: dict(v) for ph, v in stats.counts.items()})
    expect = np.concatenate([np.arange(n) + 100 * k for k, n in enumerate(counts)])
    sums = sum((np.arange(total) * (k + 1)) % 11 for k in range(P))
    for gathered, summed, _ in results.values():
        np.testing.assert_array_equal(gathered, expect.astype(dtype))
        np.testing.assert_array_equal(summed, sums[lo:lo + counts[RANK]].astype(dtype))
    assert results["pairwise"][2] == results["mpi"][2]

    monkeypatch.setattr(comm_mod, "PAIRWISE_BYTES", 0)
    # An all-gather whose send block already lies in its place in the output.
    gathered = np.full(total, -1, dtype=dtype)
    gathered[lo:lo + counts[RANK]] = np.arange(counts[RANK]) + 100 * RANK
    CountingComm(COMM, CommStats()).allgatherv(gathered[lo:lo + counts[RANK]], gathered, counts)
    np.testing.assert_array_equal(gathered, expect.astype(dtype))
    # Random values: the pairwise sums equal float64's to rounding, and run twice, bitwise.
    rng = np.random.default_rng(RANK)
    send = rng.standard_normal(total).astype(dtype)
    parts = np.array(COMM.allgather(send), dtype=np.float64)
    twice = []
    for _ in range(2):
        got = np.empty(counts[RANK], dtype=dtype)
        CountingComm(COMM, CommStats()).reduce_scatter(send.copy(), got, counts)
        twice.append(got)
    np.testing.assert_array_equal(twice[0], twice[1])
    np.testing.assert_allclose(twice[0], parts.sum(axis=0)[lo:lo + counts[RANK]],
                               rtol=0, atol=P * 4 * np.finfo(dtype).eps * np.abs(parts).max())


def test_pairwise_collectives_refuse_strided_buffers(monkeypatch):
    from distmm.core import comm as comm_mod

    if P == 1:
        pytest.skip("one rank moves nothing")
    monkeypatch.setattr(comm_mod, "PAIRWISE_BYTES", 0)
    cc = CountingComm(COMM, CommStats())
    with pytest.raises(ValueError, match="C-contiguous"):
        cc.allgatherv(np.ones(2), np.empty((2 * P, 2))[:, 0], [2] * P)


def test_nonblocking_shift_counts_like_blocking():
    stats = CommStats()
    cc = CountingComm(COMM, stats)
    left, right = (RANK - 1) % P, (RANK + 1) % P
    send = np.full(5, float(RANK))
    recv = np.empty(5)
    cc.finish(cc.start_shift(send, recv, dest=left, source=right))
    assert (recv == right).all()
    assert stats.words("propagation") == (5 if P > 1 else 0)


def test_prepared_shift_moves_counts_and_times_like_shift(monkeypatch):
    """A prepared shift, called again and again, is :meth:`CountingComm.shift` each time:
    the buffers' current contents move (blocks of different sizes around the ring), also
    from and into other buffers of the same sizes than it was prepared with, and the
    counters equal those of as many plain shifts; while a watchdog runs it marks the phase."""
    from distmm.runtime import watchdog

    left, right = (RANK - 1) % P, (RANK + 1) % P
    send = np.empty((RANK + 2, 3))
    got = np.empty((right + 2, 3))
    plain_stats, prepared_stats = CommStats(), CommStats()
    plain, prepared = CountingComm(COMM, plain_stats), CountingComm(COMM, prepared_stats)
    run = prepared.prepared_shift(send, got, dest=left, source=right)
    for k in range(3):
        send[...] = 10 * k + RANK  # read when it is called, not when it was prepared
        run(send, got)
        assert (got == 10 * k + right).all()
        plain.shift(send, got, dest=left, source=right)
    other, into = np.full_like(send, 7 + RANK), np.empty_like(got)
    run(other, into)
    plain.shift(other, into, dest=left, source=right)
    assert (into == 7 + right).all()
    assert dict(prepared_stats.counts) == dict(plain_stats.counts)
    assert prepared_stats.seconds["propagation"] > 0

    marked = []

    class Dog:
        def watch(self, phase, inner):
            marked.append(phase)
            return inner

    monkeypatch.setattr(watchdog, "ACTIVE", Dog())
    run(send, got)
    assert (got == 20 + right).all()
    assert marked == ["propagation"]
    assert prepared_stats.words("propagation", "messages_sent") == (5 if P > 1 else 0)
