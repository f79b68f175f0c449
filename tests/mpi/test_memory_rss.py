"""The memory model against the operating system: the measured peak resident set of a rank
(Linux VmHWM, above its baseline after imports and a warm-up) stays within 1.3x of the
family's predicted peak, across families, strategies and c, at p = 1, 2 and 4.

Sizes are chosen so that the modelled bytes (tens of MB a rank) dominate the noise of the
interpreter and MPI; see docs/memory.md for what the model counts and the measured table.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import distmm
from distmm.core.memory import reset_peak_rss
from distmm.core.partition import default_method
from distmm.io.generate import erdos_renyi
from distmm.perf import costmodel
from distmm.perf.memory_peak import measure_peak

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
R = 128
TOLERANCE = 1.3
PARTITION_SLACK = 0.6


def _cases():
    out = []
    for algorithm, cls in distmm.ALGORITHMS.items():
        cs = costmodel.valid_cs(algorithm, P, R)
        # c = 1 at p = 4 is p = 2's layout with more steps: p = 4 measures the deepest c only
        for c in sorted({cs[0], cs[-1]} if P < 4 else {cs[-1]}):
            for strategy in cls.strategies:
                out.append((algorithm, c, strategy))
    return out


@pytest.mark.skipif(P not in (1, 2, 4), reason="measured at p = 1, 2 and 4")
@pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("algorithm,c,strategy", _cases())
def test_peak_rss_within_model(algorithm, c, strategy):
    n = 8000 * P
    op = "fusedmm_a" if c == 1 else "fusedmm_b"
    # the sparsity-aware family's default partition runs on rank 0 only
    # (test_partitioning_peak_on_rank_0_within_model): its layout in natural-order blocks is
    # what is measured here, on every rank alike
    permute = "blocks" if getattr(distmm.ALGORITHMS[algorithm], "needs_pattern", False) \
        else "auto"
    peak, model = measure_peak(algorithm, lambda: erdos_renyi(n, n, 8, 5, COMM), COMM, c, R,
                               op, strategy, np.float32, permute=permute)
    ratios = COMM.allgather(peak / model.peak)
    assert all(1 / TOLERANCE <= x <= TOLERANCE for x in ratios), (
        f"{algorithm} c={c} {op} {strategy}: measured/model per rank "
        f"{[round(x, 2) for x in ratios]}; model {model.as_dict()}")


@pytest.mark.skipif(P != 2, reason="rank 0's partitioning, measured at p = 2")
@pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.skipif(default_method((2, 2), 2) is None, reason="needs kahip (distmm[partition])")
def test_partitioning_peak_on_rank_0_within_model():
    """The sparsity-aware family's default order partitions S on rank 0 at distribute: rank
    0's measured peak is at most TOLERANCE times the model's partitioner (the gathered
    pattern and KaHIP's memory, distmm.core.partition.partition_peak_bytes), which is its
    peak, and at least PARTITION_SLACK of it (the formula is an upper bound over the graphs
    measured, whose readings lie 0.7-0.9 of it); rank 1 stays within its own
    (partitioner-free) model."""
    n = 12000
    peak, model = measure_peak("15d-sparse-aware", lambda: erdos_renyi(n, n, 8, 5, COMM), COMM,
                               1, R, "fusedmm_a", "fusion", np.float32, rounds=2,
                               permute="auto")
    assert model.partitioner > model.rank_peak(1)  # the partitioner is rank 0's peak
    ratios = COMM.allgather(peak / model.rank_peak(COMM.rank))
    assert PARTITION_SLACK <= ratios[0] <= TOLERANCE and ratios[1] <= TOLERANCE, (
        f"measured/model per rank {[round(x, 2) for x in ratios]}; model {model.as_dict()}")
