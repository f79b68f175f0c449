"""``distmm partition``: S's rows split into p parts of balanced work and low SpMM volume
(:mod:`distmm.core.partition`), saved for ``--partition FILE`` so that a training job does not
partition again at every launch."""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm import api
from distmm.cli import files
from distmm.cli.common import emit
from distmm.core.partition import PARTITIONERS, partition, save_partition, volume
from distmm.errors import Checks, InputError, wait_quietly
from distmm.io.outputs import atomic_output


def add_parser(sub) -> None:
    """Register ``distmm partition``."""
    pa = sub.add_parser("partition", help="partition S's rows into p parts of balanced work "
                                          "and low SpMM volume; save them for --partition")
    files.input_option(pa, "sparse", readers="root",
                       help="S as .mtx, .mtx.gz or .h5/.hdf5 (square: one partition of "
                            "rows and columns; rectangular: a row and a column partition)")
    pa.add_argument("-p", "--ranks", type=int, required=True, dest="p", help="parts (ranks)")
    files.output_option(pa, "--out", required=True, help="partition file to write (HDF5)")
    pa.add_argument("--method", default="kahip", choices=list(PARTITIONERS),
                    help="kahip (default: graph partitioner, fast) or kahypar (column-net "
                         "hypergraph, SpMM's volume itself, slower)")
    pa.add_argument("--imbalance", type=float, default=0.03,
                    help="allowed imbalance of the parts' nonzeros (default 0.03)")
    pa.add_argument("--seed", type=int, default=0)
    pa.set_defaults(func=cmd_partition)


def cmd_partition(args: argparse.Namespace) -> int:
    """``distmm partition``: rank 0 reads S, partitions and writes the file; the other ranks
    of a launch only agree on the outcome. Prints one JSON line: the partitioner's seconds,
    SpMM's volume before and after, the parts' balance. Collective over COMM_WORLD."""
    comm = MPI.COMM_WORLD
    checks, part, record = Checks(comm), None, None
    with checks.guard():
        if comm.Get_rank() == 0:
            if args.p < 1:
                raise InputError(f"-p must be >= 1, got {args.p}")
            share = api.as_coo_share(args.sparse, MPI.COMM_SELF)
            S = sp.coo_matrix((np.ones(share.rows.size), (share.rows, share.cols)),
                              shape=share.shape)
            part = partition(S, args.p, args.method, args.imbalance, args.seed)
            m, n = share.shape
            weights = np.bincount(part.parts, weights=np.diff(S.tocsr().indptr) + 1,
                                  minlength=args.p)
            natural = np.arange(m) * args.p // max(m, 1)
            natural_cols = None if m == n else np.arange(n) * args.p // max(n, 1)
            record = {"event": "partition", "sparse": args.sparse, "out": args.out,
                      "p": args.p, "n": m, "columns": n, "nnz": part.nnz,
                      "method": part.method, "seconds": part.seconds,
                      "volume": volume(S, part.parts, part.col_parts),
                      "natural_volume": volume(S, natural, natural_cols),
                      "max_over_mean_work": float(weights.max() / weights.mean())}
    wait_quietly(comm, 0)  # the other ranks sleep while rank 0 partitions
    checks.agree()

    def write(path: str) -> None:
        with atomic_output(path) as tmp:
            save_partition(part, tmp)

    files.write_output(comm, args.out, "--out", write)
    emit(record, comm)
    return 0
