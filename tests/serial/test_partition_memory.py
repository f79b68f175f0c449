"""Rank 0's partitioning at distribute in the memory model: the formula against hand
arithmetic, counted only where distribute will partition S, and the refusal that names the
partitioner's share and the ways around it."""

from __future__ import annotations

import pytest

from distmm.core import partition as partition_mod
from distmm.core.memory import Memory
from distmm.core.partition import (
    PARTITION_BYTES_FIXED,
    PARTITION_BYTES_PER_NNZ,
    PARTITION_BYTES_PER_NNZ_PART,
    PARTITION_BYTES_PER_VERTEX,
    Partition,
    partition_peak_bytes,
    partition_scratch_bytes,
    partitioner_at_distribute,
)
from distmm.perf.planner import family_memory, memory_problem

AWARE = "15d-sparse-aware"


def test_partition_peak_bytes_by_hand():
    a, b, f = PARTITION_BYTES_PER_NNZ, PARTITION_BYTES_PER_VERTEX, PARTITION_BYTES_FIXED
    k = PARTITION_BYTES_PER_NNZ_PART
    # square: the graph's vertices are its n rows; rank 0's share ceil(8001 / 4) = 2001
    assert partition_scratch_bytes(1000, 1000, 8001, 4) == a * 8001 + b * 1000 + k * 8001 * 4 + f
    assert partition_peak_bytes(1000, 1000, 8001, 4) == (
        24 * 2001 + 16 * 6000 + a * 8001 + b * 1000 + k * 8001 * 4 + f)
    # rectangular: the bipartite graph has m + n vertices; a given share
    assert partition_peak_bytes(10, 20, 100, 3, share=40) == (
        24 * 40 + 16 * 60 + a * 100 + b * 30 + k * 100 * 3 + f)
    # nothing is partitioned on one rank or for an empty S
    assert partition_peak_bytes(1000, 1000, 8001, 1) == 0
    assert partition_peak_bytes(1000, 1000, 0, 4) == 0


def test_partitioner_at_distribute(monkeypatch):
    monkeypatch.setattr(partition_mod, "default_method", lambda shape, p: "kahip")
    assert partitioner_at_distribute("auto", (9, 9), 2) == "kahip"
    assert partitioner_at_distribute(True, (9, 9), 2) == "kahip"
    assert partitioner_at_distribute("kahypar", (9, 9), 2) == "kahypar"
    for mode in ("blocks", "none", "random", "partition", False):
        assert partitioner_at_distribute(mode, (9, 9), 2) is None
    saved = Partition(parts=__import__("numpy").zeros(9, dtype=int), p=2, n=9, nnz=3,
                      method="kahip", imbalance=0.03, seconds=0.0)
    assert partitioner_at_distribute(saved, (9, 9), 2) is None
    assert partitioner_at_distribute("auto", (9, 9), 1) is None
    monkeypatch.setattr(partition_mod, "default_method", lambda shape, p: None)
    assert partitioner_at_distribute("auto", (9, 9), 2) is None  # kahip not installed


def test_memory_rank_peak_counts_the_partitioner_on_rank_0_only():
    mem = Memory({"S": 100}, {"t": 10}, distribute=50, build=0, partitioner=500)
    assert mem.rank_peak(0) == 500 and mem.rank_peak(1) == 110 and mem.peak == 500
    assert mem.as_dict()["partitioner"] == 500
    assert Memory({"S": 100}, partitioner=0).peak == 100


@pytest.fixture
def kahip_default(monkeypatch):
    """The default order partitions (as where kahip is installed), whatever is installed."""
    import distmm.algorithms.sparse_aware_15d as family

    monkeypatch.setattr(partition_mod, "default_method", lambda shape, p: "kahip")
    monkeypatch.setattr(family, "default_method", lambda shape, p: "kahip")


def test_family_memory_counts_the_partitioner_only_where_distribute_partitions(kahip_default):
    m = n = 20000
    nnz, r, p = 160000, 16, 2
    made = family_memory(AWARE, "fusion", m, n, nnz, r, p, 1, permute="auto")
    assert made.partitioner == partition_peak_bytes(m, n, nnz, p)
    assert made.peak == max(made.rank_peak(1), made.partitioner)
    for permute in ("blocks", "partition"):
        given = family_memory(AWARE, "fusion", m, n, nnz, r, p, 1, permute=permute)
        assert given.partitioner == 0
        assert given.peak == made.rank_peak(1)
    # the oblivious families never partition
    assert family_memory("15d-dense-shift", "fusion", m, n, nnz, r, p, 1).partitioner == 0


def test_memory_limit_below_the_partitioner_names_its_share_and_the_ways_around(
        kahip_default):
    m = n = 20000
    nnz, r, p = 160000, 16, 2
    made = family_memory(AWARE, "fusion", m, n, nnz, r, p, 1, permute="auto")
    rest = made.rank_peak(1)
    assert rest < made.partitioner
    limit = (rest + made.partitioner) // 2  # fits the run, not the partitioning
    msg = memory_problem(AWARE, "fusion", m, n, nnz, r, p, 1, limit, permute="auto")
    assert "rank 0 partitions S" in msg and "--partition" in msg
    assert "--permute blocks" in msg and "distmm partition" in msg
    assert memory_problem(AWARE, "fusion", m, n, nnz, r, p, 1, limit, permute="blocks") is None
    assert memory_problem(AWARE, "fusion", m, n, nnz, r, p, 1, made.peak,
                          permute="auto") is None
