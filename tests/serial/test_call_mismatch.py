"""Ranks in different calls after the agreed first calls (checks "once" and "off") hang where
the watchdog names the phase, and never get a result (docs/reliability.md, "Python API: ranks
in different calls"): each call's point-to-point messages carry its own tag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distmm.watchdog import EXIT_CODE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_env import mpi_env  # noqa: E402

HERE = Path(__file__).resolve().parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="the venv's mpiexec is missing")


@pytest.mark.parametrize("p, algorithm, c, checks", [
    (2, "15d-dense-shift", 1, "once"),
    (2, "15d-dense-shift", 1, "off"),
    (3, "15d-sparse-shift", 1, "once"),
])
def test_different_later_calls_hang_named_never_return(p, algorithm, c, checks):
    cmd = [str(MPIEXEC), "-n", str(p), sys.executable, str(HERE / "call_mismatch_driver.py"),
           algorithm, str(c), checks]
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=120)
    assert "got a result" not in proc.stdout, proc.stdout
    assert proc.returncode == EXIT_CODE, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("distmm: watchdog")]
    assert len(ours) == 1, proc.stderr
    assert "a collective did not complete within --timeout 3 s (waiting in phase" in ours[0]
    assert " waiting in propagation" in ours[0], ours[0]
