"""The memory model of every family against the arrays a rank really holds.

Oracle: :func:`distmm.core.memory.held_bytes`, which walks the object (and the caller's dense blocks
and result) and adds up the distinct array buffers it finds, knowing nothing of the families.
The family's static ``memory_bytes``, given the rank's own block sizes (``memory_counts``),
must equal it to the byte after one call of every operation and FusedMM strategy, on awkward
shapes (m != n, sizes not multiples of p, an empty row), at every valid c; and without them
(the planner's prediction) it must bound the fullest rank closely.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI

import distmm
from distmm.core.memory import held_bytes

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
R = 12  # >= the minimum width of every family and c at p <= 8


def _matrix(m: int, n: int, density: float, seed: int) -> sp.csr_matrix:
    S = sp.random(m, n, density=density, random_state=seed, format="lil")
    S[3, :] = 0  # an empty row
    return S.tocsr()


def _call(obj, op: str, A, B, strategy: str):
    if op == "sddmm":
        return obj.sddmm(A, B), (A, B)
    if op == "spmm_a":
        return obj.spmm_a(B), (B,)
    if op == "spmm_b":
        return obj.spmm_b(A), (A,)
    return getattr(obj, op)(A, B, strategy=strategy), (A, B)


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_model_equals_held_arrays(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    S = _matrix(203, 157, 0.04, 7)
    cases = [(op, st) for op in distmm.core.memory.OPS
             for st in (cls.strategies if op.startswith("fusedmm") else cls.strategies[-1:])]
    for c in grid_cs(algorithm, R):
        for op, strategy in cases:
            for dtype in ((np.float32, np.float64) if op == "fusedmm_a" else (np.float32,)):
                obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=R, dtype=dtype,
                                        root=None)
                A, B = obj.dense("a", R, 0.5), obj.dense("b", R, 0.25)
                result, inputs = _call(obj, op, A, B, strategy)
                got = held_bytes(obj, *inputs, result)
                model = obj.stats.memory_model(op, strategy, R)
                assert model.held == got, (algorithm, c, op, strategy, np.dtype(dtype).name,
                                           model.parts, got - model.held)
                assert obj.stats.memory_held() <= got
                obj.close()


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_prediction_bounds_the_fullest_rank(algorithm):
    """Without a rank's sizes, the model assumes the largest blocks and nnz/p per rank: on an
    Erdos-Renyi matrix (balanced up to chance) it is within 10% of the fullest rank."""
    from distmm.io.generate import erdos_renyi

    cls = distmm.ALGORITHMS[algorithm]
    m = n = 4003
    share = erdos_renyi(m, n, 8, 3, COMM)
    nnz = COMM.allreduce(share.nnz)
    permute = "auto"
    for c in grid_cs(algorithm, R):
        strategy = cls.strategies[-1]
        obj = distmm.distribute(share, COMM, algorithm=algorithm, c=c, r=R, permute=permute)
        if getattr(obj.permute, "is_partition", False):  # KaHIP's parts, seconds on rank 0:
            permute = obj.permute  # the same layout at the next c
        A, B = obj.dense("a", R, 0.5), obj.dense("b", R, 0.25)
        result, inputs = _call(obj, "fusedmm_a", A, B, strategy)
        fullest = COMM.allreduce(held_bytes(obj, *inputs, result), op=MPI.MAX)
        predicted = cls.model.memory_bytes("fusedmm_a", strategy, m, n, nnz, R, P, c).held
        if getattr(cls, "needs_pattern", False):
            # a family whose exchange follows S's pattern: without the pattern its model is
            # the bound where every rank receives every row of its layer's other blocks; with
            # each rank's own exchange counts it is the estimate held to 10%
            assert predicted >= 0.97 * fullest, (algorithm, c, predicted, fullest)
            predicted = COMM.allreduce(
                obj.stats.memory_model("fusedmm_a", strategy, R).held, op=MPI.MAX)
        assert 0.97 * fullest <= predicted <= 1.1 * fullest, (algorithm, c, predicted, fullest)
        obj.close()


def test_model_parts_are_named_and_positive():
    """Every part and temporary the families report is a non-negative byte count, and the peak
    is the largest of the three phases and, for rank 0, its partitioning of S."""
    for algorithm, cls in distmm.ALGORITHMS.items():
        for c in grid_cs(algorithm, R):
            for strategy in cls.strategies:
                mem = cls.model.memory_bytes("fusedmm_b", strategy, 1000, 700, 9000, R, P, c,
                                       np.float64, True)
                assert all(v >= 0 for v in [*mem.parts.values(), *mem.call.values()])
                assert mem.rank_peak(1) == max(mem.distribute, mem.build,
                                               mem.held + sum(mem.call.values()))
                assert mem.peak == max(mem.rank_peak(1), mem.partitioner) == mem.rank_peak(0)
                assert mem.held > 8 * (1000 + 700) * R * 2 // P  # at least A, B, output
