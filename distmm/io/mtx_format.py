"""The Matrix Market coordinate format: what a file must be, read without its entries.

Opening a file (plain or gzip-compressed, :func:`open_stream`), its banner and size line
(:class:`Header`, :func:`parse_header`), the header-only readers :func:`mtx_header` and
:func:`matrix_market_size` (sizes compared and checked before any data is read), the message
for a file that cannot be read (:func:`read_failure`) and the checks of parsed entries
(:func:`first_bad_entry`). The parallel reader, :mod:`distmm.io.matrix_market`, builds on
these; nothing here is collective.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from distmm.errors import InputError

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_HEADER_LINE = 1 << 20  # a header line longer than this is not Matrix Market
_FIELDS = {"real": "real", "double": "real", "integer": "integer", "pattern": "pattern"}
_SYMMETRIES = ("general", "symmetric", "skew-symmetric")


@dataclass(frozen=True)
class Header:
    """What the banner and size line of a Matrix Market coordinate file say."""

    field: str  # "real", "integer" or "pattern"
    symmetry: str  # "general", "symmetric" or "skew-symmetric"
    nrows: int
    ncols: int
    nnz: int  # entries stored in the file (before symmetric mirroring)
    lines: int  # lines up to and including the size line
    data_offset: int  # offset of the data section in the (decompressed) byte stream
    gzipped: bool

    @property
    def nfields(self) -> int:
        return 2 if self.field == "pattern" else 3


@contextlib.contextmanager
def open_stream(path: str):
    """Open ``path`` for binary reading, through gzip when it starts with the gzip magic."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if not gzipped:
            yield raw, False
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            yield gz, True


