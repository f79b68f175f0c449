"""Property-based tests of the Matrix Market reader (one process, ``MPI.COMM_SELF``).

Generated valid files (field real / integer / pattern, symmetry general / symmetric /
skew-symmetric, comments, blank lines, spaces and tabs, duplicates, gzip or not) must read
equal to the matrix they were generated from and to ``scipy.io.mmread``. Corrupted files
(truncation, bit flips, wrong counts, bad tokens, lost or repeated lines) must either raise
:class:`~distmm.errors.InputError`, never another exception, or read a matrix that is not
silently wrong: equal to scipy's reading when scipy accepts the file, and equal to the
uncorrupted matrix when scipy refuses it (a harmless change, e.g. in a comment).
Bounded by ``max_examples`` so the file runs in seconds; HYPOTHESIS_PROFILE is not used.
"""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
import scipy.io
from mpi4py import MPI

from distmm.errors import InputError
from distmm.io import read_matrix_market

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
