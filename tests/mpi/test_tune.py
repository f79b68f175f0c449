"""Measured planning (distmm.perf.tuning.tune, --algorithm auto --tune K) on every rank: the pick is
one of the model's top K, every rank picks the same, the distribution it returns computes the
right FusedMM, and a bad K fails on every rank alike."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.io
from mpi4py import MPI
from oracle import oracle, problem

import distmm
from distmm.api import as_coo_share
from distmm.cli import main
from distmm.errors import InputError
from distmm.perf.planner import Machine, plan
from distmm.perf.tuning import candidates, tune

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_tune_picks_among_the_top_k_and_every_rank_agrees(k):
    S, A, B = problem(40, 40, 8, density=0.2, seed=3)
    share = as_coo_share(S if COMM.rank == 0 else None, COMM)
    machine = Machine()
    result = tune(share, COMM, 8, k, machine, dtype=np.float64)
    top = candidates(plan(40, 40, S.nnz, 8, P, machine, tuple(distmm.ALGORITHMS)), k)
    key = (result.best["algorithm"], result.best["strategy"], result.best["c"])
    assert key in [(x["algorithm"], x["strategy"], x["c"]) for x in top]
    assert [(x["algorithm"], x["strategy"], x["c"]) for x in result.candidates] == \
        [(x["algorithm"], x["strategy"], x["c"]) for x in top]
    assert len(set(COMM.allgather(key))) == 1
    if len(top) == 1:
        assert result.best["measured_s"] is None
    else:
        assert all(x["measured_s"] > 0 for x in result.candidates)
        assert result.best["measured_s"] == min(x["measured_s"] for x in result.candidates)
    obj = result.obj
    assert (obj.name, obj.stats.describe()["c"]) == (key[0], key[2])
    out = obj.fusedmm_a(obj.scatter("a", A, root=None), obj.scatter("b", B, root=None),
                        strategy=key[1])
    full = obj.gather("a", out)
    if COMM.rank == 0:
        np.testing.assert_allclose(full, oracle("fusedmm-a", S, A, B), rtol=1e-9, atol=1e-12)


def test_bad_k_fails_everywhere():
    S, _, _ = problem(20, 20, 4, seed=1)
    share = as_coo_share(S if COMM.rank == 0 else None, COMM)
    with pytest.raises(InputError, match="tune"):
        tune(share, COMM, 4, 0)
    with pytest.raises(InputError, match="operation"):
        tune(share, COMM, 4, 2, op="gemm")


@pytest.fixture(scope="module")
def files(shared_tmp):
    d = os.path.join(shared_tmp, "tune")
    if COMM.rank == 0:
        os.makedirs(d, exist_ok=True)
    S, A, B = problem(37, 37, 6, density=0.15, seed=5)
    if COMM.rank == 0:
        scipy.io.mmwrite(os.path.join(d, "S.mtx"), S)
        np.save(os.path.join(d, "A.npy"), A)
        np.save(os.path.join(d, "B.npy"), B)
    COMM.Barrier()
    return d, S, A, B


def test_run_auto_tune_writes_the_right_result(files, capsys):
    import h5py

    d, S, A, B = files
    out = os.path.join(d, "tuned.h5")
    code = main(["run", "fusedmm-a", "--sparse", os.path.join(d, "S.mtx"),
                 "--a", os.path.join(d, "A.npy"), "--b", os.path.join(d, "B.npy"),
                 "--out", out, "--algorithm", "auto", "--tune", "2", "--dtype", "float64"])
    assert code == 0
    printed = capsys.readouterr().out
    if COMM.rank != 0:
        assert printed == ""
        return
    recs = [json.loads(line) for line in printed.strip().splitlines()]
    tunes = [x for x in recs if x["event"] == "tune"]
    assert [x["event"] for x in recs[:1]] == ["plan"]
    assert len(tunes) == min(2, len(candidates(plan(37, 37, S.nnz, 6, P), 2)))
    assert sum(x["chosen"] for x in tunes) == 1
    assert all(x["predicted_s"] > 0 and x["measured_s"] > 0 for x in tunes)
    chosen = next(x for x in tunes if x["chosen"])
    run = next(x for x in recs if x["event"] == "run")
    assert (run["algorithm"], run["strategy"], run["c"]) == (
        chosen["algorithm"], chosen["strategy"], chosen["c"])
    with h5py.File(out, "r") as h5:
        np.testing.assert_allclose(h5["result"][()], oracle("fusedmm-a", S, A, B),
                                   rtol=1e-9, atol=1e-12)


def test_bench_auto_tune_and_bad_k(capsys):
    code = main(["bench", "--n", "64", "--nnz-per-row", "3", "--r", "4", "--repeat", "1",
                 "--algorithm", "auto", "--tune", "2"])
    assert code == 0
    printed = capsys.readouterr().out
    if COMM.rank == 0:
        recs = [json.loads(line) for line in printed.strip().splitlines()]
        events = [x["event"] for x in recs]
        assert events[0] == "plan" and events[-1] == "bench" and "tune" in events
        chosen = next(x for x in recs if x.get("chosen"))
        assert (recs[-1]["algorithm"], recs[-1]["strategy"], recs[-1]["c"]) == (
            chosen["algorithm"], chosen["strategy"], chosen["c"])
    code = main(["bench", "--n", "64", "--nnz-per-row", "3", "--r", "4", "--repeat", "1",
                 "--algorithm", "auto", "--tune", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("--tune must be at least 1" in err) == (COMM.rank == 0)