def read_failure(path: str, exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a directory, not a Matrix Market file"
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
        return f"{path}: corrupt or truncated gzip data ({exc})"
    return f"{path}: cannot read the file ({exc})"


def mtx_header(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """``(rows, cols, entries)`` from a Matrix Market file's banner and size line. Not collective.

    Reads only the header (through gzip when the file is compressed), so sizes can be compared
    and checked before any data is read or distributed. ``entries`` is the size line's count
    (before symmetric mirroring). Raises :class:`InputError` with the same messages as
    :func:`read_matrix_market` for a missing, unreadable or malformed file.
    """
    path = os.fspath(path)
    try:
        with open_stream(path) as (fh, gzipped):
            header, msg = parse_header(fh, path, gzipped)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(read_failure(path, exc)) from None
    if msg is not None:
        raise InputError(msg)
    assert header is not None
    return header.nrows, header.ncols, header.nnz


def parse_header(fh: BinaryIO, path: str, gzipped: bool) -> tuple[Header | None, str | None]:
    """Read the banner, comments and size line; return the header or a problem. Not collective."""
    line = fh.readline(_MAX_HEADER_LINE)
    if line.startswith(b"\xef\xbb\xbf"):  # tolerate a UTF-8 byte-order mark
        line = line[3:]
    if not line.lower().startswith(b"%%matrixmarket"):
        return None, (
            f"{path}, line 1: not a Matrix Market file (the first line must start with "
            "'%%MatrixMarket')"
        )
    tokens = line.decode("ascii", "replace").split()
    if len(tokens) != 5 or tokens[0].lower() != "%%matrixmarket":
        return None, (
            f"{path}, line 1: malformed banner {line.strip()[:100]!r}; expected "
            "'%%MatrixMarket matrix coordinate <field> <symmetry>'"
        )
    obj, fmt, field, symmetry = (t.lower() for t in tokens[1:])
    where = f"{path}, line 1"
    if obj != "matrix":
        return None, f"{where}: unsupported object '{obj}' (only 'matrix' is supported)"
    if fmt == "array":
        return None, (
            f"{where}: dense 'array' Matrix Market files are not supported; "
            "a sparse 'coordinate' file is required"
        )
    if fmt != "coordinate":
        return None, f"{where}: unknown format '{fmt}' (only 'coordinate' is supported)"
    if field == "complex":
        return None, f"{where}: complex matrices are not supported (field 'complex')"
    if field not in _FIELDS:
        return None, (f"{where}: unknown field '{field}' (supported: real, integer, pattern)")
    if symmetry == "hermitian":
        return None, f"{where}: 'hermitian' matrices are not supported (complex values)"
    if symmetry not in _SYMMETRIES:
        return None, (
            f"{where}: unknown symmetry '{symmetry}' "
            "(supported: general, symmetric, skew-symmetric)"
        )
    field = _FIELDS[field]
    if field == "pattern" and symmetry == "skew-symmetric":
        return None, f"{where}: 'pattern skew-symmetric' is not a valid combination"

    lines = 1
    while True:
        line = fh.readline(_MAX_HEADER_LINE)
        lines += 1
        if not line:
            return None, f"{path}: the file ends before the size line"
        cut = len(line) == _MAX_HEADER_LINE and not line.endswith(b"\n")
        stripped = line.strip()
        if stripped and not stripped.startswith(b"%"):
            if cut:
                return None, (f"{path}, line {lines}: the size line is longer than "
                              f"{_MAX_HEADER_LINE} bytes; expected 'rows cols entries'")
            break
        while cut:  # a comment may be of any length: read past the rest of it
            line = fh.readline(_MAX_HEADER_LINE)
            cut = len(line) == _MAX_HEADER_LINE and not line.endswith(b"\n")
    parts = stripped.split()
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        text = stripped[:100].decode("ascii", "replace")
        return None, (
            f"{path}, line {lines}: bad size line {text!r}; expected 'rows cols entries' "
            "(three non-negative integers)"
        )
    nrows, ncols, nnz = (int(part) for part in parts)
    if symmetry != "general" and nrows != ncols:
        return None, (
            f"{path}, line {lines}: a {symmetry} matrix must be square, "
            f"but the size line says {nrows} x {ncols}"
        )
    return (
        Header(
            field=field,
            symmetry=symmetry,
            nrows=nrows,
            ncols=ncols,
            nnz=nnz,
            lines=lines,
            data_offset=fh.tell(),
            gzipped=gzipped,
        ),
        None,
    )


def matrix_market_size(path: str | os.PathLike[str]) -> tuple[int, int, int, str]:
    """(rows, columns, stored entries, symmetry) from a Matrix Market coordinate file's header,
    without reading its entries. Not collective.

    A symmetric or skew-symmetric file stores one triangle: the matrix has up to twice the
    stored entries (less the diagonal's). Raises InputError naming the file when it cannot be
    read or its header is not a coordinate header (plain or gzip-compressed).
    """
    path = os.fspath(path)
    try:
        with open_stream(path) as (fh, gzipped):
            header, problem = parse_header(fh, path, gzipped)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(read_failure(path, exc)) from None
    if header is None:
        raise InputError(str(problem))
    return header.nrows, header.ncols, header.nnz, header.symmetry


def first_bad_entry(table: np.ndarray, header: Header) -> tuple[int, str] | None:
    """The first entry (row of ``table``) with a bad index or value, and what is wrong with it.

    ``table`` holds the parsed fields (row, col[, value]) of one entry per row, indices still
    1-based. Not collective.
    """
    checks: list[tuple[np.ndarray, Callable[[int], str]]] = []
    for col, name, limit in ((0, "row", header.nrows), (1, "column", header.ncols)):
        idx = table[:, col]
        integral = np.isfinite(idx) & (idx == np.floor(idx))
        checks.append((~integral,
                       lambda e, n=name, i=idx: f"{n} index {float(i[e])!r} is not an integer"))
        checks.append(
            (
                integral & ((idx < 1) | (idx > limit)),
                lambda e, n=name, i=idx, m=limit: (
                    f"{n} index {int(i[e])} is out of range 1..{m} (indices are 1-based)"
                ),
            )
        )
    if table.shape[1] == 3:
        val = table[:, 2]
        finite = np.isfinite(val)
        checks.append(
            (~finite, lambda e: f"value {val[e]} is not finite (NaN and inf values are refused)")
        )
        if header.field == "integer":
            checks.append(
                (
                    finite & (val != np.floor(val)),
                    lambda e: f"value {float(val[e])!r} is not an integer in an 'integer' file",
                )
            )
    first: tuple[int, str] | None = None
    for bad, describe in checks:
        hits = np.flatnonzero(bad)
        if hits.size and (first is None or hits[0] < first[0]):
            first = (int(hits[0]), describe(int(hits[0])))
    return first


__all__ = ["Header", "first_bad_entry", "matrix_market_size", "mtx_header", "open_stream",
           "parse_header", "read_failure"]
