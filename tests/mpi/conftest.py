"""MPI test harness for tests/mpi: every rank runs the same pytest session.

Launch with ``mpiexec -n N python tests/mpi_pytest.py tests/mpi`` (./tasks test does this for
N in 1 2 3 4 8). What this file guarantees:

* Lock-step phases. After every setup, call and teardown phase the ranks meet on a non-blocking
  collective of a private duplicate of COMM_WORLD: a one-byte ``Iallgather`` of each rank's
  outcome, which is the barrier too (polled with ``Test()`` and short sleeps). Only when the
  outcomes differ or one failed do they then allgather the texts. If any rank failed, the
  phase is reported as failed on EVERY rank, with the tracebacks (and captured output) of the
  failing ranks, each headed ``---- rank k of N ----`` (ranks that failed identically share
  one). As pytest's runner acts on the reports it gets here, a setup failure on one rank
  makes every rank skip the test body, so all ranks keep running the same phases in the
  same order.
* No silent deadlock. A rank waits at that barrier at most DISTMM_TEST_PHASE_TIMEOUT seconds
  (default 120). On timeout it prints which test, phase and rank timed out plus its own
  outcome and traceback (e.g. it raised before a collective the other ranks are still
  blocked in), removes the run's temp dir, then calls COMM_WORLD.Abort(1). If instead
  every rank hangs inside a test, a per-test watchdog (faulthandler) dumps the stacks and
  exits the process after DISTMM_TEST_HANG_TIMEOUT seconds (default twice the phase
  timeout; 0 disables it), which makes mpiexec end the job.
* Skips and xfails must agree across ranks. Skip only on rank-independent conditions (e.g.
  ``comm.size % c != 0``). A phase that passes on some ranks and skips on others is reported
  as a FAILURE naming each rank's outcome: silently skipping on every rank would hide the
  ranks that did run, and letting them diverge would deadlock. For ``xfail`` tests, a
  failure on any rank counts as the expected failure (xfailed) on every rank.
* Identical collection. All ranks must collect the same tests; if not, the run stops before
  running any test, like a collection error.
* Rank counts. Each module runs at the rank counts tests/mpi/rank_counts.py gives it (every
  count, 1 2 3 4 8, unless it is listed there with fewer). In a run over a directory, a module
  whose counts lack this run's size is not collected, and rank 0 names it; a module named on
  the command line runs at any size, and DISTMM_TEST_EVERY_RANK_COUNT=1 runs every module.
* Files. ``tmp_path`` is private to each rank (pytest's base temp dir is made per run and per
  rank, then removed at the end, unless --basetemp is given); the session fixture
  ``shared_tmp`` is one directory, made by rank 0, that every rank sees. ``--junitxml`` is
  written by rank 0 only.
"""

from __future__ import annotations

import faulthandler
import gc
import importlib.util
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from mpi4py import MPI

PHASE_TIMEOUT_ENV = "DISTMM_TEST_PHASE_TIMEOUT"
HANG_TIMEOUT_ENV = "DISTMM_TEST_HANG_TIMEOUT"
EVERY_RANK_COUNT_ENV = "DISTMM_TEST_EVERY_RANK_COUNT"

# The rank counts of each module: tests/mpi/rank_counts.py (pure Python, which ./tasks reads
# too), loaded from beside this file so that tests/harness_cases' copy of the harness finds it.
_spec = importlib.util.spec_from_file_location(
    "_distmm_rank_counts", Path(__file__).resolve().parent / "rank_counts.py")
rank_counts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rank_counts)
_LEFT_OUT = pytest.StashKey[set]()  # the module paths this run leaves out
_STATE_ATTR = "_distmm_mpi_harness"  # on the pytest Config; set once per session


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise pytest.UsageError(f"{name} must be a number of seconds, not {raw!r}") from None


