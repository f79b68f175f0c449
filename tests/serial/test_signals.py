"""SIGTERM and SIGINT under mpiexec (docs/reliability.md, "Signals and exit codes").

Each test launches ``distmm`` with the venv's MPICH ``mpiexec``, waits until the job is under
way, sends a signal either to the launcher (which forwards it to every rank, as Slurm's
``scancel`` and time limit reach every task) or to the process of one rank only, and checks:
every rank stops at the same safe point, the exit status is 128 + the signal's number, one
``distmm:`` line says where it stopped and what it wrote, no temporary file is left, the
output is untouched, and a training driver's checkpoint resumes to results bit-identical to an
uninterrupted run (checked at 3 ranks: the checkpoint is the same file whichever signal and
target stopped the job). Every launch has a timeout, so a rank that does not stop fails the test
instead of hanging it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from launch_env import descendants, kill_job, mpi_env

from distmm.io import generate

BIN = Path(sys.executable).parent
MPIEXEC, DISTMM = BIN / "mpiexec", BIN / "distmm"
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600  # seconds after which a launch counts as hung (start-up under load can take a minute)

pytestmark = pytest.mark.skipif(not MPIEXEC.exists() or not DISTMM.exists(),
                                reason="needs the venv's mpiexec and distmm console script")


def _env() -> dict[str, str]:
    return mpi_env()


class Job:
    """A ``mpiexec -n P distmm ...`` launch whose stdout and stderr go to files."""

    def __init__(self, tmp: Path, p: int, args: list[str]) -> None:
        self.out, self.err = tmp / "stdout.txt", tmp / "stderr.txt"
        with open(self.out, "w") as o, open(self.err, "w") as e:
            self.proc = subprocess.Popen([str(MPIEXEC), "-n", str(p), str(DISTMM), *args],
                                         stdout=o, stderr=e, env=_env(),
                                         start_new_session=True)

    def wait_for(self, pattern: str, timeout: float = LIMIT) -> None:
        """Wait until stderr matches ``pattern`` (the job must still be running)."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.err.read_text()):
            assert self.proc.poll() is None, f"ended early: {self.err.read_text()}"
            assert time.monotonic() < deadline, f"{pattern!r} not seen: {self.err.read_text()}"
            time.sleep(0.02)

    def signal_rank(self, rank: int, signum: int) -> None:
        """Send ``signum`` to the process of one rank only (found by its PMI_RANK)."""
        pids = _rank_pids(self.proc.pid)
        os.kill(pids[rank], signum)

    def finish(self, timeout: float = LIMIT) -> tuple[int, str, str]:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                kill_job(self.proc.pid)
                self.proc.wait()
        return code, self.out.read_text(), self.err.read_text()


def _rank_pids(launcher: int) -> dict[int, int]:
    """The processes below ``launcher`` that are MPI ranks, by rank."""
    ranks = {}
    for pid in descendants(launcher):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(b"PMI_RANK="):
                ranks[int(var[9:])] = pid
    return ranks


def _send(job: Job, target: str, signum: int, p: int) -> None:
    if target == "launcher":
        job.proc.send_signal(signum)
    else:
        job.signal_rank(p - 1, signum)


def _ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("distmm:")]


def _no_temporaries(directory: Path) -> None:
    assert not [f.name for f in directory.iterdir() if ".distmm-tmp." in f.name]


