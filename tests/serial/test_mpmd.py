"""MPMD launches (a working directory and arguments of its own per rank) under the project's
mpiexec: every bad-input and disagreement case of mpmd_cases.py ends every rank with one
error, quickly, with no traceback, no output file and every input byte-identical.

All cases at one rank count run in one launch (mpmd_driver.py), at p = 2 and 4; a few more
launches run the ``distmm`` command itself (exit status and stderr of the real processes) and
interrupt a run with SIGINT. Every launch has its own timeout, so a regression that hangs
fails here instead of stalling the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mpmd_cases  # noqa: E402
from launch_env import mpi_env  # noqa: E402

BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
DOCS = HERE.parent.parent / "docs" / "reliability.md"
LAUNCH_TIMEOUT = 600  # seconds for a launch running every case (about 50): a hang, not load
CASE_LIMIT = 30  # seconds from the start of a case to the error on every rank
RANKS = (2, 4)

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="the venv's mpiexec is missing")


def _materialise(directory: Path, files: dict) -> None:
    directory.mkdir(parents=True)
    plain = {k: v for k, v in files.items() if isinstance(v, bytes)}
    for name, data in plain.items():
        (directory / name).write_bytes(data)
    for name, spec in files.items():
        if isinstance(spec, tuple):
            if spec[0] == "dir":
                (directory / name).mkdir()
            elif spec[0] == "link":
                os.symlink(spec[1], directory / name)
            else:
                os.link(directory / spec[1], directory / name)


def _snapshot(directory: Path) -> dict[str, str]:
    """Every entry under ``directory``: files by content hash, links and directories by kind."""
    out = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_symlink():
            out[rel] = "link->" + os.readlink(path)
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _mpmd(p: int, dirs: list[Path], args: list[str]) -> list[str]:
    """An MPMD command line: rank k runs ``args`` in ``dirs[k]``."""
    cmd = [str(MPIEXEC)]
    for k in range(p):
        cmd += (([":"] if k else []) + ["-n", "1", "-wdir", str(dirs[k])] + args)
    return cmd


@pytest.fixture(scope="module", params=RANKS, ids=lambda p: f"p{p}")
def launch(request, tmp_path_factory):
    """Every case at p ranks in one MPMD launch; returns (p, records per rank, dirs, before)."""
    p = request.param
    root = tmp_path_factory.mktemp(f"mpmd-p{p}")
    dirs = [root / f"rank{k}" for k in range(p)]
    before = {}
    for case in mpmd_cases.CASES:
        for k, d in enumerate(dirs):
            _materialise(d / case.id, case.files(k, p))
            before[case.id, k] = _snapshot(d / case.id)
    results = root / "results"
    results.mkdir()
    cmd = _mpmd(p, dirs, [sys.executable, str(HERE / "mpmd_driver.py"), str(results)]
                + [case.id for case in mpmd_cases.CASES])
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True,
                              timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the MPMD launch at p={p} hung for {LAUNCH_TIMEOUT} s (a rank waits "
                    f"for one that left):\n{exc.stderr}")
    wall = time.monotonic() - start
    records = []
    for k in range(p):
        with open(results / f"rank-{k}.json") as fh:
            records.append({rec["id"]: rec for rec in json.load(fh)})
    return {"p": p, "records": records, "dirs": dirs, "before": before, "wall": wall,
            "proc": proc}


@pytest.mark.parametrize("case", mpmd_cases.CASES, ids=lambda c: c.id)
def test_case_fails_alike_everywhere(launch, case):
    p, records = launch["p"], launch["records"]
    assert launch["proc"].returncode == 0, launch["proc"].stderr
    for k in range(p):
        rec = records[k].get(case.id)
        assert rec is not None, f"rank {k} never reached {case.id}"
        assert rec["crash"] is None, f"rank {k} crashed:\n{rec['crash']}"
        assert rec["code"] == 2, (k, rec)
        assert rec["seconds"] < CASE_LIMIT, (k, rec["seconds"])
        assert "Traceback" not in rec["stderr"], rec["stderr"]
        if case.api is not None:  # the same InputError on every rank
            assert rec["error"] == records[0][case.id]["error"], (k, rec["error"])
            assert re.search(case.message, rec["error"]), rec["error"]
            assert rec["stderr"] == ""
        elif k == 0:
            lines = rec["stderr"].strip().splitlines()
            error = [line for line in lines if line.startswith("distmm: error:")]
            assert len(error) == 1, rec["stderr"]
            assert re.search(case.message, error[0]), error[0]
            # Usage errors add argparse's usage line; nothing else may be printed.
            assert all(line.startswith(("distmm: error:", "usage:", " ")) for line in lines)
        else:
            assert rec["stderr"] == "", (k, rec["stderr"])
        # Nothing written, nothing changed: the same entries, byte for byte.
        assert _snapshot(launch["dirs"][k] / case.id) == launch["before"][case.id, k]


def test_docs_table_lists_every_case():
    """docs/reliability.md has a row for each case id, with its times at p = 2 and 4."""
    text = DOCS.read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|.*$", text,
                                                        re.MULTILINE)}
    ids = [case.id for case in mpmd_cases.CASES]
    assert sorted(rows) == sorted(ids)
    assert len(ids) >= 40


def _make(tmp_path: Path, p: int, missing_on_last: str | None) -> list[Path]:
    dirs = [tmp_path / f"r{k}" for k in range(p)]
    for k, d in enumerate(dirs):
        files = mpmd_cases.base_files()
        if k == p - 1 and missing_on_last:
            files.pop(missing_on_last)
        _materialise(d, files)
    return dirs


@pytest.mark.parametrize("p", RANKS)
def test_distmm_command_missing_file_on_one_rank(tmp_path, p):
    """Issue #25's reproduction 1 with the real command: A.npy missing on the last rank."""
    dirs = _make(tmp_path, p, "A.npy")
    before = [_snapshot(d) for d in dirs]
    cmd = _mpmd(p, dirs, [str(BIN / "distmm")] + mpmd_cases.RUN)
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"distmm: error: --a A.npy: no such file (reported by rank "
                                   f"{p - 1})")
    assert [_snapshot(d) for d in dirs] == before


