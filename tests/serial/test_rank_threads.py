"""Each rank's numba and OpenBLAS threads (distmm/kernels/threads.py,
distmm/runtime/blas_threads.py):
its share of the node's cores.

The jobs run as users launch them, under mpiexec with no thread settings, and report the
thread count their kernels then use; the oracle is the formula on what the process sees
itself (its affinity, the node's CPUs, the ranks on the node).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numba
import pytest
from launch_env import mpi_env

from distmm.kernels import threads
from distmm.runtime.cores import LOCAL_SIZE_VARIABLES, cpus, node_share

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

DRIVER = r"""
import json, os, sys
import numba
import scipy.sparse as sp
from mpi4py import MPI
import distmm
from distmm.runtime.cores import cpus
from distmm.kernels import threads
if sys.argv[1] != "-":
    numba.set_num_threads(int(sys.argv[1]))  # a program that chose its own count
comm = MPI.COMM_WORLD
S = sp.random(40, 30, density=0.2, format="coo", random_state=1)
if sys.argv[2] == "then-split":  # first the whole job, then halves that see fewer ranks
    distmm.distribute(S, comm, root=None).close()
    os.environ.pop("MPI_LOCALNRANKS", None)
sub = comm.Split(comm.rank % 2, comm.rank) if sys.argv[2] != "world" else comm
with distmm.distribute(S, sub, root=None) as obj:
    A = obj.dense("a", 8, fill=1.0)
    B = obj.dense("b", 8, fill=1.0)
    obj.fusedmm_a(A, B)
    state = dict(threads.STATE, numba=numba.get_num_threads(), cpus_all=cpus(),
                 pool=numba.config.NUMBA_NUM_THREADS)
rows = comm.gather(state)
if comm.rank == 0:
    print(json.dumps(rows))
if sub is not comm:
    sub.Free()
"""


def _job(n: int, env_threads: str | None, program: str = "-", comm: str = "world") -> list:
    env = mpi_env()
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        env.pop(var, None)
    if env_threads is not None:
        env["NUMBA_NUM_THREADS"] = env_threads
    proc = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-c", DRIVER, program, comm],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_node_share_divides_the_node_and_respects_the_affinity():
    assert node_share(1, 64, 64) == 64
    assert node_share(64, 64, 64) == 1  # one rank per core, unbound
    assert node_share(16, 64, 64) == 4
    assert node_share(16, 2, 64) == 2  # bound to 2 CPUs: no more than those
    assert node_share(128, 64, 64) == 1  # oversubscribed: still one thread
    assert node_share(3, 8, 8) == 2  # the remainder stays idle rather than oversubscribed
    assert node_share(0, 4, 4) == 4


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ranks_get_their_share_of_the_node_without_any_setting(n):
    for row in _job(n, None):
        assert row["set_by"] == "distmm"
        assert row["ranks_on_node"] == n
        want = node_share(n, row["cpus_all"], os.cpu_count())
        assert row["threads"] == row["numba"] == want
        # the pool started with the share, as if NUMBA_NUM_THREADS had been set: no idle
        # threads beside the working ones
        assert row["pool"] == want


def test_a_communicator_of_some_ranks_counts_the_launchers_ranks_on_the_node():
    """Two communicators of one job: each rank still shares the node with all the job's ranks
    (MPICH's launcher says how many); a count of the communicator alone would give each rank
    twice its share."""
    rows = _job(4, None, comm="split")
    for row in rows:
        assert row["ranks_on_node"] == 4
        assert row["numba"] == node_share(4, row["cpus_all"], os.cpu_count())


def test_a_later_communicator_that_sees_fewer_ranks_stays_within_the_pool():
    """The first distribute starts the pool with the share of 2 ranks; a later one on a
    communicator of one rank, with no launcher count, would give 2 threads: it keeps to the
    pool instead of failing in numba.set_num_threads."""
    for row in _job(2, None, comm="then-split"):
        assert row["ranks_on_node"] == 1
        assert row["numba"] == row["pool"] == node_share(2, row["cpus_all"], os.cpu_count())


def test_numba_num_threads_in_the_environment_is_kept():
    for row in _job(2, "1"):
        assert row["set_by"] == "environment" and row["numba"] == 1


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2 or (os.cpu_count() or 1) < 2,
                    reason="needs a machine where numba may run 2 threads")
def test_a_count_the_program_set_is_kept():
    """A program that called numba.set_num_threads(1) on a node where distmm would give it
    more keeps its 1."""
    for row in _job(1, None, program="1"):
        assert row["set_by"] == "program" and row["numba"] == 1
        assert row["pool"] == numba.config.NUMBA_NUM_THREADS  # started by the program


def test_expected_follows_the_environment(monkeypatch):
    monkeypatch.setenv("NUMBA_NUM_THREADS", str(numba.config.NUMBA_NUM_THREADS))
    assert threads.expected()["set_by"] == "environment"
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")
    got = threads.expected()
    assert got["set_by"] == "distmm" and got["ranks_on_node"] == 4
    assert got["threads"] == node_share(4, cpus(), os.cpu_count())


# one write per process: under mpiexec two ranks' output interleaves write by write, and
# print() of several values writes each piece on its own when stdout is unbuffered
COUNT = ("import os, sys, distmm; distmm.prepare_process(); "
         "sys.stdout.write(os.environ.get('OPENBLAS_NUM_THREADS', '-') + ' ' "
         "+ distmm.runtime.blas_threads.COUNT_STATE.replace(' ', '_') + '\\n')")


def _count_state(code: str, **env: str) -> list[str]:
    """What a fresh Python prints for ``code`` with ``env`` on top of an environment without
    thread counts or launcher variables."""
    drop = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", *LOCAL_SIZE_VARIABLES)
    clean = {k: v for k, v in mpi_env().items() if k not in drop}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**clean, **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_openblas_gets_the_ranks_share_where_the_launcher_counts_several():
    """OpenBLAS's thread count: the rank's share of the node where MPICH's or Open MPI's
    launcher says several ranks share it, before numpy loads OpenBLAS; a count the user set
    (OPENBLAS_NUM_THREADS or OMP_NUM_THREADS) is kept; one rank on the node keeps OpenBLAS's
    own count."""
    share = str(node_share(2, cpus(), os.cpu_count()))
    assert _count_state(COUNT, MPI_LOCALNRANKS="2") == [share, "distmm"]
    assert _count_state(COUNT, OMPI_COMM_WORLD_LOCAL_SIZE="2") == [share, "distmm"]
    assert _count_state(COUNT, MPI_LOCALNRANKS="2", OPENBLAS_NUM_THREADS="3") == [
        "3", "environment"]
    assert _count_state(COUNT, MPI_LOCALNRANKS="2", OMP_NUM_THREADS="2") == ["-", "environment"]
    assert _count_state(COUNT) == ["-", "one_rank_on_the_node"]
    assert _count_state("import numpy; " + COUNT, MPI_LOCALNRANKS="2") == [
        share, "distmm,_after_numpy"]


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="needs the mpich wheel's mpiexec")
def test_ranks_under_mpiexec_see_the_openblas_count():
    env = {k: v for k, v in mpi_env().items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", COUNT],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    share = str(node_share(2, cpus(), os.cpu_count()))
    assert proc.stdout.split() == [share, "distmm"] * 2
