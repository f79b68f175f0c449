"""Every algorithm family runs with the Dynaspase node model: SpMM on the simulator, FusedMM
with its SDDMM falling back to the reference model; results against the scipy oracle."""

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


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_dynaspase_every_family(algorithm):
    m, n, r = 33, 27, 8
    S, A, B = problem(m, n, r, seed=21, empty_rows=True)
    c = costmodel.valid_cs(algorithm, P, r)[-1]
    for op, strategy in (("spmm-a", None), ("spmm-b", None), ("fusedmm-a", "none"),
                         ("fusedmm-b", None)):
        model = make_node_model("dynaspase", n_max=8)
        obj = distmm.distribute(S if COMM.rank == 0 else None, COMM, algorithm=algorithm,
                                c=c, r=r, node_model=model, dtype=np.float64)
        check(op, run_and_gather(obj, op, A, B, strategy), S, A, B, rtol=1e-10)
        stats = model.stats.as_dict()
        spmm = [k for k in ("spmm_a", "spmm_b") if k in stats]
        if op.startswith("spmm") or strategy == "none":
            # the SpMM ran on the simulator and reported modelled cycles
            assert spmm and all(stats[k]["fallback_calls"] == 0 for k in spmm)
            cycles = COMM.allreduce(sum(stats[k].get("model_cycles", 0) for k in spmm))
            assert cycles > 0
        if strategy == "none":
            assert stats["sddmm"]["fallback_calls"] == stats["sddmm"]["calls"] > 0
        fused = [k for k in ("fusedmm_a", "fusedmm_b") if k in stats]
        for k in fused:
            assert stats[k]["fallback_calls"] == stats[k]["calls"]
