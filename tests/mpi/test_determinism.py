"""Determinism (docs/reliability.md, "Determinism").

At a fixed p, c, seed and thread count, SDDMM, SpMM and FusedMM (every family, every valid c,
every FusedMM strategy, both dtypes), an ALS fit and a few GAT training epochs give bitwise
identical results when run twice from scratch (a fresh distribution each time). Across p the
results differ only by rounding: each is within the documented normwise tolerance of float64
scipy on the same (rounded) inputs, so any two rank counts agree within twice that.
(Thread counts and separate processes: tests/serial/test_determinism_threads.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from oracle import oracle, problem

import distmm
from distmm.apps import als
from distmm.apps.gat import DistGAT, distribute_graph
from distmm.apps.gat_model import GATModel
from distmm.apps.gat_train import TrainConfig, train
from distmm.core.operations import CLI_OPS
from distmm.perf import bench, costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
R = 7
FAMILIES = [(a, c) for a in distmm.ALGORITHMS for c in costmodel.valid_cs(a, P, R)]
# Normwise tolerance, max |distmm - scipy float64| / max |scipy float64|, in units of the
# dtype's machine epsilon (docs/reliability.md: measured at most 2.6 eps at p = 1..8).
TOLERANCE_EPS = 16


def _all_ops(obj, A_loc, B_loc) -> dict:
    out = {}
    for op in CLI_OPS:
        for strategy in (obj.strategies if op.startswith("fusedmm") else [None]):
            out[op, strategy] = np.array(bench.run_op(obj, op, A_loc, B_loc, strategy))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algorithm, c", FAMILIES)
def test_two_runs_are_bitwise_identical(algorithm, c, dtype):
    S, A, B = problem(41, 29, R, seed=11, empty_rows=True)
    runs = []
    for _ in range(2):
        with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=dtype,
                               seed=4) as obj:
            runs.append(_all_ops(obj, obj.scatter("a", A, root=None),
                                 obj.scatter("b", B, root=None)))
    assert runs[0].keys() == runs[1].keys()
    for key, first in runs[0].items():
        assert first.dtype == runs[1][key].dtype
        assert first.tobytes() == runs[1][key].tobytes(), key


def _gathered(obj, op, out):
    if op == "sddmm":
        got = obj.gather_values(out)
        if got is None:
            return None
        return got[2][np.lexsort((got[1], got[0]))]
    return obj.gather("a" if op in ("spmm-a", "fusedmm-a") else "b", out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algorithm, c", FAMILIES)
def test_every_rank_count_is_within_the_documented_tolerance(algorithm, c, dtype):
    S, A, B = problem(157, 121, 16, density=0.1, seed=7, empty_rows=True)
    eps = float(np.finfo(dtype).eps)
    # the oracle sees the inputs as rounded to the run's dtype: only the arithmetic differs
    Sr, Ar, Br = (x.astype(dtype).astype(np.float64) for x in (S, A, B))
    with distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=dtype,
                           seed=1) as obj:
        outs = _all_ops(obj, obj.scatter("a", A, root=None), obj.scatter("b", B, root=None))
        gathered = {key: _gathered(obj, key[0], out) for key, out in outs.items()}
    if COMM.rank != 0:
        return
    for (op, strategy), got in gathered.items():
        ref = oracle(op, Sr, Ar, Br)
        ref = ref[2][np.lexsort((ref[1], ref[0]))] if op == "sddmm" else np.asarray(ref)
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        assert err <= TOLERANCE_EPS * eps, (op, strategy, err / eps)


@pytest.mark.parametrize("algorithm, c", [(a, c) for a in distmm.ALGORITHMS
                                          for c in costmodel.valid_cs(a, P, 3)])
def test_als_fit_is_bitwise_identical_run_to_run(algorithm, c):
    S, _, _ = problem(37, 23, 1, density=0.3, seed=9)
    S.data = np.round(S.data * 4)  # ratings 2..6
    fits = []
    for _ in range(2):
        res = als.fit(S if COMM.rank == 0 else None, COMM, rank=3, epochs=2, cg_iters=2,
                      test_fraction=0.2, seed=5, algorithm=algorithm, c=c,
                      permute="random")  # "blocks" can lay the test set out differently
        fits.append((res.A_loc.copy(), res.B_loc.copy(), res.history))
        res.close()
    (A0, B0, h0), (A1, B1, h1) = fits
    assert A0.tobytes() == A1.tobytes() and B0.tobytes() == B1.tobytes()
    assert [(h["train_rmse"], h["test_rmse"]) for h in h0] == \
        [(h["train_rmse"], h["test_rmse"]) for h in h1]


@pytest.mark.parametrize("c", [c for c in (1, 2, 4) if P % c == 0])
def test_gat_training_is_bitwise_identical_run_to_run(c):
    rng = np.random.default_rng(8)
    S, _, _ = problem(29, 29, 1, density=0.15, seed=8)
    X = rng.random((29, 4))
    y = np.argmax(X @ rng.standard_normal((4, 3)), axis=1)
    split = {"train": np.arange(10), "val": np.arange(10, 18), "test": np.arange(18, 29)}
    runs = []
    for _ in range(2):
        obj = distribute_graph(S if COMM.rank == 0 else None, COMM, c=c, dtype=np.float64,
                               seed=3)
        nodes = obj.local_rows("a")
        model = GATModel.init(4, 3, 2, 3, 1, 2, 6, np.float64, 0.2, True)
        state = train(DistGAT(obj, model), np.ascontiguousarray(X[nodes]), y[nodes], split,
                      TrainConfig(epochs=3, dropout=0.5, attention_dropout=0.5, seed=6))
        runs.append([a.copy() for la in state.model.layers for a in la.arrays().values()])
        obj.close()
    assert len(runs[0]) == len(runs[1]) > 0
    for a, b in zip(*runs, strict=True):
        assert a.tobytes() == b.tobytes()
