"""``distmm spgemm``: C = X @ Y on one process with a node model's SpGEMM; C (CSR) to HDF5."""

from __future__ import annotations

import os
import time

import numpy as np
from mpi4py import MPI

from distmm.cli import files
from distmm.cli.common import emit, node_model_from_args
from distmm.errors import require
from distmm.io.matrix_market import read_csr_block
from distmm.io.outputs import write_h5_atomic
from distmm.kernels import NODE_MODELS
from distmm.kernels.base import spgemm_flops


def add_parser(sub) -> None:
    """Register ``distmm spgemm``."""
    sg = sub.add_parser("spgemm", help="C = X @ Y on one process with a node model's SpGEMM; "
                                       "write C (CSR) to HDF5")
    files.input_option(sg, "--x", required=True, help="X as .mtx or .mtx.gz (m x k)")
    files.input_option(sg, "--y", required=True, help="Y as .mtx or .mtx.gz (k x n)")
    files.output_option(sg, "--out", required=True, help="output HDF5 file with indptr, "
                                                         "indices, data and shape of C "
                                                         "(written atomically)")
    sg.add_argument("--node-model", default="hash-spgemm", choices=list(NODE_MODELS))
    files.input_option(sg, "--node-config", metavar="FILE",
                       help="JSON object of the node model's options")
    sg.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                    help="value type (default float64, as the OpSparse paper measures)")
    sg.add_argument("--repeat", type=int, default=1,
                    help="multiply this many times; one JSON line each (default 1)")
    sg.set_defaults(func=cmd_spgemm)


def cmd_spgemm(args) -> int:
    """C = X @ Y on one process (refuses more than one rank); C to HDF5, a JSON line per run."""
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    require(p == 1, f"distmm spgemm multiplies on one process; run it without mpiexec "
                    f"(got {p} ranks)")
    require(args.repeat >= 1, "--repeat must be at least 1")
    model = node_model_from_args(args)
    dtype = np.dtype(args.dtype)
    X, Y = read_csr_block(args.x, dtype), read_csr_block(args.y, dtype)
    require(X.shape[1] == Y.shape[0],
            f"cannot multiply: X ({args.x}) is {X.shape[0]} x {X.shape[1]} but Y ({args.y}) "
            f"is {Y.shape[0]} x {Y.shape[1]}; X's columns must equal Y's rows")
    flops = spgemm_flops(X, Y)
    for rep in range(args.repeat):
        model.stats.reset()
        t0 = time.perf_counter()
        C = model.spgemm(X, Y)
        seconds = time.perf_counter() - t0
        emit({"event": "spgemm", "repeat": rep, "x": args.x, "y": args.y,
              "shape": list(C.shape), "nnz_x": X.nnz, "nnz_y": Y.nnz, "nnz_c": C.nnz,
              "flops": flops, "seconds": seconds,
              "gflops": flops / seconds / 1e9 if seconds > 0 else None,
              "node_model": args.node_model, "options": model.options(),
              "counters": model.stats.as_dict().get("spgemm", {})})
    datasets = {"indptr": C.indptr, "indices": C.indices, "data": C.data,
                "shape": np.asarray(C.shape, dtype=np.int64)}
    attrs = {"x": os.path.abspath(args.x), "y": os.path.abspath(args.y),
             "node_model": args.node_model, "options": model.options(), "flops": flops,
             "seconds": seconds}
    files.write_output(comm, args.out, "--out", lambda path: write_h5_atomic(path, datasets,
                                                                              attrs))
    return 0
