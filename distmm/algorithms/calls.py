"""Checking one call's operands, and learning its dense width r, under a ``checks`` policy.

Every public operation of a distributed object starts with :meth:`CallChecks.begin`, which
validates the dense blocks, S's values and the ``out=`` buffer, and returns the call's dense
width r. How much it does depends on the object's ``checks`` (a constructor argument):

``"always"``
    Full validation on every call: type, side, owner, rows, dtype, contiguity, width, NaN/inf
    scan of every operand (when ``check_finite``), and one cross-rank agreement (a small
    pickled allgather), so a problem found on any rank raises the same InputError on every rank
    before the operation communicates.
``"once"`` (the default)
    The full validation on the first call of each kind (``sddmm``, ``spmm_a``, ... and
    ``gather``), and after it only cheap local checks: type, side and owner of typed blocks,
    rows, dtype, contiguity, width and ``out=`` (no NaN scan, no collective). What is lost: a
    NaN or infinity that appears in a later iteration is not diagnosed (it propagates into the
    results); and a problem that the cheap checks find on some ranks only raises there, while
    the other ranks go on into the operation's collectives and wait (a hang, which the MPI
    test harness or a job time limit ends). Ranks that pass blocks of different r after the
    first call are not caught either. Typed blocks (:class:`~distmm.core.dense.DenseBlock`) make
    the cheap checks much stronger: side, owner and the global r are known locally, so a block
    of the wrong side or object is refused on every rank that holds one. A call that passes the
    very same operand objects as the last call of its kind skips even the cheap checks where r
    is known locally (:meth:`CallChecks.recall`). A kind is the operation, and in a family
    that keeps whole rows also the width (``_call_key``: a loop over layers of several
    widths is remembered per width); the full validation runs on the first call of each
    operation whatever its width.
``"off"``
    No checks at all after construction (the dense width is still read from the blocks).

The dense width r. A typed block carries it. A plain ndarray carries only its local width,
which is r itself in the families that keep whole rows (1.5D dense shifting) but only a share
of r in the families that split the r columns across ranks; there, r is learnt by an all-gather
of one integer per rank (a buffer call, counted under phase "other") unless a typed operand
gives it, or, with ``checks="off"``, the last r used.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np
from mpi4py import MPI

from distmm.core.dense import SIDES, DenseBlock
from distmm.core.operations import OPS
from distmm.errors import InputError, format_ranks
from distmm.errors import _describe_disagreement as describe_disagreement
from distmm.runtime import watchdog

CHECKS = ("always", "once", "off")
# Call keys (``_call_key``: one per operation and width) whose operands an object remembers at
# most (the newest).
MEMO_KEYS = 32


# Point-to-point tags: a call's messages carry CountingComm's own tags plus TAG_STRIDE times
# the call's code (operation and FusedMM strategy), so that no message of one call can match
# a receive of another. Under MPI's guaranteed tag bound, 32767.
TAG_STRIDE = 32
_CALL_OPS = (*OPS, "gather")
_STRATEGY_CODES = {None: 0, "none": 1, "reuse": 2, "fusion": 3}


def call_tag(op: str, strategy: str | None = None) -> int:
    """The tag offset of a call's point-to-point messages (see :data:`TAG_STRIDE`); the same
    on every rank for the same call, different for different calls. Not collective."""
    code = 4 * (_CALL_OPS.index(op) + 1) + _STRATEGY_CODES.get(strategy, 3)
    return TAG_STRIDE * code


def call_name(op: str, strategy: str | None = None) -> str:
    """A call's name in messages (``"fusedmm_a (strategy reuse)"``). Not collective."""
    return op if strategy is None else f"{op} (strategy {strategy})"


def key_op(kind: str | tuple) -> str:
    """The operation of a call key (``"spmm_a"`` or ``("spmm_a", width)``: ``_call_key``).
    Not collective."""
    return kind if kind.__class__ is str else kind[0]


def unchanged(X: np.ndarray, held: tuple | None) -> bool:
    """Whether ``X`` is a remembered operand, unchanged. Not collective.

    Parameters
    ----------
    X : ndarray or DenseBlock
        An operand of this call.
    held : tuple or None
        What :meth:`CallChecks._remember` kept of the operand in X's place: (weak reference,
        shape, strides, dtype, layout token or None); None if there was none.

    Returns
    -------
    bool
        True if X is that very object and, for a typed block, still has that layout token
        (nothing assigned to it since, :meth:`DenseBlock.layout_token`), or, for a plain
        array, the same shape, strides and dtype.
    """
    if held is None or held[0]() is not X:
        return False
    return same_layout(X, held)


