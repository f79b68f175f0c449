"""Fixed corrupted Matrix Market and HDF5 files (the kinds the serial fuzz tests generate:
truncation, bit flips, wrong counts, bad tokens) read at every rank count: each ends in the
same InputError on every rank, naming the file, never another exception or a hang (the
harness aborts a hung run). Each rank's share of the file differs with p, so the bad byte
falls on a different rank at each rank count."""

from __future__ import annotations

import gzip
import os
import re

import h5py
import numpy as np
import pytest
from mpi4py import MPI

from distmm.api import as_coo_share
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
HEAD = b"%%MatrixMarket matrix coordinate real general\n% comment\n9 7 12\n"
LINES = [b"%d %d %.3f\n" % (1 + k % 9, 1 + (3 * k) % 7, 0.5 + k) for k in range(12)]
GOOD = HEAD + b"".join(LINES)


def _flip(data: bytes, at: int, bit: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 1 << bit
    return bytes(out)


CASES = [
    ("truncated_mid_line.mtx", GOOD[: len(GOOD) - len(LINES[-1]) + 2], "line 15"),
    ("truncated_at_line.mtx", HEAD + b"".join(LINES[:7]), "declares 12 entries"),
    ("digit_to_bang.mtx", _flip(GOOD, len(HEAD) + len(b"".join(LINES[:9])), 4),
     "line 13"),
    ("flip_in_banner.mtx", _flip(GOOD, 3, 6), "line 1"),
    ("count_too_high.mtx", GOOD.replace(b"9 7 12", b"9 7 13"), "declares 13 entries"),
    ("index_zero.mtx", HEAD + b"".join(LINES[:11]) + b"0 1 1.0\n", "line 15"),
    ("bad_token.mtx", HEAD + b"".join(LINES[:5]) + b"2 x 1.0\n" + b"".join(LINES[6:]),
     "line 9"),
    ("nan_token.mtx", HEAD + b"".join(LINES[:11]) + b"2 2 nan\n", "line 15"),
    ("truncated.mtx.gz", gzip.compress(GOOD)[:-9], "gzip"),
    ("flipped.mtx.gz", _flip(gzip.compress(GOOD), 30, 2), "gzip|line|entries"),
]


@pytest.fixture(scope="module")
def corrupt_dir(shared_tmp):
    d = os.path.join(shared_tmp, "fuzz-corrupt")
    if COMM.rank == 0:
        os.makedirs(d, exist_ok=True)
        for name, data, _ in CASES:
            with open(os.path.join(d, name), "wb") as fh:
                fh.write(data)
        with open(os.path.join(d, "good.mtx"), "wb") as fh:
            fh.write(GOOD)
        with h5py.File(os.path.join(d, "cut.h5"), "w") as fh:
            fh["indptr"] = np.arange(10, dtype=np.int64)
            fh["indices"] = np.arange(9, dtype=np.int64) % 7
            fh["data"] = np.ones(9)
            fh.attrs["shape"] = np.array([9, 7])
        with open(os.path.join(d, "cut.h5"), "rb") as fh:
            whole = fh.read()
        with open(os.path.join(d, "truncated.h5"), "wb") as fh:
            fh.write(whole[: len(whole) // 2])
    COMM.Barrier()
    return d


@pytest.mark.parametrize("name,data,message", CASES + [("truncated.h5", b"", "HDF5")],
                         ids=[c[0] for c in CASES] + ["truncated.h5"])
def test_corrupt_file_same_error_on_every_rank(corrupt_dir, name, data, message):
    path = os.path.join(corrupt_dir, name)
    with pytest.raises(InputError) as exc:
        as_coo_share(path, COMM)
    text = str(exc.value)
    assert path in text
    assert re.search(message, text), text
    assert len(set(COMM.allgather(text))) == 1


def test_uncorrupted_file_reads(corrupt_dir):
    share = as_coo_share(os.path.join(corrupt_dir, "good.mtx"), COMM)
    assert COMM.allreduce(share.nnz) == 12
