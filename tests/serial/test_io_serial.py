"""Single-process tests of distmm.io (Matrix Market, .npy, outputs), distmm.io.generate,
distmm.core.coo and distmm.core.permute."""

from __future__ import annotations

import gzip
import json
import os

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.core.permute import identity_permutation, inverse_permutation, random_permutation
from distmm.errors import InputError
from distmm.io import matrix_market as dio
from distmm.io.generate import erdos_renyi, erdos_renyi_chunk, rmat, rmat_chunk
from distmm.io.matrix_market import read_matrix_market
from distmm.io.npy import load_dense_npy
from distmm.io.outputs import write_h5_atomic

SELF = MPI.COMM_SELF


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    data = text.encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def dense(share: CooShare) -> np.ndarray:
    return share.to_scipy().toarray()


def reference(path: str) -> np.ndarray:
    if path.endswith(".gz"):
        with gzip.open(path) as fh:
            return sp.coo_matrix(scipy.io.mmread(fh)).toarray()
    return sp.coo_matrix(scipy.io.mmread(path)).toarray()


GENERAL = """%%MatrixMarket matrix coordinate real general
% a comment
4 5 6
1 1 1.5
2 3 -2e-3
4 5 7
3 2 0.25
1 1 2.5
4 1 -1
"""


# ---------------------------------------------------------------- reading: good files


@pytest.mark.parametrize("name", ["a.mtx", "a.mtx.gz"])
def test_general_matches_scipy(tmp_path, name):
    path = write(tmp_path, name, GENERAL)
    share = read_matrix_market(path, SELF)
    assert share.shape == (4, 5)
    assert share.nnz == 6  # duplicates kept
    assert share.rows.dtype == np.int64 and share.cols.dtype == np.int64
    assert share.vals.dtype == np.float64
    np.testing.assert_array_equal(share.rows, [0, 1, 3, 2, 0, 3])
    np.testing.assert_array_equal(share.cols, [0, 2, 4, 1, 0, 0])
    np.testing.assert_allclose(dense(share), reference(path))


def test_gzip_detected_by_content_not_name(tmp_path):
    path = tmp_path / "plain-name.mtx"
    path.write_bytes(gzip.compress(GENERAL.encode()))
    np.testing.assert_allclose(
        dense(read_matrix_market(path, SELF)), reference(write(tmp_path, "b.mtx", GENERAL))
    )


def test_irregular_whitespace_comments_blank_lines_crlf(tmp_path):
    text = (
        "%%MatrixMarket   Matrix  Coordinate  REAL  General\r\n"
        "%comment one\r\n"
        "\r\n"
        "   % indented comment\r\n"
        "  3\t3   4  \r\n"
        "1 1 1\r\n"
        "\r\n"
        "% comment inside the data\r\n"
        "  2\t\t2    2.5e0   \r\n"
        "\t3 1 -3\r\n"
        "   \r\n"
        "3 3 .5"  # no final newline
    )
    path = write(tmp_path, "ws.mtx", text)
    share = read_matrix_market(path, SELF)
    expected = np.array([[1, 0, 0], [0, 2.5, 0], [-3, 0, 0.5]])
    np.testing.assert_array_equal(dense(share), expected)


def test_symmetric_mirrors_off_diagonal(tmp_path):
    text = """%%MatrixMarket matrix coordinate real symmetric
3 3 4
1 1 1
2 1 2
3 1 3
3 3 4
"""
    path = write(tmp_path, "sym.mtx", text)
    share = read_matrix_market(path, SELF)
    assert share.nnz == 6
    np.testing.assert_array_equal(dense(share), reference(path))
    np.testing.assert_array_equal(dense(share), dense(share).T)


def test_skew_symmetric_negates_mirror(tmp_path):
    text = """%%MatrixMarket matrix coordinate real skew-symmetric
3 3 2
2 1 2
3 2 -5
"""
    path = write(tmp_path, "skew.mtx", text)
    share = read_matrix_market(path, SELF)
    d = dense(share)
    np.testing.assert_array_equal(d, reference(path))
    np.testing.assert_array_equal(d, -d.T)


@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
def test_pattern(tmp_path, symmetry):
    text = f"""%%MatrixMarket matrix coordinate pattern {symmetry}
3 3 3
1 1
2 1
3 2
"""
    path = write(tmp_path, "pat.mtx", text)
    share = read_matrix_market(path, SELF)
    assert np.all(share.vals == 1.0)
    np.testing.assert_array_equal(dense(share), reference(path))


