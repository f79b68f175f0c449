"""The operation front-ends of a distributed matrix: its five public calls and what they share.

:class:`Operations` is the matrix's ``_ops`` part. It owns the per-call checks
(:class:`~distmm.algorithms.calls.CallChecks`, also the matrix's ``_calls``) and holds the
matrix weakly; :class:`~distmm.algorithms.base.DistributedMatrix`'s ``sddmm``, ``spmm_a``,
``spmm_b``, ``fusedmm_a`` and ``fusedmm_b`` call it. A call checks its operands
(``CallChecks.repeat``, else the matrix's ``_begin``) and runs the family's loop piece
(``_sddmm``, ``_spmm_a``, ``_spmm_b``, ``_fusedmm``); nothing else. A repeat whose last
call was one kernel (a family's loop on one rank) runs that kernel again
(``PreparedCalls.rerun``). A loop that repeats a call
makes a plan of it (``S.plan``, plan.py), which is where repeats get cheaper.
"""

from __future__ import annotations

import weakref

import numpy as np

from distmm.algorithms import multivalue as _multi
from distmm.algorithms.calls import CallChecks
from distmm.core.dense import DenseBlock

# (operation, its dense operand's side and name) of the SpMM whose result is on each side
_SPMM = {"a": ("spmm_a", "b", "B"), "b": ("spmm_b", "a", "A")}
# the FusedMM whose result is on each side
_FUSED = {"a": "fusedmm_a", "b": "fusedmm_b"}


