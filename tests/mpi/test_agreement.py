"""Agreement before work (issue #25), in-process on every rank: arguments that differ between
ranks raise the same InputError everywhere; numpy integers are integers; a result that
overflows is refused with its operation and stage, and nothing is written.

A regression that hangs is ended by the harness's hang timeout (tests/mpi/conftest.py)."""

from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

import distmm
from distmm.cli import main
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
M, N, R = 23, 11, 3


def _S(value: float = 1.0) -> sp.coo_matrix:
    S = sp.random(M, N, density=0.3, format="coo", random_state=np.random.default_rng(4))
    S.data[:] = value
    return S


@pytest.fixture
def files(shared_tmp, request):
    """S, A and B in one shared directory per test; returns a path builder."""
    d = os.path.join(shared_tmp, request.node.name.replace("[", "-").replace("]", ""))
    if COMM.rank == 0:
        os.makedirs(d)
    COMM.Barrier()
    return lambda name: os.path.join(d, name)


def _write(path, S_value, a_value, b_value):
    if COMM.rank == 0:
        scipy.io.mmwrite(path("S.mtx"), _S(S_value))
        np.save(path("A.npy"), np.full((M, R), a_value))
        np.save(path("B.npy"), np.full((N, R), b_value))
    COMM.Barrier()


def _digest(path) -> dict:
    return {name: hashlib.sha256(open(path(name), "rb").read()).hexdigest()
            for name in ("S.mtx", "A.npy", "B.npy")}


@pytest.mark.parametrize("op, values, stage", [
    ("fusedmm-a", (1.0, 1e20, 1e20), "SDDMM"),   # A B^T = 3e40
    ("fusedmm-b", (1.0, 1e15, 1e15), "SpMM"),    # dot products 3e30, times A: 3e45
    ("sddmm", (1.0, 1e20, 1e20), "SDDMM"),
    ("spmm-a", (1e30, 1.0, 1e10), "SpMM"),       # S B = 1e40
])
def test_result_overflow_names_operation_and_stage(files, capsys, op, values, stage):
    _write(files, *values)
    before = _digest(files)
    code = main(["run", op, "--sparse", files("S.mtx"), "--a", files("A.npy"), "--b",
                 files("B.npy"), "--out", files("o.h5")])
    err = capsys.readouterr().err
    assert code == 2
    if COMM.rank == 0:
        assert f"distmm: error: {op} overflowed float32 in its {stage} stage" in err, err
        assert "use --dtype float64" in err and "Traceback" not in err
    else:
        assert err == ""
    COMM.Barrier()
    assert not os.path.exists(files("o.h5"))
    assert not [f for f in os.listdir(os.path.dirname(files("o.h5"))) if "distmm-tmp" in f]
    assert _digest(files) == before


def test_same_values_in_float64_compute(files, capsys):
    """The cure the message suggests works: the same inputs with --dtype float64."""
    _write(files, 1.0, 1e20, 1e20)
    assert main(["run", "fusedmm-a", "--sparse", files("S.mtx"), "--a", files("A.npy"),
                 "--b", files("B.npy"), "--out", files("o.h5"), "--dtype", "float64"]) == 0
    capsys.readouterr()
    COMM.Barrier()
    if COMM.rank == 0:
        import h5py

        S = _S().tocsr()
        A, B = np.full((M, R), 1e20), np.full((N, R), 1e20)
        with h5py.File(files("o.h5"), "r") as h5:
            np.testing.assert_allclose(h5["result"][()], S.multiply(A @ B.T).tocsr() @ B,
                                       rtol=1e-12)


def test_numpy_integers_are_integers():
    c = np.int64(2 if P % 2 == 0 else 1)
    S = _S() if COMM.rank == 0 else None
    obj = distmm.distribute(S, COMM, c=c, r=np.int32(R), seed=np.int64(3))
    ref = distmm.distribute(S, COMM, c=int(c), r=R, seed=3)
    assert obj.c == ref.c == int(c)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((M, R)), rng.standard_normal((N, R))
    got = obj.gather("a", obj.spmm_a(obj.scatter("b", B)))
    want = ref.gather("a", ref.spmm_a(ref.scatter("b", B)))
    if COMM.rank == 0:
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(got, _S().tocsr() @ B, rtol=1e-5, atol=1e-5)
    del A


@pytest.mark.skipif(P == 1, reason="needs ranks that can disagree")
@pytest.mark.parametrize("setting, mine, theirs, shown", [
    ("c", 1, np.int64(P), "c (1 on rank"),
    ("dtype", np.float32, np.float64, "dtype (float32 on"),
    ("algorithm", "15d-dense-shift", "15d-sparse-shift", "algorithm (15d-dense-shift on"),
    ("seed", 0, 9, "seed (0 on"),
])
def test_api_disagreement_raises_the_same_everywhere(setting, mine, theirs, shown):
    """One rank (the last) is given another value: the same InputError on every rank."""
    value = theirs if COMM.rank == P - 1 else mine
    S = _S() if COMM.rank == 0 else None
    with pytest.raises(InputError) as info:
        distmm.distribute(S, COMM, **{setting: value})
    text = str(info.value)
    assert shown in text and f"on rank {P - 1})" in text, text
    everyone = COMM.allgather(text)
    assert all(t == text for t in everyone)


def test_wait_quietly_sleeps_until_the_busy_rank_arrives():
    """wait_quietly (before an agreement where one rank works alone): no rank returns before
    the busy rank (the last) has called it, and the ranks that wait sleep rather than poll
    MPI without pause: their CPU time is a small part of the wait. Load can only lengthen the
    sleeps, so it cannot raise that CPU time."""
    from distmm.errors import wait_quietly

    busy, work = P - 1, 0.6
    if COMM.rank == busy:
        time.sleep(work)
    entered = time.time()
    cpu = time.process_time()
    wait_quietly(COMM, busy)
    cpu = time.process_time() - cpu
    left = time.time()
    busy_entered = COMM.bcast(entered, root=busy)
    assert left >= busy_entered  # the ranks share one clock here (one node)
    if COMM.rank != busy:
        assert cpu < work / 3, cpu


def test_empty_matrix_with_auto_says_empty(files, capsys):
    if COMM.rank == 0:
        with open(files("E.mtx"), "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
        np.save(files("A0.npy"), np.ones((0, R)))
    COMM.Barrier()
    assert main(["run", "spmm-b", "--sparse", files("E.mtx"), "--a", files("A0.npy"),
                 "--out", files("o.h5"), "--algorithm", "auto"]) == 2
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert "the matrix is empty (0 x 0, 0 entries)" in err, err