def test_integer_field(tmp_path):
    text = """%%MatrixMarket matrix coordinate integer general
2 3 3
1 1 7
2 3 -4
1 2 3
"""
    path = write(tmp_path, "int.mtx", text)
    np.testing.assert_array_equal(dense(read_matrix_market(path, SELF)), reference(path))


@pytest.mark.parametrize("name", ["e.mtx", "e.mtx.gz"])
@pytest.mark.parametrize("shape", [(0, 0), (5, 3)])
def test_empty_matrix(tmp_path, name, shape):
    path = write(
        tmp_path, name, f"%%MatrixMarket matrix coordinate real general\n{shape[0]} {shape[1]} 0\n"
    )
    share = read_matrix_market(path, SELF)
    assert share.shape == shape and share.nnz == 0
    assert share.rows.dtype == np.int64 and share.vals.dtype == np.float64


@pytest.mark.parametrize("name", ["h.mtx", "h.mtx.gz"])
@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
def test_absurd_entry_count_is_a_count_mismatch_not_an_allocation(tmp_path, name, symmetry):
    """A size line claiming 10^23 entries: the reader sizes its arrays by the file's bytes,
    not by the claim, and refuses the file for its count (found by test_fuzz_readers)."""
    path = write(tmp_path, name, f"%%MatrixMarket matrix coordinate real {symmetry}\n"
                 "1 1 99999999999999999999999\n1 1 0.0\n1 1 0.0\n")
    with pytest.raises(InputError, match="99999999999999999999999"):
        read_matrix_market(path, SELF)


def test_empty_without_final_newline(tmp_path):
    path = write(tmp_path, "e.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 0")
    assert read_matrix_market(path, SELF).nnz == 0


def test_scipy_written_file_roundtrip(tmp_path):
    rng = np.random.default_rng(0)
    a = sp.random(60, 45, density=0.1, random_state=rng, format="coo")
    path = str(tmp_path / "r.mtx")
    scipy.io.mmwrite(path, a, precision=17)
    share = read_matrix_market(path, SELF)
    np.testing.assert_array_equal(dense(share), a.toarray())


# ---------------------------------------------------------------- reading: the split


