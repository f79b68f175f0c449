"""Every algorithm family runs SpMM, SDDMM and FusedMM with the hash-spgemm node model and
agrees with the scipy oracle, with mostly-zero "dense" operands (the case the model is for);
and ``distmm spgemm`` refuses to run on more than one rank."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI
from oracle import check, problem, run_and_gather

import distmm
from distmm.cli import main
from distmm.kernels import make_node_model
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


def _sparse_dense(D, density, seed):
    """ReLU and dropout: a dense operand that is mostly zeros."""
    rng = np.random.default_rng(seed)
    return np.maximum(D, 0) * (rng.random(D.shape) < density)


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_families_with_hash_spgemm(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    r = 6
    S, A, B = problem(33, 27, r, density=0.25, seed=41, empty_rows=True)
    A, B = _sparse_dense(A, 0.3, 1), _sparse_dense(B, 0.3, 2)
    B[4] = np.abs(B[4]) + 1  # one fully dense row among the sparse ones
    for c in costmodel.valid_cs(algorithm, P, r):
        model = make_node_model("hash-spgemm")
        obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                node_model=model, root=None)
        for op in ("spmm-a", "spmm-b", "sddmm"):
            check(op, run_and_gather(obj, op, A, B), S, A, B, rtol=1e-10)
        check("fusedmm-a", run_and_gather(obj, "fusedmm-a", A, B, cls.strategies[-1]), S, A, B,
              rtol=1e-10)
        st = model.stats.as_dict()
        native = sum(st.get(op, {}).get("calls", 0) for op in ("spmm_a", "spmm_b", "sddmm"))
        fallback = sum(st.get(op, {}).get("fallback_calls", 0)
                       for op in ("spmm_a", "spmm_b", "sddmm"))
        seen = sum(st.get(op, {}).get("dense_entries", 0) for op in ("spmm_a", "spmm_b"))
        assert fallback == 0
        assert COMM.allreduce(native) > 0 and COMM.allreduce(seen) > 0


def test_spgemm_command_runs_on_one_rank_only(shared_tmp, capsys):
    X = sp.random(6, 6, density=0.5, random_state=np.random.default_rng(0))
    path = str(shared_tmp / "X_hash.mtx")
    if COMM.rank == 0:
        scipy.io.mmwrite(path, X)
    COMM.Barrier()
    out = shared_tmp / f"C_hash_{P}.h5"
    rc = main(["spgemm", "--x", path, "--y", path, "--out", str(out)])
    if P == 1:
        assert rc == 0 and out.exists()
    else:  # every rank refuses alike, rank 0 says why, nothing is written
        assert rc == 2 and not out.exists()
        if COMM.rank == 0:
            assert "one process" in capsys.readouterr().err
