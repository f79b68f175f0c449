"""The MPI test harness (tests/mpi/conftest.py, tests/mpi_pytest.py) on deliberately broken cases.

Each case file in tests/harness_cases/ runs under ``mpiexec -n 3`` with a 5 s phase timeout.
subprocess's own timeout turns a harness that hangs into a failure here.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_env import TIMER_SLACK_NS, mpi_env

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "harness_cases"
MPIEXEC = Path(sys.executable).parent / "mpiexec"  # the venv's MPICH; never another MPI's
RANKS = 3

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec beside {sys.executable}")


def run_case(case: str, *args: str, tmpdir: Path, hang_timeout: float | None = None):
    env = mpi_env(DISTMM_TEST_PHASE_TIMEOUT="5", TMPDIR=str(tmpdir))
    env.pop("DISTMM_TEST_HANG_TIMEOUT", None)
    if hang_timeout is not None:
        env["DISTMM_TEST_HANG_TIMEOUT"] = str(hang_timeout)
    cmd = [str(MPIEXEC), "-n", str(RANKS), sys.executable, str(REPO / "tests" / "mpi_pytest.py"),
           str(CASES / case), "-rA", *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=90)
    proc.elapsed = time.monotonic() - start
    return proc


def show(proc) -> str:
    return (f"exit {proc.returncode} after {proc.elapsed:.1f} s\n"
            f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")


@pytest.mark.skipif(not Path("/proc/self/timerslack_ns").exists(),
                    reason="needs Linux's /proc/PID/timerslack_ns")
def test_launched_ranks_sleep_with_the_coarse_timer_slack():
    """tests/serial/conftest.py coarsens the timer slack; every rank of a job inherits it."""
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-c",
           "print('<' + open('/proc/self/timerslack_ns').read().strip() + '>')"]
    proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True, timeout=60)
    # the ranks' lines may run together in mpiexec's merged output
    got = re.findall(r"<(\d+)>", proc.stdout)
    assert got == [str(TIMER_SLACK_NS)] * 2, (proc.stdout, proc.stderr)


def test_passing_run_exits_0_with_one_report(tmp_path):
    proc = run_case("case_pass.py", tmpdir=tmp_path)
    assert proc.returncode == 0, show(proc)
    assert proc.stdout.count("test session starts") == 1, show(proc)
    assert proc.stdout.count("2 passed, 1 skipped, 1 xfailed") == 1, show(proc)
    assert not list(tmp_path.glob("distmm-mpi-*")), "the run's temp dir was not removed"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_case("case_outcomes.py", tmpdir=tmp_path_factory.mktemp("outcomes"))


def test_failure_on_one_rank_fails_the_run_with_that_ranks_traceback(outcomes):
    out = outcomes.stdout
    assert outcomes.returncode == 1, show(outcomes)
    assert out.count("test session starts") == 1, show(outcomes)  # rank 0 reports, once
    assert out.count("---- rank 1 of 3 ----") == 1, show(outcomes)
    assert "AssertionError: failure-marker-rank1-of-3" in out, show(outcomes)
    assert "captured-output-of-rank-1" in out, show(outcomes)  # rank 1's captured stdout
    assert "FAILED tests/harness_cases/case_outcomes.py::test_fails_on_rank1" in out
    assert "2 failed, 2 passed, 1 xfailed, 2 errors" in out, show(outcomes)
    assert "timed out" not in outcomes.stderr, show(outcomes)


def test_setup_or_teardown_failure_on_one_rank_fails_every_rank(outcomes):
    out = outcomes.stdout
    assert "RuntimeError: fixture-marker-rank2" in out, show(outcomes)
    assert "ERROR tests/harness_cases/case_outcomes.py::test_setup_fails_on_rank2" in out
    assert "RuntimeError: teardown-marker-rank0" in out, show(outcomes)
    assert "ERROR tests/harness_cases/case_outcomes.py::test_teardown_fails_on_rank0" in out
    # ... and the ranks are still in step for the next test.
    assert "PASSED tests/harness_cases/case_outcomes.py::test_still_in_step_after_all_that" in out


def test_skip_on_some_ranks_only_is_a_failure_and_xfail_on_one_rank_is_xfail(outcomes):
    out = outcomes.stdout
    assert "FAILED tests/harness_cases/case_outcomes.py::test_skips_on_rank0_only" in out
    assert "the ranks disagree on the outcome of the call phase" in out, show(outcomes)
    assert "XFAIL tests/harness_cases/case_outcomes.py::test_xfail_fails_on_rank1_only" in out


def test_rank_raising_before_a_collective_aborts_instead_of_hanging(tmp_path):
    # the watchdog (default twice the phase timeout) far off: on a loaded host rank 2 may take
    # seconds to report its error before its phase timeout starts
    proc = run_case("case_raise_before_collective.py", tmpdir=tmp_path, hang_timeout=60)
    assert proc.returncode != 0, show(proc)
    err = proc.stderr
    assert "rank 2 of 3 timed out after 5 s" in err, show(proc)
    assert "test_rank2_raises_before_allreduce" in err, show(proc)
    assert "RuntimeError: raised-before-collective-marker-rank2" in err, show(proc)
    assert not list(tmp_path.glob("distmm-mpi-*")), "the aborted run's temp dir was not removed"


def test_deadlock_on_every_rank_is_ended_by_the_watchdog(tmp_path):
    # long enough for a loaded host to reach the test's receive before the stacks are dumped
    proc = run_case("case_deadlock.py", tmpdir=tmp_path, hang_timeout=20)
    assert proc.returncode != 0, show(proc)
    assert ("case_deadlock.py::test_every_rank_waits_forever is hitting the 20 s limit"
            in proc.stderr), show(proc)
    assert "in test_every_rank_waits_forever" in proc.stderr, show(proc)  # the stack dump


def test_ranks_collecting_different_tests_stop_before_running_any(tmp_path):
    proc = run_case("case_collection_mismatch.py", str(CASES / "case_collection_error.py"),
                    tmpdir=tmp_path)
    assert proc.returncode == 2, show(proc)  # pytest's "interrupted"
    assert "the ranks collected different tests" in proc.stderr, show(proc)
    assert "test_only_on_rank1" in proc.stderr, show(proc)  # the extra test on rank 1
    assert "ImportError: collection-error-marker-rank2" in proc.stderr, show(proc)
    assert "passed" not in proc.stdout, show(proc)


def test_no_tests_collected_is_an_error_unless_allowed(tmp_path):
    proc = run_case("case_pass.py", "-k", "no_such_test", tmpdir=tmp_path)
    assert proc.returncode == 5, show(proc)
    assert proc.stderr.count("no tests collected") == 1, show(proc)
    proc = run_case("case_pass.py", "-k", "no_such_test", "--allow-empty", tmpdir=tmp_path)
    assert proc.returncode == 0, show(proc)



def test_modules_run_only_at_their_rank_counts_unless_asked(tmp_path):
    """On 2 ranks a module that tests/mpi/rank_counts.py gives other counts, in a directory
    being collected, is left out, and the run says so; a module it does not list runs;
    DISTMM_TEST_EVERY_RANK_COUNT=1 runs both."""
    spec = importlib.util.spec_from_file_location("rank_counts",
                                                  REPO / "tests" / "mpi" / "rank_counts.py")
    rank_counts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rank_counts)
    limited = min(name for name, counts in rank_counts.RANK_COUNTS.items() if 2 not in counts)
    cases = tmp_path / "cases"
    cases.mkdir()
    # the harness cases' conftest (the real harness), pointed at this checkout's
    harness = (CASES / "conftest.py").read_text()
    (cases / "conftest.py").write_text(harness.replace(
        'Path(__file__).resolve().parent.parent / "mpi"', f"Path({str(REPO / 'tests' / 'mpi')!r})"))
    (cases / limited).write_text("def test_application():\n    pass\n")
    (cases / "test_engine.py").write_text("def test_engine():\n    pass\n")

    def run(every: str):
        cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(REPO / "tests" / "mpi_pytest.py"),
               str(cases), "-q"]
        env = mpi_env(TMPDIR=str(tmp_path), DISTMM_TEST_EVERY_RANK_COUNT=every)
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
        proc.elapsed = 0.0  # for show()
        assert proc.returncode == 0, show(proc)
        return proc

    left_out = run("")
    assert "1 passed" in left_out.stdout, show(left_out)
    assert "on 2 ranks these modules are not run" in left_out.stderr, show(left_out)
    assert limited in left_out.stderr, show(left_out)
    asked = run("1")
    assert "2 passed" in asked.stdout, show(asked)
    assert "modules are not run" not in asked.stderr, show(asked)
