"""Compile the kernels most processes of the tests call into numba's on-disk cache, once:
``python tests/warm_numba_cache.py PART...``, where a PART is ``reference``, a node model's
name (``hash-spgemm``, ``sparch``, ...), ``gat``, ``layers`` or ``reader``, each in the
dtypes the tests use; ``--group K`` compiles the parts of :data:`GROUPS`'s K-th group, and
``--all`` (what ``./tasks`` runs) every group, one process each side by side: the groups'
compile times balance. Each
part compiles its dtypes in turn in one process, so that its kernels that do not depend on
the dtype (hash-spgemm's symbolic phase, the simulators' index kernels) compile once, not
once in each of two processes at the same time.

The serial tests start hundreds of processes (every rank of the ``mpiexec`` jobs of the CLI,
watchdog and signal tests). With a cold cache, each of them compiles every kernel it calls
until some process has written that kernel to the cache, so one kernel may be compiled by
several ranks at once. ``./tasks test`` runs this first; the tests do not depend on it, only
their time does.

What each part compiles: ``reference``, the reference model's five operations at every
specialised width and at a generic one, in float32 and float64, on a block with int32 indices
(what distributed blocks of the tests' sizes get; write and accumulate mode share one compiled
kernel, the mode being a run-time flag); a node model's name, its five operations at one
width, and for ``hash-spgemm`` its SpGEMM too, with hash tables and with its dense accumulator
(its kernels are the largest compile of the suite, which tests and the ranks of ``distmm
spgemm`` and of the node-model tests would otherwise each do), float32 then float64;
``gat``, one epoch of GAT training on the families the app-breakdown test runs, in float32
(the experiments' dtype) and float64 (the dtype of the GAT tests under MPI); ``layers``, what
the edge operations, distmm.torch's GAT port and Sputnik's tests under MPI reach beyond that
(:func:`warm_layers`); ``reader``, the Matrix Market parser. ``DISTMM_WARM_TIMES=1`` prints
each part's CPU seconds per dtype.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from distmm.core.sparse import CSRBlock
from distmm.io.matrix_market import read_matrix_market
from distmm.kernels import NODE_MODELS, make_node_model
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


def warm_node_model(name: str, dtype: np.dtype) -> None:
    """Node model ``name``'s five operations at one width, and for hash-spgemm its SpGEMM too,
    with hash tables and with its dense accumulator (its largest kernels: the serial tests,
    the ranks of ``distmm spgemm`` and the node-model tests under MPI would each compile
    them)."""
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, 9, 40), rng.integers(0, 7, 40)
    S = CSRBlock.from_coo(rows, cols, rng.standard_normal(40), (9, 7), dtype=dtype)
    r = 16
    A = rng.standard_normal((9, r)).astype(dtype)
    B = rng.standard_normal((7, r)).astype(dtype)
    model = make_node_model(name)
    model.sddmm(S, S.data, A, B, np.zeros(S.nnz, dtype))
    model.spmm_a(S, S.data, B, np.zeros((9, r), dtype))
    model.spmm_b(S, S.data, A, np.zeros((7, r), dtype))
    model.fusedmm_a(S, S.data, A, B, np.zeros((9, r), dtype))
    model.fusedmm_b(S, S.data, A, B, np.zeros((7, r), dtype))
    if name != "hash-spgemm":
        return
    X = CSRBlock.from_coo(rows, cols, rng.standard_normal(40), (9, 9), dtype=dtype)
    for dense_max_bytes in (0, None):
        opts = {} if dense_max_bytes is None else {"dense_max_bytes": dense_max_bytes}
        make_node_model("hash-spgemm", **opts).spgemm(X, X)


def warm_reader(dtype: np.dtype | None = None) -> None:
    """The Matrix Market parser (its dtype is fixed; ``dtype`` is not used)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "S.mtx"
        path.write_text("%%MatrixMarket matrix coordinate real general\n3 2 2\n1 1 1.5\n"
                        "3 2 -2e-3\n")
        read_matrix_market(str(path), MPI.COMM_SELF)


