"""The compiled fast path of the Matrix Market reader (distmm/io/mtx_parse.py and its use in
distmm/io/matrix_market.py), on one process.

Oracles: Python's ``float`` (correctly rounded, as strtod) for every value, bit for bit;
``scipy.io.mmread`` for whole files; ``bytes.splitlines`` for the line blocks; tracemalloc for
the memory bound. Blocks, capacities and buffers are made tiny so that every seam (a line cut
by a block boundary, a line longer than the buffer, the arrays growing mid-block, a hard value
in every block) is crossed many times on small files.
"""

from __future__ import annotations

import gzip
import io
import tracemalloc

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.errors import InputError
from distmm.io import matrix_market as dio
from distmm.io.matrix_market import read_matrix_market

SELF = MPI.COMM_SELF
HEAD = "%%MatrixMarket matrix coordinate real general\n"


def _value_strings(rng: np.random.Generator, count: int) -> list[str]:
    """Decimal strings of every kind the fast path meets or must hand on: short and long
    mantissas, the whole exponent range (subnormals, overflow to inf excluded), halfway cases
    of 2^53 + 1, more than 19 digits, leading and trailing zeros, signs, '.5' and '5.'."""
    fixed = ["0", "-0", "0.0", "+0.000e+00", "5e-324", "4.9406564584124654e-324",
             "2.2250738585072011e-308", "2.2250738585072014e-308", "1.7976931348623157e308",
             "9007199254740993", "9007199254740993.0000000000000001", "123456789012345678901234",
             ".5", "5.", "-.5e-3", "+7", "007.250", "1e22", "1e23", "0.1", "1E-5",
             "0.30000000000000004", "123456789.123456789", "1" + "0" * 30, "0." + "0" * 30 + "1"]
    out = list(fixed)
    for k in range(count):
        scale = 10.0 ** int(rng.integers(-320, 308))
        kind = k % 4
        if kind == 0:
            out.append(repr(float(rng.random())))
        elif kind == 1:
            out.append(f"{rng.random() * scale:.16e}")
        elif kind == 2:
            out.append(f"{rng.standard_normal() * scale:.{int(rng.integers(1, 22))}g}")
        else:
            out.append(str(int(rng.integers(-(10**15), 10**15))))
    return out


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    data = text.encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return str(path)


@pytest.mark.parametrize("name", ["v.mtx", "v.mtx.gz"])
@pytest.mark.parametrize("block", [1 << 24, 97])
def test_values_are_correctly_rounded(tmp_path, monkeypatch, name, block):
    monkeypatch.setattr(dio, "_PARSE_BLOCK", block)
    values = _value_strings(np.random.default_rng(5), 4000)
    body = "".join(f"{k + 1} {k % 3 + 1} {v}\n" for k, v in enumerate(values))
    path = _write(tmp_path, name, f"{HEAD}{len(values)} 3 {len(values)}\n{body}")
    share = read_matrix_market(path, SELF)
    expected = np.array([float(v) for v in values])
    np.testing.assert_array_equal(share.vals.view(np.uint64), expected.view(np.uint64))
    np.testing.assert_array_equal(share.rows, np.arange(len(values)))
    np.testing.assert_array_equal(share.cols, np.arange(len(values)) % 3)


def _messy_text(rng: np.random.Generator, field: str, symmetry: str, m: int, nnz: int,
                long_line: int = 0) -> str:
    """A valid file with comments, blank and whitespace-only lines, tabs, CRLF endings, a
    mix of value spellings, optionally a line padded to ``long_line`` bytes, and no final
    newline."""
    n = m if symmetry != "general" else m + 3
    lines = [f"%%MatrixMarket matrix coordinate {field} {symmetry}", "% header comment",
             f"{m} {n} {nnz}"]
    for k in range(nnz):
        i, j = int(rng.integers(1, m + 1)), int(rng.integers(1, n + 1))
        if symmetry != "general":
            i, j = max(i, j), min(i, j)
            if symmetry == "skew-symmetric" and i == j:
                i, j = (i, j - 1) if j > 1 else (i + 1, j)
        value = {"real": repr(float(rng.standard_normal())) if k % 2 else
                 f"{rng.standard_normal():.3e}",
                 "integer": str(int(rng.integers(-50, 50))), "pattern": ""}[field]
        sep = "\t" if k % 3 == 0 else " "
        line = f"{i}{sep}{j}{sep}{value}".rstrip()
        if k % 5 == 0:
            line = "  " + line + " \r"
        if long_line and k == nnz // 2:
            line += " " * long_line
        lines.append(line)
        if k % 7 == 0:
            lines.append("% a comment between entries")
        if k % 11 == 0:
            lines.append(" \t ")
    return "\n".join(lines)


def _scipy_dense(text: str) -> np.ndarray:
    # scipy refuses comment lines among the entries: give it the file without them
    kept = [line for k, line in enumerate(text.split("\n")) if k < 2 or not line.startswith("%")]
    return sp.coo_matrix(scipy.io.mmread(io.BytesIO("\n".join(kept).encode()))).toarray()


KINDS = [("real", "general"), ("integer", "symmetric"), ("real", "skew-symmetric"),
         ("pattern", "general"), ("pattern", "symmetric")]