class _Harness:
    """Per-session state: the private communicator, timeouts and directories."""

    def __init__(self, config: pytest.Config) -> None:
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        self.comm = world.Dup()  # private: harness traffic never meets the tests' messages
        self.phase_timeout = _env_seconds(PHASE_TIMEOUT_ENV, 120.0)
        self.hang_timeout = _env_seconds(HANG_TIMEOUT_ENV, 2 * self.phase_timeout)
        if float(config.getini("faulthandler_timeout") or 0) > 0:
            self.hang_timeout = 0  # pytest's own faulthandler_timeout is in charge then
        # pytest captures fd 2 during tests; keep a handle on the real stderr.
        self.err_fd = os.dup(2)

        given = config.option.basetemp
        base = None
        if self.rank == 0:
            base = str(given) if given else tempfile.mkdtemp(prefix="distmm-mpi-")
            shared = Path(base, "shared")
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir(parents=True)
        self.base = self.comm.bcast(base, root=0)
        self.owns_base = not given
        self.shared_dir = Path(self.base, "shared")
        config.option.basetemp = os.path.join(self.base, f"rank{self.rank}")
        if self.rank != 0 and getattr(config.option, "xmlpath", None):
            config.option.xmlpath = None  # one junit file, not N racing writers

    def say(self, text: str) -> None:
        os.write(self.err_fd, (text.rstrip("\n") + "\n").encode("utf-8", "replace"))

    def meet(self, where: str, local_detail: str = "", code: int = 0) -> bytearray:
        """Wait for every rank at ``where`` and return each rank's one-byte ``code``.

        A non-blocking allgather of one byte: it is the barrier and, in the common case where
        every code agrees, the whole exchange. Polled with sleeps of about 2% of the time
        waited so far: quick when the ranks arrive together, and a long wait leaves the cores
        to the ranks still working. If not every rank comes, abort the job.
        """
        send, codes = bytearray([code]), bytearray(self.size)
        request = self.comm.Iallgather([send, MPI.BYTE], [codes, MPI.BYTE])
        start = time.monotonic()
        while not request.Test():
            waited = time.monotonic() - start
            if waited > self.phase_timeout:
                self.say(
                    f"\n==== distmm MPI harness: rank {self.rank} of {self.size} timed out "
                    f"after {self.phase_timeout:g} s waiting for the other ranks {where} ====\n"
                    "Another rank is stuck (e.g. in a collective this rank never entered) "
                    f"or has died; aborting the job ({PHASE_TIMEOUT_ENV} sets the timeout).\n"
                    + local_detail
                )
                if self.owns_base:  # nobody will reach close(): clean up the run's temp dir
                    shutil.rmtree(self.base, ignore_errors=True)
                MPI.COMM_WORLD.Abort(1)
            time.sleep(min(0.02, 5e-5 + 0.02 * waited))
        return codes

    def close(self) -> None:
        self.meet("at the end of the session")
        if self.rank == 0 and self.owns_base:
            shutil.rmtree(self.base, ignore_errors=True)
        self.comm.Free()
        os.close(self.err_fd)


def _harness(config: pytest.Config) -> _Harness | None:
    return getattr(config, _STATE_ATTR, None)


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path / junitxml plugins read the options
def pytest_configure(config: pytest.Config) -> None:
    if _harness(config) is None:
        setattr(config, _STATE_ATTR, _Harness(config))


