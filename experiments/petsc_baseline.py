"""The paper's baseline (section VI-A): PETSc's MatMatMult, sparse AIJ times dense, called twice
per FusedMM, on the same ranks, matrix and r as distmm.

PETSc distributes S and the dense matrices by block rows (1D, no replication); the paper
compares 10 MatMatMult calls with 5 FusedMM calls, "a reasonable performance surrogate" since
SDDMM and SpMM have the same flops and communication. Used by the runner for configurations
with ``algorithm == "petsc"`` (strong_scaling.py adds them when petsc4py is installed, or
always with --petsc). PETSc's messages do not pass through distmm's counting communicator, so
its records carry no counted or modelled words.
"""

from __future__ import annotations

import time

import numpy as np

from distmm.runtime.extras import require_extra

ALGORITHM, STRATEGY = "petsc", "matmatmult-x2"


def measure_petsc(cfg: dict, source, comm) -> dict | None:
    """Time ``2 * cfg["calls"]`` MatMatMult calls ``cfg["repeat"]`` times after a warm-up
    (collective over ``comm``, which every rank passes); the record on rank 0, None elsewhere.

    ``source`` is this rank's :class:`distmm.core.coo.CooShare` of S (any rows); PETSc's COO
    assembly moves each entry to the rank that owns its row."""
    require_extra("petsc4py", what="the PETSc baseline")
    import petsc4py

    petsc4py.init(comm=comm)
    from petsc4py import PETSc

    m, n = source.shape
    r = cfg["r"]
    pcomm = PETSc.Comm(comm)
    S = PETSc.Mat().create(comm=pcomm)
    S.setSizes(((PETSc.DECIDE, m), (PETSc.DECIDE, n)))
    S.setType(PETSc.Mat.Type.AIJ)
    S.setPreallocationCOO(source.rows.astype(PETSc.IntType), source.cols.astype(PETSc.IntType))
    S.setValuesCOO(source.vals.astype(PETSc.ScalarType), addv=PETSc.InsertMode.ADD_VALUES)
    S.assemble()
    local_cols = S.getLocalSize()[1]
    B = PETSc.Mat().createDense(((local_cols, n), (PETSc.DECIDE, r)), comm=pcomm)
    B.setUp()
    rng = np.random.default_rng([cfg["seed"], comm.rank])
    B.getDenseArray()[:] = rng.standard_normal((local_cols, r))
    B.assemble()
    C = S.matMult(B)  # warm-up: symbolic product and the communication plan

    def calls() -> float:
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(2 * cfg["calls"]):
            S.matMult(B, result=C)
        return comm.allreduce(time.perf_counter() - t0, op=_max())

    times = [calls() for _ in range(cfg["repeat"])]
    nnz = S.getInfo(PETSc.Mat.InfoType.GLOBAL_SUM)["nz_used"]
    for mat in (C, B, S):
        mat.destroy()
    if comm.rank != 0:
        return None
    return {"m": m, "n": n, "nnz": int(nnz), "times": times, "seconds": min(times),
            "phase_seconds": {}, "words_max": None, "words_mean": None, "model": None}


def _max():
    from mpi4py import MPI

    return MPI.MAX
