"""`distmm info`, `distmm --version`, the single version and the optional-extra helper.

The oracle for `info` is what this process sees itself (mpi4py's MPI library string, numba's
thread count, importlib's view of the installed extras); the console script runs as a user
would run it, with a timeout.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import numba
import pytest
from launch_env import mpi_env
from mpi4py import MPI

import distmm
from distmm.cli import build_parser
from distmm.errors import InputError
from distmm.runtime.extras import EXTRAS, require_extra
from distmm.runtime.info import collect, format_text

BIN = os.path.dirname(sys.executable)
DISTMM = os.path.join(BIN, "distmm")
MPIEXEC = os.path.join(BIN, "mpiexec")
ENV = mpi_env()
needs_script = pytest.mark.skipif(not os.path.exists(DISTMM),
                                  reason="needs the installed distmm console script")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=ENV)


def test_version_has_one_source():
    # setup.cfg reads distmm.__version__, so the installed metadata must agree with it
    assert distmm.__version__ == importlib.metadata.version("distmm")


@needs_script
def test_version_flag_prints_the_package_version():
    res = _run(DISTMM, "--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"distmm {distmm.__version__}"


def test_collect_matches_what_this_process_sees():
    info = collect()
    assert info["distmm"] == distmm.__version__
    assert info["mpi"]["library_version"] == MPI.Get_library_version().strip()
    assert info["mpi"]["library"] and info["mpi"]["library"] in " ".join(
        MPI.Get_library_version().split())
    assert info["mpi"]["standard"] == "{}.{}".format(*MPI.Get_version())
    assert info["mpi"]["world_size"] == MPI.COMM_WORLD.Get_size()
    assert info["numba"]["num_threads"] == numba.get_num_threads()
    assert info["numba"]["threading_layer"]
    assert info["packages"]["numpy"] == importlib.metadata.version("numpy")
    for module, entry in info["extras"].items():
        assert entry["extra"] == EXTRAS[module]
        try:
            installed = importlib.metadata.version(
                "torch-geometric" if module == "torch_geometric" else module) is not None
        except importlib.metadata.PackageNotFoundError:
            installed = importlib.util.find_spec(module) is not None
        assert entry["installed"] == installed, module
    from distmm.kernels import reference

    budget = info["panel_budget"]
    assert budget == reference.cache_share(info["rank_threads"]["ranks_on_node"])
    text = format_text(info)
    assert distmm.__version__ in text and info["mpi"]["library"] in text
    row = next(x for x in text.splitlines() if x.startswith("column-panel budget per rank"))
    assert f"{budget['panel_bytes'] / 2**20:g} MiB" in row
    for entry in info["extras"].values():
        if not entry["installed"]:
            assert f"pip install distmm[{entry['extra']}]" in text


@needs_script
def test_info_json_from_the_console_script():
    res = _run(DISTMM, "info", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["distmm"] == distmm.__version__
    assert info["mpi"]["library_version"] == MPI.Get_library_version().strip()
    assert info["numba"]["num_threads"] == 1  # NUMBA_NUM_THREADS=1 in ENV


@pytest.mark.skipif(not os.path.exists(MPIEXEC) or not os.path.exists(DISTMM),
                    reason="needs the installed mpiexec and distmm console script")
def test_info_under_mpiexec_prints_once_and_sees_every_rank():
    res = _run(MPIEXEC, "-n", "2", DISTMM, "info", "--json")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["mpi"]["world_size"] == 2


def test_info_is_registered_in_the_parser():
    args = build_parser().parse_args(["info", "--json"])
    assert args.command == "info" and args.json


def test_require_extra_returns_the_module_or_names_the_extra():
    import json as json_module

    assert require_extra("json") is json_module
    with pytest.raises(InputError, match=r"^plotting needs the optional package "
                                         r"distmm_no_such_pkg: pip install distmm\[plot\]$"):
        require_extra("distmm_no_such_pkg.sub", "plot", what="plotting")
    if importlib.util.find_spec("petsc4py") is None:
        with pytest.raises(InputError, match=r"pip install distmm\[petsc\]"):
            require_extra("petsc4py", what="the PETSc baseline")


def _blas_state(code: str, **env: str) -> list[str]:
    """What a fresh Python prints for ``code`` with ``env`` on top of an environment without
    OPENBLAS_THREAD_TIMEOUT."""
    clean = {k: v for k, v in ENV.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**clean, **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


SHOW = ("import os, distmm; distmm.prepare_process(); "
        "print(os.environ['OPENBLAS_THREAD_TIMEOUT'], "
        "distmm.runtime.blas_threads.STATE.replace(' ', '_'))")


def test_openblas_thread_timeout_is_set_before_numpy_loads():
    """distmm.prepare_process() first sets OpenBLAS's shortest spin before numpy loads it; a
    value in the environment is kept; after numpy, the value is set for what loads later and
    the state says numpy's OpenBLAS did not see it. Importing distmm alone sets nothing."""
    assert _blas_state(SHOW) == ["4", "distmm"]
    assert _blas_state(SHOW, OPENBLAS_THREAD_TIMEOUT="12") == ["12", "environment"]
    assert _blas_state("import numpy; " + SHOW) == ["4", "distmm,_after_numpy"]
    assert _blas_state("import distmm, numpy, os; "
                       "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT', '-'))") == ["-"]