@pytest.mark.parametrize("field,symmetry", KINDS)
@pytest.mark.parametrize("name", ["s.mtx", "s.mtx.gz"])
def test_tiny_blocks_and_growing_arrays_match_scipy(tmp_path, monkeypatch, field, symmetry,
                                                    name):
    # blocks of 61 bytes, a line of 300 bytes (the buffer doubles), arrays first sized at a
    # third of the entries (they grow several times, also in the middle of a block)
    monkeypatch.setattr(dio, "_PARSE_BLOCK", 61)
    monkeypatch.setattr(dio, "_CAPACITY_MARGIN", 0.3)
    monkeypatch.setattr(dio, "_CAPACITY_SLACK", 0)
    text = _messy_text(np.random.default_rng(11), field, symmetry, 17, 150, long_line=300)
    share = read_matrix_market(_write(tmp_path, name, text), SELF)
    np.testing.assert_array_equal(share.to_scipy().toarray(), _scipy_dense(text))
    stored = 150 if symmetry == "general" else None
    if stored is not None:
        assert share.nnz == stored


def test_fast_path_keeps_what_the_checked_parser_accepts(tmp_path):
    # indices with a sign, a point or an exponent are not plain digits: the fast parser hands
    # the lines to the checked numpy parser, which accepts them as before
    path = _write(tmp_path, "odd.mtx", f"{HEAD}3 3 3\n1 1 1.5\n+2 2.0 2\n3e0 3 2\n")
    share = read_matrix_market(path, SELF)
    np.testing.assert_array_equal(share.rows, [0, 1, 2])
    np.testing.assert_array_equal(share.cols, [0, 1, 2])
    np.testing.assert_array_equal(share.vals, [1.5, 2.0, 2.0])


@pytest.mark.parametrize("bad,fragment", [
    ("4 1 1.0", "line 5: row index 4 is out of range 1..3"),
    ("1 1 nan", "line 5: value nan is not finite"),
    ("1 1 1e999", "line 5: value inf is not finite"),
    ("1 1 1." + "1" * 30 + "e999", "line 5: value inf is not finite"),
    ("1 1", "line 5: expected 3 fields"),
    ("1 1 1 1", "line 5: expected 3 fields"),
    ("1 1 abc", "line 5: cannot parse the numbers"),
])
@pytest.mark.parametrize("block", [1 << 24, 23])
def test_errors_name_the_line(tmp_path, monkeypatch, bad, fragment, block):
    monkeypatch.setattr(dio, "_PARSE_BLOCK", block)
    path = _write(tmp_path, "bad.mtx", f"{HEAD}% c\n3 3 4\n1 1 1\n{bad}\n2 2 2\n3 3 3\n")
    with pytest.raises(InputError, match=fragment):
        read_matrix_market(path, SELF)


def test_integer_file_values_must_be_integral(tmp_path):
    # 17 digits: converted by Eisel-Lemire after the line loop; 24 digits: by numpy
    head = "%%MatrixMarket matrix coordinate integer general\n3 1 3\n"
    good = _write(tmp_path, "i.mtx", head + "1 1 123456789012345678901234\n2 1 -7\n"
                  "3 1 12345678901234567\n")
    np.testing.assert_array_equal(read_matrix_market(good, SELF).vals,
                                  [123456789012345678901234.0, -7.0, 12345678901234567.0])
    for k, bad in enumerate(["2.5000000000000000000001", "1.2345678901234567"]):
        path = _write(tmp_path, f"j{k}.mtx", head + f"1 1 3\n2 1 {bad}\n3 1 4\n")
        with pytest.raises(InputError, match="line 4: value .* is not an integer"):
            read_matrix_market(path, SELF)


@pytest.mark.parametrize("size", [1, 5, 64])
@pytest.mark.parametrize("skip,take", [(0, None), (3, None), (0, 4), (2, 5), (40, None),
                                       (0, 0), (7, 100)])
def test_line_blocks(size, skip, take):
    rng = np.random.default_rng(size + skip)
    lines = [b"x" * int(rng.integers(0, 12)) + b"\n" for _ in range(30)] + [b"tail"]
    data = b"".join(lines)
    for limit in (None, len(data), len(data) - 9):
        # a piece is valid until the next is asked for (the buffer is reused): copy each
        pieces = [p.tobytes() for p in dio._line_blocks(io.BytesIO(data), limit, skip, take,
                                                        size)]
        got = b"".join(pieces)
        available = data if limit is None else data[:limit]
        kept = available.splitlines(keepends=True)[skip:]
        assert got == b"".join(kept if take is None else kept[:take])
        assert all(piece.endswith(b"\n") for piece in pieces[:-1])


def test_peak_memory_near_the_final_arrays(tmp_path, monkeypatch):
    # the text is read in blocks and the entries written straight into their arrays: the
    # peak of numpy's allocations stays within 2x the final COO arrays (24 bytes per entry)
    monkeypatch.setattr(dio, "_PARSE_BLOCK", 1 << 16)
    rng = np.random.default_rng(3)
    nnz = 200_000
    for symmetry in ("general", "symmetric"):
        rows = rng.integers(1, 5001, nnz)
        cols = rng.integers(1, 5001, nnz)
        if symmetry == "symmetric":
            rows, cols = np.maximum(rows, cols), np.minimum(rows, cols)
        body = "\n".join(f"{r} {c} {v!r}" for r, c, v in zip(rows.tolist(), cols.tolist(),
                                                             rng.random(nnz).tolist(),
                                                             strict=True))
        path = _write(tmp_path, f"{symmetry}.mtx",
                      f"%%MatrixMarket matrix coordinate real {symmetry}\n5000 5000 {nnz}\n"
                      f"{body}\n")
        read_matrix_market(path, SELF)  # compile or load the parser outside the measurement
        tracemalloc.start()
        try:
            share = read_matrix_market(path, SELF)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        final = share.rows.nbytes + share.cols.nbytes + share.vals.nbytes
        assert peak <= 2 * final, (symmetry, peak / final)