def test_distmm_command_c_differs(tmp_path):
    """Issue #25's reproduction 2: -c 1 on two ranks, -c 2 on two others."""
    dirs = _make(tmp_path, 4, None)
    cmd = [str(MPIEXEC)]
    for k, d in enumerate(dirs):
        cmd += ([":"] if k else []) + ["-n", "1", "-wdir", str(d), str(BIN / "distmm"),
                                       *mpmd_cases.RUN, "-c", "1" if k < 2 else "2"]
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "distmm: error: the ranks were given different settings, which must be identical on "
        "every rank: -c (1 on ranks 0, 1; 2 on ranks 2, 3)")
    assert not any((d / "o.h5").exists() for d in dirs)


def test_sigint_ends_every_rank_with_130_and_one_line(tmp_path):
    """Ctrl-C: mpiexec forwards SIGINT to every rank; each stops at the same safe point of the
    benchmark's repetitions and ends with 130, one line in all (tests/serial/test_signals.py
    covers SIGTERM, one rank, and the training drivers)."""
    dirs = [tmp_path / "r0", tmp_path / "r1"]
    for d in dirs:
        d.mkdir()
    cmd = _mpmd(2, dirs, [sys.executable, str(HERE / "mpmd_driver.py"), "--interrupt"])
    proc = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("distmm")]
    assert len(ours) == 1 and re.fullmatch(
        r"distmm: stopped by SIGINT measuring sddmm \(-\) before repeat \d+ of 1000000; the "
        r"records printed so far are complete", ours[0]), err