def warm_gat(dtype: np.dtype) -> None:
    """One epoch of ``distmm gat train`` on one rank, fused and unfused and on the column-split
    and 2.5D families: the GAT layer's own kernels (dropout, LeakyReLU and its gradient, the
    fused attention loop, the multi-head and head-segment SDDMM and SpMM), which both ranks of
    the app-breakdown test's GAT jobs (float32, the experiments' dtype) would otherwise each
    compile, and the one-rank stage of the MPI tests (float64) beside the serial tests."""
    import contextlib
    import io
    import json

    import scipy.io
    import scipy.sparse as sp

    from distmm.cli.entry import main as distmm_main

    rng = np.random.default_rng(2)
    n, f = 13, 3
    with tempfile.TemporaryDirectory() as tmp:
        scipy.io.mmwrite(f"{tmp}/A.mtx", sp.random(n, n, density=0.3, format="coo",
                                                   random_state=rng))
        np.save(f"{tmp}/X.npy", rng.random((n, f)))
        np.savetxt(f"{tmp}/y.txt", rng.integers(0, 2, n), fmt="%d")
        Path(f"{tmp}/split.json").write_text(json.dumps(
            {"train": list(range(5)), "val": list(range(5, 9)), "test": list(range(9, n))}))
        common = ["gat", "train", "--graph", f"{tmp}/A.mtx", "--features", f"{tmp}/X.npy",
                  "--labels", f"{tmp}/y.txt", "--split", f"{tmp}/split.json", "--dtype",
                  str(dtype), "--hidden", "3", "--heads", "2", "--epochs", "1"]
        for i, extra in enumerate((["--fused"], ["--no-fused"],
                                   ["--algorithm", "15d-sparse-shift"],
                                   ["--algorithm", "25d-dense-replicate"])):
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                code = distmm_main([*common, *extra, "--out", f"{tmp}/w{i}.h5"])
            if code:
                raise RuntimeError(f"distmm gat train {extra} exited {code}")


def warm_layers(dtype: np.dtype) -> None:
    """Kernels that ranks of the MPI stages would each compile at once, in the dtypes and
    widths those tests reach: the segment sum and maximum (the edge operations; float64 at 2
    ranks, float32 at 3), the multi-head SpMM and SDDMM at 8 columns per head (distmm.torch's
    GAT port, float32 at 2 ranks) and Sputnik's SpMM at tile widths 4 and 8 (the node-model
    and ALS tests, float64 at 3 ranks)."""
    from distmm.kernels.multivalue import prepare_sddmm_multi, spmm_multi_block
    from distmm.ops.segment_reduce import MIN_PARALLEL_VALUES, segment_reduce

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((MIN_PARALLEL_VALUES, 2)).astype(dtype)
    starts = np.arange(0, xs.shape[0], 7, dtype=np.int64)
    for ufunc in (np.add, np.maximum):
        segment_reduce(ufunc, xs, starts)
    rows, cols = rng.integers(0, 9, 40), rng.integers(0, 7, 40)
    S = CSRBlock.from_coo(rows, cols, rng.standard_normal(40), (9, 7), dtype=dtype)
    if dtype == np.float32:
        heads, F = 2, 8
        V = rng.standard_normal((heads, S.nnz)).astype(dtype)
        X = rng.standard_normal((7, heads * F)).astype(dtype)
        spmm_multi_block(None, "spmm_multi_a", S, V, 0, X, np.zeros((9, heads * F), dtype),
                         heads)
        A = rng.standard_normal((9, heads * F)).astype(dtype)
        out = np.zeros((S.nnz, heads), dtype)
        prepare_sddmm_multi(ReferenceModel(), S, S.data, A, X, out)(S.data, A, X, out)
    else:
        for tile_width in (4, 8):
            B = rng.standard_normal((7, tile_width)).astype(dtype)
            make_node_model("sputnik", tile_width=tile_width).spmm_a(
                S, S.data, B, np.zeros((9, tile_width), dtype))


# each part with the dtypes it compiles, in order: the reference kernels, every other node
# model by its name, GAT and the reader
PARTS = {
    "reference": (warm_reference, ("float32", "float64")),
    **{name: (functools.partial(warm_node_model, name), ("float32", "float64"))
       for name in NODE_MODELS if name != "reference"},
    "gat": (warm_gat, ("float32", "float64")),
    "layers": (warm_layers, ("float32", "float64")),
    "reader": (warm_reader, ("float64",)),
}


# the parts of each process ./tasks starts, in two groups of about equal compile time:
# hash-spgemm's SpGEMM (the largest part) with the simulators and the layers' kernels, and
# the reference model's widths with GAT's and the rest (DISTMM_WARM_TIMES=1 shows each part)
GROUPS = (("hash-spgemm", "sparch", "dynaspase", "layers"),
          ("reference", "sputnik", "gat", "reader"))
assert sorted(p for g in GROUPS for p in g) == sorted(PARTS), "every part in one group"


def main(argv: list[str]) -> int:
    if argv == ["--all"]:
        procs = [subprocess.Popen([sys.executable, __file__, "--group", str(k)])
                 for k in range(len(GROUPS))]
        return 1 if any([proc.wait() for proc in procs]) else 0
    if len(argv) == 2 and argv[0] == "--group" and argv[1] in map(str, range(len(GROUPS))):
        argv = list(GROUPS[int(argv[1])])
    if not argv or any(part not in PARTS for part in argv):
        print(f"usage: python tests/warm_numba_cache.py {{{'|'.join(PARTS)}}}... | --group "
              f"{{{'|'.join(map(str, range(len(GROUPS))))}}} | --all", file=sys.stderr)
        return 2
    for part in argv:
        warm, dtypes = PARTS[part]
        for dtype in dtypes:
            t0 = time.process_time()
            warm(np.dtype(dtype))
            if os.environ.get("DISTMM_WARM_TIMES"):
                print(f"{part} {dtype}: {time.process_time() - t0:.1f} cpu-s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
