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
    assert m.alpha > 0 and m.beta >= 0 and m.gamma >= 0 and m.delta >= 0
    # beta is the slope of the ping-pong time over message size; with more ranks than cores a
    # rank that loses its core mid-exchange can make the small messages as slow as the large
    # ones (seen once: beta 0.0 at 4 ranks on 2 cores, under other load), so like gamma it must
    # be positive only when every rank has a core of its own.
    # gamma is the rise of the fused kernel's cost per nonzero from width 1 to 64, timed on
    # blocks of about 0.1 ms; with more ranks than cores (3 and 8 ranks on this 2-core
    # machine) a rank losing its core for a time slice inside the width-1 timing erases it
    # (seen once: gamma 0.0 at 3 ranks), so it must be positive only when every rank has a
    # core of its own (and every numba thread: 2 ranks of 2 threads on 2 cores gave gamma 0.0
    # and a fixed cost per call of 8 ms)
    import numba

    over = COMM.size * numba.get_num_threads() > len(os.sched_getaffinity(0))
    if not over:
        assert m.beta > 0 and m.gamma > 0
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
        assert max(x for plane in table.per_nonzero for row in plane for x in row) > 0
    assert m.has_bulk_betas and m.beta_shift > 0 and m.per_call > 0


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