def same_layout(X: np.ndarray, held: tuple) -> bool:
    """Whether ``X`` is laid out as when ``held`` (see :func:`unchanged`) was taken of it: the
    same layout token for a typed block, else the same shape, strides and dtype. Not
    collective."""
    if held[4] is not None:
        return X._layout is held[4]
    return (X.shape == held[1] and X.strides == held[2]
            and (X.dtype is held[3] or X.dtype == held[3]))


def check_strategy(S, strategy: str) -> None:
    """Rank-independent check of a FusedMM strategy name for the matrix ``S``'s family."""
    if strategy not in S.strategies:  # the message is built only when it is needed
        raise InputError(f"unknown FusedMM strategy {strategy!r} for {S.name}; it "
                         f"supports only {', '.join(S.strategies)}{S.strategy_note}")


class CallChecks:
    """The per-call checks of one distributed matrix (its ``_calls`` part), and what they
    remember between calls: which operations had their full check (``checked``), the
    widths that passed the family's rule (``widths_passed``), the operands of the last
    cheap-checked call of each kind (``memo``) and the last width (``last_r``).

    Reads the matrix's ``comm``, ``p``, ``rank``, ``dtype``, ``stats``, ``checks``,
    ``check_finite``, ``splits_r``, ``values`` and its layout hooks (``_local_rows``,
    ``local_width``, ``r_rule``, ``_col_block``); owns no communicator. The matrix's
    ``_begin`` and ``check_inputs`` delegate here."""

    def __init__(self, mat) -> None:
        # weakly: the matrix holds this part, and a reference back would be a cycle that
        # keeps the matrix's arrays alive after the user lets it go, until Python's cycle
        # collector runs
        self._mat = weakref.ref(mat)
        # operations whose first call had the full checks
        self.checked: set[str] = set()
        # the dense widths r that passed the rank-independent rule (r_rule)
        self.widths_passed: set[int] = set()
        # kind -> (r, the operands of the last cheap-checked call, weakly)
        self.memo: dict = {}
        # operation -> its last cheap-checked call: (kind, r, the operands as in memo,
        # strategy, point-to-point tag, name), what a repeat of it needs (repeat)
        self.last: dict = {}
        self.last_r: int | None = None

    def forget(self) -> None:
        """Drop what the checks remember of earlier calls (the matrix is closing). Not
        collective."""
        self.memo.clear()
        self.last.clear()

    @property
    def mat(self):
        """The distributed matrix these are the checks of."""
        return self._mat()

    # ----------------------------------------------------------------- entry point
    def begin(self, kind: str, dense: tuple[tuple[str, np.ndarray, str], ...],
               values: np.ndarray | None = None, out: np.ndarray | None = None,
               out_side: str | None = None, strategy: str | None = None) -> int:
        """Validate one call's operands per ``self.mat.checks`` and return its dense width r.

        ``dense`` lists (side, block, name); ``out_side`` is the side of a dense ``out=``
        buffer or ``"values"`` for an SDDMM result; ``strategy`` a FusedMM call's strategy.
        Collective unless the policy allows a local check (see the module docstring): a full
        check also agrees on the call itself (operation, strategy, values and out= given or
        not), so ranks in different calls raise one InputError instead of pairing up. The
        point-to-point messages of the call carry its tag (:func:`call_tag`), so that ranks
        in different calls after the checks wait (where a watchdog names the phase) rather
        than receive each other's blocks."""
        mat = self._mat()  # (read once: this runs before every plain call)
        mat._require_open()
        mat._kind = kind
        state = mat.kernel.plan_state()
        if state != mat._plan_state:  # e.g. numba.set_num_threads: plans cut rows per thread
            mat._kernels.forget()
            mat._plan_state = state
        repeat = False
        if mat.checks == "off":
            if strategy is not None:
                check_strategy(mat, strategy)
            r = self._unchecked_r(dense)
        elif mat.checks == "always" or key_op(kind) not in self.checked:
            # full checks on the first call of each operation, whatever its width: they are
            # collective, and every rank must decide alike (a key's width is rank-local)
            call = {"operation": key_op(kind), "strategy": strategy,
                    "values=": "given" if values is not None else "not given",
                    "out=": "given" if out is not None else "not given"}
            r = self.full_check(dense, values, out, out_side, call)
            self.checked.add(key_op(kind))
            if mat.checks == "once":  # the full checks include the cheap ones
                self._remember(kind, dense, values, out, r, strategy)
        else:
            if strategy is not None:
                check_strategy(mat, strategy)
            r = self.recall(kind, dense, values, out)
            repeat = r is not None
            if not repeat:
                r = self.quick_r(dense, values, out, out_side)
                if r is None:
                    r = self.cheap_check(dense, values, out, out_side)
                self._remember(kind, dense, values, out, r, strategy)
        op = key_op(kind)
        mat.stats.set_call(call_tag(op, strategy), r, call_name(op, strategy))
        # a repeat, or a plan's call (plan.py): its operands get prepared kernel calls of
        # their own (prepared.py)
        mat._repeat = repeat or mat._tracer is not None
        self.last_r = r
        return r

    # ----------------------------------------------------------------- repeated operands
    def repeat(self, op: str, operands: tuple, strategy: str | None = None) -> int | None:
        """:meth:`begin` for a call that passes the very operand objects of the last
        cheap-checked call of ``op``, unchanged, under ``checks="once"``: returns its r, or
        None for any other call (the caller then calls :meth:`begin`). Not collective.

        ``operands`` are the call's dense operands in the method's order, then its values
        (None or an array) and its ``out`` (None or a buffer). Unchanged as in
        :meth:`recall`, whose cheap checks would pass again; the same strategy, which passed
        its check then. What begin does besides checking is done here too: the use after
        close is refused, prepared kernel calls of another plan state dropped, and the call's
        tag, width and name set for the comparison before its first collective
        (:meth:`CommStats.set_call`). The operation's last call is tried alone, without
        working out its key (its width): a loop repeating a call pays this and its kernels."""
        last = self.last.get(op)
        if last is None:
            return None
        kind, r, kept, strat, tag, name = last
        if strat != strategy:
            return None
        k = 0
        for X in operands:  # written out: every repeated plain call pays for this loop
            held = kept[k]
            k += 1
            if held is None or X is None:
                if X is not held:
                    return None
            elif held[0]() is not X:
                return None
            elif held[4] is not None:
                if X._layout is not held[4]:
                    return None
            elif (X.shape != held[1] or X.strides != held[2]
                  or (X.dtype is not held[3] and X.dtype != held[3])):
                return None
        mat = self._mat()
        if mat._closed or mat.checks != "once":
            return None  # begin refuses a closed object and checks under another policy
        state = mat.kernel.plan_state()
        if state != mat._plan_state:
            mat._kernels.forget()
            mat._plan_state = state
        mat._kind = kind
        mat.stats.set_call(tag, r, name)
        mat._repeat = True
        self.last_r = r
        return r

    def recall(self, kind: str, dense, values, out) -> int | None:
        """r of the last cheap-checked call of ``kind`` if this call passes the very same
        operand objects, unchanged (None otherwise). Not collective.

        Unchanged: a plain array of the same shape, strides and dtype (its data and flags
        cannot change without its shape or strides changing); a typed block with the same
        layout token (:meth:`DenseBlock.layout_token`: nothing assigned to it since, so
        neither its layout nor its side or owner changed). The cheap checks depend on nothing
        else, so they would pass again: a loop that calls one operation with the same buffers
        pays for them once."""
        memo = self.memo.get(kind)
        if memo is None:
            return None
        r, kept = memo
        if len(kept) != len(dense) + 2:
            return None
        k = 0
        for _, X, _ in dense:
            if not unchanged(X, kept[k]):
                return None
            k += 1
        for X in (values, out):
            held = kept[k]
            k += 1
            if X is None:
                if held is not None:
                    return None
            elif not unchanged(X, held):
                return None
        return r

    def quick_r(self, dense, values, out, out_side) -> int | None:
        """The call's r when every operand plainly passes the cheap checks, else None (then
        :meth:`cheap_check` looks again and words the problem). Not collective.

        The cheap checks' rules for the common case only: each dense operand a typed block of
        this very object (not a reshaped view) on its side, or a plain 2-D ndarray, with this
        rank's rows, the object's dtype, C layout and one local width that is this rank's
        share of r; ``values`` a plain C-contiguous 1-D array of the stored nonzeros in the
        dtype; ``out`` the same as an operand of its side (such values for an SDDMM result),
        writeable and sharing no memory with the inputs. r from a typed operand, else the
        local width where the family keeps whole rows; a call that needs the width agreed
        across ranks is not quick. Called for every call whose operands are new objects (a
        loop that builds new arrays, the PyTorch functions): the cheap checks' general form,
        with its messages, was a large part of such a call on a small graph."""
        width = typed_r = None
        for side, X, _ in dense:
            t = self._quick_block(X, side)
            if t is None:
                return None
            if t:
                if typed_r is None:
                    typed_r = t
                elif t != typed_r:
                    return None
            if width is None:
                width = X.shape[1]
            elif X.shape[1] != width:
                return None
        if typed_r is not None:
            r = typed_r
        elif self.mat.splits_r or width is None:
            return None
        else:
            r = width
        if out is not None:
            if not out.flags.writeable:
                return None
            if out_side == "values":
                if not self._quick_values(out):
                    return None
            else:
                t = self._quick_block(out, out_side)
                if t is None or (t and t != r) or out.shape[1] != width:
                    return None
            for _, X, _ in dense:
                if np.may_share_memory(out, X):
                    return None
            if values is not None and np.may_share_memory(out, values):
                return None
        if values is not None and not self._quick_values(values):
            return None
        if r not in self.widths_passed:
            if self.r_problem(r) is not None:
                return None
            self.widths_passed.add(r)
        if not self.mat.splits_r:
            return r if width == r else None
        return r if width == self.mat.local_width(r) else None

    def _quick_block(self, X, side: str) -> int | None:
        """For :meth:`quick_r`: X's global r if it is a typed block of this very object on
        ``side`` (not a reshaped view), 0 if it is a plain 2-D ndarray, either with this
        rank's rows, the object's dtype and C layout; else None."""
        mat = self._mat()
        if type(X) is DenseBlock:
            meta = X.__dict__
            if (meta["owner"] is not mat or meta["side"] != side
                    or X.shape != meta["_block_shape"]):
                return None
            typed = meta["global_shape"][1]
        elif type(X) is np.ndarray and X.ndim == 2:
            typed = 0
        else:
            return None
        dtype = mat.dtype
        if (X.shape[0] != mat._local_rows(side) or (X.dtype is not dtype and X.dtype != dtype)
                or not X.flags.c_contiguous):
            return None
        return typed

    def _quick_values(self, values) -> bool:
        """Whether ``values`` plainly passes the values checks (:meth:`quick_r`)."""
        mat = self._mat()
        return (type(values) is np.ndarray and values.ndim == 1
                and values.size == mat.values.size
                and (values.dtype is mat.dtype or values.dtype == mat.dtype)
                and values.flags.c_contiguous)

    def _remember(self, kind: str, dense, values, out, r: int,
                  strategy: str | None = None) -> None:
        """Keep (weakly) the operands that passed the cheap checks of a ``kind`` call.

        Only where r came from the operands on this rank alone: where the cheap checks agree
        on r by an all-gather, every rank must keep doing it, and a rank whose operands
        changed would otherwise wait in it for ranks that skipped it."""
        if self.mat.splits_r and not any(isinstance(X, DenseBlock) and X.typed
                                     for _, X, _ in dense):
            self.last.pop(key_op(kind), None)
            return
        kept = [remembered(X) for _, X, _ in dense]
        kept.append(None if values is None else remembered(values))
        kept.append(None if out is None else remembered(out))
        kept = tuple(kept)
        self.memo[kind] = (r, kept)
        op = key_op(kind)
        if op in _CALL_OPS:
            self.last[op] = (kind, r, kept, strategy, call_tag(op, strategy),
                             call_name(op, strategy))
        if len(self.memo) > MEMO_KEYS:  # calls at many widths: forget the oldest width's
            old = next((k for k in self.memo if k.__class__ is tuple and k != kind), None)
            if old is not None:
                del self.memo[old]

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

    def _unchecked_r(self, dense) -> int:
        """The dense width without checking anything (checks="off")."""
        for _, X, _ in dense:
            if isinstance(X, DenseBlock) and X.typed:
                return X.r
        if not self.mat.splits_r:
            return dense[0][1].shape[1]
        known = self.last_r if self.last_r is not None else self.mat.r
        return known if known is not None else self._agree_width(dense[0][1].shape[1])

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


def remembered(X: np.ndarray) -> tuple:
    """What :meth:`CallChecks._remember` keeps of one operand (see :func:`unchanged`)."""
    token = X.layout_token() if isinstance(X, DenseBlock) else None
    return weakref.ref(X), X.shape, X.strides, X.dtype, token


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


__all__ = ["CHECKS", "SIDES", "CallChecks"]
