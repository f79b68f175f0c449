"""What is wrong with one call's operands, and its dense width r from every rank's blocks.

:class:`OperandChecks` finds the problems of a call's dense blocks, S's values and its
``out=`` buffer (each with the message a user reads), runs the full check (every problem,
then one agreement over the ranks) and the cheap local one, and derives r from the ranks'
widths under the family's rule. It keeps no state of its own besides the matrix (weakly).
:class:`~distmm.algorithms.calls.CallChecks`, the matrix's ``_calls``, is these checks with
the ``checks`` policy and what it remembers between calls (:mod:`distmm.algorithms.calls`).
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np
from mpi4py import MPI

from distmm.core.dense import DenseBlock
from distmm.errors import InputError, format_ranks
from distmm.errors import _describe_disagreement as describe_disagreement
from distmm.runtime import watchdog


def check_strategy(S, strategy: str) -> None:
    """Rank-independent check of a FusedMM strategy name for the matrix ``S``'s family."""
    if strategy not in S.strategies:  # the message is built only when it is needed
        raise InputError(f"unknown FusedMM strategy {strategy!r} for {S.name}; it "
                         f"supports only {', '.join(S.strategies)}{S.strategy_note}")


class OperandChecks:
    """The checks of one distributed matrix's call operands, without memory: what is wrong
    with a block, values or ``out=`` on this rank, the full and the cheap check, and r from
    the ranks' widths.

    Reads the matrix's ``comm``, ``p``, ``rank``, ``dtype``, ``stats``, ``check_finite``,
    ``splits_r``, ``values`` and its layout hooks (``_local_rows``, ``local_width``,
    ``r_rule``, ``_col_block``); owns no communicator."""

    def __init__(self, mat) -> None:
        # weakly: the matrix holds this part, and a reference back would be a cycle that
        # keeps the matrix's arrays alive after the user lets it go, until Python's cycle
        # collector runs
        self._mat = weakref.ref(mat)

    @property
    def mat(self):
        """The distributed matrix these are the checks of."""
        return self._mat()

    # ----------------------------------------------------------------- local pieces
    def block_problem(self, side: str, X, what: str, scan: bool) -> str | None:
        """What is wrong with one operand on this rank (None if nothing). Not collective."""
        if not isinstance(X, np.ndarray) or X.ndim != 2:
            return f"{what} must be a 2-D numpy array"
        if isinstance(X, DenseBlock) and X.typed:
            if X.owner is not self.mat and _layout_key(X.owner) != _layout_key(self.mat):
                return (f"{what} is a block of another distributed object whose dense "
                        "distribution differs from this one's (family, grid, shape or "
                        "permutation); move it with that object's gather and this one's "
                        "scatter")
            if X.side != side:
                return (f"{what} is a side-{X.side!r} block ({_side_words(X.side)}), but this "
                        f"operation needs a side-{side!r} block ({_side_words(side)})")
        expect = self.mat._local_rows(side)
        if X.shape[0] != expect:
            return (f"{what} has {X.shape[0]} rows on this rank but the distribution gives it "
                    f"{expect}")
        if X.dtype != self.mat.dtype:
            return (f"{what} has dtype {X.dtype}, but this matrix was distributed as "
                    f"{self.mat.dtype}")
        if not X.flags.c_contiguous:
            return f"{what} must be C-contiguous (np.ascontiguousarray)"
        if scan and not np.isfinite(X).all():
            return f"{what} contains NaN or infinite values"
        return None

    def _values_problem(self, values, scan: bool) -> str | None:
        nnz = self.mat.values.size
        if not isinstance(values, np.ndarray) or values.ndim != 1 or values.size != nnz:
            return f"values must be a 1-D array of this rank's {nnz} stored nonzeros"
        if values.dtype != self.mat.dtype:
            return f"values have dtype {values.dtype}, expected {self.mat.dtype}"
        if scan and not np.isfinite(values).all():
            return "values contain NaN or infinite entries"
        return None

    def check_values(self, values: np.ndarray) -> str | None:
        """Local check of a values array (with the NaN scan when ``check_finite``)."""
        return self._values_problem(values, self.mat.check_finite)

    def _out_problem(self, out, out_side: str | None, operands) -> str | None:
        """What is wrong with an ``out=`` buffer, apart from its width. Not collective."""
        if out is None:
            return None
        if out_side == "values":
            msg = self._values_problem(out, scan=False) or _contiguity_problem(out)
            msg = msg and "out= " + msg
        else:
            msg = self.block_problem(out_side, out, "out=", scan=False)
        if msg is None and not out.flags.writeable:
            msg = "out= is read-only (its flags.writeable is False); pass a writeable buffer"
        if msg is None and any(isinstance(x, np.ndarray) and np.may_share_memory(out, x)
                               for x in operands):
            msg = "out= shares memory with an input of the same call; pass a separate buffer"
        return msg

    def _local(self, dense, values, out, out_side, scan: bool):
        """(message, typed r or None, local width or -1, out= width or None) on this rank."""
        msg, typed, widths = None, set(), set()
        for side, X, what in dense:
            msg = msg or self.block_problem(side, X, what, scan)
            if isinstance(X, np.ndarray) and X.ndim == 2:
                widths.add(X.shape[1])
                if isinstance(X, DenseBlock) and X.typed:
                    typed.add(X.r)
        if isinstance(out, DenseBlock) and out.typed:
            typed.add(out.r)
        if len(widths) > 1:
            msg = msg or f"the dense operands have different widths {sorted(widths)}"
        if len(typed) > 1:
            msg = msg or (f"the dense operands (and out=) are blocks of different widths r "
                          f"{sorted(typed)}")
        if values is not None:  # the kernels take a call's values as they are
            msg = msg or self._values_problem(values, scan) or _contiguity_problem(values)
        operands = [x for _, x, _ in dense] + ([values] if values is not None else [])
        msg = msg or self._out_problem(out, out_side, operands)
        width = widths.pop() if len(widths) == 1 else -1
        out_width = None  # no dense out= buffer on this rank
        if out is not None and out_side not in (None, "values"):
            out_width = out.shape[1] if isinstance(out, np.ndarray) and out.ndim == 2 else -1
        return msg, (typed.pop() if len(typed) == 1 else None), width, out_width

    # ----------------------------------------------------------------- the three policies
    def full_check(self, dense, values, out, out_side, call: dict | None = None) -> int:
        """Every check, then one agreement over ``comm`` (collective) on the problems found,
        the widths and ``call`` (what must be the same call on every rank: operation,
        strategy, values= and out= given or not; None for :meth:`check_inputs`)."""
        msg, typed_r, width, out_width = self._local(dense, values, out, out_side,
                                                     scan=self.mat.check_finite)
        if call is not None and call["strategy"] is not None:
            try:  # an unknown strategy is agreed like any other problem
                check_strategy(self.mat, call["strategy"])
            except InputError as err:
                msg = str(err)
        with watchdog.waiting("agree"):
            gathered = self.mat.comm.allgather((msg, typed_r, width, out_width, call))
        p = self.mat.p
        if p > 1:
            self.mat.stats.add("other", p - 1, p - 1, p - 1, p - 1)
        differ = describe_disagreement([g[4] for g in gathered])
        if differ is not None:  # ranks in different calls: nothing else is comparable
            raise InputError("the ranks made different calls on one distributed matrix "
                             "(every rank must make the same call, in the same order): "
                             + differ.split(": ", 1)[1])
        bad = [(k, g[0]) for k, g in enumerate(gathered) if g[0] is not None]
        if not bad:
            r, problem = self._derive_r([(g[1], g[2]) for g in gathered])
            if problem is None and out_side not in (None, "values"):
                problem = self._width_problem(r, [g[3] for g in gathered], "out=")
            if problem is not None:
                bad = [(None, problem)]
        if bad:
            k, m = bad[0]
            suffix = f" (reported by rank {k})" if self.mat.p > 1 and k is not None else ""
            raise InputError(m + suffix)
        return r

    def cheap_check(self, dense, values, out, out_side) -> int:
        """Local checks only; an all-gather of one integer when r is not known locally."""
        msg, typed_r, width, out_width = self._local(dense, values, out, out_side, scan=False)
        if msg is None:
            if typed_r is not None:
                r = typed_r
            elif not self.mat.splits_r:
                r = width
            else:
                r = self._agree_width(width)
            msg = self.r_problem(r) or self._width_problem(r, {self.mat.rank: width}, "dense block")
            if msg is None and out_side not in (None, "values"):
                msg = self._width_problem(r, {self.mat.rank: out_width}, "out=")
        if msg is not None:
            raise InputError(msg + " (found by the cheap local checks of checks='once' on "
                             f"rank {self.mat.rank}; other ranks may not have seen it)")
        return r

    def _agree_width(self, width: int) -> int:
        """r from every rank's local width: an all-gather of one integer (collective)."""
        mine = np.array([width], dtype=np.int64)
        every = np.empty(self.mat.p, dtype=np.int64)
        with self.mat.stats.timer("other"):
            self.mat.comm.Allgather([mine, MPI.INT64_T], [every, MPI.INT64_T])
        p = self.mat.p
        if p > 1:
            self.mat.stats.add("other", p - 1, p - 1, p - 1, p - 1)
        r, problem = self._derive_r([(None, int(w)) for w in every])
        if problem is not None:
            raise InputError(problem)
        return r

    # ----------------------------------------------------------------- r from widths
    def _derive_r(self, info: list[tuple[int | None, int]]) -> tuple[int, str | None]:
        """The call's r from every rank's (typed r or None, local width); rank-independent.

        Returns (r, None) or (-1, the problem)."""
        typed = sorted({t for t, _ in info if t is not None})
        if len(typed) > 1:
            return -1, f"dense blocks disagree on r across ranks: {typed}"
        if typed:
            r = typed[0]
        elif not self.mat.splits_r:
            widths = sorted({w for _, w in info})
            if len(widths) > 1:
                ranks = {w: [k for k, (_, v) in enumerate(info) if v == w] for w in widths}
                held = "; ".join(f"{w} on {format_ranks(ranks[w])}" for w in widths)
                return -1, f"dense blocks disagree on r across ranks: width {held}"
            r = widths[0]
        else:
            # Each column block of r is held by several ranks: take the first holder's width.
            first: dict[int, int] = {}
            for k, (_, w) in enumerate(info):
                first.setdefault(self.mat._col_block(k), w)
            r = sum(first.values()) if min(first.values()) >= 0 else -1
        problem = self.r_problem(r) or self._width_problem(
            r, {k: w for k, (_, w) in enumerate(info)}, "dense block")
        return r, problem

    def r_problem(self, r: int) -> str | None:
        if r < 1:
            return f"dense width r={r} is too small: dense operands need r >= 1 columns"
        low, why = self.mat.r_rule()
        if r < low:
            return (f"dense width r={r} is too small for the {self.mat.name} algorithm: it needs "
                    f"r >= {low} ({why})")
        return None

    def _width_problem(self, r: int, widths, what: str) -> str | None:
        """Whether each rank's local width (a dict or list by rank) is its share of r."""
        items = widths.items() if isinstance(widths, dict) else enumerate(widths)
        for k, w in items:
            if w is None:
                continue
            expect = self.mat.local_width(r, k)
            if w != expect:
                return (f"{what} on rank {k} has {w} columns, but its share of the r={r} "
                        f"columns is {expect} (dense blocks disagree on r across ranks, or "
                        "the block is not in this distribution)")
        return None


def _contiguity_problem(values: np.ndarray) -> str | None:
    """The problem with a call's values array (or SDDMM result) that is not C-contiguous."""
    if values.flags.c_contiguous:
        return None
    return "values must be C-contiguous (np.ascontiguousarray)"


def _layout_key(obj) -> tuple:
    """What a dense block's placement depends on: two objects with equal keys lay out every
    width-r block identically, so their blocks are interchangeable (cached on the object)."""
    key = obj.__dict__.get("_layout_key_cache")
    if key is None:
        digest = hashlib.blake2b(digest_size=16)
        for perm in (obj.row_perm, obj.col_perm):
            digest.update(np.ascontiguousarray(perm, dtype=np.int64).tobytes())
        grid = getattr(obj, "grid", None)
        key = (type(obj).__name__, obj.p, obj.rank, obj.shape, getattr(obj, "c", None),
               getattr(grid, "order", None), digest.hexdigest())
        obj.__dict__["_layout_key_cache"] = key
    return key


def _side_words(side: str) -> str:
    return "rows indexed like S's rows: A" if side == "a" else "rows indexed like S's columns: B"


__all__ = ["OperandChecks", "check_strategy"]
