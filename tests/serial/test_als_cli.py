"""``mpiexec -n N distmm als``: a real job killed after a checkpoint and resumed, a bad
argument refused with a clear message, exit status 2 and no file damaged (every kind of bad
input, in-process on every rank: tests/mpi/test_als_cli_input.py), and HDF5 ratings with a
separate test file under the planner's pick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from launch_env import kill_job, mpi_env

from distmm.algorithms import ALGORITHMS
from distmm.io import generate

BIN = os.path.dirname(sys.executable)
MPIEXEC = os.path.join(BIN, "mpiexec")
DISTMM = os.path.join(BIN, "distmm")
ENV = mpi_env()

pytestmark = pytest.mark.skipif(not os.path.exists(MPIEXEC) or not os.path.exists(DISTMM),
                                reason="needs the installed mpiexec and distmm console script")


def _cmd(n: int, *args: str) -> list[str]:
    return [MPIEXEC, "-n", str(n), DISTMM, "als", *args]


def launch(n: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(n, *args), capture_output=True, text=True, timeout=timeout,
                          env=ENV)


@pytest.fixture()
def ratings(tmp_path):
    m, n = 300, 200
    parts = [generate.planted_low_rank_chunk(m, n, 4, 20, 1, t, 0.1, chunk_rows=64)
             for t in range(-(-m // 64))]
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
    path = tmp_path / "ratings.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix((vals + 3.0, (rows, cols)), shape=(m, n)))
    return path


def _epoch(path) -> int:
    try:
        with h5py.File(path, "r", locking=False) as fh:
            return int(fh.attrs["epoch"])
    except (OSError, KeyError):
        return 0


def _factors(path):
    with h5py.File(path, "r") as fh:
        return np.asarray(fh["A"]), np.asarray(fh["B"]), int(fh.attrs["epoch"])


def test_killed_job_resumes_to_bit_identical_factors(ratings, tmp_path):
    common = ("--ratings", str(ratings), "--rank", "8", "--lambda", "0.1", "--cg-iters", "3",
              "--test-fraction", "0.1", "--seed", "2")
    # The killed job asks for more epochs than it can reach, so it is under way whenever the
    # kill lands (however loaded the host); the runs compared with it stop a few epochs after
    # the epoch it was killed at (a resumed run may ask for fewer epochs than the first).
    ck, out = tmp_path / "ck.h5", tmp_path / "out.h5"
    job = subprocess.Popen(_cmd(2, *common, "--epochs", "100000", "--out", str(out),
                                "--checkpoint", str(ck), "--checkpoint-every", "1"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    while _epoch(ck) < 2 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    kill_job(job.pid)  # every rank at once, as a node failure would
    job.wait(timeout=60)
    assert job.returncode != 0 and not out.exists(), "the job ended before it was killed"
    killed_at = _epoch(ck)
    assert killed_at >= 2
    copy = tmp_path / "ck-copy.h5"
    copy.write_bytes(ck.read_bytes())

    total = killed_at + 4
    epochs = ("--epochs", str(total))
    full = tmp_path / "full.h5"
    res = launch(2, *common, *epochs, "--out", str(full))
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [x["epoch"] for x in lines if x["event"] == "als-epoch"] == list(range(1, total + 1))
    assert res.stderr.count("distmm als: epoch") == total  # one progress line per epoch

    res = launch(2, *common, *epochs, "--out", str(out), "--checkpoint", str(ck), "--resume")
    assert res.returncode == 0, res.stderr
    done_epochs = [json.loads(x)["epoch"] for x in res.stdout.splitlines()[:-1]]
    assert done_epochs == list(range(killed_at + 1, total + 1))
    A, B, done = _factors(out)
    A_full, B_full, _ = _factors(full)
    assert done == total
    np.testing.assert_array_equal(A, A_full)
    np.testing.assert_array_equal(B, B_full)

    # The same checkpoint resumes at another rank count and family (stored in original order).
    res = launch(3, *common, *epochs, "--out", str(out), "--checkpoint", str(copy), "--resume",
                 "--algorithm", "15d-sparse-shift")
    assert res.returncode == 0, res.stderr
    # Rounding differs from the first resumed epoch on (other summation order) and is carried
    # through the resumed epochs of truncated CG: about 1e-9 relative, bounded here by 1e-7.
    A, B, _ = _factors(out)
    np.testing.assert_allclose(A, A_full, rtol=0, atol=1e-7 * np.abs(A_full).max())
    np.testing.assert_allclose(B, B_full, rtol=0, atol=1e-7 * np.abs(B_full).max())


def test_bad_input_is_refused_and_damages_nothing(ratings, tmp_path):
    """One bad argument through mpiexec and the console script: status 2, one message, the
    output untouched (every kind of bad input in-process on every rank:
    tests/mpi/test_als_cli_input.py)."""
    out, ck = tmp_path / "out.h5", tmp_path / "ck.h5"
    out.write_bytes(b"previous factors")
    res = launch(2, "--ratings", str(ratings), "--rank", "0", "--epochs", "2", "--out",
                 str(out), "--checkpoint", str(ck))
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("distmm: error:") == 1 and "rank must be" in res.stderr, res.stderr
    assert res.stdout == ""
    assert out.read_bytes() == b"previous factors"
    assert not ck.exists()


def test_hdf5_ratings_separate_test_file_and_auto(ratings, tmp_path):
    S = scipy.io.mmread(ratings).tocoo()
    held = np.arange(S.nnz) % 10 == 0
    h5 = tmp_path / "train.h5"
    with h5py.File(h5, "w") as fh:
        fh["row"], fh["col"], fh["rating"] = S.row[~held], S.col[~held], S.data[~held]
        fh.attrs["shape"] = np.array(S.shape)
    test = tmp_path / "test.mtx"
    scipy.io.mmwrite(test, sp.coo_matrix((S.data[held], (S.row[held], S.col[held])),
                                         shape=S.shape))
    res = launch(4, "--ratings", str(h5), "--test", str(test), "--rank", "4", "--epochs", "2",
                 "--algorithm", "auto")
    assert res.returncode == 0, res.stderr
    records = [json.loads(x) for x in res.stdout.splitlines()]
    done = records[-1]
    assert done["event"] == "als-done" and done["p"] == 4
    assert done["algorithm"] in ALGORITHMS  # the pattern-aware planner's pick
    assert all(r["test_rmse"] > 0 for r in records[:-1])
