"""Input checks of the primitives: local checks, then one collective agreement.

The primitives' message sizes depend on the number of columns h of edge values and per-node
arrays (one per attention head), so every rank must use the same h; a shape error on one rank
must raise on every rank before any data moves. One small buffer all-reduce (a few integers,
counted under phase "other") settles both; the texts of error messages travel only on the error
path (:func:`distmm.errors.agree`).
"""

from __future__ import annotations

import numpy as np

from distmm.errors import InputError, agree


def agree_width(obj, message: str | None, *widths: int) -> None:
    """Raise the same :class:`InputError` on every rank if any rank has a message or the ranks
    disagree on any of ``widths`` (e.g. h for 2-D operands, 0 for 1-D ones).

    Collective over ``obj.comm``.
    """
    if obj.p == 1:
        if message is not None:
            raise InputError(message)
        return
    w = np.array(widths, dtype=np.int64)
    local = np.concatenate(([int(message is not None)], w, w * w))
    total = np.empty_like(local)
    obj.world.allreduce(local, total, phase="other")
    if total[0]:
        agree(obj.comm, message)
    # Equal widths everywhere iff their variance is zero (exact in integers, same on all ranks).
    k = w.size
    if np.any(obj.p * total[1 + k:] != total[1:1 + k] ** 2):
        raise InputError("the ranks passed operands with different numbers of columns (heads "
                         "or widths); every rank must pass the same, and all 1-D or all 2-D")


def columns(X, nrows: int, dtype: np.dtype, what: str, allow: str = "nan"
            ) -> tuple[str | None, int]:
    """Local check of an operand of ``nrows`` rows, 1-D or (nrows, h), in ``dtype``.

    Returns (message or None, width code: h for 2-D, 0 for 1-D). ``allow`` says which
    non-finite entries are rejected: "nan" rejects NaN only; "softmax" also rejects +inf
    (a score of -inf masks an edge, +inf has no normalised meaning); "none" checks nothing.
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
    if allow != "none" and np.isnan(X).any():
        return f"{what} contains NaN", width
    if allow == "softmax" and np.isposinf(X).any():
        return f"{what} contains +inf (use -inf to mask an edge)", width
    return None, width
