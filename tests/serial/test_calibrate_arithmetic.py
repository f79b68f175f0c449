"""The arithmetic of ``distmm calibrate`` on injected timings.

A real calibration on a loaded host can time anything as zero or in any order, so the tests
that run it (tests/mpi/test_calibrate.py) check only the machine file's structure. Here the
timings are injected: a fake clock that only the kernels of a fake node model advance, by an
amount known in advance, so every table entry, the fixed cost of a call and the derived
gamma and delta have an exact expected value.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from mpi4py import MPI

from distmm.perf import calibrate, costmodel

PER_CALL = 2e-6
KIND_COST = {"fusedmm": 3e-9, "sddmm": 2e-9, "spmm_a": 1.5e-9, "spmm_b": 1.7e-9}


def cost(kind: str, width: int, gathered: int) -> float:
    """The injected seconds per nonzero of ``kind`` at ``width`` gathering from ``gathered``
    rows: rises with both, as a real kernel's does."""
    return KIND_COST[kind] * (1 + width) * (1 + gathered / 1024)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


class FakeModel:
    """Each kernel call advances the clock by PER_CALL plus nnz times :func:`cost`."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def _tick(self, kind, S, gathered):
        self.clock.now += PER_CALL + S.nnz * cost(kind, gathered.shape[1], gathered.shape[0])

    def fusedmm_a(self, S, vals, X, Y, out):
        self._tick("fusedmm", S, Y)

    def sddmm(self, S, vals, X, Y, R):
        self._tick("sddmm", S, Y)

    def spmm_a(self, S, vals, Y, out):
        self._tick("spmm_a", S, Y)

    def spmm_b(self, S, vals, X, out):
        self._tick("spmm_b", S, X)


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(calibrate, "time", types.SimpleNamespace(
        perf_counter=clock.perf_counter, strftime=lambda *a: "date"))
    monkeypatch.setattr(calibrate, "make_node_model", lambda name: FakeModel(clock))
    return clock


def test_kernel_tables_are_the_injected_cost_per_nonzero(fake):
    sizes, densities, widths = (256, 1024), (2, 8), (1, 8, 64)
    out = calibrate.measure_kernels(MPI.COMM_SELF, "reference", np.float32, sizes=sizes,
                                    densities=densities, widths=widths, max_nnz=1 << 11,
                                    reps=2)
    # the 1 x 1 call's nonzero adds its own cost to the fixed one
    assert out["per_call"] == pytest.approx(PER_CALL + cost("fusedmm", 1, 1), rel=1e-9)
    assert set(out["kernels"]) == set(costmodel.KERNEL_KINDS)
    extra = out["per_call"] - PER_CALL  # what the subtracted fixed cost over-counts
    for kind, table in out["kernels"].items():
        assert (table["sizes"], table["densities"], table["widths"]) == (
            list(sizes), list(densities), list(widths))
        for i, n in enumerate(sizes):
            for k, d in enumerate(densities):
                nnz = min(n, (1 << 11) // d) * d  # at most: from_coo may merge duplicates
                for j, w in enumerate(widths):
                    got = table["per_nonzero"][i][k][j]
                    want = cost(kind, w, n)
                    # (t - per_call) / nnz, t = PER_CALL + nnz' * want, nnz' <= nnz
                    assert got == pytest.approx(want - extra / nnz, rel=0.02), (kind, n, d, w)
    assert out["kernel_block"] == {"sizes": list(sizes), "densities": list(densities),
                                   "max_nnz": 1 << 11, "reps": 2}


def test_a_kernel_faster_than_the_fixed_cost_is_clamped_at_zero(fake, monkeypatch):
    monkeypatch.setattr(FakeModel, "sddmm", lambda self, S, vals, X, Y, R: None)
    out = calibrate.measure_kernels(MPI.COMM_SELF, "reference", np.float64, sizes=(128,),
                                    densities=(2,), widths=(1, 4), max_nnz=256, reps=1)
    assert out["kernels"]["sddmm"]["per_nonzero"] == [[[0.0, 0.0]]]
    assert all(x > 0 for x in out["kernels"]["fusedmm"]["per_nonzero"][0][0])


def tables_from(gamma: float, delta: float, gamma_unfused: float, widths) -> dict:
    """Tables whose middle plane holds the affine model's costs, the rest noise."""
    rng = np.random.default_rng(0)

    def planes(row):
        noise = [[list(rng.random(len(widths))) for _ in range(3)] for _ in range(3)]
        noise[1][1] = row
        return noise

    fused = [delta + 4 * gamma * w for w in widths]
    half = [delta + 2 * gamma_unfused * w for w in widths]
    out = {"fusedmm": fused, "sddmm": half, "spmm_a": half, "spmm_b": half}
    return {kind: {"widths": list(widths), "per_nonzero": planes(row)}
            for kind, row in out.items()}


def test_affine_model_from_the_tables():
    widths = (1, 4, 16, 64, 256)
    tables = tables_from(gamma=2e-10, delta=5e-9, gamma_unfused=3e-10, widths=widths)
    gamma, delta, gamma_unfused = calibrate.affine_from_tables(tables, r=64)
    assert gamma == pytest.approx(2e-10) and delta == pytest.approx(5e-9)
    assert gamma_unfused == pytest.approx(3e-10)
    # r between two widths: the widest one below it
    assert calibrate.affine_from_tables(tables, r=100)[0] == pytest.approx(2e-10)


def test_affine_model_of_a_falling_table_is_clamped_at_zero():
    tables = tables_from(gamma=-1e-10, delta=5e-9, gamma_unfused=-1e-9, widths=(1, 64))
    gamma, delta, gamma_unfused = calibrate.affine_from_tables(tables, r=64)
    assert gamma == 0.0 and delta == pytest.approx(5e-9 - 4e-10) and gamma_unfused == 0.0


def test_rows_and_nonzeros_from_two_timings():
    n, z_lo, z_hi, fixed, row, nz = 1000, 2000, 16000, 1e-5, 3e-9, 7e-10
    t = [fixed + n * row + z * nz for z in (z_lo, z_hi)]
    assert calibrate._solve_rows_nonzeros(*t, n, z_lo, z_hi, fixed) == pytest.approx(
        (row, nz))
    # a timing with the larger block faster (a loaded host): zero, not negative
    assert calibrate._solve_rows_nonzeros(t[1], t[0], n, z_lo, z_hi, fixed)[1] == 0.0


def test_fit_clamps_a_falling_line_at_zero():
    sizes = np.array([1, 10, 100, 1000])
    alpha, beta = calibrate.fit_alpha_beta(sizes, 5e-6 - 1e-9 * sizes)
    assert beta == 0.0 and alpha > 0
