"""Input checks of the primitives: local checks, then one collective agreement.

The primitives' message sizes depend on the number of columns h of edge values and per-node
arrays (one per attention head), so every rank must use the same h; a shape error on one rank
must raise on every rank before any data moves. One small buffer all-reduce (a few integers,
counted under phase "other") settles both; the texts of error messages travel only on the error
path (:func:`distmm.errors.agree`).
"""

from __future__ import annotations

import zlib

import numpy as np

from distmm.errors import InputError, agree


def full_check_due(obj, call: str) -> bool:
    """Whether ``call`` (a primitive's name) gets the full check now, under the object's
    ``checks`` policy: always; on its first successful call ("once"); never ("off"). Not
    collective; the same on every rank."""
    policy = getattr(obj, "checks", "always")
    if policy == "off":
        return False
    return policy == "always" or call not in obj._edges.checked


def agree_width(obj, message: str | None, *widths: int, call: str, variant: str = "") -> None:
    """Raise the same :class:`InputError` on every rank if any rank has a message or the ranks
    disagree on any of ``widths`` (e.g. h for 2-D operands, 0 for 1-D ones). At p > 1 the
    ranks' primitives (``call`` and its ``variant``: a dim, a side) are compared first
    (:func:`same_primitive`).

    Collective over ``obj.comm`` when :func:`full_check_due` says so for ``call``; otherwise
    local (a message raises on this rank only, as the cheap checks of ``checks="once"`` do).
    A closed object raises on every rank.
    """
    if getattr(obj, "closed", False):
        raise InputError(f"this {obj.name} object was closed (close() or the end of its "
                         "with-block freed its communicators); distribute S again")
    due = full_check_due(obj, call)
    if obj.p > 1:  # the widths too where the full check below does not compare them
        same_primitive(obj, f"{call} {variant}".strip(), () if due else widths)
    if not due:
        if message is not None:
            raise InputError(f"{message} (found by the cheap local checks on rank {obj.rank}; "
                             "other ranks may not have seen it)")
        return
    if obj.p > 1:
        w = np.array(widths, dtype=np.int64)
        local = np.concatenate(([int(message is not None)], w, w * w))
        total = np.empty_like(local)
        obj.world.allreduce(local, total, phase="other")
        if total[0]:
            agree(obj.comm, message)
        # Equal widths everywhere iff their variance is zero (exact in integers, same on all
        # ranks).
        k = w.size
        if np.any(obj.p * total[1 + k:] != total[1:1 + k] ** 2):
            # Error path only: name each rank's widths (0 stands for a 1-D operand).
            agree(obj.comm, None, same={
                "the operands' numbers of columns (heads, widths; 0: 1-D)":
                    tuple(int(x) for x in w)})
    elif message is not None:
        raise InputError(message)
    obj._edges.checked.add(call)


def same_primitive(obj, call: str, widths: tuple[int, ...], comm=None) -> None:
    """Compare the primitive and its widths across ranks before any of its collectives: one
    all-gather of three integers over ``obj.world``, the comparison the operations make
    before a call's first collective (:meth:`~distmm.core.comm.CountingComm.compare_call`),
    so that ranks in different primitives, or in a primitive and an operation, raise one
    :class:`InputError` on every rank instead of pairing their collectives up (under every
    ``checks`` policy: the agreement of the full check compares widths only). Not counted (a
    check, not a word of a primitive's model). Collective over ``obj.comm`` (or over
    ``comm``, a :class:`~distmm.core.comm.CountingComm` of some of its ranks); p > 1."""
    st = obj.stats
    saved = st.call_tag, st.call_width, st.call_name
    # a code no operation's tag takes (those are >= 0), the same on every rank
    st.call_tag = -1 - zlib.crc32(call.encode()) % (1 << 30)
    # the widths packed exactly (at most two, each below 2**31), so that different widths
    # never compare equal
    code = 0
    for w in widths:
        code = (code << 31) | (int(w) & 0x7FFFFFFF)
    st.call_width = code
    st.call_name = f"the edge primitive {call}" + (
        f" (heads {', '.join(map(str, widths))})" if widths else "")
    try:
        (obj.world if comm is None else comm).compare_call()
    finally:
        st.call_tag, st.call_width, st.call_name = saved


def columns(X, nrows: int, dtype: np.dtype, what: str, allow: str = "nan", scan: bool = True
            ) -> tuple[str | None, int]:
    """Local check of an operand of ``nrows`` rows, 1-D or (nrows, h), in ``dtype``.

    Returns (message or None, width code: h for 2-D, 0 for 1-D). ``allow`` says which
    non-finite entries are rejected: "nan" rejects NaN only; "softmax" also rejects +inf
    (a score of -inf masks an edge, +inf has no normalised meaning); ``scan=False`` skips
    reading the entries (the cheap checks).
    """
    if not isinstance(X, np.ndarray) or X.ndim not in (1, 2):
        return f"{what} must be a 1-D or 2-D numpy array", -1
    width = X.shape[1] if X.ndim == 2 else 0
    if X.shape[0] != nrows:
        return f"{what} has {X.shape[0]} rows on this rank, expected {nrows}", width
    if X.ndim == 2 and X.shape[1] < 1:
        return f"{what} needs at least one column", width
    if X.dtype != dtype:
        return f"{what} has dtype {X.dtype}, expected {dtype}", width
    if not scan or np.isfinite(X).all():  # one pass in the common case
        return None, width
    if np.isnan(X).any():
        return f"{what} contains NaN", width
    if allow == "softmax" and np.isposinf(X).any():
        return f"{what} contains +inf (use -inf to mask an edge)", width
    return None, width


def block_side(obj, expected: str | None, *blocks: tuple[object, str]) -> str | None:
    """The side of dense blocks: ``expected`` and what typed blocks (those carrying ``side``
    and ``owner``, e.g. :class:`distmm.core.dense.DenseBlock`) say about themselves must agree.

    Not collective: the sides and owners of blocks follow the program, not the rank's data.
    Raises :class:`InputError` for a block of another distributed object or mixed sides;
    returns the side, or None when nothing says it.
    """
    sides = {} if expected is None else {"the call": expected}
    for X, what in blocks:
        owner = getattr(X, "owner", None)
        if owner is not None and owner is not obj:
            raise InputError(f"{what} is a block of another distributed matrix")
        side = getattr(X, "side", None)
        if side is not None:
            sides[what] = side
    if len(set(sides.values())) > 1:
        said = ", ".join(f"{who}: side {side!r}" for who, side in sides.items())
        raise InputError(f"the dense blocks are on different sides ({said})")
    return next(iter(sides.values()), None)
