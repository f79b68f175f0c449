"""Determinism across thread counts and processes (docs/reliability.md, "Determinism").

The reference kernels give every output row (SpMM, FusedMM) or nonzero (SDDMM) to exactly one
numba thread and sum it in an order fixed by the row alone, so the thread count changes which
thread computes it but not its bits: checked here with 1 to 6 threads, with and without
column panels. Then the ``distmm`` command, run as separate MPI jobs: two runs at the same p,
c and seed write bitwise identical results, also when NUMBA_NUM_THREADS differs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from launch_env import mpi_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MPIEXEC, DISTMM = BIN / "mpiexec", BIN / "distmm"

THREADS_SCRIPT = textwrap.dedent("""
    import numba
    import numpy as np
    from distmm.kernels.reference import ReferenceModel
    from distmm.core.sparse import CSRBlock

    rng = np.random.default_rng(3)
    m, n, r = 301, 157, 19
    rows = np.concatenate([rng.integers(0, m, 3000), np.full(150, 17)])  # one dense row
    rows[rows % 7 == 0] += 1  # and some empty rows
    rows = np.minimum(rows, m - 1)
    cols = np.concatenate([rng.integers(0, n, 3000), np.arange(150)])
    vals = rng.standard_normal(rows.size)
    for dtype in (np.float32, np.float64):
        S = CSRBlock.from_coo(rows, cols, vals, (m, n), dtype=dtype)
        A = rng.standard_normal((m, r)).astype(dtype)
        B = rng.standard_normal((n, r)).astype(dtype)
        for panel_bytes in (None, 512):  # default, and tiny: several column panels
            model = ReferenceModel(panel_bytes=panel_bytes)
            seen = None
            for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
                numba.set_num_threads(threads)
                got = []
                for op in ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"):
                    rows_out = {"sddmm": None, "spmm_a": m, "spmm_b": n, "fusedmm_a": m,
                                "fusedmm_b": n}[op]
                    out = (np.zeros(S.nnz, dtype) if rows_out is None
                           else np.zeros((rows_out, r), dtype))
                    args = {"sddmm": (A, B), "spmm_a": (B,), "spmm_b": (A,),
                            "fusedmm_a": (A, B), "fusedmm_b": (A, B)}[op]
                    getattr(model, op)(S, S.data, *args, out)
                    got.append(out.tobytes())
                if seen is None:
                    seen = got
                assert got == seen, (dtype, panel_bytes, threads)
    print("identical at", numba.config.NUMBA_NUM_THREADS, "thread counts")
""")


def test_reference_kernels_are_bitwise_identical_at_every_thread_count():
    env = {**os.environ, "NUMBA_NUM_THREADS": "6"}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    res = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "identical at 6 thread counts"


@pytest.mark.skipif(not MPIEXEC.exists() or not DISTMM.exists(),
                    reason="needs the venv's mpiexec and distmm console script")
# One whole-job case (the in-process tests, tests/mpi/test_determinism.py, cover every family,
# op and strategy): the family with the most moving parts, at a c that replicates.
@pytest.mark.parametrize("op, algorithm, c", [("fusedmm-b", "25d-sparse-replicate", 3)])
def test_separate_jobs_write_identical_results(tmp_path, op, algorithm, c):
    rng = np.random.default_rng(6)
    scipy.io.mmwrite(tmp_path / "S.mtx", sp.random(211, 97, density=0.06, format="coo",
                                                    random_state=rng))
    np.save(tmp_path / "A.npy", rng.standard_normal((211, 6)))
    np.save(tmp_path / "B.npy", rng.standard_normal((97, 6)))
    results = []
    for k, threads in enumerate(("1", "1", "3")):
        env = mpi_env(NUMBA_NUM_THREADS=threads)
        out = tmp_path / f"o{k}.h5"
        res = subprocess.run([str(MPIEXEC), "-n", "3", str(DISTMM), "run", op, "--sparse",
                              str(tmp_path / "S.mtx"), "--a", str(tmp_path / "A.npy"), "--b",
                              str(tmp_path / "B.npy"), "--out", str(out), "--algorithm",
                              algorithm, "-c", str(c), "--seed", "2"], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        with h5py.File(out, "r") as fh:
            results.append({name: np.asarray(fh[name]).tobytes() for name in fh})
    assert results[0] and results[0] == results[1] == results[2]