def random_text(rng, m=40, n=30, nnz=300, messy=False) -> str:
    lines = ["%%MatrixMarket matrix coordinate real general", "% header", f"{m} {n} {nnz}"]
    for k in range(nnz):
        r, c, v = rng.integers(1, m + 1), rng.integers(1, n + 1), rng.normal()
        if messy and k % 7 == 0:
            lines.append("% comment")
        if messy and k % 11 == 0:
            lines.append("   ")
        sep = "\t " if messy and k % 3 == 0 else " "
        lines.append(f"{r}{sep}{c}{sep}{v!r}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 64])
def test_byte_shares_partition_the_data_lines(tmp_path, p):
    text = random_text(np.random.default_rng(p), messy=True)
    path = write(tmp_path, "split.mtx", text)
    with open(path, "rb") as fh:
        header, msg = dio._parse_header(fh, path, False)
        assert msg is None
        size = os.fstat(fh.fileno()).st_size
        ranges = [dio._byte_share(fh, header.data_offset, size, k, p) for k in range(p)]
    assert ranges[0][0] == header.data_offset and ranges[-1][1] == size
    for (_, end), (start, _) in zip(ranges[:-1], ranges[1:], strict=True):
        assert end == start
    data = text.encode()
    length = size - header.data_offset
    for k, (start, end) in enumerate(ranges):
        assert start == header.data_offset or data[start - 1 : start] == b"\n"
        # the line starting at `start` has its first byte in rank k's raw range
        if end > start:
            assert (
                header.data_offset + k * length // p
                <= start
                < header.data_offset + (k + 1) * length // p
            )
    # parsing the shares separately gives the whole matrix, in file order
    parts = []
    first = header.lines + 1
    for start, end in ranges:
        chunk = data[start:end]
        parsed = dio._parse_chunk(chunk, first, header, path)
        assert not isinstance(parsed, str), parsed
        parts.append(parsed)
        first += dio._count_lines(chunk)
    rows = np.concatenate([q[0] for q in parts])
    whole = dio._parse_chunk(data[header.data_offset :], header.lines + 1, header, path)
    np.testing.assert_array_equal(rows, whole[0])
    np.testing.assert_array_equal(np.concatenate([q[2] for q in parts]), whole[2])


@pytest.mark.parametrize("p", [1, 2, 3, 7, 400])
@pytest.mark.parametrize("block", [5, 64, 1 << 22])
def test_gzip_line_shares(tmp_path, monkeypatch, p, block):
    monkeypatch.setattr(dio, "_GZ_BLOCK", block)
    text = random_text(np.random.default_rng(7), nnz=100)
    path = write(tmp_path, "split.mtx.gz", text)
    data_lines = text.splitlines(keepends=True)[3:]
    pieces = []
    for k in range(p):
        with gzip.open(path, "rb") as fh:
            header, msg = dio._parse_header(fh, path, True)
            assert msg is None
            lo = k * header.nnz // p
            hi = None if k == p - 1 else (k + 1) * header.nnz // p
            piece = dio._read_gzip_lines(fh, lo, hi).decode()
        assert piece == "".join(data_lines[lo:hi])
        pieces.append(piece)
    assert "".join(pieces) == "".join(data_lines)


def test_parse_values_exactly(tmp_path):
    values = [0.1, 1e-300, -2.5e300, 123456789.123456789, 5e-324]
    body = "".join(f"{k + 1} 1 {v!r}\n" for k, v in enumerate(values))
    path = write(tmp_path, "v.mtx", f"%%MatrixMarket matrix coordinate real general\n5 1 5\n{body}")
    np.testing.assert_array_equal(read_matrix_market(path, SELF).vals, values)


# ---------------------------------------------------------------- reading: errors


def raises(path, *fragments):
    with pytest.raises(InputError) as info:
        read_matrix_market(path, SELF)
    text = str(info.value)
    assert os.fspath(path) in text
    for fragment in fragments:
        assert fragment in text, text
    return text


HEAD = "%%MatrixMarket matrix coordinate real general\n"


def test_missing_file(tmp_path):
    raises(tmp_path / "nope.mtx", "no such file")


def test_directory(tmp_path):
    raises(tmp_path, "directory")


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("", ["line 1", "not a Matrix Market file"]),
        ("1 2 3\n", ["line 1", "not a Matrix Market file"]),
        ("%%MatrixMarket matrix coordinate real\n1 1 0\n", ["line 1", "malformed banner"]),
        ("%%MatrixMarket vector coordinate real general\n", ["unsupported object"]),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", ["dense 'array'"]),
        ("%%MatrixMarket matrix sparse real general\n", ["unknown format"]),
        ("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n", ["complex"]),
        ("%%MatrixMarket matrix coordinate quaternion general\n", ["unknown field"]),
        ("%%MatrixMarket matrix coordinate real hermitian\n", ["hermitian"]),
        ("%%MatrixMarket matrix coordinate real upper\n", ["unknown symmetry"]),
        ("%%MatrixMarket matrix coordinate pattern skew-symmetric\n", ["not a valid"]),
        (HEAD + "% only comments\n", ["ends before the size line"]),
        (HEAD + "3 3\n", ["line 2", "bad size line"]),
        (HEAD + "%c\n3 -3 1\n", ["line 3", "bad size line"]),
        (HEAD + "3 3 1.0\n", ["line 2", "bad size line"]),
        (HEAD + "3 x 1\n", ["line 2", "bad size line"]),
        (HEAD + "3 3 1 1\n", ["line 2", "bad size line"]),
        ("%%MatrixMarket matrix coordinate real symmetric\n3 4 0\n", ["must be square"]),
    ],
)
def test_header_errors(tmp_path, text, fragments):
    raises(write(tmp_path, "bad.mtx", text), *fragments)