def _left_out(config: pytest.Config, name: str) -> bool:
    """Whether module file ``name``, met in a directory, is not run at this run's size."""
    harness = _harness(config)
    return (harness is not None and name.startswith("test_") and name.endswith(".py")
            and not rank_counts.runs_at(name, harness.size)
            and os.environ.get(EVERY_RANK_COUNT_ENV, "") in ("", "0"))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    # Not collected at all (rather than deselected): their imports (PyTorch) are skipped too.
    if _left_out(config, collection_path.name):
        config.stash.setdefault(_LEFT_OUT, set()).add(collection_path)
        return True
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    harness = _harness(config)
    if harness is not None:
        delattr(config, _STATE_ATTR)
        harness.close()


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported (numpy, numba, scipy, PyTorch and PyG for the modules that
    # test distmm.torch: hundreds of thousands of objects) lives as long as the process. Out
    # of the cycle collector's sight, a full collection, which the tests of freed memory and
    # the memory models run, costs microseconds instead of a tenth of a second.
    gc.collect()
    gc.freeze()
    harness = _harness(session.config)
    if harness is None:
        return
    harness.meet("at the end of collection")
    # the modules left out of the directories asked for (pytest also visits the directory of a
    # file named on the command line, whose other modules nobody asked for)
    asked = [Path(arg.split("::")[0]).resolve() for arg in session.config.args]
    left_out = sorted({path.name for path in session.config.stash.get(_LEFT_OUT, set())
                       if any(d.is_dir() and path.is_relative_to(d) for d in asked)})
    if harness.rank == 0 and left_out:
        harness.say(f"distmm MPI harness: on {harness.size} ranks these modules are not run "
                    f"(tests/mpi/rank_counts.py gives their rank counts; "
                    f"{EVERY_RANK_COUNT_ENV}=1 runs them): {', '.join(left_out)}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    errors = [
        f"{report.nodeid}:\n{report.longreprtext}"
        for report in (reporter.stats.get("error", []) if reporter else [])
        if isinstance(report, pytest.CollectReport)
    ]
    mine = ([item.nodeid for item in session.items], errors)
    everyone = harness.comm.allgather(mine)
    if all(theirs == everyone[0] for theirs in everyone):
        return  # the same tests (and the same collection errors, which pytest reports)
    if harness.rank == 0:
        lines = ["", "==== distmm MPI harness: the ranks collected different tests ===="]
        for rank, (ids, errs) in enumerate(everyone):
            extra = sorted(set(ids) - set(everyone[0][0]))
            missing = sorted(set(everyone[0][0]) - set(ids))
            lines.append(
                f"rank {rank}: {len(ids)} tests, {len(errs)} collection errors"
                + (f"; not on rank 0: {extra[:5]}" if extra else "")
                + (f"; missing vs rank 0: {missing[:5]}" if missing else "")
            )
            if rank != 0:  # rank 0's own errors are in its report
                lines += [f"---- rank {rank} of {harness.size}: ERROR collecting {e}" for e in errs]
        harness.say("\n".join(lines))
    # Stop every rank the way pytest stops on a collection error.
    session.testsfailed = max(session.testsfailed, 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    harness = _harness(item.config)
    if harness is None or harness.hang_timeout <= 0:
        yield
        return
    limit = harness.hang_timeout
    # faulthandler's C thread fires even if the main thread never releases the GIL; the
    # heading just before it (a Python thread) names the rank and test where it can.
    heading = threading.Timer(
        max(0.9 * limit, limit - 1.0),
        harness.say,
        [f"\n==== distmm MPI harness: rank {harness.rank} of {harness.size}: {item.nodeid} "
         f"is hitting the {limit:g} s limit ({HANG_TIMEOUT_ENV}); dumping stacks, exiting ===="],
    )
    heading.daemon = True
    heading.start()
    faulthandler.dump_traceback_later(limit, exit=True, file=harness.err_fd)
    yield
    faulthandler.cancel_dump_traceback_later()
    heading.cancel()


_KINDS = ("passed", "failed", "skipped", "xfailed", "xpassed")


def _kind(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if isinstance(report.longrepr, str) and report.longrepr.startswith("[XPASS(strict)]"):
        return "xpassed"  # pytest turned an unexpected pass of xfail(strict=True) into a failure
    return report.outcome


def _local_state(report: pytest.TestReport) -> tuple[str, str, str | None, list]:
    """What one rank tells the others about a phase: kind, text, crash line, captures."""
    kind = _kind(report)
    if report.skipped and isinstance(report.longrepr, tuple):
        text = str(report.longrepr[2])  # the skip reason
    elif kind in ("xfailed", "xpassed") and hasattr(report, "wasxfail"):
        text = str(report.wasxfail)
    else:
        text = report.longreprtext
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
    sections = list(report.sections) if report.failed else []
    return kind, text, crash, sections


class _RanksRepr:
    """A longrepr made of several ranks' texts (pytest prints it like a traceback)."""

    def __init__(self, text: str, crash: str) -> None:
        self.text = text
        self.reprcrash = _Crash(crash)  # shown in the short summary and junit's message

    def toterminal(self, tw) -> None:
        for line in self.text.splitlines():
            tw.line(line)

    def __str__(self) -> str:
        return self.text


class _Crash:
    def __init__(self, message: str) -> None:
        self.message = message

    def __str__(self) -> str:
        return self.message


def _failure_text(states: list, failed: list[int], me: int) -> tuple[str, str]:
    """The failing ranks' tracebacks (ranks that failed identically share one) and outputs."""
    size = len(states)
    alike: dict[str, list[int]] = {}  # traceback, object addresses masked -> ranks
    for rank in failed:
        alike.setdefault(re.sub(r"0x[0-9a-fA-F]+", "0x...", states[rank][1]), []).append(rank)
    parts = []
    for first, *same in alike.values():
        also = f" (ranks {', '.join(map(str, same))} failed the same way)" if same else ""
        parts.append(f"---- rank {first} of {size}{also} ----\n{states[first][1]}")
    for rank in failed:
        if rank != me:  # this rank's own captured output is printed by pytest itself
            parts += [
                f"---- rank {rank} of {size}: {title} ----\n{body}"
                for title, body in states[rank][3]
            ]
    first = states[failed[0]]
    crash = first[2] or (first[1].strip().splitlines() or ["failed"])[-1]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return "\n".join(parts), f"[rank {failed[0]}] {crash}{more}"


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: see skipping/xfail's final word
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    harness = _harness(item.config)
    if harness is None:
        return
    mine = _local_state(report)
    codes = harness.meet(
        f"at the end of the {call.when} phase of {item.nodeid}",
        f"Outcome of that phase on rank {harness.rank}: {mine[0]}\n{mine[1]}\n",
        _KINDS.index(mine[0]),
    )
    if len(set(codes)) == 1 and _KINDS[codes[0]] != "failed":
        return  # the same outcome everywhere: keep this rank's own report
    states = harness.comm.allgather(mine)  # safe: every rank is here
    kinds = {state[0] for state in states}
    failed = [rank for rank, state in enumerate(states) if state[0] == "failed"]
    if failed:
        report.outcome = "failed"
        report.longrepr = _RanksRepr(*_failure_text(states, failed, harness.rank))
        if hasattr(report, "wasxfail"):
            del report.wasxfail
    elif kinds == {"xfailed", "xpassed"}:
        # It failed on some rank, as expected: an expected failure on every rank.
        xfailed = [rank for rank, state in enumerate(states) if state[0] == "xfailed"]
        report.outcome = "skipped"
        report.wasxfail = states[xfailed[0]][1]  # the xfail reason
        report.longrepr = _RanksRepr(*_failure_text(states, xfailed, harness.rank))
    else:
        listing = "\n".join(
            f"  rank {rank}: {kind}" + (f" ({text})" if text else "")
            for rank, (kind, text, _, _) in enumerate(states)
        )
        report.outcome = "failed"
        report.longrepr = _RanksRepr(
            f"distmm MPI harness: the ranks disagree on the outcome of the {call.when} phase.\n"
            "A test must skip (or xfail) on every rank or on none: base skip conditions on\n"
            "rank-independent facts such as comm.size, never on comm.rank or local state.\n"
            + listing,
            "ranks disagree: " + ", ".join(sorted(kinds)),
        )
        if hasattr(report, "wasxfail"):
            del report.wasxfail


@pytest.fixture(autouse=True)
def _close_distributed_objects():
    """Close every distributed object a test built, in the order it was built.

    Each object holds sub-communicators until closed, and MPICH has 2048 communicator ids per
    process: a whole suite of tests that never close their objects runs out of them. Every
    rank runs the same test, so every rank closes the same objects in the same order."""
    from distmm.algorithms.base import track_objects

    made: list = []
    track_objects(made)
    yield
    track_objects(None)
    for obj in made:
        obj.close()


@pytest.fixture
def comm() -> MPI.Intracomm:
    """MPI.COMM_WORLD, for tests that communicate."""
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def shared_tmp(pytestconfig: pytest.Config) -> Path:
    """One directory for the whole run, made by rank 0 and the same path on every rank."""
    harness = _harness(pytestconfig)
    assert harness is not None, "the MPI harness is not configured"
    return harness.shared_dir
