"""The fast path of the Matrix Market reader: one pass of compiled code over the raw bytes.

:func:`parse_lines` walks a block of whole data lines once and writes each entry straight into
preallocated output arrays (0-based int64 row and column, float64 value), with no per-line
Python and no intermediate arrays. It accepts only the common, unambiguous forms: indices
written as plain digits, values as ``[+-]digits[.digits][(e|E)[+-]digits]``, fields separated
by spaces, tabs, ``\\v``, ``\\f`` or ``\\r``, blank lines and ``%`` comment lines. Anything else
(a sign or a decimal point in an index, ``inf``/``nan``, a wrong number of fields, an index out
of range, a fraction in an ``integer`` file, stray bytes) makes it stop and report
:data:`SLOW`: the caller then reads the rank's lines again with the fully checked numpy parser
of :mod:`distmm.io`, which accepts exactly what it always accepted and names the file and line
of the first problem. So the fast path changes the speed, never what is accepted or refused.

Values are converted exactly as ``strtod`` does (correctly rounded). Mantissas of at most 15
significant digits with small exponents take Clinger's fast path (one exact multiplication or
division by a power of ten); up to 19 digits take the Eisel-Lemire algorithm (Lemire, "Number
parsing at a gigabyte per second", 2021: a 64 x 128-bit product with a truncated power of
five, which decides the rounding or says it cannot). What neither decides (more than 19
significant digits, exponents outside 10^-342..10^308, the rare undecided halfway case) is
copied into a side buffer and parsed afterwards by numpy in one call per block (``hard``
values, marked by a NaN placeholder meanwhile).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["EXACT_POW10", "FULL", "OK", "POW5_HI", "POW5_LO", "SLOW", "finish_values",
           "last_newline", "mirror", "newline_after", "parse_lines", "undecided"]

OK, FULL, SLOW = 0, 1, 2  # parse_lines statuses: block done; output arrays full; use slow path

_MIN_EXP10, _MAX_EXP10 = -342, 308


def _pow5_table() -> tuple[np.ndarray, np.ndarray]:
    """128-bit mantissas of 5^q (= those of 10^q), q in -342..308, as (high, low) words.

    Positive powers are truncated, negative ones rounded up, as the Eisel-Lemire algorithm
    requires (the generator script of Lemire's fast_float)."""
    hi = np.zeros(_MAX_EXP10 - _MIN_EXP10 + 1, dtype=np.uint64)
    lo = np.zeros_like(hi)
    for k, q in enumerate(range(_MIN_EXP10, _MAX_EXP10 + 1)):
        if q >= 0:
            power5 = 5**q
            bits = power5.bit_length()
            c = power5 << (128 - bits) if bits <= 128 else power5 >> (bits - 128)
        else:
            power5 = 5**-q
            z = power5.bit_length()
            b = z + 127 if q >= -27 else 2 * z + 128
            c = (1 << b) // power5 + 1
            c >>= max(0, c.bit_length() - 128)  # halved until under 2^128, in one shift
        hi[k], lo[k] = c >> 64, c & ((1 << 64) - 1)
    return hi, lo


POW5_HI, POW5_LO = _pow5_table()
EXACT_POW10 = np.array([10.0**k for k in range(23)])  # exactly representable

_U32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_SIGN = np.uint64(1 << 63)


@njit(cache=True, inline="always")
def _mul64(a, b):
    """The 128-bit product of two uint64 values, as (high, low) uint64 words."""
    a_lo, a_hi = a & _U32, a >> _S32
    b_lo, b_hi = b & _U32, b >> _S32
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (p0 >> _S32) + (p1 & _U32) + (p2 & _U32)
    return p3 + (p1 >> _S32) + (p2 >> _S32) + (mid >> _S32), (p0 & _U32) | (mid << _S32)


@njit(cache=True)
def _eisel_lemire(man, exp10, pow_hi, pow_lo):
    """IEEE bits of man * 10**exp10 (man > 0, uint64), correctly rounded; -1 when undecided.

    A transcription of Go's strconv.eiselLemire64 (BSD licence) with a signed binary exponent.
    """
    if exp10 < _MIN_EXP10 or exp10 > _MAX_EXP10:
        return -1
    clz = 0
    probe = man
    while probe < np.uint64(1 << 63):
        probe = probe << np.uint64(1)
        clz += 1
    man = probe
    ret_exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz
    k = exp10 - _MIN_EXP10
    x_hi, x_lo = _mul64(man, pow_hi[k])
    if (x_hi & np.uint64(0x1FF)) == np.uint64(0x1FF) and x_lo + man < man:
        y_hi, y_lo = _mul64(man, pow_lo[k])
        merged_hi, merged_lo = x_hi, x_lo + y_hi
        if merged_lo < x_lo:
            merged_hi += np.uint64(1)
        if ((merged_hi & np.uint64(0x1FF)) == np.uint64(0x1FF)
                and merged_lo + np.uint64(1) == np.uint64(0) and y_lo + man < man):
            return -1
        x_hi, x_lo = merged_hi, merged_lo
    msb = x_hi >> np.uint64(63)
    mantissa = x_hi >> (msb + np.uint64(9))
    ret_exp2 -= 1 ^ np.int64(msb)
    if (x_lo == np.uint64(0) and (x_hi & np.uint64(0x1FF)) == np.uint64(0)
            and (mantissa & np.uint64(3)) == np.uint64(1)):
        return -1
    mantissa += mantissa & np.uint64(1)
    mantissa >>= np.uint64(1)
    if mantissa >> np.uint64(53) > np.uint64(0):
        mantissa >>= np.uint64(1)
        ret_exp2 += 1
    if ret_exp2 <= 0 or ret_exp2 >= 0x7FF:
        return -1
    bits = (np.uint64(ret_exp2) << np.uint64(52)) | (mantissa & np.uint64(0x000FFFFFFFFFFFFF))
    return np.int64(bits)


@njit(cache=True, inline="always")
def _is_blank(c):
    """Space, \\t, \\v, \\f or \\r: the separators within a line."""
    return c == 32 or c == 9 or c == 11 or c == 12 or c == 13


@njit(cache=True, inline="always")
def _token_end(buf, i, end):
    """Whether position ``i`` ends a token (a separator, a newline or the end of the block)."""
    return i >= end or buf[i] == 10 or _is_blank(buf[i])


@njit(cache=True, inline="always")
def _skip_blanks(buf, i, end):
    while i < end and _is_blank(buf[i]):
        i += 1
    return i


@njit(cache=True, inline="always")
def _parse_index(buf, i, end):
    """A plain-digit index starting at ``i``: (value, end position), value -1 if not one."""
    value = 0
    start = i
    while i < end and 48 <= buf[i] <= 57 and i - start < 18:
        value = value * 10 + (buf[i] - 48)
        i += 1
    if i == start or not _token_end(buf, i, end):
        return -1, i
    return value, i


@njit(cache=True, inline="always")
def _parse_value(buf, i, end, exact, vals, bits, n):
    """Convert the decimal value at ``i`` into ``vals[n]``: (end position, status).

    Status 0: converted; 1: a valid decimal the fast conversions cannot decide (hard; nothing
    written); 2: not a plain decimal (left to the slow path); 4 and above: the mantissa is in
    ``bits[n]`` and the status encodes the decimal exponent and sign for
    :func:`finish_values` (Eisel-Lemire runs there, in a loop of its own: called from this
    loop, it slows every line, even those that never need it). ``bits`` is ``vals`` viewed as
    uint64."""
    neg = False
    if i < end and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    man = np.uint64(0)
    digits = 0  # significant digits taken into man
    dropped = False  # a nonzero digit beyond the 19th
    exp10 = 0
    seen = 0  # digits of the mantissa, leading zeros included
    while i < end and 48 <= buf[i] <= 57:
        d = buf[i] - 48
        seen += 1
        if digits < 19:
            if digits > 0 or d != 0:
                man = man * np.uint64(10) + np.uint64(d)
                digits += 1
        else:
            exp10 += 1
            dropped = dropped or d != 0
        i += 1
    if i < end and buf[i] == 46:
        i += 1
        while i < end and 48 <= buf[i] <= 57:
            d = buf[i] - 48
            seen += 1
            if digits < 19:
                if digits > 0 or d != 0:
                    man = man * np.uint64(10) + np.uint64(d)
                    digits += 1
                exp10 -= 1
            else:
                dropped = dropped or d != 0
            i += 1
    if seen == 0:
        return i, 2
    if i < end and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        start = i
        e = 0
        while i < end and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        if i == start:
            return i, 2
        exp10 += -e if eneg else e
    if not _token_end(buf, i, end):
        return i, 2
    if man == np.uint64(0):
        vals[n] = -0.0 if neg else 0.0  # zeros beyond the 19th digit change nothing
        return i, 0
    if dropped:
        return i, 1
    if man <= np.uint64(1 << 53) and -22 <= exp10 <= 22:
        v = np.float64(man)
        v = v * exact[exp10] if exp10 >= 0 else v / exact[-exp10]
        vals[n] = -v if neg else v
        return i, 0
    if exp10 < _MIN_EXP10 or exp10 > _MAX_EXP10:
        return i, 1
    bits[n] = man  # converted later by finish_values (the code, with the sign, is the status)
    return i, 4 + 2 * (exp10 - _MIN_EXP10) + (1 if neg else 0)


@njit(cache=True, nogil=True)
def parse_lines(buf, nfields, nrows, ncols, integer, rows, cols, vals, bits, n, hard, pend,
                exact):
    """Parse the data lines in ``buf`` (uint8) into ``rows``, ``cols`` and ``vals`` from entry n.

    ``bits`` is ``vals`` viewed as uint64. ``pend[k]`` describes entry ``n0 + k`` (``n0`` the
    n given): -1, or the exponent and sign of a value whose mantissa waits in ``bits`` for
    :func:`finish_values`, which the caller must run before anything else reads ``vals``.
    Returns ``(status, pos, n, newlines, hard_bytes)``: status OK (all of ``buf`` parsed),
    FULL (the output arrays or ``pend`` are full; ``pos`` is the start of the first line not
    parsed) or SLOW (a line the fast path does not accept starts
    at ``pos``); ``n`` the entries written so far; ``newlines`` those consumed; ``hard_bytes``
    the bytes written to ``hard``: the text of each value the fast conversions could not
    decide, each followed by a space, in entry order (their entries hold NaN).
    """
    end = buf.size
    cap = min(rows.size, n + pend.size)
    first = n
    i = 0
    newlines = 0
    h = 0
    while i < end:
        line = i
        i = _skip_blanks(buf, i, end)
        if i >= end:
            break
        c = buf[i]
        if c == 10:
            newlines += 1
            i += 1
            continue
        if c == 37:  # '%': a comment line
            while i < end and buf[i] != 10:
                i += 1
            if i < end:
                newlines += 1
                i += 1
            continue
        if n >= cap:
            return FULL, line, n, newlines, h
        r, i = _parse_index(buf, i, end)
        if r < 1 or r > nrows:
            return SLOW, line, n, newlines, h
        i = _skip_blanks(buf, i, end)
        col, i = _parse_index(buf, i, end)
        if col < 1 or col > ncols:
            return SLOW, line, n, newlines, h
        if nfields == 3:
            i = _skip_blanks(buf, i, end)
            start = i
            i, status = _parse_value(buf, i, end, exact, vals, bits, n)
            pend[n - first] = status - 4 if status >= 4 else -1
            if status == 2:
                return SLOW, line, n, newlines, h
            if status == 1:
                for k in range(start, i):
                    hard[h] = buf[k]
                    h += 1
                hard[h] = 32
                h += 1
                vals[n] = np.nan
            elif status == 0 and integer and vals[n] != np.floor(vals[n]):
                return SLOW, line, n, newlines, h
        else:
            vals[n] = 1.0
            pend[n - first] = -1
        i = _skip_blanks(buf, i, end)
        if i < end:
            if buf[i] != 10:
                return SLOW, line, n, newlines, h
            newlines += 1
            i += 1
        rows[n] = r - 1
        cols[n] = col - 1
        n += 1
    return OK, end, n, newlines, h


@njit(cache=True, nogil=True)
def finish_values(vals, bits, pend, first, n, integer, pow_hi, pow_lo):
    """Convert the values :func:`parse_lines` left in ``bits[first:n]`` (see ``pend``).

    Returns the number of values Eisel-Lemire could not decide (left as they were, for
    :func:`undecided`), or -1 when a converted value of an ``integer`` file is not an
    integer (the slow path then names the line)."""
    left = 0
    for k in range(n - first):
        code = pend[k]
        if code < 0:
            continue
        exp10 = code // 2 + _MIN_EXP10
        found = _eisel_lemire(bits[first + k], exp10, pow_hi, pow_lo)
        if found < 0:
            left += 1
            continue
        bits[first + k] = np.uint64(found) | _SIGN if code % 2 else np.uint64(found)
        pend[k] = -1
        if integer and vals[first + k] != np.floor(vals[first + k]):
            return -1
    return left


def undecided(bits: np.ndarray, pend: np.ndarray, first: int) -> list[tuple[int, str]]:
    """The values :func:`finish_values` left, as (entry, exact decimal text) pairs.

    ``pend`` is the part of the array that describes entries ``first`` to ``n``.
    The mantissa and exponent are the token's exact decimal value, so ``float`` of the text
    is the correctly rounded value of the token (these are rare halfway cases)."""
    out = []
    for k in np.flatnonzero(pend >= 0).tolist():
        code = int(pend[k])
        sign = "-" if code % 2 else ""
        out.append((first + k, f"{sign}{int(bits[first + k])}e{code // 2 + _MIN_EXP10}"))
    return out


@njit(cache=True, nogil=True)
def last_newline(buf, end):
    """The position of the last newline in ``buf[:end]``, or -1."""
    i = end - 1
    while i >= 0 and buf[i] != 10:
        i -= 1
    return i


@njit(cache=True, nogil=True)
def newline_after(buf, end, count):
    """(position after the ``count``-th newline of ``buf[:end]`` or -1, newlines seen)."""
    seen = 0
    for i in range(end):
        if buf[i] == 10:
            seen += 1
            if seen == count:
                return i + 1, seen
    return -1, seen


@njit(cache=True, nogil=True)
def mirror(rows, cols, vals, n, sign):
    """Append the mirror image (j, i, sign * v) of each off-diagonal entry among the first n.

    The arrays must have room for them; returns the new number of entries."""
    m = n
    for k in range(n):
        if rows[k] != cols[k]:
            rows[m] = cols[k]
            cols[m] = rows[k]
            vals[m] = sign * vals[k]
            m += 1
    return m