@pytest.mark.parametrize(
    "body, fragments",
    [
        ("1 1 1\n2 2\n", ["line 4", "expected 3 fields", "found 2"]),
        ("1 1 1\n2 2 2 2\n", ["line 4", "found 4"]),
        ("1 1 1\n2 2 abc\n3 3 3\n", ["line 4", "cannot parse", "abc"]),
        ("1 1 1\n2 2 1.5.5\n", ["line 4", "cannot parse"]),
        ("1 1 1\n2 2 1e5-3\n", ["line 4", "cannot parse"]),
        ("1 1 1\n2 2 0x10\n", ["line 4", "cannot parse"]),
        ("1 1 1\n2 2 2 % trailing comment\n", ["line 4", "expected 3 fields"]),
        ("0 1 1\n", ["line 3", "row index 0 is out of range 1..3"]),
        ("1 1 1\n4 1 1\n", ["line 4", "row index 4 is out of range"]),
        ("1 1 1\n1 0 1\n", ["line 4", "column index 0 is out of range 1..3"]),
        ("1 4 1\n", ["line 3", "column index 4"]),
        ("1 1 1\n1.5 1 1\n", ["line 4", "row index", "not an integer"]),
        ("1 1 1\n1 nan 1\n", ["line 4", "column index", "not an integer"]),
        ("1 1 nan\n", ["line 3", "not finite", "NaN"]),
        ("1 1 1\n2 2 -inf\n", ["line 4", "not finite"]),
        ("1 1 1\n2 2 1e400\n", ["line 4", "not finite"]),
        ("1 1 1\n2 2 2\n", ["declares 3 entries", "holds 2"]),
        ("1 1 1\n2 2 2\n3 3 3\n1 2 3\n", ["declares 3 entries", "holds 4"]),
    ],
)
@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_data_errors(tmp_path, body, fragments, suffix):
    raises(write(tmp_path, "bad" + suffix, HEAD + "3 3 3\n" + body), *fragments)


def test_first_bad_line_is_reported(tmp_path):
    lines = [f"{k % 5 + 1} {k % 4 + 1} {k}" for k in range(200)]
    lines[150] = "1 1 x"
    lines[170] = "9 1 1"
    text = HEAD + "5 4 200\n" + "\n".join(lines) + "\n"
    raises(write(tmp_path, "bad.mtx", text), "line 153", "cannot parse")
    lines[120] = "1 99 1"
    text = HEAD + "5 4 200\n" + "\n".join(lines) + "\n"
    raises(write(tmp_path, "bad.mtx", text), "line 123", "column index 99")


def test_integer_field_refuses_fractions(tmp_path):
    text = "%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 2.5\n"
    raises(write(tmp_path, "i.mtx", text), "line 3", "not an integer")


def test_pattern_with_values_refused(tmp_path):
    text = "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 1 2.5\n"
    raises(write(tmp_path, "p.mtx", text), "line 3", "expected 2 fields")


