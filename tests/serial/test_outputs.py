"""Output files (issue #25): written with the umask's mode, temporary files of killed runs
removed by the next run that writes the same output (and nothing else removed), output paths
that would destroy an input refused."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest

from distmm.io.outputs import check_output, remove_stale_temporaries, write_h5_atomic


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_mode_follows_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        write_h5_atomic(tmp_path / "o.h5", {"x": np.ones(2)})
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "o.h5").st_mode & 0o777 == mode


def _dead_pid() -> int:
    """The id of a process that has ended (a child reaped at once)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporary_of_a_killed_run_is_removed(tmp_path):
    host = socket.gethostname()
    dead = tmp_path / f"o.h5.distmm-tmp.{host}.{_dead_pid()}.abc123"
    alive = tmp_path / f"o.h5.distmm-tmp.{host}.{os.getpid()}.def456"
    elsewhere = tmp_path / f"o.h5.distmm-tmp.other-host.{_dead_pid()}.ghi789"
    other_output = tmp_path / f"p.h5.distmm-tmp.{host}.{_dead_pid()}.jkl012"
    mine = tmp_path / "o.h5.tmp-notours"
    for path in (dead, alive, elsewhere, other_output, mine):
        path.write_bytes(b"x" * 1000)
    write_h5_atomic(tmp_path / "o.h5", {"x": np.arange(3)})
    left = sorted(os.listdir(tmp_path))
    assert dead.name not in left
    assert {alive.name, elsewhere.name, other_output.name, mine.name, "o.h5"} == set(left)
    with h5py.File(tmp_path / "o.h5") as h5:
        np.testing.assert_array_equal(h5["x"][()], np.arange(3))
    assert remove_stale_temporaries(tmp_path / "o.h5") == []


def test_check_output(tmp_path):
    (tmp_path / "A.npy").write_bytes(b"a")
    os.symlink("A.npy", tmp_path / "link")
    os.link(tmp_path / "A.npy", tmp_path / "hard")
    (tmp_path / "d").mkdir()
    inputs = [str(tmp_path / "A.npy"), None]
    assert check_output(str(tmp_path / "o.h5"), "--out", inputs) is None
    assert check_output(None, "--out", inputs) is None
    cases = {"": "is empty", str(tmp_path / "d"): "is a directory",
             str(tmp_path / "new") + "/": "is a directory",
             str(tmp_path / "no" / "o.h5"): "does not exist",
             str(tmp_path / "A.npy"): "is the input file",
             str(tmp_path / "link"): "is the input file",
             str(tmp_path / "hard"): "is the input file",
             str(tmp_path / "." / "A.npy"): "is the input file"}
    for path, fragment in cases.items():
        problem = check_output(path, "--out", inputs)
        assert problem is not None and fragment in problem, (path, problem)
    assert os.listdir(tmp_path / "d") == []
