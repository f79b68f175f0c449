"""What a user does at the shell: `mpiexec -n N distmm run ...` and the README example.

These launch real MPI jobs with the mpiexec installed next to this Python, and bound each one
with a timeout so that a hang fails the test instead of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from launch_env import mpi_env

BIN = os.path.dirname(sys.executable)
MPIEXEC = os.path.join(BIN, "mpiexec")
DISTMM = os.path.join(BIN, "distmm")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = mpi_env()

pytestmark = pytest.mark.skipif(not os.path.exists(MPIEXEC) or not os.path.exists(DISTMM),
                                reason="needs the installed mpiexec and distmm console script")


def launch(n: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([MPIEXEC, "-n", str(n), *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=ROOT)


@pytest.fixture()
def inputs(tmp_path):
    rng = np.random.default_rng(7)
    S = sp.random(45, 38, density=0.15, random_state=rng, format="coo")
    A = rng.standard_normal((45, 6)).astype(np.float32)
    B = rng.standard_normal((38, 6)).astype(np.float32)
    scipy.io.mmwrite(tmp_path / "S.mtx", S)
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    return tmp_path, S, A, B


def test_distmm_run_on_four_ranks(inputs):
    d, S, A, B = inputs
    out = d / "out.h5"
    res = launch(4, DISTMM, "run", "fusedmm-b", "--sparse", str(d / "S.mtx"), "--a",
                 str(d / "A.npy"), "--b", str(d / "B.npy"), "--out", str(out), "-c", "2",
                 "--strategy", "reuse")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1  # only rank 0 prints, one JSON object per run
    rec = json.loads(lines[0])
    assert rec["p"] == 4 and rec["c"] == 2 and rec["strategy"] == "reuse"
    assert rec["phases"]["propagation"]["words_sent"] > 0
    R = sp.csr_matrix(S).multiply(A.astype(np.float64) @ B.T.astype(np.float64))
    with h5py.File(out, "r") as h5:
        np.testing.assert_allclose(h5["result"][()], R.T @ A, rtol=1e-4, atol=1e-4)
        assert json.loads(h5.attrs["report"])["phases"]["propagation"]
    assert sorted(os.listdir(d)) == ["A.npy", "B.npy", "S.mtx", "out.h5"]


def test_bad_file_exits_nonzero_quickly_with_one_message(inputs):
    d, _, _, _ = inputs
    (d / "bad.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                               "4 38 3\n1 1 1.0\n2 2 2.0\n9 1 3.0\n")
    # quickly: launch's timeout fails a run that hangs instead of ending (no wall-clock assert:
    # a loaded host may take any time to start the ranks)
    res = launch(3, DISTMM, "run", "spmm-a", "--sparse", str(d / "bad.mtx"), "--b",
                 str(d / "B.npy"), "--out", str(d / "never.h5"), timeout=60)
    assert res.returncode != 0
    assert res.stderr.count("distmm: error:") == 1 and "out of range" in res.stderr
    assert not any(f.startswith("never.h5") for f in os.listdir(d))


def test_readme_example_runs_under_mpiexec():
    res = launch(4, sys.executable, os.path.join(ROOT, "examples", "quickstart.py"))
    assert res.returncode == 0, res.stderr
    assert "finite: True" in res.stdout
