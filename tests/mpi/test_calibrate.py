"""distmm calibrate on every rank: a usable machine file, or a clear refusal on one rank."""

from __future__ import annotations

import json
import os

import pytest
from mpi4py import MPI

from distmm.cli import main
from distmm.perf.planner import Machine

COMM = MPI.COMM_WORLD


def test_calibrate_writes_a_machine_file(shared_tmp, capsys):
    out = os.path.join(shared_tmp, "machine.json")
    code = main(["calibrate", "--quick", "--out", out])
    err = capsys.readouterr().err
    if COMM.size == 1:
        assert code == 2
        assert ("at least 2 ranks" in err) == (COMM.rank == 0)
        return
    assert code == 0
    COMM.Barrier()
    m = Machine.load(out)
    # Measured values are checked for shape and sign only: with more ranks than cores a rank
    # that loses its core inside a timing can make any fitted slope or table entry come out
    # 0.0 (the arithmetic that turns timings into them is tested with injected timings in
    # tests/serial/test_calibrate_arithmetic.py).
    import math

    import numba

    for name in ("alpha", "beta", "beta_shift", "gamma", "delta", "per_call"):
        value = getattr(m, name)
        assert math.isfinite(value) and value >= 0, (name, value)
    over = COMM.size * numba.get_num_threads() > len(os.sched_getaffinity(0))
    with open(out) as fh:
        data = json.load(fh)
    assert data["p"] == COMM.size and data["node_model"] == "reference"
    # The warning says when the ranks' threads exceed the cores (here every rank is on one
    # node), on rank 0's stderr and in the file.
    assert (data["warning"] is not None) == over
    if COMM.rank == 0:
        assert ("distmm: warning: calibrating with" in err) == over
    assert len(data["pingpong"]["words"]) == len(data["pingpong"]["seconds"])
    # The kernel tables: every kind the loops call, sizes x densities x widths, all loaded.
    from distmm.perf.costmodel import KERNEL_KINDS

    assert set(m.kernels) == set(KERNEL_KINDS)
    for table in m.kernels.values():
        assert len(table.per_nonzero) == len(table.sizes)
        assert all(len(plane) == len(table.densities) for plane in table.per_nonzero)
        assert all(len(row) == len(table.widths) for plane in table.per_nonzero
                   for row in plane)
        assert all(math.isfinite(x) and x >= 0 for plane in table.per_nonzero
                   for row in plane for x in row)
    assert m.has_bulk_betas


def test_fit_recovers_a_line():
    import numpy as np

    from distmm.perf.calibrate import fit_alpha_beta

    sizes = np.array([1, 10, 100, 1000, 10000, 100000])
    alpha, beta = fit_alpha_beta(sizes, 3e-6 + 2e-10 * sizes)
    assert alpha == pytest.approx(3e-6, rel=1e-6) and beta == pytest.approx(2e-10, rel=1e-6)


def test_oversubscription_is_ranks_times_threads_against_cores():
    from distmm.perf.calibrate import oversubscription

    assert oversubscription(2, 1, 2) is None and oversubscription(4, 16, 64) is None
    msg = oversubscription(2, 2, 2)
    assert "2 ranks x 2 numba threads" in msg and "NUMBA_NUM_THREADS=1" in msg
    assert "NUMBA_NUM_THREADS=1 " in oversubscription(8, 1, 2)  # at least one thread
    assert "NUMBA_NUM_THREADS=8 " in oversubscription(8, 16, 64)
