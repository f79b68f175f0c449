"""The reference model's kernels specialised for a constant dense width against its generic ones.

The specialisations (``SPECIALISED_WIDTHS``, and SpMM's straight-line tail where
``_STRAIGHT_TAIL`` asks for it) must change speed only: every result is compared
bit for bit with the generic kernel's (the width-0 kernel, which the model runs for every other
width), for every operation, both dtypes, accumulate and write mode, with and without column
panels and prefetch, on blocks with empty rows and rows shorter and longer than the kernels'
groups of four nonzeros, and with one and with all numba threads. The generic kernels are
checked against scipy in test_reference_kernels.py.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.core import config as numba_config

import distmm.kernels.reference as reference
from distmm.core.sparse import CSRBlock

OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def _block(dtype) -> CSRBlock:
    """37 x 29 with empty rows, a dense row and rows of 1 to 7 entries."""
    rng = np.random.default_rng(5)
    rows = np.concatenate([rng.integers(0, 37, 160), np.full(29, 4)])
    rows[rows % 5 == 0] += 1  # rows 0, 5, 10, ..., 35 stay empty
    rows = np.minimum(rows, 36)
    cols = np.concatenate([rng.integers(0, 29, 160), np.arange(29)])
    return CSRBlock.from_coo(rows, cols, rng.standard_normal(rows.size), (37, 29), dtype=dtype)


def _run(model, op: str, S: CSRBlock, A, B, accumulate: bool, seed: int) -> np.ndarray:
    m, n = S.shape
    r = A.shape[1]
    shape = {"sddmm": (S.nnz,), "spmm_a": (m, r), "spmm_b": (n, r), "fusedmm_a": (m, r),
             "fusedmm_b": (n, r)}[op]
    rng = np.random.default_rng(seed)
    out = (rng.standard_normal(shape).astype(S.dtype) if accumulate
           else np.full(shape, np.nan, S.dtype))
    args = {"sddmm": (A, B), "spmm_a": (B,), "spmm_b": (A,), "fusedmm_a": (A, B),
            "fusedmm_b": (A, B)}[op]
    getattr(model, op)(S, S.data, *args, out, accumulate=accumulate)
    return out


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("width", reference.SPECIALISED_WIDTHS)
def test_specialised_kernels_are_bitwise_the_generic_ones(width, dtype, monkeypatch):
    S = _block(dtype)
    rng = np.random.default_rng(width)
    A = rng.standard_normal((S.shape[0], width)).astype(dtype)
    B = rng.standard_normal((S.shape[1], width)).astype(dtype)
    saved = numba.get_num_threads()
    try:
        # every thread count at two widths; the others at one thread (the kernels'
        # threading is the same code for every width)
        counts = {1, numba.config.NUMBA_NUM_THREADS} if width in (16, 128) else {1}
        for threads in sorted(counts):
            numba.set_num_threads(threads)
            # default budget (one panel, no prefetch) and a tiny one (panels and prefetch)
            for panel_bytes in (None, 256):
                model = reference.ReferenceModel(panel_bytes=panel_bytes)
                for op in OPS:
                    for accumulate in (True, False):
                        # the generic kernel with its looped tail (no straight-line tail)
                        monkeypatch.setattr(reference, "_width", lambda r: 0)
                        monkeypatch.setattr(reference, "_STRAIGHT_TAIL", frozenset())
                        want = _run(model, op, S, A, B, accumulate, seed=1)
                        monkeypatch.undo()
                        got = _run(model, op, S, A, B, accumulate, seed=1)
                        assert not np.isnan(got).any(), (op, accumulate)
                        assert got.tobytes() == want.tobytes(), (op, threads, panel_bytes,
                                                                 accumulate)
    finally:
        numba.set_num_threads(saved)


def test_widths_select_their_kernels():
    assert reference._width(16) == 16
    assert reference._width(17) == 0
    assert reference._spmm_kernel(16) is not reference._spmm_kernel(0)
    assert reference._spmm_kernel(16) is reference._spmm_kernel(16)


def test_slp_setting_is_restored_after_a_compilation():
    """The SLP vectoriser is switched on for the specialised kernels' compilations only."""
    before = numba_config.SLP_VECTORIZE
    S = _block(np.float32)
    B = np.ones((S.shape[1], 8), np.float32)
    out = np.empty((S.shape[0], 8), np.float32)
    reference.ReferenceModel().spmm_a(S, S.data, B, out, accumulate=False)
    assert numba_config.SLP_VECTORIZE == before
    np.testing.assert_allclose(out, S.to_scipy() @ B, rtol=1e-5, atol=1e-5)
