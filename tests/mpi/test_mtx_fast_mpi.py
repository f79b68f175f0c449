"""The fast path of the parallel Matrix Market reader at any number of ranks, with tiny blocks
and arrays first sized far too small, so that byte shares (plain files) and line shares (gzip)
cut through blocks, lines longer than the buffer and the arrays' growth meet on every rank.

Oracle: scipy.io.mmread of the same file (comment lines among the entries removed for it).
Every rank asserts on the union of all shares (allgather).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI
from shared_files import put

from distmm.errors import InputError
from distmm.io import matrix_market as dio
from distmm.io.matrix_market import read_matrix_market

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def _text(seed: int, symmetry: str, m: int, nnz: int) -> str:
    rng = np.random.default_rng(seed)
    n = m if symmetry != "general" else m + 2
    lines = [f"%%MatrixMarket matrix coordinate real {symmetry}", f"{m} {n} {nnz}"]
    for k in range(nnz):
        i, j = int(rng.integers(1, m + 1)), int(rng.integers(1, n + 1))
        if symmetry == "symmetric":
            i, j = max(i, j), min(i, j)
        value = f"{rng.standard_normal():.17g}" if k % 3 else f"{rng.standard_normal():.2f}"
        lines.append(f"{i}\t{j} {value}" + (" " * 200 if k == nnz // 3 else ""))
        if k % 9 == 0:
            lines.append("% comment")
        if k % 13 == 0:
            lines.append("")
    return "\n".join(lines) + "\n"


def _scipy_dense(text: str) -> np.ndarray:
    kept = [line for k, line in enumerate(text.split("\n")) if k < 1 or not line.startswith("%")]
    return sp.coo_matrix(scipy.io.mmread(io.BytesIO("\n".join(kept).encode()))).toarray()


@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
@pytest.mark.parametrize("name", ["f.mtx", "f.mtx.gz"])
@pytest.mark.parametrize("block", [37, 1 << 24])
def test_shares_match_scipy(shared_tmp, monkeypatch, symmetry, name, block):
    monkeypatch.setattr(dio, "_PARSE_BLOCK", block)
    monkeypatch.setattr(dio, "_CAPACITY_MARGIN", 0.25)
    monkeypatch.setattr(dio, "_CAPACITY_SLACK", 0)
    text = _text(3, symmetry, 11, 97)
    share = read_matrix_market(put(shared_tmp, f"mtxfast-{symmetry}-{block}-{name}", text), comm)
    parts = comm.allgather((share.rows, share.cols, share.vals))
    rows, cols, vals = (np.concatenate([p[i] for p in parts]) for i in range(3))
    got = sp.coo_matrix((vals, (rows, cols)), shape=share.shape).toarray()
    np.testing.assert_array_equal(got, _scipy_dense(text))


@pytest.mark.parametrize("name", ["e.mtx", "e.mtx.gz"])
def test_error_late_in_the_file_names_its_line(shared_tmp, monkeypatch, name):
    # the bad line is in the last rank's share; every rank raises the same error with the
    # global line number (found by the checked parser after the fast one gives up)
    monkeypatch.setattr(dio, "_PARSE_BLOCK", 29)
    lines = ["%%MatrixMarket matrix coordinate real general", "5 5 40"]
    lines += [f"{k % 5 + 1} {k % 4 + 1} 0.{k}" for k in range(39)] + ["3 9 1.0"]
    path = put(shared_tmp, f"mtxfast-late-{name}", "\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"line 42: column index 9 is out of range 1\.\.5"):
        read_matrix_market(path, comm)
