"""``distmm convert IN.mtx[.gz] OUT.h5``: a Matrix Market file to the HDF5 CSR layout, read in
parallel and written by rank 0 (:mod:`distmm.io.convert`)."""

from __future__ import annotations

import argparse
import json
import os
import time

from mpi4py import MPI

from distmm.cli import files
from distmm.errors import Checks, require
from distmm.io.convert import gather_share, write_csr_h5
from distmm.io.hdf5 import HDF5_SUFFIXES, is_hdf5_path
from distmm.io.matrix_market import mtx_header, read_matrix_market


def add_parser(sub) -> None:
    """Register ``distmm convert``."""
    cv = sub.add_parser("convert", help="convert a Matrix Market file to HDF5 (CSR layout; "
                                        "parallel read, atomic write)")
    files.input_option(cv, "input", metavar="IN", help="S as .mtx or .mtx.gz")
    files.output_option(cv, "output", metavar="OUT",
                        help="HDF5 file to write (.h5 or .hdf5; written atomically)")
    cv.set_defaults(func=cmd_convert, check_arguments=_check_names)


def _check_names(args) -> None:
    """The file names' suffixes, before the files are looked at (not collective: the same
    arguments give the same result on every rank). Raises InputError."""
    require(not is_hdf5_path(args.input),
            f"{args.input}: convert reads Matrix Market (.mtx or .mtx.gz), not HDF5")
    require(is_hdf5_path(args.output),
            f"{args.output}: the output must be named {' or '.join(HDF5_SUFFIXES)}")


def cmd_convert(args: argparse.Namespace) -> int:
    """Run ``distmm convert`` (collective over COMM_WORLD); one JSON line on rank 0."""
    comm = MPI.COMM_WORLD
    checks = Checks(comm)
    with checks.guard():
        mtx_header(args.input)
    checks.agree()
    t0 = time.perf_counter()
    share = read_matrix_market(args.input, comm)
    read_seconds = time.perf_counter() - t0
    entries = int(comm.allreduce(share.nnz))
    csr = gather_share(share, comm)
    del share
    files.write_output(comm, args.output, "OUT", lambda path: write_csr_h5(
        path, csr, {"source": os.path.abspath(args.input)}))
    if csr is not None:
        print(json.dumps({"event": "convert", "input": args.input, "output": args.output,
                          "shape": list(csr.shape), "entries_read": entries, "nnz": csr.nnz,
                          "p": comm.Get_size(), "read_seconds": read_seconds,
                          "seconds": time.perf_counter() - t0}, sort_keys=True), flush=True)
    return 0