@pytest.fixture()
def ratings(tmp_path):
    m, n = 90, 70
    parts = [generate.planted_low_rank_chunk(m, n, 4, 12, 1, t, 0.1, chunk_rows=64)
             for t in range(-(-m // 64))]
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
    path = tmp_path / "ratings.mtx"
    scipy.io.mmwrite(path, sp.coo_matrix((vals + 3.0, (rows, cols)), shape=(m, n)))
    return path


def _factors(path):
    with h5py.File(path, "r") as fh:
        return np.asarray(fh["A"]), np.asarray(fh["B"]), int(fh.attrs["epoch"])


def _ids(value):
    return value.name if isinstance(value, signal.Signals) else None


@pytest.mark.parametrize("p, target, signum", [
    (2, "launcher", signal.SIGTERM), (3, "rank", signal.SIGINT)], ids=_ids)
def test_als_stops_with_a_checkpoint_that_resumes_bit_identically(ratings, tmp_path, p,
                                                                  target, signum):
    common = ["als", "--ratings", str(ratings), "--rank", "4", "--cg-iters", "2",
              "--seed", "3"]
    ck, out = tmp_path / "ck.h5", tmp_path / "out.h5"
    out.write_bytes(b"the previous output")
    job = Job(tmp_path, p, [*common, "--epochs", "100000", "--out", str(out),
                            "--checkpoint", str(ck), "--checkpoint-every", "1000"])
    job.wait_for(r"epoch 2/")
    _send(job, target, signum, p)
    code, stdout, err = job.finish()
    assert code == 128 + signum, err
    assert "Traceback" not in err
    lines = _ours(err)
    assert len(lines) == 1 and re.fullmatch(
        rf"distmm: stopped by {signal.Signals(signum).name} after epoch (\d+) of 100000; "
        rf"checkpoint {re.escape(str(ck))} written \(continue with --resume\)", lines[0]), err
    stopped = int(re.search(r"after epoch (\d+)", lines[0]).group(1))
    epochs = [int(k) for k in re.findall(r'"epoch": (\d+)', stdout)]
    assert epochs == list(range(1, stopped + 1))  # every rank stopped after the same epoch
    assert out.read_bytes() == b"the previous output"
    _no_temporaries(tmp_path)
    assert _factors(ck)[2] == stopped

    if p == 2:  # the resume, whichever signal wrote the checkpoint: at 3 ranks (uneven split)
        return
    # Resumed to two more epochs == two more epochs without the interruption, bit for bit.
    total = str(stopped + 2)
    resumed, straight = tmp_path / "resumed.h5", tmp_path / "straight.h5"
    for args in ([*common, "--epochs", total, "--out", str(resumed), "--checkpoint", str(ck),
                  "--resume"],
                 [*common, "--epochs", total, "--out", str(straight)]):
        res = subprocess.run([str(MPIEXEC), "-n", str(p), str(DISTMM), *args], env=_env(),
                             capture_output=True, text=True, timeout=LIMIT)
        assert res.returncode == 0, res.stderr
    for x, y in zip(_factors(resumed), _factors(straight), strict=True):
        np.testing.assert_array_equal(x, y)


def test_als_without_checkpoint_says_nothing_was_written(ratings, tmp_path):
    job = Job(tmp_path, 2, ["als", "--ratings", str(ratings), "--rank", "4", "--epochs",
                            "100000", "--out", str(tmp_path / "out.h5")])
    job.wait_for(r"epoch 1/")
    job.signal_rank(0, signal.SIGTERM)
    code, _, err = job.finish()
    assert code == 143, err
    assert re.fullmatch(r"distmm: stopped by SIGTERM after epoch \d+ of 100000; no checkpoint "
                        r"was asked for, so nothing was written", _ours(err)[0]), err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ratings.mtx", "stderr.txt",
                                                          "stdout.txt"]


@pytest.fixture()
def graph(tmp_path):
    n, f, classes = 31, 5, 3
    rng = np.random.default_rng(4)
    A = sp.random(n, n, density=0.15, format="coo", random_state=rng)
    X = rng.random((n, f))
    y = np.argmax(X @ rng.standard_normal((f, classes)), axis=1)
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    np.save(tmp_path / "X.npy", X)
    np.savetxt(tmp_path / "y.txt", y, fmt="%d")
    (tmp_path / "split.json").write_text(json.dumps(
        {"train": list(range(12)), "val": list(range(12, 20)), "test": list(range(20, n))}))
    return ["gat", "train", "--graph", str(tmp_path / "A.mtx"), "--features",
            str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.txt"), "--split",
            str(tmp_path / "split.json"), "--dtype", "float64", "--hidden", "3", "--heads",
            "2", "--patience", "1000000"]


def _weights(path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as fh:
        out = {}
        fh.visititems(lambda k, v: out.__setitem__(k, np.asarray(v))
                      if isinstance(v, h5py.Dataset) else None)
        return out


@pytest.mark.parametrize("p, target", [(2, "launcher"), (3, "rank")])
def test_gat_train_stops_with_a_checkpoint_that_resumes_bit_identically(graph, tmp_path, p,
                                                                        target):
    ck, out = tmp_path / "ck.h5", tmp_path / "w.h5"
    job = Job(tmp_path, p, [*graph, "--epochs", "1000000", "--out", str(out),
                            "--checkpoint", str(ck), "--checkpoint-every", "100000"])
    job.wait_for(r"gat train: epoch 2/")
    _send(job, target, signal.SIGTERM, p)
    code, _, err = job.finish()
    assert code == 143, err
    lines = _ours(err)
    assert len(lines) == 1 and re.fullmatch(
        rf"distmm: stopped by SIGTERM after epoch (\d+) of 1000000; checkpoint "
        rf"{re.escape(str(ck))} written \(continue with --resume {re.escape(str(ck))}\)",
        lines[0]), err
    stopped = int(re.search(r"after epoch (\d+)", lines[0]).group(1))
    assert not out.exists()
    _no_temporaries(tmp_path)
    if p == 2:  # the resume, whichever signal wrote the checkpoint: at 3 ranks (uneven split)
        return

    total = str(stopped + 2)
    resumed, straight = tmp_path / "resumed.h5", tmp_path / "straight.h5"
    for args in ([*graph, "--epochs", total, "--out", str(resumed), "--resume", str(ck)],
                 [*graph, "--epochs", total, "--out", str(straight)]):
        res = subprocess.run([str(MPIEXEC), "-n", str(p), str(DISTMM), *args], env=_env(),
                             capture_output=True, text=True, timeout=LIMIT)
        assert res.returncode == 0, res.stderr
    a, b = _weights(resumed), _weights(straight)
    assert a.keys() == b.keys() and a
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.fixture()
def run_inputs(tmp_path):
    rng = np.random.default_rng(5)
    S = sp.random(300, 170, density=0.05, format="coo", random_state=rng)
    scipy.io.mmwrite(tmp_path / "S.mtx", S)
    np.save(tmp_path / "A.npy", rng.random((300, 8)))
    np.save(tmp_path / "B.npy", rng.random((170, 8)))
    return ["run", "fusedmm-a", "--sparse", str(tmp_path / "S.mtx"), "--a",
            str(tmp_path / "A.npy"), "--b", str(tmp_path / "B.npy")]


@pytest.mark.parametrize("p, target, signum", [
    (2, "launcher", signal.SIGINT), (4, "rank", signal.SIGTERM)], ids=_ids)
def test_run_repeat_stops_between_repeats_and_writes_nothing(run_inputs, tmp_path, p, target,
                                                             signum):
    out = tmp_path / "o.h5"
    job = Job(tmp_path, p, [*run_inputs, "--out", str(out), "--repeat", "100000000"])
    deadline = time.monotonic() + LIMIT
    while job.out.read_text().count("\n") < 2:
        assert job.proc.poll() is None and time.monotonic() < deadline, job.err.read_text()
        time.sleep(0.02)
    _send(job, target, signum, p)
    code, stdout, err = job.finish()
    assert code == 128 + signum, err
    lines = _ours(err)
    assert len(lines) == 1 and re.fullmatch(
        rf"distmm: stopped by {signal.Signals(signum).name} after repeat (\d+) of 100000000; "
        r"nothing was written", lines[0]), err
    done = int(re.search(r"after repeat (\d+)", lines[0]).group(1))
    # (mpiexec writes its own Ctrl-C notice into the same stream, so no JSON parsing here)
    assert [int(k) for k in re.findall(r'"repeat": (\d+)', stdout)] == list(range(done))
    assert not out.exists()
    _no_temporaries(tmp_path)


def test_run_with_timeout_completes_normally(run_inputs, tmp_path):
    out = tmp_path / "o.h5"
    res = subprocess.run([str(MPIEXEC), "-n", "2", str(DISTMM), *run_inputs, "--out",
                          str(out), "--repeat", "3", "--timeout", "60"], env=_env(),
                         capture_output=True, text=True, timeout=LIMIT)
    assert res.returncode == 0, res.stderr
    assert out.exists()


@pytest.mark.parametrize("value", ["0", "abc"])
def test_bad_timeout_is_a_usage_error(run_inputs, tmp_path, value):
    res = subprocess.run([str(MPIEXEC), "-n", "2", str(DISTMM), *run_inputs, "--out",
                          str(tmp_path / "o.h5"), f"--timeout={value}"], env=_env(),
                         capture_output=True, text=True, timeout=LIMIT)
    assert res.returncode == 2
    assert "--timeout: expected a positive number of seconds" in res.stderr
