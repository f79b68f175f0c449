"""Parallel Matrix Market reading.

:func:`read_matrix_market` is collective and returns each rank's :class:`~distmm.core.coo.CooShare`;
every problem it finds in the file is raised as the same :class:`~distmm.errors.InputError` on
every rank, naming the file and (where there is one) the line. :func:`mtx_header` and
:func:`matrix_market_size` read only a file's header (so sizes are compared before any data is
read); :func:`read_csr_block` reads a whole file on one process.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.errors import InputError, agree, require
from distmm.io.mtx_parse import (
    EXACT_POW10,
    OK,
    POW5_HI,
    POW5_LO,
    SLOW,
    finish_values,
    last_newline,
    mirror,
    newline_after,
    parse_lines,
    undecided,
)

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_HEADER_LINE = 1 << 20  # a header line longer than this is not Matrix Market
_SCAN_BLOCK = 1 << 16  # read size when looking for the end of a line
_GZ_BLOCK = 1 << 22  # decompressed block size when streaming a gzip file
_PARSE_BLOCK = 1 << 24  # bytes of text the fast parser gets at a time
# First size of a rank's entry arrays: its expected entries (by bytes, or by lines of a gzip
# file) times the margin, plus the slack; they grow by half when short (lines vary in length).
_CAPACITY_MARGIN = 1.05
_CAPACITY_SLACK = 1024
_MIN_LINE_BYTES = 4  # the shortest data line: "i j" and its newline
_GZIP_MAX_RATIO = 1032  # deflate expands its input at most this many times
# The bytes that separate fields: space, \t, \n, \v, \f, \r (what numpy's text parser skips).
_IS_SPACE = np.zeros(256, dtype=bool)
_IS_SPACE[[9, 10, 11, 12, 13, 32]] = True
_NEWLINE = 10
_PERCENT = ord("%")
_FIELDS = {"real": "real", "double": "real", "integer": "integer", "pattern": "pattern"}
_SYMMETRIES = ("general", "symmetric", "skew-symmetric")


__all__ = ["matrix_market_size", "mtx_header", "read_csr_block", "read_matrix_market"]


@dataclass(frozen=True)
class _Header:
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


def read_matrix_market(path: str | os.PathLike[str], comm: MPI.Comm) -> CooShare:
    """Read a Matrix Market coordinate file into one COO share per rank.

    Collective over ``comm``; every rank passes the same ``path`` (a shared file system is
    assumed). Supported: format ``coordinate``; field ``real`` (or ``double``), ``integer`` or
    ``pattern`` (every value 1.0); symmetry ``general``, ``symmetric`` (each off-diagonal entry
    is mirrored) or ``skew-symmetric`` (mirrored with its value negated). Refused: ``array``
    (dense) files, ``complex`` and ``hermitian`` matrices, ``pattern skew-symmetric``.
    Indices are converted from 1-based to 0-based; duplicates are kept (summed later).

    How the file is split. Every rank reads the header (banner, comments, size line). For an
    uncompressed file, rank k of p then reads only the bytes [k*L/p, (k+1)*L/p) of the
    L-byte data section, moved to line boundaries: a line belongs to the rank whose range holds
    its first byte. A gzip file (recognised by its magic bytes, whatever its name) cannot be
    seeked, so every rank decompresses the stream from the start and keeps only data lines
    [k*nnz/p, (k+1)*nnz/p) (the last rank keeps everything from its first line to the end);
    a rank stops decompressing once it is past its lines. Blank lines and lines starting with
    ``%`` are allowed anywhere and skipped; fields may be separated by any mix of spaces and
    tabs, lines may end in ``\\r\\n``.

    How the lines are parsed. A rank reads its text in blocks of whole lines and parses them
    with the compiled parser of :mod:`distmm.io.mtx_parse`, straight into its preallocated
    arrays (peak memory near the final arrays: 24 bytes per entry, plus fixed buffers). Where
    that parser meets a line it does not accept, the rank reparses its text with the checked
    numpy parser, which accepts the same files as ever and finds the line to name.

    Validation. Any of the following raises the same InputError on every rank, naming the file
    and, where there is one, the line: a missing or unreadable file (or corrupt gzip data); a
    first line that is not a Matrix Market banner; an unsupported object, format, field or
    symmetry; a size line that is not three non-negative integers (or a non-square size for a
    symmetric file); a data line with the wrong number of fields or a field that is not a
    number; a row or column index that is not an integer in 1..rows or 1..cols; a value of an
    ``integer`` file that is not an integer; a NaN or infinite value (refused rather than
    passed on, since it would silently poison every product it touches); and a total number
    of entries (summed over ranks) different from the size line's.
    """
    path = os.fspath(path)
    rank, p = comm.Get_rank(), comm.Get_size()

    header: _Header | None = None
    msg: str | None = None
    entries: _Entries | None = None
    chunk: bytes | None = None  # the rank's text, read only when the fast parser gives up
    nlines = 0
    with contextlib.ExitStack() as stack:
        try:
            fh, gzipped = stack.enter_context(_open_stream(path))
            header, msg = _parse_header(fh, path, gzipped)
        except (OSError, EOFError, zlib.error) as exc:
            msg = _read_failure(path, exc)
        agree(comm, msg)
        assert header is not None
        first_line = header.lines + 1
        try:
            if header.gzipped:
                # The stream is where the header ended: stream on to this rank's lines.
                lo = rank * header.nnz // p
                hi = None if rank == p - 1 else (rank + 1) * header.nnz // p
                first_line = header.lines + lo + 1
                blocks = _line_blocks(fh, None, lo, None if hi is None else hi - lo)
                estimate = max(header.nnz - lo, 0) if hi is None else hi - lo
            else:
                size = os.fstat(fh.fileno()).st_size
                start, end = _byte_share(fh, header.data_offset, size, rank, p)
                fh.seek(start)
                blocks = _line_blocks(fh, end - start, 0, None)
                estimate = header.nnz * (end - start) / max(size - header.data_offset, 1)
            # A first guess only (the arrays grow when it is short), never more entries than
            # the rank's bytes can hold, whatever the size line claims.
            bound = (os.fstat(fh.fileno()).st_size * _GZIP_MAX_RATIO if header.gzipped
                     else end - start) // _MIN_LINE_BYTES + 1
            capacity = min(int(estimate * _CAPACITY_MARGIN) + _CAPACITY_SLACK, bound)
            entries = _parse_fast(blocks, header, capacity)
            if entries is not None:
                nlines = entries.lines
            elif header.gzipped:
                fh.seek(header.data_offset)
                chunk = _read_gzip_lines(fh, lo, hi)
            else:
                fh.seek(start)
                chunk = fh.read(end - start)
                nlines = _count_lines(chunk)
        except (OSError, EOFError, zlib.error) as exc:
            msg = _read_failure(path, exc)
            entries, chunk = None, b""
    if not header.gzipped:
        # Line numbers for error messages: count the lines of the ranks before this one.
        before = comm.exscan(nlines)
        first_line = header.lines + (before or 0) + 1

    if msg is None and entries is None:
        assert chunk is not None
        parsed = _parse_chunk(chunk, first_line, header, path)
        if isinstance(parsed, str):
            msg = parsed
        else:
            entries = _Entries(*parsed, count=parsed[0].size, lines=nlines)
    del chunk
    agree(comm, msg)
    assert entries is not None

    total = comm.allreduce(entries.count, op=MPI.SUM)
    require(
        total == header.nnz,
        f"{path}: the size line declares {header.nnz} entries but the file holds {total}",
    )
    if header.symmetry != "general":
        entries.mirror(-1.0 if header.symmetry == "skew-symmetric" else 1.0)
    rows, cols, vals = entries.trimmed()
    return CooShare(shape=(header.nrows, header.ncols), rows=rows, cols=cols, vals=vals)


@dataclass
class _Entries:
    """A rank's parsed entries: the first ``count`` of ``rows``, ``cols`` and ``vals``.

    The arrays may be longer than ``count`` (they were allocated before the number of entries
    was known) and are grown and trimmed in place (``ndarray.resize``: a ``realloc``, which
    for large arrays remaps pages rather than copying them, so memory stays near the final
    arrays' size). ``lines`` counts the text lines the entries came from."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    count: int
    lines: int = 0

    @classmethod
    def empty(cls, capacity: int) -> _Entries:
        return cls(np.empty(capacity, np.int64), np.empty(capacity, np.int64),
                   np.empty(capacity, np.float64), 0)

    def resize(self, capacity: int) -> None:
        """Make room for ``capacity`` entries (keeping the first ``count``)."""
        for name in ("rows", "cols", "vals"):
            arr = getattr(self, name)
            if arr.flags.owndata and arr.base is None and arr.flags.c_contiguous:
                arr.resize(capacity, refcheck=False)
            else:  # an array of the slow path that does not own its memory
                new = np.empty(capacity, arr.dtype)
                new[: self.count] = arr[: self.count]
                setattr(self, name, new)

    def mirror(self, sign: float) -> None:
        """Append the mirror image of every off-diagonal entry, its value times ``sign``."""
        off = self.count - _count_diagonal(self.rows[: self.count], self.cols[: self.count])
        self.resize(self.count + off)
        self.count = mirror(self.rows, self.cols, self.vals, self.count, sign)

    def trimmed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The arrays cut to ``count`` entries."""
        if self.rows.size != self.count:
            self.resize(self.count)
        return self.rows, self.cols, self.vals


def _count_diagonal(rows: np.ndarray, cols: np.ndarray) -> int:
    """Entries with row == col, counted in bounded pieces (no array of the full length)."""
    step = 1 << 22
    return sum(int(np.count_nonzero(rows[k : k + step] == cols[k : k + step]))
               for k in range(0, rows.size, step))


def _parse_fast(blocks: Iterator[np.ndarray], header: _Header, capacity: int) -> _Entries | None:
    """Parse a rank's lines with the compiled fast parser; None where it gives up.

    Not collective. ``blocks`` yields the rank's text in pieces of whole lines; ``capacity``
    is a first guess of the number of entries (the arrays grow by half when it is short). None
    means some line is not in the forms the fast parser accepts, or a value is not acceptable
    (out of range, not finite, not an integer in an ``integer`` file): the caller reparses the
    rank's text with :func:`_parse_chunk`, which finds and names the line (or accepts it).
    """
    entries = _Entries.empty(capacity)
    hard = np.empty(0, np.uint8)
    pend = np.empty(0, np.int16)
    integer = header.field == "integer"
    newlines = 0
    unterminated = False
    for block in blocks:
        if hard.size < block.size + 1:
            hard = np.empty(block.size + 1, np.uint8)
            pend = np.empty(block.size // 4 + 2, np.int16)
        unterminated = block[-1] != _NEWLINE
        offset = 0
        while True:
            first = entries.count
            status, pos, entries.count, seen, nhard = parse_lines(
                block[offset:], header.nfields, header.nrows, header.ncols, integer,
                entries.rows, entries.cols, entries.vals, entries.vals.view(np.uint64),
                entries.count, hard, pend, EXACT_POW10)
            newlines += seen
            if status == SLOW or not _finish_values(entries, first, pend, integer):
                return None
            if nhard and not _fill_hard(entries.vals[first : entries.count], hard[:nhard],
                                        integer):
                return None
            if status == OK:
                break
            offset += pos
            if entries.count == entries.rows.size:
                entries.resize(max(entries.rows.size * 3 // 2, entries.rows.size + 1024))
    entries.lines = newlines + int(unterminated)
    return entries


def _finish_values(entries: _Entries, first: int, pend: np.ndarray, integer: bool) -> bool:
    """Convert the values :func:`parse_lines` left to Eisel-Lemire (and the rare ones it
    cannot decide, through Python's correctly rounded ``float``); False when a value is
    not acceptable (a fraction in an ``integer`` file)."""
    bits = entries.vals.view(np.uint64)
    left = finish_values(entries.vals, bits, pend, first, entries.count, integer, POW5_HI,
                         POW5_LO)
    if left < 0:
        return False
    for entry, text in undecided(bits, pend[: entries.count - first], first) if left else ():
        value = float(text)
        if not np.isfinite(value) or (integer and value != np.floor(value)):
            return False
        entries.vals[entry] = value
    return True


def _fill_hard(vals: np.ndarray, text: np.ndarray, integer: bool) -> bool:
    """Put the values the fast conversions left (NaN placeholders in ``vals``) from ``text``.

    ``text`` holds their tokens, space-separated, in order; numpy's correctly rounded parser
    converts them. False when they are not acceptable (not finite, or not integers in an
    ``integer`` file): the slow path then names the line."""
    at = np.flatnonzero(np.isnan(vals))
    parsed = _parse_numbers(text.tobytes(), at.size)
    if parsed is None or not np.isfinite(parsed).all():
        return False
    if integer and not (parsed == np.floor(parsed)).all():
        return False
    vals[at] = parsed
    return True


def _read_into(fh: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``fh`` as far as the stream goes; the number of bytes read."""
    done = 0
    while done < len(view):
        got = fh.readinto(view[done:])
        if not got:
            break
        done += got
    return done


def _line_blocks(fh: BinaryIO, limit: int | None, skip: int, take: int | None,
                 size: int | None = None) -> Iterator[np.ndarray]:
    """Yield the text of ``fh`` from its position in pieces of whole lines (uint8 arrays).

    Reads at most ``limit`` bytes (None: to the end of the stream), drops the first ``skip``
    lines and stops after ``take`` lines (None: no limit); the last piece may end without a
    newline. One buffer of ``size`` bytes (default ``_PARSE_BLOCK``) is reused (doubled only
    for a longer line), so a piece is valid only until the next one is asked for. Not
    collective."""
    if take == 0:
        return
    buf = np.empty(_PARSE_BLOCK if size is None else size, np.uint8)
    keep = 0  # bytes of an unfinished line carried at the front of buf
    left = limit
    while True:
        room = buf.size - keep if left is None else min(buf.size - keep, left)
        got = _read_into(fh, memoryview(buf)[keep : keep + room])
        if left is not None:
            left -= got
        filled = keep + got
        done = got < room or left == 0
        begin = 0
        if skip:
            begin, seen = newline_after(buf[:filled], filled, skip)
            if begin < 0:
                skip -= seen
                keep = 0
                if done:
                    return
                continue
            skip = 0
        stop = filled if done else last_newline(buf, filled) + 1
        if stop <= begin:  # no whole line yet: keep what there is, grow a full buffer
            if done:
                return
            keep = filled - begin
            buf[:keep] = buf[begin:filled]
            if keep == buf.size:
                buf = np.concatenate((buf, np.empty(buf.size, np.uint8)))
            continue
        if take is not None:
            cut, seen = newline_after(buf[begin:stop], stop - begin, take)
            if cut >= 0:
                if cut:
                    yield buf[begin : begin + cut]
                return
            take -= seen
        if stop > begin:
            yield buf[begin:stop]
        if done:
            return
        keep = filled - stop
        buf[:keep] = buf[stop:filled]


@contextlib.contextmanager
def _open_stream(path: str):
    """Open ``path`` for binary reading, through gzip when it starts with the gzip magic."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if not gzipped:
            yield raw, False
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            yield gz, True


def _read_failure(path: str, exc: BaseException) -> str:
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
        with _open_stream(path) as (fh, gzipped):
            header, msg = _parse_header(fh, path, gzipped)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(_read_failure(path, exc)) from None
    if msg is not None:
        raise InputError(msg)
    assert header is not None
    return header.nrows, header.ncols, header.nnz


def _parse_header(fh: BinaryIO, path: str, gzipped: bool) -> tuple[_Header | None, str | None]:
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
        _Header(
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


def _line_start_after(fh: BinaryIO, pos: int, lo: int, hi: int) -> int:
    """The first line start at or after ``pos`` within [lo, hi]: the owner of byte ``pos``.

    A line starts at ``lo`` or right after a newline, so this is ``pos`` when the byte before
    it is a newline, otherwise one past the next newline (or ``hi`` when there is none).
    """
    if pos <= lo:
        return lo
    if pos >= hi:
        return hi
    fh.seek(pos - 1)
    at = pos - 1
    while at < hi:
        block = fh.read(min(_SCAN_BLOCK, hi - at))
        if not block:
            break
        found = block.find(b"\n")
        if found >= 0:
            return at + found + 1
        at += len(block)
    return hi


def _byte_share(fh: BinaryIO, data_offset: int, size: int, rank: int, p: int) -> tuple[int, int]:
    """The byte range [start, end) of the data section that rank ``rank`` of ``p`` parses.

    The data section [data_offset, size) is cut at data_offset + k*L/p and each cut is moved
    forward to the next line start, so every line goes to the rank whose raw range holds its
    first byte. Not collective; ``fh`` must be seekable.
    """
    length = size - data_offset
    start = _line_start_after(fh, data_offset + rank * length // p, data_offset, size)
    end = _line_start_after(fh, data_offset + (rank + 1) * length // p, data_offset, size)
    return start, end


def _read_gzip_lines(fh: BinaryIO, lo: int, hi: int | None) -> bytes:
    """From a stream at the start of the data section, the bytes of lines [lo, hi).

    ``hi=None`` means to the end of the stream. Reads in blocks and stops as soon as line
    ``hi`` starts, so only the stream up to this rank's last line is decompressed.
    """
    if hi is not None and hi <= lo:
        return b""
    pieces: list[bytes] = []
    seen = 0  # newlines in the blocks before the current one
    collecting = lo == 0
    while True:
        block = fh.read(_GZ_BLOCK)
        if not block:
            break
        count = block.count(b"\n")
        begin = 0
        if not collecting:
            if seen + count < lo:
                seen += count
                continue
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == _NEWLINE)
            begin = int(newlines[lo - seen - 1]) + 1
            collecting = True
        if hi is not None and seen + count >= hi:
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == _NEWLINE)
            pieces.append(block[begin : int(newlines[hi - seen - 1]) + 1])
            break
        pieces.append(block[begin:])
        seen += count
    return b"".join(pieces)


def _count_lines(chunk: bytes) -> int:
    """Lines in ``chunk``, counting an unterminated last line."""
    if not chunk:
        return 0
    return chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)


def _parse_numbers(data: bytes, expected: int) -> np.ndarray | None:
    """Parse whitespace-separated numbers; None unless exactly ``expected`` parse cleanly."""
    if expected == 0:
        # numpy returns [-1.0] for a whitespace-only string: never ask it.
        return np.zeros(0, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            out = np.fromstring(data, dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None
    return out if out.size == expected else None


def _parse_chunk(
    chunk: bytes, first_line: int, header: _Header, path: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """Parse one rank's data lines into 0-based (rows, cols, vals), or describe a problem.

    ``first_line`` is the 1-based line number of the chunk's first line in the file. Not
    collective. Vectorised: fields are located with numpy on the raw bytes (to check the number
    of fields per line) and converted with numpy's C text parser in one call; only when that
    fails is the chunk bisected to find the first line that does not parse.
    """
    nfields = header.nfields
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
    if not chunk:
        return empty
    buf = np.frombuffer(chunk, dtype=np.uint8)
    newlines = np.flatnonzero(buf == _NEWLINE)
    nlines = newlines.size + (0 if buf[-1] == _NEWLINE else 1)
    line_starts = np.zeros(nlines + 1, dtype=np.int64)
    line_starts[1 : newlines.size + 1] = newlines + 1
    line_starts[nlines] = buf.size

    space = _IS_SPACE[buf]
    field_starts = np.flatnonzero(~space[1:] & space[:-1]) + 1
    if not space[0]:
        field_starts = np.concatenate(([0], field_starts))
    field_line = np.searchsorted(newlines, field_starts)  # line index of each field

    if b"%" in chunk:
        # Comment lines (first field starts with '%'): blank them out, keeping the newlines.
        firsts = np.concatenate(([True], field_line[1:] != field_line[:-1]))
        comment = firsts & (buf[field_starts] == _PERCENT)
        if comment.any():
            is_comment = np.zeros(nlines, dtype=bool)
            is_comment[field_line[comment]] = True
            keep = ~is_comment[field_line]
            field_starts, field_line = field_starts[keep], field_line[keep]
            blank = np.repeat(is_comment, np.diff(line_starts)) & (buf != _NEWLINE)
            editable = buf.copy()
            editable[blank] = ord(" ")
            buf = editable
            chunk = editable.tobytes()
    del space

    per_line = np.bincount(field_line, minlength=nlines)
    entry_line = np.flatnonzero(per_line)  # local line index of every entry

    # A structural problem (wrong field count, unparsable field) at line `broken` is reported
    # only if no line before it has a bad value, so that the first bad line is the one named.
    structural: str | None = None
    broken = nlines
    wrong = np.flatnonzero((per_line != 0) & (per_line != nfields))
    if wrong.size:
        broken = int(wrong[0])
        what = "row col" if nfields == 2 else "row col value"
        structural = (
            f"{path}, line {first_line + broken}: expected {nfields} fields ({what}) for a "
            f"'{header.field}' file, found {per_line[broken]}: "
            f"{_line_text(chunk, line_starts, broken)}"
        )
    nentries = int(np.count_nonzero(per_line[:broken]))
    prefix = chunk if broken == nlines else chunk[: line_starts[broken]]
    numbers = _parse_numbers(prefix, nentries * nfields)
    if numbers is None:
        broken = _first_unparsable_line(chunk, line_starts, per_line[:broken])
        structural = (
            f"{path}, line {first_line + broken}: cannot parse the numbers of "
            f"{_line_text(chunk, line_starts, broken)}"
        )
        nentries = int(np.count_nonzero(per_line[:broken]))
        numbers = _parse_numbers(chunk[: line_starts[broken]], nentries * nfields)
        assert numbers is not None  # the lines before the first unparsable one parse
    table = numbers.reshape(-1, nfields)

    problem = _first_bad_entry(table, header)
    if problem is not None:
        entry, description = problem
        line = int(entry_line[entry])
        return (
            f"{path}, line {first_line + line}: {description}: "
            f"{_line_text(chunk, line_starts, line)}"
        )
    if structural is not None:
        return structural

    rows = table[:, 0].astype(np.int64) - 1
    cols = table[:, 1].astype(np.int64) - 1
    vals = np.ones(rows.size) if nfields == 2 else np.ascontiguousarray(table[:, 2])
    return rows, cols, vals


def _first_bad_entry(table: np.ndarray, header: _Header) -> tuple[int, str] | None:
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


def _first_unparsable_line(chunk: bytes, line_starts: np.ndarray, per_line: np.ndarray) -> int:
    """The first line whose fields numpy cannot parse, found by bisection (lines are independent).

    Invariant: lines [lo, hi) do not parse as a whole. Each step parses half of the range, so
    the total work is about twice the chunk.
    """
    fields_before = np.concatenate(([0], np.cumsum(per_line)))
    lo, hi = 0, per_line.size
    while hi - lo > 1:
        mid = (lo + hi) // 2
        part = chunk[line_starts[lo] : line_starts[mid]]
        if _parse_numbers(part, int(fields_before[mid] - fields_before[lo])) is None:
            hi = mid
        else:
            lo = mid
    return lo


def _line_text(chunk: bytes, line_starts: np.ndarray, line: int) -> str:
    """The text of a line of ``chunk`` for an error message (quoted, shortened)."""
    text = chunk[line_starts[line] : line_starts[line + 1]].strip()
    shown = text[:100].decode("ascii", "replace")
    return repr(shown + ("..." if len(text) > 100 else ""))


def read_csr_block(path: str | os.PathLike[str], dtype=np.float64):
    """A whole Matrix Market file as one :class:`~distmm.core.sparse.CSRBlock` on this process.

    Not collective: it runs :func:`read_matrix_market` on ``MPI.COMM_SELF``, so single-process
    commands (``spgemm``, ``simulate``) refuse malformed files with the same checks and
    messages as the distributed reader (:class:`InputError`)."""
    from distmm.core.sparse import CSRBlock

    share = read_matrix_market(path, MPI.COMM_SELF)
    return CSRBlock.from_coo(share.rows, share.cols, share.vals, share.shape, dtype)


def matrix_market_size(path: str | os.PathLike[str]) -> tuple[int, int, int, str]:
    """(rows, columns, stored entries, symmetry) from a Matrix Market coordinate file's header,
    without reading its entries. Not collective.

    A symmetric or skew-symmetric file stores one triangle: the matrix has up to twice the
    stored entries (less the diagonal's). Raises InputError naming the file when it cannot be
    read or its header is not a coordinate header (plain or gzip-compressed).
    """
    path = os.fspath(path)
    try:
        with _open_stream(path) as (fh, gzipped):
            header, problem = _parse_header(fh, path, gzipped)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InputError(_read_failure(path, exc)) from None
    if header is None:
        raise InputError(str(problem))
    return header.nrows, header.ncols, header.nnz, header.symmetry