class Operations:
    """The operation front-ends of one distributed matrix (its ``_ops`` part).

    State: the per-call checks and what they remember (``checks``, a
    :class:`~distmm.algorithms.calls.CallChecks`; ``multi_agreed``, the multi-head call
    kinds already agreed over every rank, :mod:`~distmm.algorithms.multivalue`). Reads the
    matrix (held weakly: the matrix holds this part) for its values, named vectors,
    strategies and loop pieces. Each family implements ``_sddmm``, ``_spmm_a``,
    ``_spmm_b`` and ``_fusedmm`` (side, ...), given the checked operands, the call's r and
    an optional output buffer."""

    def __init__(self, mat) -> None:
        self._mat = weakref.ref(mat)
        self.checks = CallChecks(mat)
        self.multi_agreed: set[tuple] = set()

    def sddmm(self, A_loc: np.ndarray, B_loc: np.ndarray,
              values: np.ndarray | str | None = None, out: np.ndarray | None = None,
              heads: int | None = None) -> np.ndarray:
        """SDDMM: R = S(values) * (A B^T) at S's nonzeros. Collective.

        Parameters
        ----------
        A_loc, B_loc : DenseBlock or ndarray
            This rank's side-"a" block of A (m x r) and side-"b" block of B (n x r).
        values : ndarray, optional
            Values of S in this rank's value order, or the name of a vector registered with
            :meth:`set_named_values` (default: S's current values).
        out : ndarray, optional
            A 1-D buffer of this rank's stored nonzeros (dtype of S) to write R into.
        heads : int, optional
            The multi-head SDDMM: A and B of width heads * F hold the heads side by side and
            R is (nnz_local, heads), head h's column from columns h*F .. (h+1)*F - 1
            (:mod:`distmm.algorithms.multivalue`).

        Returns
        -------
        ndarray
            This rank's R in value order (``out`` when given).
        """
        S = self._mat()
        if heads is not None:  # one SDDMM per head in one call (multivalue.py)
            return _multi.sddmm_multi(S, A_loc, B_loc, heads, values, out)
        if values is not None and isinstance(values, str):
            values = S.named_values(values)
        r = self.checks.repeat("sddmm", (A_loc, B_loc, values, out))
        if r is None:
            r = S._begin(S._call_key("sddmm", A_loc), (("a", A_loc, "A"), ("b", B_loc, "B")),
                         values, out, "values")
        else:
            res = S._kernels.rerun(S._kind)  # its one kernel, where it was one (prepared.py)
            if res is not None:
                return res
        res = S._sddmm(_plain(A_loc), _plain(B_loc), S.values if values is None else values, r,
                       out)
        return res if out is None else out

    def spmm(self, side: str, X, values: np.ndarray | str | None = None,
             out: np.ndarray | None = None) -> DenseBlock:
        """SpMMA (``side`` "a": S(values) @ B, an m x r side-"a" matrix, X = B) or SpMMB
        ("b": S(values)^T @ A, an n x r side-"b" matrix, X = A). Collective.

        Parameters
        ----------
        side : {"a", "b"}
            The side of the result.
        X : DenseBlock or ndarray
            This rank's block of the dense operand (the other side); r is read from it.
        values : ndarray, optional
            Values of S in this rank's value order, or the name of a vector registered with
            :meth:`set_named_values` (default: S's current values). A 2-D array (heads,
            nnz_local) is one value vector per head: the multi-value SpMM, head h's columns
            of X being h*F .. (h+1)*F - 1 (:mod:`distmm.algorithms.multivalue`).
        out : DenseBlock or ndarray, optional
            A block of ``side`` and the same r to write into (reusable across calls).

        Returns
        -------
        DenseBlock
            This rank's block of the result (``out`` when given).
        """
        S = self._mat()
        op, x_side, name = _SPMM[side]
        if values is not None:
            if isinstance(values, str):
                values = S.named_values(values)
            if _multi.is_multi_value(values):  # one value vector per head (multivalue.py)
                return _multi.spmm_multi(S, side, X, values, out)
        r = self.checks.repeat(op, (X, values, out))
        if r is None:
            r = S._begin(S._call_key(op, X), ((x_side, X, name),), values, out, side)
        else:
            res = S._kernels.rerun(S._kind)  # its one kernel, where it was one (prepared.py)
            if res is not None:
                return S._block(side, r, res if out is None else out)
        loop = S._spmm_a if side == "a" else S._spmm_b
        res = loop(_plain(X), S.values if values is None else values, r, _plain(out))
        return S._block(side, r, res if out is None else out)

    def fusedmm(self, side: str, A_loc, B_loc, strategy: str | None = None,
                values: np.ndarray | str | None = None,
                out: np.ndarray | None = None) -> DenseBlock:
        """FusedMMA (``side`` "a": (S(values) * (A B^T)) @ B, an m x r side-"a" matrix) or
        FusedMMB ("b": (S * (A B^T))^T @ A, an n x r side-"b" matrix). Collective.

        Parameters
        ----------
        side : {"a", "b"}
            The side of the result.
        A_loc, B_loc : DenseBlock or ndarray
            This rank's side-"a" block of A (m x r) and side-"b" block of B (n x r).
        strategy : str, optional
            One of the family's ``strategies`` ("none": SDDMM then SpMM as two calls;
            "reuse": replication reuse; "fusion": local kernel fusion, where the family has
            it); default: the family's most eliding one (the last of ``strategies``).
        values : ndarray or str, optional
            Values of S in this rank's value order, or the name of a vector registered with
            :meth:`set_named_values` (default: S's current values). A strategy that runs on
            the stored S^T needs the values in S^T's order: S's own and named vectors are
            moved there once and kept; an explicit array is moved at every call (one
            all-to-all of this rank's nonzero values, phase "values"), so a loop that reuses
            a vector should register it by name.
        out : DenseBlock or ndarray, optional
            A block of ``side`` and the same r to write into.

        Returns
        -------
        DenseBlock
            This rank's block of the result (``out`` when given).
        """
        S = self._mat()
        strategy = strategy or S.strategies[-1]
        op = _FUSED[side]
        resolved = S.named_values(values) if values is not None and isinstance(values, str) \
            else values
        r = self.checks.repeat(op, (A_loc, B_loc, resolved, out), strategy)
        if r is None:  # checks the strategy too
            r = S._begin(S._call_key(op, A_loc), (("a", A_loc, "A"), ("b", B_loc, "B")),
                         resolved, out, side, strategy)
        else:
            res = S._kernels.rerun(S._kind)  # its one kernel, where it was one (prepared.py)
            if res is not None:
                return S._block(side, r, res if out is None else out)
        # A name travels on as it is, so that the family finds the vector's copy in the
        # stored S^T's order under that name (_values_for).
        res = S._fusedmm(side, _plain(A_loc), _plain(B_loc), strategy, r, _plain(out), values)
        return S._block(side, r, res if out is None else out)


def _plain(X: np.ndarray | None) -> np.ndarray | None:
    """A plain ndarray view of a block (the kernels and the loops see no subclass).

    A plain array is returned as it is, and a block's view is kept on the block while its layout
    token stands (:meth:`DenseBlock.layout_token`: nothing assigned to it since), so that a loop
    called again with the same operand objects sees the same objects
    (:meth:`~distmm.algorithms.prepared.PreparedCalls.run` keeps prepared calls by identity). The
    kept view is cut from the plain array under the block, never from the block itself: a view of
    the block would refer to it, and the block to the view, a reference cycle that would keep the
    block, its data and its distributed object alive until Python's cycle collector ran. A block
    that owns its data (``X.copy()``) has no such array under it: it gets a new view per call."""
    if X is None or type(X) is np.ndarray:
        return X
    meta = X.__dict__
    kept = meta.get("_plain_view")
    if kept is not None and kept[0] is meta.get("_layout"):
        return kept[1]
    base = X.base
    if (type(base) is np.ndarray and base.shape == X.shape and base.strides == X.strides
            and base.dtype == X.dtype
            and base.__array_interface__["data"] == X.__array_interface__["data"]):
        view = base.view()  # (not base itself: its own attributes may be set later)
        if not X.flags.writeable:
            view.flags.writeable = False
        meta["_plain_view"] = (X.layout_token(), view)
        return view
    return X.view(np.ndarray)


__all__ = ["Operations"]
