"""MPI tests of the parallel Matrix Market reader, the generators and CooShare.from_scipy.

Run under mpiexec with any number of ranks; every test is collective and every rank asserts
the same things, on data that every rank has (gathered with allgather).
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI
from shared_files import put

from distmm.core.coo import CooShare
from distmm.errors import InputError
from distmm.io.generate import erdos_renyi, rmat
from distmm.io.matrix_market import read_matrix_market

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()


@pytest.fixture(scope="module")
def shared_dir():
    """A directory made by rank 0 and seen by every rank; removed after the module."""
    path = tempfile.mkdtemp(prefix="distmm-io-mpi-") if rank == 0 else None
    path = comm.bcast(path, root=0)
    yield Path(path)
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def union(share: CooShare) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ranks' entries concatenated in rank order, on every rank."""
    parts = comm.allgather((share.rows, share.cols, share.vals))
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def union_dense(share: CooShare) -> np.ndarray:
    rows, cols, vals = union(share)
    return sp.coo_matrix((vals, (rows, cols)), shape=share.shape).toarray()


def sorted_triples(rows, cols, vals):
    """The entries as (rows, cols, vals) sorted by row, column, value: an order-free view."""
    order = np.lexsort((vals, cols, rows))
    return rows[order], cols[order], vals[order]


def scipy_dense(path: str) -> np.ndarray:
    if path.endswith(".gz"):
        with gzip.open(path) as fh:
            return sp.coo_matrix(scipy.io.mmread(fh)).toarray()
    return sp.coo_matrix(scipy.io.mmread(path)).toarray()


