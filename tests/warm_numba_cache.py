"""Compile the kernels most processes of the tests call into numba's on-disk cache, once:
``python tests/warm_numba_cache.py DTYPE`` (float32 or float64), one process per dtype.

The serial tests start hundreds of processes (every rank of the ``mpiexec`` jobs of the CLI,
watchdog and signal tests). With a cold cache, each of them compiles every kernel it calls
until some process has written that kernel to the cache, so one kernel may be compiled by
several ranks at once. ``./tasks test`` runs this first, the two dtypes side by side; the
tests do not depend on it, only their time does.

What it compiles: the reference model's five operations at every specialised width and at a
generic one, on a block with int32 indices (what distributed blocks of the tests' sizes get;
write and accumulate mode share one compiled kernel, the mode being a run-time flag), and
(float64 only) the Matrix Market parser.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
from mpi4py import MPI

from distmm.core.sparse import CSRBlock
from distmm.io.matrix_market import read_matrix_market
from distmm.kernels.reference import SPECIALISED_WIDTHS, ReferenceModel

GENERIC_WIDTH = 5  # any width that is not specialised


def warm_reference(dtype: np.dtype) -> None:
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 9, 40), rng.integers(0, 7, 40)
    S = CSRBlock.from_coo(rows, cols, rng.standard_normal(40), (9, 7), dtype=dtype)
    model = ReferenceModel()
    for r in (*SPECIALISED_WIDTHS, GENERIC_WIDTH):
        A = rng.standard_normal((9, r)).astype(dtype)
        B = rng.standard_normal((7, r)).astype(dtype)
        calls = {"sddmm": ((A, B), (S.nnz,)), "spmm_a": ((B,), (9, r)),
                 "spmm_b": ((A,), (7, r)), "fusedmm_a": ((A, B), (9, r)),
                 "fusedmm_b": ((A, B), (7, r))}
        for op, (dense, shape) in calls.items():
            getattr(model, op)(S, S.data, *dense, np.zeros(shape, dtype), accumulate=False)


def warm_reader() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "S.mtx"
        path.write_text("%%MatrixMarket matrix coordinate real general\n3 2 2\n1 1 1.5\n"
                        "3 2 -2e-3\n")
        read_matrix_market(str(path), MPI.COMM_SELF)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("float32", "float64"):
        print("usage: python tests/warm_numba_cache.py float32|float64", file=sys.stderr)
        return 2
    dtype = np.dtype(argv[0])
    warm_reference(dtype)
    if dtype == np.float64:
        warm_reader()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
