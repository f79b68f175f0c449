"""Parallel Matrix Market reading.

:func:`read_matrix_market` is collective and returns each rank's :class:`~distmm.core.coo.CooShare`;
every problem it finds in the file is raised as the same :class:`~distmm.errors.InputError` on
every rank, naming the file and (where there is one) the line. Each rank reads its own byte
share of the data section (line-aligned; a gzip file is streamed and cut by lines) and parses
it with the compiled parser (:mod:`distmm.io.mtx_parse`), numpy's text parser where that one
cannot decide. What the format is, the header and the checks of an entry, is
:mod:`distmm.io.mtx_format`; its header-only readers :func:`mtx_header` and
:func:`matrix_market_size` (sizes compared before any data is read) are imported here too.
:func:`read_csr_block` reads a whole file on one process.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.errors import agree, require
from distmm.io.mtx_format import (
    Header,
    first_bad_entry,
    matrix_market_size,
    mtx_header,
    open_stream,
    read_failure,
)
from distmm.io.mtx_format import (
    parse_header as _parse_header,
)
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


__all__ = ["matrix_market_size", "mtx_header", "read_csr_block", "read_matrix_market"]


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

    header: Header | None = None
    msg: str | None = None
    entries: _Entries | None = None
    chunk: bytes | None = None  # the rank's text, read only when the fast parser gives up
    nlines = 0
    with contextlib.ExitStack() as stack:
        try:
            fh, gzipped = stack.enter_context(open_stream(path))
            header, msg = _parse_header(fh, path, gzipped)
        except (OSError, EOFError, zlib.error) as exc:
            msg = read_failure(path, exc)
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
            msg = read_failure(path, exc)
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


def _parse_fast(blocks: Iterator[np.ndarray], header: Header, capacity: int) -> _Entries | None:
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
    chunk: bytes, first_line: int, header: Header, path: str
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

    problem = first_bad_entry(table, header)
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
