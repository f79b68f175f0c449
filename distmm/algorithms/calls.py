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

What each check finds, and its message, is :mod:`distmm.algorithms.operand_checks`; this
module holds the policy, what a call remembers of its operands and how a repeat is recognised.
"""

from __future__ import annotations

import weakref

import numpy as np

from distmm.algorithms.operand_checks import OperandChecks, check_strategy
from distmm.core.dense import SIDES, DenseBlock
from distmm.core.operations import OPS

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


class CallChecks(OperandChecks):
    """The per-call checks of one distributed matrix (its ``_calls`` part): the operand
    checks of :class:`~distmm.algorithms.operand_checks.OperandChecks` under the matrix's
    ``checks`` policy, and what they remember between calls: which operations had their
    full check (``checked``), the widths that passed the family's rule (``widths_passed``),
    the operands of the last cheap-checked call of each kind (``memo``, ``last``) and the
    last width (``last_r``).

    Reads the matrix's ``checks``, ``kernel``, ``_plan_state``, ``_kernels``, ``_tracer``
    beside what the operand checks read; owns no communicator. The matrix's ``_begin`` and
    ``check_inputs`` delegate here."""

    def __init__(self, mat) -> None:
        super().__init__(mat)
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
        # the last call of this kind ran which kernel alone is known only after this one runs
        mat._kernels.only_steps.pop(kind, None)
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
        tag, name = call_tag(op, strategy), call_name(op, strategy)
        mat.stats.set_call(tag, r, name)
        if repeat and op in _CALL_OPS:  # the operation's last call is this one (repeat)
            self.last[op] = (kind, r, self.memo[kind][1], strategy, tag, name)
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

    def _unchecked_r(self, dense) -> int:
        """The dense width without checking anything (checks="off")."""
        for _, X, _ in dense:
            if isinstance(X, DenseBlock) and X.typed:
                return X.r
        if not self.mat.splits_r:
            return dense[0][1].shape[1]
        known = self.last_r if self.last_r is not None else self.mat.r
        return known if known is not None else self._agree_width(dense[0][1].shape[1])


def remembered(X: np.ndarray) -> tuple:
    """What :meth:`CallChecks._remember` keeps of one operand (see :func:`unchanged`)."""
    token = X.layout_token() if isinstance(X, DenseBlock) else None
    return weakref.ref(X), X.shape, X.strides, X.dtype, token


__all__ = ["CHECKS", "SIDES", "CallChecks"]
