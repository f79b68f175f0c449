"""DISTMM_PAIRWISE_BYTES, the size from which the fiber collectives exchange blocks pairwise
(distmm/core/comm.py): read when distmm is imported, and agreed by distmm.distribute and
distmm calibrate, so that a bad or differing value raises the same InputError on every rank
before any collective depends on it (a rank on MPI's all-gather and another on pairwise
messages would wait for each other forever)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from launch_env import mpi_env

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
PROGRAM = """
import distmm, scipy.sparse as sp
from mpi4py import MPI
from distmm.core import comm
S = sp.random(20, 20, density=0.2, random_state=1, format="coo")
try:
    with distmm.distribute(S, MPI.COMM_WORLD, c=2, root=None) as obj:
        line = f"ok {comm.PAIRWISE_BYTES} {obj.p}"
except distmm.InputError as e:
    line = f"InputError {e}"
lines = MPI.COMM_WORLD.gather(line)  # one writer: the ranks' prints would interleave
if MPI.COMM_WORLD.rank == 0:
    print("\\n".join(lines))
"""
pytestmark = pytest.mark.skipif(not os.path.exists(MPIEXEC),
                                reason="needs the mpich wheel's mpiexec")


def _ranks(*values: str | None) -> list[str]:
    """One line per rank of an MPMD job whose rank k has DISTMM_PAIRWISE_BYTES=values[k]
    (unset for None), each running PROGRAM."""
    env = mpi_env()
    env.pop("DISTMM_PAIRWISE_BYTES", None)
    cmd = [MPIEXEC]
    for k, value in enumerate(values):
        setting = [] if value is None else [f"DISTMM_PAIRWISE_BYTES={value}"]
        cmd += ([":"] if k else []) + ["-n", "1", "env", *setting, sys.executable, "-c", PROGRAM]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(values), proc.stdout
    return lines


def test_the_same_value_everywhere_is_used():
    assert _ranks("1000", "1000") == ["ok 1000 2"] * 2
    assert _ranks(None, None) == [f"ok {256 * 1024} 2"] * 2


def test_a_bad_value_is_refused_on_every_rank():
    lines = _ranks("lots", "lots")
    assert lines == ["InputError DISTMM_PAIRWISE_BYTES='lots': expected a number of bytes, 0 or "
                     "more (unset it for the default, 256 KiB)"] * 2
    # on one rank only: still refused everywhere
    assert len(set(_ranks(None, "-1"))) == 1


def test_values_that_differ_between_ranks_are_refused_on_every_rank():
    lines = _ranks("1000", None)
    assert len(set(lines)) == 1
    assert lines[0].startswith("InputError the ranks were given different settings")
    assert "DISTMM_PAIRWISE_BYTES (1000 on rank 0; 262144 on rank 1)" in lines[0]
