"""MPICH's single-copy switch between the ranks of a node (distmm.runtime.intranode).

The oracle is a fresh Python process: what its environment holds after
``distmm.prepare_process()``, given what it held before, whether MPI came first, and what Yama
and the kernel permit here (``cma_permitted``, whose parts are tested with a Yama file of our
own and a process that runs threads). The last test runs ranks with the switch on and checks
that a large message, which then takes the single-copy path, arrives intact.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from launch_env import mpi_env

from distmm.runtime import intranode
from distmm.runtime.info import _intranode_text

VAR = intranode.VARIABLE
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
SHOW = ("import os, distmm; distmm.prepare_process(); "
        "print(os.environ.get('MPIR_CVAR_CH4_CMA_ENABLE', '-'), "
        "repr(distmm.runtime.intranode.STATE))")


# distmm.runtime.intranode alone, as distmm.prepare_process runs it first: before numpy or MPI start
# threads
_PATH = intranode.__file__
ALONE = (f"import importlib.util as u; s = u.spec_from_file_location('m', {_PATH!r}); "
         "i = u.module_from_spec(s); s.loader.exec_module(i); ")


def _state(code: str, **env: str) -> tuple[str, str]:
    """(the variable after ``code`` or "-", intranode.STATE) in a fresh Python."""
    clean = {k: v for k, v in os.environ.items() if k != VAR}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**clean, **env})
    assert res.returncode == 0, res.stderr
    value, state = res.stdout.strip().split(" ", 1)
    return value, eval(state)  # noqa: S307 - repr of a str printed by our own code


def test_import_alone_sets_nothing():
    assert _state("import os, distmm; print(os.environ.get('MPIR_CVAR_CH4_CMA_ENABLE', '-'), "
                  "repr(distmm.runtime.intranode.STATE))") == ("-", "not called")


def test_distmm_sets_the_switch_before_mpi_where_permitted():
    value, state = _state(SHOW)
    why = _state(ALONE + "print('-', repr(i.cma_permitted()[1]))")[1]
    if why == "":
        assert (value, state) == ("1", "distmm")
    else:  # not permitted on this machine: left alone, and the state says why
        assert (value, state) == ("-", f"not set: {why}")


def test_a_value_in_the_environment_is_kept():
    assert _state(SHOW, MPIR_CVAR_CH4_CMA_ENABLE="0") == ("0", "environment")
    assert _state(SHOW, MPIR_CVAR_CH4_CMA_ENABLE="1") == ("1", "environment")


def test_after_mpi_the_state_says_so():
    """mpi4py's MPI imported first: MPI read its variables already. Where CMA is permitted,
    either the probe ran and the state says the value came after MPI, or MPI's own threads
    kept the probe from running and nothing was set; where it is not, nothing is set and the
    state gives the reason a fresh process finds (or the threads, which the probe meets
    before it reads a child)."""
    value, state = _state("from mpi4py import MPI; " + SHOW)
    why = _state(ALONE + "print('-', repr(i.cma_permitted()[1]))")[1]
    threads = ("-", "not set: not tested (this process runs threads already)")
    if why == "":
        assert (value, state) in (("1", "distmm, after MPI"), threads)
    else:
        assert (value, state) in (("-", f"not set: {why}"), threads)


def test_yama_other_than_zero_is_refused(tmp_path):
    for scope in ("1", "2", "3"):
        f = tmp_path / "ptrace_scope"
        f.write_text(scope + "\n")
        assert intranode.cma_permitted(str(f)) == (False, f"Yama ptrace_scope is {scope}")


def test_no_yama_or_scope_zero_goes_on_to_the_probe(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(intranode, "_read_child_memory", lambda: calls.append(1) or "")
    f = tmp_path / "ptrace_scope"
    f.write_text("0\n")
    assert intranode.cma_permitted(str(f)) == (True, "")
    assert intranode.cma_permitted(str(tmp_path / "no-yama")) == (True, "")
    monkeypatch.setattr(intranode, "_read_child_memory", lambda: "process_vm_readv is refused")
    assert intranode.cma_permitted(str(f)) == (False, "process_vm_readv is refused")
    assert len(calls) == 2


def test_a_probe_that_cannot_run_leaves_the_switch_alone(tmp_path, monkeypatch):
    """An OS error inside the probe (/proc hidden, no file descriptors left) is a reason not
    to set the switch, never an exception out of ``distmm.prepare_process()``."""
    def no_proc(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(intranode.os, "listdir", no_proc)
    assert intranode.cma_permitted(str(tmp_path / "no-yama")) == \
        (False, "not tested (Permission denied)")


def test_the_probe_does_not_fork_a_process_that_runs_threads():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert intranode._read_child_memory() == \
            "not tested (this process runs threads already)"
    finally:
        stop.set()
        t.join()


class _RefusingLibc:
    """A C library whose process_vm_readv fails, as under a seccomp filter that refuses it."""

    class process_vm_readv:  # noqa: N801 - stands in for the C function
        restype = argtypes = None

        def __new__(cls, *args):
            return -1


def test_a_refused_read_of_the_child_is_reported(monkeypatch):
    monkeypatch.setattr(intranode.os, "listdir", lambda path: ["1"])  # one thread
    monkeypatch.setattr(intranode.ctypes, "CDLL", lambda *a, **k: _RefusingLibc())
    why = intranode._read_child_memory()
    assert why.startswith("process_vm_readv is refused")


def test_the_probe_reads_a_child_here():
    """On this Linux (no Yama, or scope 0, and no filter), a fresh single-threaded process
    reads its forked child; the large-message test below is the end-to-end check."""
    if intranode.cma_permitted()[1] not in ("", "not tested (this process runs threads "
                                                "already)"):
        pytest.skip(f"not permitted here: {intranode.cma_permitted()[1]}")
    assert _state(ALONE + "print('-', repr(i._read_child_memory()))") == ("-", "")


def test_info_reports_the_switch():
    from distmm.runtime.info import collect, format_text

    info = collect()
    assert info["intranode"]["variable"] == VAR
    assert info["intranode"]["value"] == os.environ.get(VAR)
    assert info["intranode"]["set_by"] == intranode.STATE
    assert info["intranode"]["mpich"] == ("MPICH" in info["mpi"]["library_version"])
    row = next(x for x in format_text(info).splitlines() if x.startswith(VAR))
    assert row.split(None, 1)[1] == _intranode_text(info["intranode"])


def test_info_row():
    assert "MPICH's switch" in _intranode_text({"value": None, "set_by": "distmm",
                                                "mpich": False})
    assert _intranode_text({"value": "0", "set_by": "environment", "mpich": True}) == \
        "0 (from the environment)"
    assert "before MPI was initialised" in _intranode_text(
        {"value": "1", "set_by": "distmm", "mpich": True})
    assert _intranode_text({"value": None, "set_by": "not set: Yama ptrace_scope is 1",
                            "mpich": True}) == "not set (distmm left it: Yama ptrace_scope is 1)"


@pytest.mark.parametrize("switch", ["0", "1"])
def test_large_messages_arrive_intact_with_the_switch(switch):
    """Two ranks swap 4 MiB (single-copy with the switch on, bounce buffer off) and 100 bytes
    (below MPICH's single-copy threshold either way): every byte arrives."""
    code = (
        "import distmm, numpy as np\n"
        "from mpi4py import MPI\n"
        "c = MPI.COMM_WORLD; r = c.rank\n"
        "for n in (1 << 19, 13):\n"
        "    a = np.arange(n, dtype=np.float64) + 1e6 * r; b = np.empty(n)\n"
        "    c.Sendrecv(a, 1 - r, 0, b, 1 - r, 0)\n"
        "    assert np.array_equal(b, np.arange(n, dtype=np.float64) + 1e6 * (1 - r))\n"
        "ok = c.allreduce(1)\n"
        "if r == 0: print('intact on', ok, 'ranks', flush=True)\n")
    res = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120, env=mpi_env(MPIR_CVAR_CH4_CMA_ENABLE=switch))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["intact", "on", "2", "ranks"]