def test_truncated_gzip(tmp_path):
    data = gzip.compress(random_text(np.random.default_rng(1), nnz=2000).encode())
    path = tmp_path / "t.mtx.gz"
    path.write_bytes(data[: len(data) // 2])
    raises(path, "gzip")


# ---------------------------------------------------------------- CooShare


def test_cooshare_from_scipy_self():
    a = sp.random(20, 10, density=0.2, random_state=1, format="csr")
    for root in (0, None):
        share = CooShare.from_scipy(a, SELF, root=root)
        assert share.shape == (20, 10) and share.nnz == a.nnz
        np.testing.assert_array_equal(share.to_scipy().toarray(), a.toarray())
        np.testing.assert_array_equal(share.gather_scipy(SELF).toarray(), a.toarray())


def test_cooshare_checks():
    with pytest.raises(ValueError):
        CooShare((2, 2), np.zeros(2), np.zeros(3), np.zeros(2))
    share = CooShare((2, 2), [0, 1], [1, 0], [1, 2])
    assert share.rows.dtype == np.int64 and share.vals.dtype == np.float64
    with pytest.raises(InputError, match="complex"):
        CooShare.from_scipy(sp.coo_matrix(np.array([[1j]])), SELF)
    with pytest.raises(InputError, match="no matrix"):
        CooShare.from_scipy(None, SELF)
    with pytest.raises(InputError, match="root"):
        CooShare.from_scipy(sp.eye(2), SELF, root=1)


# ---------------------------------------------------------------- write_h5_atomic


def test_write_h5_atomic_success(tmp_path):
    path = tmp_path / "out.h5"
    x = np.arange(12.0).reshape(3, 4)
    attrs = {
        "name": "run",
        "p": 4,
        "grid": {"c": 2, "dims": [2, 2]},
        "times": [0.5, 1.5],
        "none": None,
        "arr": np.array([1, 2]),
        "npint": np.int64(3),
    }
    write_h5_atomic(path, {"y": x, "group/z": np.array([1, 2, 3])}, attrs)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["y"][...], x)
        np.testing.assert_array_equal(f["group/z"][...], [1, 2, 3])
        assert f.attrs["name"] == "run" and f.attrs["p"] == 4 and f.attrs["npint"] == 3
        assert json.loads(f.attrs["grid"]) == {"c": 2, "dims": [2, 2]}
        assert json.loads(f.attrs["times"]) == [0.5, 1.5]
        assert json.loads(f.attrs["none"]) is None
        np.testing.assert_array_equal(f.attrs["arr"], [1, 2])
    assert os.listdir(tmp_path) == ["out.h5"]
    # overwriting replaces the whole file
    write_h5_atomic(path, {"w": np.zeros(2)}, {})
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["w"]
    assert os.listdir(tmp_path) == ["out.h5"]


def test_write_h5_atomic_failure_leaves_nothing(tmp_path):
    path = tmp_path / "out.h5"
    bad = np.array([{"a": 1}], dtype=object)  # h5py cannot store object arrays
    with pytest.raises(TypeError):
        write_h5_atomic(path, {"good": np.ones(3), "bad": bad}, {})
    assert os.listdir(tmp_path) == []
    with pytest.raises(TypeError):
        write_h5_atomic(path, {"good": np.ones(3)}, {"attr": {"x": object()}})
    assert os.listdir(tmp_path) == []


def test_write_h5_atomic_failure_keeps_old_file(tmp_path):
    path = tmp_path / "out.h5"
    write_h5_atomic(path, {"old": np.ones(2)}, {"v": 1})
    with pytest.raises(TypeError):
        write_h5_atomic(path, {"new": np.array([object()], dtype=object)}, {})
    with h5py.File(path, "r") as f:
        assert list(f.keys()) == ["old"] and f.attrs["v"] == 1
    assert os.listdir(tmp_path) == ["out.h5"]


def test_write_h5_atomic_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "out.h5"

    def boom(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        write_h5_atomic(path, {"x": np.ones(2)}, {})
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- load_dense_npy


def test_load_dense_npy(tmp_path):
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.save(tmp_path / "x.npy", x)
    got = load_dense_npy(tmp_path / "x.npy", block_rows=2)
    np.testing.assert_array_equal(got, x)
    assert got.dtype == np.float32 and got.ndim == 2


def test_load_dense_npy_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_dense_npy(tmp_path / "missing.npy")
    np.save(tmp_path / "v.npy", np.ones(3))
    with pytest.raises(InputError, match="2-D"):
        load_dense_npy(tmp_path / "v.npy")
    bad = np.ones((7, 3))
    bad[5, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(InputError, match="row 5, column 2"):
        load_dense_npy(tmp_path / "nan.npy", block_rows=2)
    bad[5, 2] = np.inf
    np.save(tmp_path / "inf.npy", bad)
    with pytest.raises(InputError, match="non-finite"):
        load_dense_npy(tmp_path / "inf.npy")
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    with pytest.raises(InputError, match="not a readable"):
        load_dense_npy(tmp_path / "junk.npy")
    np.save(tmp_path / "obj.npy", np.array([[{}]], dtype=object), allow_pickle=True)
    with pytest.raises(InputError):
        load_dense_npy(tmp_path / "obj.npy")
    np.save(tmp_path / "c.npy", np.ones((2, 2), dtype=complex))
    with pytest.raises(InputError, match="real"):
        load_dense_npy(tmp_path / "c.npy")
    np.savez(tmp_path / "z.npz", a=np.ones((2, 2)))
    with pytest.raises(InputError, match="npz"):
        load_dense_npy(tmp_path / "z.npz")


# ---------------------------------------------------------------- generators


def test_erdos_renyi_is_defined_by_its_chunks():
    m, n, k, seed, chunk_rows = 103, 37, 5, 11, 10
    share = erdos_renyi(m, n, k, seed, SELF, chunk_rows=chunk_rows)
    chunks = [erdos_renyi_chunk(m, n, k, seed, t, chunk_rows) for t in range(11)]
    for i, arr in enumerate((share.rows, share.cols, share.vals)):
        np.testing.assert_array_equal(arr, np.concatenate([c[i] for c in chunks]))
    assert share.shape == (m, n) and share.nnz == m * k
    np.testing.assert_array_equal(np.bincount(share.rows, minlength=m), np.full(m, k))
    assert share.cols.min() >= 0 and share.cols.max() < n
    assert share.vals.min() >= 0 and share.vals.max() < 1
    # what rank r of p would hold: chunks t = r, r + p, ...; their union is the same matrix
    full = share.to_scipy().toarray()
    for p in (2, 3, 7, 20):
        union = sum(
            sp.coo_matrix((c[2], (c[0], c[1])), shape=(m, n)).toarray()
            for r in range(p)
            for c in chunks[r::p]
        )
        np.testing.assert_array_equal(union, full)


def test_erdos_renyi_seeds_and_edges():
    a = erdos_renyi(50, 50, 3, 1, SELF)
    b = erdos_renyi(50, 50, 3, 1, SELF)
    c = erdos_renyi(50, 50, 3, 2, SELF)
    np.testing.assert_array_equal(a.cols, b.cols)
    assert not np.array_equal(a.cols, c.cols)
    assert erdos_renyi(0, 5, 3, 1, SELF).nnz == 0
    assert erdos_renyi(5, 0, 0, 1, SELF).nnz == 0
    for bad in [(-1, 5, 1, 0), (5, 5, -1, 0), (5, 0, 1, 0), (5, 5, 1, -3)]:
        with pytest.raises(InputError):
            erdos_renyi(*bad, SELF)
    with pytest.raises(InputError):
        erdos_renyi(5, 5, 1, 0, SELF, chunk_rows=0)


def test_rmat_is_defined_by_its_chunks():
    scale, ef, seed, ce = 6, 5, 3, 50
    share = rmat(scale, ef, seed, SELF, chunk_edges=ce)
    total = ef << scale
    chunks = [rmat_chunk(scale, ef, seed, t, chunk_edges=ce) for t in range(-(-total // ce))]
    for i, arr in enumerate((share.rows, share.cols, share.vals)):
        np.testing.assert_array_equal(arr, np.concatenate([c[i] for c in chunks]))
    assert share.shape == (64, 64) and share.nnz == total
    assert share.rows.min() >= 0 and share.rows.max() < 64
    assert share.cols.min() >= 0 and share.cols.max() < 64


def test_rmat_distribution():
    share = rmat(10, 16, 5, SELF, a=0.57, b=0.19, c=0.19)
    top = share.rows < 512
    left = share.cols < 512
    assert abs(np.mean(top & left) - 0.57) < 0.01
    assert abs(np.mean(top & ~left) - 0.19) < 0.01
    assert abs(np.mean(~top & left) - 0.19) < 0.01
    uniform = rmat(8, 8, 5, SELF, a=0.25, b=0.25, c=0.25)
    assert abs(np.mean(uniform.rows < 128) - 0.5) < 0.03
    assert rmat(0, 3, 1, SELF).shape == (1, 1)
    with pytest.raises(InputError):
        rmat(4, 2, 1, SELF, a=0.6, b=0.3, c=0.3)
    with pytest.raises(InputError):
        rmat(-1, 2, 1, SELF)


# ---------------------------------------------------------------- permutations


def test_random_permutation():
    perm = random_permutation(100, 42)
    assert perm.dtype == np.int64
    np.testing.assert_array_equal(np.sort(perm), np.arange(100))
    np.testing.assert_array_equal(perm, random_permutation(100, 42))
    assert not np.array_equal(perm, random_permutation(100, 43))
    assert random_permutation(0, 1).size == 0
    with pytest.raises(InputError):
        random_permutation(-1, 1)
    with pytest.raises(InputError):
        random_permutation(5, -1)


def test_inverse_and_identity():
    perm = random_permutation(50, 3)
    inv = inverse_permutation(perm)
    np.testing.assert_array_equal(perm[inv], np.arange(50))
    np.testing.assert_array_equal(inv[perm], np.arange(50))
    np.testing.assert_array_equal(identity_permutation(4), [0, 1, 2, 3])
    assert identity_permutation(4).dtype == np.int64
    np.testing.assert_array_equal(inverse_permutation(identity_permutation(6)), np.arange(6))
    assert inverse_permutation(np.zeros(0, dtype=np.int64)).size == 0
    for bad in ([0, 0, 1], [0, 3], [[0, 1]], [0.0, 1.0], [-1, 0]):
        with pytest.raises(InputError):
            inverse_permutation(np.array(bad))


def test_permutation_convention():
    rng = np.random.default_rng(0)
    s = sp.random(7, 5, density=0.5, random_state=rng, format="coo")
    pr, pc = random_permutation(7, 1), random_permutation(5, 2)
    permuted = s.toarray()[pr][:, pc]
    # new row i is old row pr[i]
    for i in range(7):
        np.testing.assert_array_equal(permuted[i], s.toarray()[pr[i]][pc])
    # entry (r, c) moves to (inv_pr[r], inv_pc[c])
    ir, ic = inverse_permutation(pr), inverse_permutation(pc)
    moved = sp.coo_matrix((s.data, (ir[s.row], ic[s.col])), shape=s.shape).toarray()
    np.testing.assert_array_equal(moved, permuted)