def test_the_command_prepares_the_process_before_numpy_and_mpi():
    """``distmm`` (``python -m distmm``) makes the settings before it loads numpy and MPI:
    ``distmm info`` run through it reports them as set in time."""
    clean = {k: v for k, v in ENV.items() if k not in (
        "OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
        "MPIR_CVAR_CH4_CMA_ENABLE")}
    res = subprocess.run([sys.executable, "-m", "distmm", "info", "--json"],
                         capture_output=True, text=True, timeout=120, env=clean)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["blas_threads"]["value"], info["blas_threads"]["set_by"]) == ("4", "distmm")
    assert info["intranode"]["set_by"] in ("distmm", "environment") or \
        info["intranode"]["set_by"].startswith("not set: ")
    assert info["intranode"]["set_by"] not in ("not called", "distmm, after MPI")


def test_info_reports_the_blas_thread_timeout():
    info = collect()
    assert info["blas_threads"]["variable"] == "OPENBLAS_THREAD_TIMEOUT"
    assert info["blas_threads"]["value"] == os.environ.get("OPENBLAS_THREAD_TIMEOUT")
    assert info["blas_threads"]["set_by"] == distmm.runtime.blas_threads.STATE
    assert "OPENBLAS_THREAD_TIMEOUT" in format_text(info)
    assert info["blas_threads"]["count"] == os.environ.get("OPENBLAS_NUM_THREADS")
    assert info["blas_threads"]["count_set_by"] == distmm.runtime.blas_threads.COUNT_STATE
    assert "OPENBLAS_NUM_THREADS" in format_text(info)


def test_panel_budget_row_says_what_the_budget_rests_on():
    from distmm.runtime.info import _budget_text

    MiB = 2**20
    assert _budget_text({"cache_bytes": 32 * MiB, "cache_cpus": 2, "ranks_sharing": 2,
                         "panel_bytes": 8 * MiB}) == (
        "8 MiB (half of a 32 MiB last-level cache shared by 2 CPUs, over 2 rank(s) on it)")
    assert _budget_text({"cache_bytes": 0, "cache_cpus": 0, "ranks_sharing": 1,
                         "panel_bytes": 8 * MiB}) == (
        "8 MiB (the last-level cache's size is unknown here)")


def test_info_reports_the_pairwise_threshold():
    from distmm.core import comm

    info = collect()
    assert info["pairwise"]["bytes"] == comm.PAIRWISE_BYTES
    assert info["pairwise"]["value"] == os.environ.get("DISTMM_PAIRWISE_BYTES")
    row = next(x for x in format_text(info).splitlines()
               if x.startswith("DISTMM_PAIRWISE_BYTES"))
    assert f" {comm.PAIRWISE_BYTES} (" in row