def matrix_text(seed: int, m: int, n: int, nnz: int, style: str = "plain") -> str:
    """A random real general file. The same seed gives the same entries in every style.

    "plain": one space between fields. "messy": irregular spaces and tabs (leading, between
    and trailing), blank lines and extra header comments -- all of which scipy also reads.
    "comments": messy plus comment lines between the entries (valid for our reader, refused
    by scipy's).
    """
    rng = np.random.default_rng(seed)
    messy = style != "plain"
    lines = ["%%MatrixMarket matrix coordinate real general", "% generated for a test"]
    if messy:
        lines += ["%   another comment", "", "%"]
    lines.append(f"  {m}\t{n}  {nnz} " if messy else f"{m} {n} {nnz}")
    for k in range(nnz):
        r, c, v = rng.integers(1, m + 1), rng.integers(1, n + 1), rng.normal()
        if style == "comments" and k % 9 == 4:
            lines.append("% a comment between entries")
        if messy and k % 13 == 6:
            lines.append("  \t ")
        if messy and k % 3 == 1:
            lines.append(f"\t{r}   {c}\t\t{v!r}  ")
        elif messy and k % 3 == 2:
            lines.append(f"  {r}\t{c} {v!r}\t")
        else:
            lines.append(f"{r} {c} {v!r}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- good files


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("style", ["plain", "messy", "comments"])
def test_union_equals_scipy(shared_dir, suffix, style):
    path = put(shared_dir, f"{style}{suffix}", matrix_text(3, 37, 23, 400, style))
    clean = put(shared_dir, f"clean{suffix}", matrix_text(3, 37, 23, 400))
    share = read_matrix_market(path, comm)
    assert share.shape == (37, 23)
    got = union_dense(share)
    np.testing.assert_array_equal(got, scipy_dense(clean))
    if style != "comments":
        np.testing.assert_array_equal(got, scipy_dense(path))
    # the shares are consecutive pieces of the file, in rank order
    whole = read_matrix_market(path, MPI.COMM_SELF)
    for mine, want in zip(union(share), (whole.rows, whole.cols, whole.vals), strict=True):
        np.testing.assert_array_equal(mine, want)
    counts = comm.allgather(share.nnz)
    assert sum(counts) == 400
    if style == "plain":  # near-equal shares for lines of similar length
        assert max(counts) <= 400 / size * 1.5 + 4


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("nnz", [0, 1, 2, 5])
def test_fewer_entries_than_ranks(shared_dir, suffix, nnz):
    path = put(shared_dir, f"few{nnz}{suffix}", matrix_text(nnz, 4, 6, nnz))
    share = read_matrix_market(path, comm)
    assert share.shape == (4, 6)
    np.testing.assert_array_equal(union_dense(share), scipy_dense(path))


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_symmetric_and_pattern(shared_dir, suffix):
    rng = np.random.default_rng(5)
    body = "".join(f"{max(r, c)} {min(r, c)}\n" for r, c in rng.integers(1, 31, size=(120, 2)))
    text = "%%MatrixMarket matrix coordinate pattern symmetric\n30 30 120\n" + body
    path = put(shared_dir, "sym" + suffix, text)
    dense = union_dense(read_matrix_market(path, comm))
    np.testing.assert_array_equal(dense, scipy_dense(path))
    np.testing.assert_array_equal(dense, dense.T)


# ---------------------------------------------------------------- bad files


def raises_everywhere(path: str, *fragments: str) -> str:
    """read_matrix_market must raise the same InputError on every rank."""
    with pytest.raises(InputError) as info:
        read_matrix_market(path, comm)
    text = str(info.value)
    assert len(set(comm.allgather(text))) == 1, "ranks raised different errors"
    assert path in text
    for fragment in fragments:
        assert fragment in text, text
    return text


def good_lines(count: int) -> list[str]:
    return [f"{k % 10 + 1} {k % 7 + 1} {k + 0.5}" for k in range(count)]


HEAD = "%%MatrixMarket matrix coordinate real general\n"


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_bad_index_in_last_line_only(shared_dir, suffix):
    lines = good_lines(200)
    lines[-1] = "11 1 1.0"  # row 11 of a 10-row matrix, in the last rank's share only
    path = put(shared_dir, "lastbad" + suffix, HEAD + "10 7 200\n" + "\n".join(lines) + "\n")
    text = raises_everywhere(path, "line 202", "row index 11 is out of range")
    if size > 1:
        assert f"reported by rank {size - 1})" in text


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_bad_line_in_first_share_only(shared_dir, suffix):
    lines = good_lines(200)
    lines[0] = "1 1 nan"
    path = put(shared_dir, "firstbad" + suffix, HEAD + "10 7 200\n" + "\n".join(lines) + "\n")
    text = raises_everywhere(path, "line 3", "not finite")
    if size > 1:
        assert "reported by rank 0)" in text


@pytest.mark.parametrize(
    "name, text, fragments",
    [
        ("banner.mtx", "hello\n1 1 1\n", ["line 1", "not a Matrix Market file"]),
        ("array.mtx", "%%MatrixMarket matrix array real general\n1 1\n1\n", ["array"]),
        (
            "complex.mtx.gz",
            "%%MatrixMarket matrix coordinate complex general\n1 1 0\n",
            ["complex"],
        ),
        ("size.mtx", HEAD + "10 7\n", ["line 2", "bad size line"]),
        ("fields.mtx", HEAD + "10 7 3\n1 1 1\n2 2\n3 3 3\n", ["line 4", "expected 3 fields"]),
        ("parse.mtx.gz", HEAD + "10 7 3\n1 1 1\n2 2 2\n3 3 x3\n", ["line 5", "cannot parse"]),
        ("col.mtx", HEAD + "10 7 2\n1 1 1\n1 8 1\n", ["line 4", "column index 8"]),
        (
            "few.mtx",
            HEAD + "10 7 250\n" + "\n".join(good_lines(200)) + "\n",
            ["declares 250 entries", "holds 200"],
        ),
        (
            "many.mtx.gz",
            HEAD + "10 7 150\n" + "\n".join(good_lines(200)) + "\n",
            ["declares 150 entries", "holds 200"],
        ),
        (
            "inf.mtx",
            HEAD + "10 7 200\n" + "\n".join(good_lines(120) + ["3 3 -inf"] + good_lines(79)) + "\n",
            ["line 123", "not finite"],
        ),
    ],
)
def test_bad_files(shared_dir, name, text, fragments):
    raises_everywhere(put(shared_dir, name, text), *fragments)


def test_missing_file(shared_dir):
    raises_everywhere(str(shared_dir / "does-not-exist.mtx"), "no such file")


# ---------------------------------------------------------------- generators


@pytest.mark.parametrize("chunk_rows", [1, 7, 4096])
def test_erdos_renyi_independent_of_p(chunk_rows):
    share = erdos_renyi(53, 31, 4, 17, comm, chunk_rows=chunk_rows)
    alone = erdos_renyi(53, 31, 4, 17, MPI.COMM_SELF, chunk_rows=chunk_rows)
    got = sorted_triples(*union(share))
    want = sorted_triples(alone.rows, alone.cols, alone.vals)
    for mine, ref in zip(got, want, strict=True):
        np.testing.assert_array_equal(mine, ref)


def test_rmat_independent_of_p():
    share = rmat(7, 4, 9, comm, chunk_edges=33)
    alone = rmat(7, 4, 9, MPI.COMM_SELF, chunk_edges=33)
    assert share.shape == (128, 128)
    got = sorted_triples(*union(share))
    want = sorted_triples(alone.rows, alone.cols, alone.vals)
    for mine, ref in zip(got, want, strict=True):
        np.testing.assert_array_equal(mine, ref)


@pytest.mark.skipif(size == 1, reason="needs ranks that can disagree")
def test_generator_parameters_must_agree():
    with pytest.raises(InputError, match="disagree"):
        erdos_renyi(10, 10, 2, 1 + int(rank > 0), comm)
    with pytest.raises(InputError, match="disagree"):
        rmat(3, 2 + int(rank == size - 1), 1, comm)


# ---------------------------------------------------------------- CooShare.from_scipy


@pytest.mark.parametrize("root", [0, "last", None])
def test_from_scipy(root):
    matrix = sp.random(41, 29, density=0.15, random_state=2, format="csr")
    root = size - 1 if root == "last" else root
    given = matrix if root is None or rank == root else None
    share = CooShare.from_scipy(given, comm, root=root)
    assert share.shape == (41, 29)
    counts = comm.allgather(share.nnz)
    assert sum(counts) == matrix.nnz and max(counts) - min(counts) <= 1
    np.testing.assert_array_equal(union_dense(share), matrix.toarray())


def test_from_scipy_errors_on_every_rank():
    bad = sp.coo_matrix(np.array([[1j, 0], [0, 1]])) if rank == size - 1 else None
    with pytest.raises(InputError, match="complex"):
        CooShare.from_scipy(bad, comm, root=size - 1)
    with pytest.raises(InputError, match="no matrix"):
        CooShare.from_scipy(None, comm, root=0)


@pytest.mark.skipif(size == 1, reason="needs ranks that can disagree")
def test_from_scipy_none_root_needs_same_matrix():
    with pytest.raises(InputError, match="same matrix"):
        CooShare.from_scipy(sp.eye(2 + int(rank > 0)), comm, root=None)
