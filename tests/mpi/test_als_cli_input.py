"""``distmm als`` in-process on every rank: each kind of bad input (a ratings file that does
not parse, holds NaN, an index out of range or no rating; a bad argument; a corrupt checkpoint
or one of another problem) is refused on every rank with status 2 and one message on rank 0,
before any output: the factors file and the checkpoint are left as they were. One bad input
through ``mpiexec`` and the console script is tests/serial/test_als_cli.py's."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.cli import main
from distmm.io import generate

COMM = MPI.COMM_WORLD

BAD_FILES = {
    "text.mtx": ("%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 3\n2 2 abc\n",
                 "cannot parse"),
    "nan.mtx": ("%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 3\n2 2 nan\n",
                "NaN"),
    "range.mtx": ("%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 3\n5 2 4\n",
                  "index"),
    "empty.mtx": ("%%MatrixMarket matrix coordinate real general\n4 4 0\n", "empty"),
}


@pytest.fixture(scope="module")
def ratings(shared_tmp):
    """A planted low-rank ratings file that rank 0 writes; the path on every rank."""
    path = os.path.join(shared_tmp, "als-input-ratings.mtx")
    if COMM.rank == 0:
        m, n = 300, 200
        parts = [generate.planted_low_rank_chunk(m, n, 4, 20, 1, t, 0.1, chunk_rows=64)
                 for t in range(-(-m // 64))]
        rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
        scipy.io.mmwrite(path, sp.coo_matrix((vals + 3.0, (rows, cols)), shape=(m, n)))
    COMM.Barrier()
    return path


@pytest.fixture()
def case_dir(shared_tmp, request):
    """A directory of this test's own on every rank (the same path), made by rank 0."""
    path = os.path.join(shared_tmp, "als-input-" + request.node.callspec.id)
    if COMM.rank == 0:
        os.makedirs(path)
    COMM.Barrier()
    return path


def _write(path: str, data: bytes) -> None:
    if COMM.rank == 0:
        with open(path, "wb") as fh:
            fh.write(data)
    COMM.Barrier()


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if os.path.exists(path) else None


@pytest.mark.parametrize("case", [
    *[("file", name) for name in BAD_FILES],
    ("args", ("--lambda", "-1"), "lambda must be"), ("args", ("--epochs", "0"), "epochs must be"),
    ("ckpt", "corrupt", "corrupt"), ("ckpt", "foreign", "another problem"),
], ids=lambda case: "-".join(map(str, case[:2])).replace("--", "").replace(".mtx", ""))
def test_bad_input_is_refused_on_every_rank_and_damages_nothing(ratings, case_dir, case,
                                                                 capsys):
    out, ck = os.path.join(case_dir, "out.h5"), os.path.join(case_dir, "ck.h5")
    args = ["als", "--ratings", ratings, "--rank", "4", "--epochs", "2", "--out", out,
            "--checkpoint", ck]
    if case[0] == "file":
        text, match = BAD_FILES[case[1]]
        args[2] = os.path.join(case_dir, case[1])
        _write(args[2], text.encode())
    elif case[0] == "args":
        args += list(case[1])
        match = case[2]
    else:
        match = case[2]
        if case[1] == "corrupt":
            _write(ck, b"\x89HDF\r\n garbage")
        else:  # a checkpoint of the same ratings under another lambda
            assert main([*args, "--checkpoint-every", "1", "--lambda", "0.5"]) == 0
        args.append("--resume")
    capsys.readouterr()
    _write(out, b"previous factors")
    before = _read(ck)
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2
    if COMM.rank == 0:
        assert captured.err.count("distmm: error:") == 1 and match in captured.err, captured.err
    else:
        assert captured.err == ""
    assert captured.out == ""
    COMM.Barrier()
    assert _read(out) == b"previous factors"
    assert _read(ck) == before
