"""pytest plugin: the tests that took the most CPU seconds, the load-robust ``--durations``.

``python -m pytest -p cpu_durations --cpu-durations=N ...`` (from tests/, or with tests/ on
``PYTHONPATH``), also in pytest-xdist workers and under ``tests/mpi_pytest.py``. A test's CPU
seconds are those of its setup, call and teardown: user + system time of the test's process
and of the child processes it waited for (the ranks of an ``mpiexec`` it launched), summed
over the ranks under MPI. On a host that others load, wall times drift several-fold while
these stay put; compare them between runs, and keep wall-clock timings to the benchmarks.
"""

from __future__ import annotations

import resource
import sys

import pytest

_KEY = "cpu_seconds"


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests and the N modules that took the most CPU seconds (0: all)")


_started: dict[str, float] = {}
_seconds: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _started[item.nodeid] = _cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when == "teardown" and item.nodeid in _started:
        report = outcome.get_result()
        report.user_properties.append((_KEY, _cpu() - _started.pop(item.nodeid)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # here in the process that reports: pytest-xdist's controller gets the workers' reports
    for key, value in report.user_properties:
        if key == _KEY:
            _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + value


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    count = config.getoption("cpu_durations")
    if count is None:
        return
    seconds = dict(_seconds)
    mpi = sys.modules.get("mpi4py.MPI")
    size = 1
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        world = mpi.COMM_WORLD  # every rank runs the same session and reaches this hook
        size = world.Get_size()
        total: dict[str, float] = {}
        for theirs in world.allgather(seconds):
            for nodeid, value in theirs.items():
                total[nodeid] = total.get(nodeid, 0.0) + value
        seconds = total
    modules: dict[str, float] = {}
    for nodeid, value in seconds.items():
        module = nodeid.split("::")[0]
        modules[module] = modules.get(module, 0.0) + value
    where = f", summed over {size} ranks" if size > 1 else ""
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", f"CPU seconds per module{where}")
    ranked_modules = sorted(modules.items(), key=lambda kv: -kv[1])
    for module, value in ranked_modules[:count] if count else ranked_modules:
        write(f"{value:9.1f}  {module}")
    write(f"{sum(modules.values()):9.1f}  (all {len(seconds)} tests)")
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"CPU seconds per test{where}")
    for nodeid, value in ranked[:count] if count else ranked:
        write(f"{value:9.2f}  {nodeid}")
