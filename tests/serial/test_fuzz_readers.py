"""Property-based tests of the Matrix Market and HDF5 readers (one process, ``MPI.COMM_SELF``).

Generated valid files (field real / integer / pattern, symmetry general / symmetric /
skew-symmetric, comments, blank lines, spaces and tabs, duplicates, gzip or not) must read
equal to the matrix they were generated from and to ``scipy.io.mmread``. Corrupted files
(truncation, bit flips, wrong counts, bad tokens, lost or repeated lines) must either raise
:class:`~distmm.errors.InputError`, never another exception, or read a matrix that is not
silently wrong: equal to scipy's reading when scipy accepts the file, and equal to the
uncorrupted matrix when scipy refuses it (a harmless change, e.g. in a comment).
HDF5: generated CSR and COO files, valid or with one dataset changed (a value, its type or
length, a missing dataset, a bad shape), are read equal to scipy's fully checked assembly of
the same arrays exactly when scipy's checks pass (and the values are finite), and refused with
InputError otherwise; damaged bytes (bit flips, truncation) end in InputError or a matrix of
the right shape.
Bounded by ``max_examples`` (400 per test, derandomized) so the file runs in seconds.
"""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
import scipy.io
from mpi4py import MPI

from distmm.errors import InputError
from distmm.io.matrix_market import read_matrix_market

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

