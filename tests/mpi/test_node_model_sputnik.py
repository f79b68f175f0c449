"""Every algorithm family with the Sputnik node model (CPU path) against the scipy oracle.

SDDMM, SpMMA, SpMMB and FusedMMA (the family's default strategy, built from the model's native
SDDMM and SpMM or the reference fallback where it fuses) at the smallest and largest
replication factor this run's p admits, on a problem with empty rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm.kernels import make_node_model
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
R = 8  # >= p for every p the suite runs (1.5D sparse shifting splits r over p/c ranks)


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_every_family_with_sputnik(algorithm):
    cs = costmodel.valid_cs(algorithm, P, R)
    if not cs:
        pytest.skip(f"{algorithm} has no valid c for p={P}, r={R}")
    S, A, B = problem(30, 22, R, seed=17, empty_rows=True)
    for c in sorted({cs[0], cs[-1]}):
        model = make_node_model("sputnik", tile_width=4, bundle_size=2)
        obj = distmm.distribute(S if COMM.rank == 0 else None, COMM, algorithm=algorithm, c=c,
                                r=R, node_model=model, dtype=np.float64)
        assert obj.kernel is model and obj.node_model == "sputnik"
        for op in ("sddmm", "spmm-a", "spmm-b", "fusedmm-a"):
            check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-9)
        stats = model.stats.as_dict()
        for op in ("sddmm", "spmm_a", "spmm_b"):
            if op in stats:  # a rank whose blocks are all empty may not have called it
                assert stats[op]["fallback_calls"] == 0
        assert any(op in stats for op in ("spmm_a", "spmm_b"))
