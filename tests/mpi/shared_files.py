"""Files that every rank of a test reads: rank 0 writes them into a directory all ranks see."""

from __future__ import annotations

import gzip
from pathlib import Path

from mpi4py import MPI


def put(directory: Path, name: str, text: str, comm: MPI.Comm = MPI.COMM_WORLD) -> str:
    """Rank 0 writes ``text`` (gzip-compressed for a .gz name) as ``directory/name``; the
    path on every rank. Collective over ``comm``."""
    path = directory / name
    if comm.Get_rank() == 0:
        data = text.encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    comm.Barrier()
    return str(path)