FUZZ = settings(max_examples=400, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KINDS = [(f, s) for f in ("real", "integer", "pattern")
         for s in ("general", "symmetric", "skew-symmetric")
         if not (f == "pattern" and s == "skew-symmetric")]


@st.composite
def mm_files(draw, scipy_readable: bool = False):
    """``(file text, the dense matrix it holds, gzip it?, scipy reads it?)``: scipy's reader
    wants the banner spelt ``%%MatrixMarket`` and no comment lines among the data lines,
    which distmm's reader allows (``scipy_readable`` rules both out)."""
    field, symmetry = draw(st.sampled_from(KINDS))
    m = draw(st.integers(1, 7))
    n = m if symmetry != "general" else draw(st.integers(1, 7))
    count = draw(st.integers(0, 12))
    entries = []
    for _ in range(count):
        i = draw(st.integers(0, m - 1))
        j = draw(st.integers(0, n - 1))
        if symmetry == "symmetric":
            i, j = max(i, j), min(i, j)
        elif symmetry == "skew-symmetric":
            if i == j:
                continue
            i, j = max(i, j), min(i, j)
        if field == "real":
            value = draw(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
            text = draw(st.sampled_from([repr(value), f"{value:.17g}", f"{value:.17e}",
                                         f"{value:.17E}"]))
            value = float(text)
        elif field == "integer":
            value = draw(st.integers(-10**6, 10**6))
            text = str(value)
        else:
            value, text = 1.0, ""
        entries.append((i, j, value, text))
    dense = np.zeros((m, n))
    for i, j, value, _ in entries:
        dense[i, j] += value
        if symmetry != "general" and i != j:
            dense[j, i] += value if symmetry == "symmetric" else -value
    sep = draw(st.sampled_from([" ", "  ", "\t", " \t "]))
    banner = draw(st.sampled_from(["%%MatrixMarket"] if scipy_readable
                                  else ["%%MatrixMarket", "%%matrixmarket"]))
    lines = [f"{banner} matrix coordinate {field} {symmetry}"]
    lines += ["% " + draw(st.text("abc xyz%0123456789", max_size=20))
              for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        lines.append("")
    lines.append(f"{m}{sep}{n}{sep}{len(entries)}")
    strict = banner == "%%MatrixMarket"
    for i, j, _, text in entries:
        if draw(st.integers(0, 9)) == 0:
            extra = draw(st.sampled_from(["", "   "] if scipy_readable
                                         else ["", "% a comment", "   "]))
            strict = strict and not extra.startswith("%")
            lines.append(extra)
        line = sep.join(str(x) for x in (i + 1, j + 1, text) if x != "")
        lines.append(line + draw(st.sampled_from(["", " ", "\t"])))
    body = ("\n".join(lines) + "\n").encode()
    return body, dense, draw(st.booleans()), strict


def _write(tmp_path, body: bytes, gz: bool) -> str:
    path = tmp_path / ("S.mtx.gz" if gz else "S.mtx")
    path.write_bytes(gzip.compress(body) if gz else body)
    return str(path)


def _ours(path: str) -> np.ndarray:
    share = read_matrix_market(path, MPI.COMM_SELF)
    return share.to_scipy().toarray()


def _scipy(body: bytes) -> np.ndarray | None:
    """scipy's reading of ``body``, or None when scipy refuses it.

    A final line without its newline is completed first: scipy 1.17's reader crashes (a
    segmentation fault) on some such files (e.g. one ending in ``1  4  -3521\t``), and a
    Matrix Market line means the same with or without it."""
    if body and not body.endswith(b"\n"):
        body += b"\n"
    try:
        return scipy.io.mmread(io.BytesIO(body)).toarray().astype(np.float64)
    except Exception:  # scipy's own errors vary (ValueError, OverflowError, ...)
        return None


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    scale = max(1.0, float(np.abs(a).max(initial=0)), float(np.abs(b).max(initial=0)))
    return bool(np.allclose(a, b, rtol=1e-12, atol=1e-12 * scale, equal_nan=False))


@FUZZ
@given(mm_files())
def test_valid_files_read_equal_to_scipy(tmp_path_factory, case):
    body, dense, gz, strict = case
    path = _write(tmp_path_factory.mktemp("v"), body, gz)
    ours = _ours(path)
    assert _close(ours, dense)
    ref = _scipy(body)
    if strict:
        assert ref is not None, body
    assert ref is None or _close(ours, ref)


BAD_TOKENS = ["x", "1.2.3", "--1", "nan", "inf", "-Inf", "1e999", "0", "-1", "0x10", "1,5",
              "99999999999999999999999", "", "1 2", "+", "e5", "\x00", "\xff"]


@st.composite
def corruptions(draw):
    """``(name, file bytes, the matrix it held before corruption)``; the corruption is in the
    text (then written plain or gzipped) or in the gzip stream itself."""
    # From files scipy reads, so that scipy can judge what a corruption turned them into.
    body, dense, gz, _ = draw(mm_files(scipy_readable=True))
    kind = draw(st.sampled_from(["truncate", "flip", "count", "token", "drop", "repeat"]))
    data = bytearray(body)
    lines = body.split(b"\n")
    size_at = next(k for k, line in enumerate(lines)
                   if k > 0 and line.strip() and not line.lstrip().startswith(b"%"))
    if kind == "truncate":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "count":
        parts = lines[size_at].split()
        parts[2] = b"%d" % max(0, int(parts[2]) + draw(st.sampled_from([-2, -1, 1, 2, 10**6])))
        lines[size_at] = b" ".join(parts)
        data = bytearray(b"\n".join(lines))
    elif kind == "token":
        k = draw(st.integers(size_at, len(lines) - 1))
        parts = lines[k].split()
        if parts:
            parts[draw(st.integers(0, len(parts) - 1))] = draw(
                st.sampled_from(BAD_TOKENS)).encode("latin-1")
            lines[k] = b" ".join(parts)
        data = bytearray(b"\n".join(lines))
    else:
        k = draw(st.integers(size_at + 1, max(size_at + 1, len(lines) - 1)))
        if k < len(lines):
            if kind == "drop":
                del lines[k]
            else:
                lines.insert(k, lines[k])
        data = bytearray(b"\n".join(lines))
    if gz and draw(st.booleans()):  # corrupt the compressed stream instead
        packed = bytearray(gzip.compress(body))
        if draw(st.booleans()):
            packed = packed[: draw(st.integers(0, len(packed) - 1))]
        else:
            packed[draw(st.integers(0, len(packed) - 1))] ^= 1 << draw(st.integers(0, 7))
        return "S.mtx.gz", bytes(packed), dense
    if gz:
        return "S.mtx.gz", gzip.compress(bytes(data)), dense
    return "S.mtx", bytes(data), dense


def _plain(raw: bytes) -> bytes | None:
    """The text scipy is given: ``raw`` decompressed when it is a readable gzip stream."""
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, ValueError):
        return None


@FUZZ
@given(corruptions())
def test_corrupted_files_raise_input_error_or_read_right(tmp_path_factory, case):
    name, raw, dense = case
    path = tmp_path_factory.mktemp("c") / name
    path.write_bytes(raw)
    try:
        ours = _ours(str(path))
    except InputError as exc:
        assert str(path) in str(exc)
        hypothesis.event("InputError")
        return
    hypothesis.event("read a matrix")
    plain = _plain(raw)
    ref = None if plain is None else _scipy(plain)
    if ref is not None:
        assert _close(ours, ref), ("differs from scipy", plain)
    else:
        assert _close(ours, dense), ("scipy refuses, distmm reads another matrix", plain)


# --------------------------------------------------------------------------------------------
# HDF5 reader
# --------------------------------------------------------------------------------------------


@st.composite
def h5_cases(draw):
    """``(datasets, shape attribute)`` of a CSR or COO file, valid or with one change."""
    m, n = draw(st.integers(0, 6)), draw(st.integers(1, 6))
    count = draw(st.integers(0, 10)) if m else 0
    rows = np.sort(np.array([draw(st.integers(0, m - 1)) for _ in range(count)], dtype=np.int64))
    cols = np.array([draw(st.integers(0, n - 1)) for _ in range(count)], dtype=np.int64)
    vals = np.array([draw(st.floats(-1e3, 1e3)) for _ in range(count)], dtype=np.float64)
    if draw(st.booleans()):
        sets = {"indptr": np.searchsorted(rows, np.arange(m + 1)).astype(np.int64),
                "indices": cols, "data": vals}
    else:
        sets = {"row": rows, "col": cols, "val": vals}
    change = draw(st.sampled_from(["none", "value", "dtype", "length", "drop", "shape"]))
    name = draw(st.sampled_from(sorted(sets)))
    arr = sets[name]
    if change == "value" and arr.size:
        arr = arr.copy()
        arr[draw(st.integers(0, arr.size - 1))] = draw(st.sampled_from(
            [-1, 0, 1, m, n, m + 1, 2**40] if arr.dtype.kind == "i"
            else [np.nan, np.inf, -np.inf, 0.0, 1e300]))
    elif change == "dtype":
        arr = arr.astype(draw(st.sampled_from([np.float32, np.int8, np.uint64, np.complex64,
                                               np.bool_])))
    elif change == "length":
        arr = arr[:-1] if arr.size and draw(st.booleans()) else np.append(arr, arr[:1])
    if change == "drop":
        del sets[name]
    else:
        sets[name] = arr
    shape = (m, n) if change != "shape" else draw(st.sampled_from(
        [(m,), (m, n, 1), (-1, n), (m + 1, n), (m, max(n - 1, 0)), None]))
    return sets, shape


def _h5_oracle(sets: dict, shape) -> np.ndarray | None:
    """The matrix the datasets hold, built and fully checked by scipy; None if invalid."""
    import scipy.sparse as sp

    try:
        if shape is None or len(shape) != 2 or min(shape) < 0:
            return None
        if any(a.dtype.kind not in "iu" for k, a in sets.items() if k not in ("data", "val")):
            return None
        if any(a.dtype.kind not in "iuf" for k, a in sets.items() if k in ("data", "val")):
            return None
        if "indptr" in sets:
            ptr = sets["indptr"]
            if ptr.size != shape[0] + 1 or ptr[0] != 0 or ptr[-1] != sets["indices"].size:
                return None
            S = sp.csr_matrix((sets["data"].astype(np.float64), sets["indices"], ptr),
                              shape=shape)
            S.check_format(full_check=True)
        else:
            r, c = sets["row"], sets["col"]
            if not (r.size == c.size == sets["val"].size):
                return None
            if r.size and (r.min() < 0 or c.min() < 0 or r.max() >= shape[0]
                           or c.max() >= shape[1]):
                return None
            S = sp.coo_matrix((sets["val"].astype(np.float64), (r, c)), shape=shape)
        dense = S.toarray().astype(np.float64)
    except (ValueError, KeyError, IndexError, TypeError, OverflowError):
        return None
    return dense if np.isfinite(dense).all() else None


@FUZZ
@given(h5_cases())
def test_hdf5_reader_refuses_or_reads_right(tmp_path_factory, case):
    import h5py

    from distmm.io.hdf5 import read_hdf5

    sets, shape = case
    path = tmp_path_factory.mktemp("h") / "S.h5"
    with h5py.File(path, "w") as fh:
        for key, value in sets.items():
            fh[key] = value
        if shape is not None:
            fh.attrs["shape"] = np.asarray(shape)
    expected = _h5_oracle(sets, shape)
    try:
        share = read_hdf5(str(path), MPI.COMM_SELF)
    except InputError as exc:
        assert str(path) in str(exc)
        assert expected is None, ("refused a valid file", str(exc))
        return
    assert expected is not None, "read an invalid file"
    np.testing.assert_allclose(share.to_scipy().toarray(), expected, rtol=1e-12, atol=0)


@FUZZ
@given(st.data())
def test_hdf5_reader_on_damaged_bytes(tmp_path_factory, data):
    """Bit flips and truncation of a real HDF5 file: InputError or the original matrix."""
    import h5py

    from distmm.io.hdf5 import read_hdf5

    d = tmp_path_factory.mktemp("b")
    good = d / "good.h5"
    dense = np.arange(20, dtype=np.float64).reshape(4, 5) % 3
    import scipy.sparse as sp

    csr = sp.csr_matrix(dense)
    with h5py.File(good, "w") as fh:
        fh["indptr"], fh["indices"], fh["data"] = csr.indptr, csr.indices, csr.data
        fh.attrs["shape"] = np.array(dense.shape)
    raw = bytearray(good.read_bytes())
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    path = d / "S.h5"
    path.write_bytes(bytes(raw))
    try:
        share = read_hdf5(str(path), MPI.COMM_SELF)
    except InputError as exc:
        assert str(path) in str(exc)
        return
    # A flip in the values themselves reads as another (valid) matrix: only the entries'
    # values may differ then. A flip in the shape attribute that enlarges the shape cannot be
    # told from a valid file (every index still fits): the entries' positions must then be the
    # original ones. (Which bytes get flipped depends on hypothesis's generation, which also
    # draws constants from the project's source, so either case can come up.)
    got = share.to_scipy().tocoo()
    assert got.shape[0] >= dense.shape[0] and got.shape[1] >= dense.shape[1]
    positions = sorted(zip(got.row.tolist(), got.col.tolist(), strict=True))
    assert positions == sorted(zip(*(x.tolist() for x in dense.nonzero()), strict=True))
