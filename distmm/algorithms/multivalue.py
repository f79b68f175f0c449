"""The multi-value SpMM: several value vectors of S (one per head) in one call.

``S.spmm_a(B, values=V)`` with ``V`` of shape (heads, nnz_local) computes, for each head h,

    out[:, h*F:(h+1)*F] = S(V[h]) @ B[:, h*F:(h+1)*F]

(``S.spmm_b`` the same with S^T): B is a dense matrix of width heads * F whose columns hold
the heads one after the other, the layout of a GAT layer's (nodes, heads, F) array reshaped
to (nodes, heads * F), so a layer passes its arrays without copying them and the result is
a plain width-(heads * F) block of the family's layout. Row h of V is S's values for head h
in this rank's value order (as ``values=`` of a one-head call).

On 1.5D dense shifting (:class:`~distmm.algorithms.dense_shift_15d.DenseShift15D`) the
call is one pass of Algorithm 1 at width heads * F, with the multi-value kernel of
:mod:`distmm.kernels.multivalue` (every head in one pass over each block's nonzeros) as its
loop body: it moves exactly the words of one single-value SpMM of width heads * F
(:func:`multi_value_words`), in one shift per step instead of one per head. 1.5D
sparsity-aware does the same with its own loop (``SparseAware15D._spmm_multi``): one
exchange of the needed rows at width heads * F (the relay's phases included), the
multi-value kernel on its two blocks, the words of one single-value call of that width
with this rank's exchange counts.

The families that cut the dense columns over ranks (``splits_r``: 1.5D sparse shifting, 2.5D
dense and sparse replicating) also run one pass of their own loop at width heads * F
(``_multi_pass`` on the family; each loop takes a :class:`MultiHead`). Each rank holds a
column slice of the width-(heads * F) operands, which may start or end inside a head or hold
no column of some heads; the slice is cut into head segments
(:func:`~distmm.kernels.multivalue.head_segments`) and each step runs the segment kernel
(:func:`~distmm.kernels.multivalue.spmm_segments_block`: one sweep over the block's
nonzeros, segment g with its head's values). The replication, shifts and reductions of dense
rows are those of one call of width heads * F; where S's values travel, the heads' values
travel together: S's packets carry ``[rows | cols | H values]``, 2 + H words a nonzero
(:mod:`distmm.algorithms.packets`; 1.5D sparse shifting, 2.5D dense replicating), and 2.5D
sparse replicating all-gathers the H values of each nonzero over the fiber in one
collective. So the words are one call's plus (H - 1) words per nonzero shifted (or per
nonzero of the fiber's other shares), each family model's ``exact_words`` with ``heads``
(:func:`multi_value_words`). No family makes one call per head.

The multi-head SDDMM (:func:`sddmm_multi`, ``S.sddmm(A, B, heads=H)``) is the multi-value
SpMM's gradient in its values: for each head h and stored nonzero e = (i, j),

    out[e, h] = S_e <A[i, h*F:(h+1)*F], B[j, h*F:(h+1)*F]>

with A and B of width heads * F laid out as above and ``out`` of shape (nnz_local, heads),
edge-major like the per-head edge arrays of :mod:`distmm.ops` (so that every family's loop
cuts a block's rows of it as it cuts a one-head SDDMM's output). On the families that keep
whole dense rows (1.5D dense shifting, 1.5D sparsity-aware) it is the family's own SDDMM loop
at width heads * F with the multi-head kernel (:func:`~distmm.kernels.multivalue.
prepare_sddmm_multi`) as each step's body: every head in one pass over each block's
nonzeros, and exactly the words of one single-value SDDMM of width heads * F
(:func:`sddmm_multi_words`). The families that cut the dense columns over ranks run one pass
of their loop too: each rank computes every head's partial dot products over its column
slice (:func:`~distmm.kernels.multivalue.sddmm_segments_block`, (nnz, H) per block), and the
reduction over the column pieces carries H partial sums per nonzero in the messages of one
call (in S's packets, 2 + H words a nonzero where one call sends 3; in 2.5D sparse
replicating's one reduce-scatter over the fiber, H words per nonzero); S's values are applied
once the sums are complete. Its words are the family model's ``exact_words`` with ``heads``
(:func:`sddmm_multi_words`).

Every rank must call. Bad operands raise the same InputError on every rank before any work
on the first call of each kind (side, heads, width) and on every call under
``checks="always"``; later calls check locally (as the single-value calls under
``checks="once"``).
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms.calls import call_tag
from distmm.core.aligned import aligned_empty
from distmm.errors import InputError, agree
from distmm.kernels.multivalue import (
    head_segments,
    sddmm_segments_block,
    spmm_multi_block,
    spmm_segments_block,
)

__all__ = ["MultiHead", "is_multi_value", "multi_value_words", "sddmm_multi",
           "sddmm_multi_words", "spmm_multi"]


class MultiHead:
    """One multi-head call inside the loop of a family that cuts the dense width over ranks
    (``splits_r``): its heads, the head width F, and the local kernels on a column slice of
    the width heads * F operands cut into head segments
    (:func:`~distmm.kernels.multivalue.head_segments`). The family's loop passes one to its
    kernels' places (``multi=``): the loop's messages are those of one call, with the value
    words of S's blocks H per nonzero. Not collective.

    Parameters
    ----------
    S : DistributedMatrix
        The family object (its node model records the kernels; their seconds are its
        "compute" phase).
    heads, r : int
        Heads and the global width heads * F of the call.
    """

    def __init__(self, S, heads: int, r: int) -> None:
        self.S, self.heads, self.F = S, int(heads), int(r) // int(heads)
        cols = S.dense_cols("a", S.rank, r)  # this rank's columns of r (the same on both sides)
        self.segs = self.segments(cols.start, cols.stop)

    def segments(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The head segments of the global columns lo .. hi - 1."""
        return head_segments(lo, hi, self.F)

    def spmm(self, op: str, blk, V: np.ndarray, X: np.ndarray, out: np.ndarray,
             accumulate: bool = True, segs=None) -> None:
        """``op`` ("spmm_multi_a": blk(V) X, "spmm_multi_b": blk(V)^T X) into ``out`` on the
        slice's segments (``segs``, default this rank's home columns)."""
        seg = self.segs if segs is None else segs
        self.S.stats.seconds["compute"] += spmm_segments_block(
            self.S.kernel, op, blk, V, 0, X, out, seg[0], seg[1], accumulate)

    def sddmm(self, blk, A: np.ndarray, B: np.ndarray, out: np.ndarray,
              accumulate: bool = True, segs=None) -> None:
        """Every head's partial dot products over the slice into ``out`` (nnz, heads)."""
        seg = self.segs if segs is None else segs
        self.S.stats.seconds["compute"] += sddmm_segments_block(
            self.S.kernel, blk, A, B, out, seg[0], seg[1], accumulate)


def _begin_multi(S, op: str, heads: int, r: int) -> None:
    """The call's state as calls.py's ``_begin`` sets it: its kind (the key of its kept
    kernel calls), the node model's plan state, the tag and width of its messages."""
    S._kind = (op + "_multi", heads)
    state = S.kernel.plan_state()
    if state != S._plan_state:
        S._kernels.forget()
        S._plan_state = state
    S._repeat = False
    S.stats.set_call(call_tag(op), r, f"{op} ({heads} heads)")


def is_multi_value(values) -> bool:
    """Whether ``values`` asks for the multi-value SpMM (a 2-D array). Not collective."""
    return isinstance(values, np.ndarray) and values.ndim == 2


def _check(S, side: str, X, V: np.ndarray, out) -> tuple[int, int]:
    """(heads, global width) of the call, after one agreement over every rank."""
    X = np.asarray(X) if not isinstance(X, np.ndarray) else X
    in_side = "b" if side == "a" else "a"
    heads = int(V.shape[0])
    r = int(getattr(X, "r", X.shape[1] if X.ndim == 2 else 0)) if S.splits_r \
        else (X.shape[1] if X.ndim == 2 else 0)
    msg = None
    if V.dtype != S.dtype:
        msg = f"values have dtype {V.dtype}, expected {S.dtype}"
    elif V.shape[1] != S.values.shape[0]:
        msg = (f"values have shape {V.shape}; one row per head of this rank's "
               f"{S.values.shape[0]} stored nonzeros expected")
    elif X.ndim != 2 or X.dtype != S.dtype:
        msg = f"the dense operand must be a 2-D {S.dtype} array, got {X.dtype} {X.shape}"
    elif X.shape[0] != S._local_rows(in_side):
        msg = (f"the dense operand has {X.shape[0]} rows on this rank, expected "
               f"{S._local_rows(in_side)}")
    elif heads < 1 or r % heads:
        msg = f"its width {r} is not a multiple of the {heads} heads of values"
    elif S.splits_r and X.shape[1] != S.local_width(r):
        msg = (f"the dense operand has {X.shape[1]} columns on this rank, but its share of "
               f"the r={r} columns is {S.local_width(r)}")
        if not getattr(X, "typed", False):
            msg += (f" ({S.name} cuts the width over ranks: pass a typed block, from "
                    "S.scatter, S.dense or S.wrap(side, block, r), so that r is known)")
    elif out is not None and (np.shape(out) != (S._local_rows(side), X.shape[1])
                              or np.asarray(out).dtype != S.dtype):
        msg = f"out has shape {np.shape(out)}, expected {(S._local_rows(side), X.shape[1])}"
    _agree_kind(S, (side, heads, r), msg, heads, r)
    return heads, r


def _agree_kind(S, kind: tuple, msg: str | None, heads: int, r: int) -> None:
    """As the single-value calls do (calls.py): the first call of each kind is agreed over
    every rank (and every call under checks="always"); later ones check locally."""
    if msg is not None:
        msg += f" (rank {S.rank})"
    done = S._ops.multi_agreed
    if S.checks == "always" or kind not in done:
        if S.p > 1:
            S.stats.add("other", S.p - 1, S.p - 1, S.p - 1, S.p - 1)
        agree(S.comm, msg, {"heads": heads, "width": r})
        done.add(kind)
    elif msg is not None:
        raise InputError(msg + " (found by the local checks after the first, agreed call "
                               "of this kind)")


def spmm_multi(S, side: str, X_loc, values: np.ndarray, out=None):
    """``S.spmm_a(X_loc, values=V)`` (side "a") or ``S.spmm_b`` (side "b") with V of shape
    (heads, nnz_local): see the module docstring. Returns this rank's side-``side`` block of
    width heads * F (``out`` when given). Collective."""
    S._require_open()
    heads, r = _check(S, side, X_loc, values, out)
    X = np.ascontiguousarray(np.asarray(X_loc).view(np.ndarray))
    V = np.ascontiguousarray(values)
    if S.splits_r:
        _begin_multi(S, "spmm_" + side, heads, r)
        res = S._multi_pass("spmm_" + side, X, None, V, r, _plain_out(out),
                            MultiHead(S, heads, r))
    elif S.name != "15d-dense-shift":  # the sparsity-aware family's own loop
        _begin_multi(S, "spmm_" + side, heads, r)
        res = S._spmm_multi(side, X, V, heads, _plain_out(out))
    elif side == "a":
        res = _dense_shift_a(S, X, V, heads, _plain_out(out))
    else:
        res = _dense_shift_b(S, X, V, heads, _plain_out(out))
    if out is not None and res is not _plain_out(out):
        np.copyto(np.asarray(out), res)
        res = out
    return S._block(side, r, res)


def _plain_out(out):
    if out is None:
        return None
    o = out.view(np.ndarray)
    return o if o.flags.c_contiguous and o.flags.writeable else None


def _dense_shift_a(S, B, V, heads: int, out) -> np.ndarray:
    """Algorithm 1's SpMMA pass at width heads * F: B's blocks shift q - 1 times around the
    layer, each step one multi-value kernel on the block present, the superblock's partial
    sums reduce-scattered over the fiber."""
    o = S._orientation("a")
    r = B.shape[1]
    nrows = o.blocks[0].shape[0] if o.blocks else 0
    if S.c > 1:
        acc = S._kernels.buffer(("T_out", "a"), (nrows, r))
    else:
        acc = out if out is not None else aligned_empty((nrows, r), S.dtype)
    _shift_loop(S, o, "spmm_multi_a", B, V, heads, acc)
    return acc if S.c == 1 else S._reduce("a", acc, out)


def _dense_shift_b(S, A, V, heads: int, out) -> np.ndarray:
    """Algorithm 1's SpMMB pass: A replicated over the fiber, the output B blocks travel q
    shifts (the last brings each home), each step adding S(V)^T T to the block present."""
    o = S._orientation("a")
    T = S._replicate("a", A)
    u, q = S.grid.u, S.q
    r = A.shape[1]
    sizes = np.diff(S.offsets["b"])[S.grid.layer_blocks()]
    if q == 1:
        res = out if out is not None else aligned_empty((int(sizes[0]), r), S.dtype)
        block_kernel(S, o, 0, "spmm_multi_b", V, T, res, heads, first=True)
        return res
    cur = S._kernels.buffer(("multi cur", "b"), (int(sizes.max()), r))
    nxt = S._kernels.buffer(("multi nxt", "b"), (int(sizes.max()), r))
    left, right = (u - 1) % q, (u + 1) % q
    res = out if out is not None else aligned_empty((int(sizes[u]), r), S.dtype)
    for s in range(q):
        t, nt = (u + s) % q, (u + s + 1) % q
        Yb = cur[:sizes[t]]
        block_kernel(S, o, t, "spmm_multi_b", V, T, Yb, heads, first=s == 0)
        recv = res if s == q - 1 else nxt[:sizes[nt]]
        S.layer.shift(Yb, recv, dest=left, source=right)
        cur, nxt = nxt, cur
    return res


def _shift_loop(S, o, op: str, Y, V, heads: int, acc) -> None:
    """The input-Y pass: q - 1 shifts (the block's last shift would only return it home),
    received into two alternating buffers (one at q = 2)."""
    u, q = S.grid.u, S.q
    sizes = np.diff(S.offsets["b"])[S.grid.layer_blocks()]
    left, right = (u - 1) % q, (u + 1) % q
    bufs = [S._kernels.buffer(("multi shift", k), (int(sizes.max()), Y.shape[1]))
            for k in range(min(2, q - 1))]
    cur = Y
    for s in range(q):
        t, nt = (u + s) % q, (u + s + 1) % q
        block_kernel(S, o, t, op, V, cur, acc, heads, first=s == 0)
        if s < q - 1:
            recv = bufs[s % 2][:sizes[nt]]
            S.layer.shift(cur, recv, dest=left, source=right)
            cur = recv


def block_kernel(S, o, t: int, op: str, V, X, out, heads: int, first: bool) -> None:
    """The multi-value kernel ``op`` on block t of orientation ``o`` (``first``: write
    ``out``, else add to it); its seconds are the "compute" phase. Not collective."""
    S.stats.seconds["compute"] += spmm_multi_block(
        S.kernel, op, o.blocks[t], V, int(o.offsets[t]), X, out, heads, accumulate=not first)


def multi_value_words(S, op: str, heads: int, features: int,
                      first: bool = True) -> dict[str, dict[str, float]]:
    """Words and messages per phase one rank sends in one multi-value ``op`` ("spmm_a" or
    "spmm_b"), plus, on the ``first`` call of its kind (and every call under
    checks="always"), the input check's agreement (phase "other", p - 1). Not collective
    (collective only where the family's counts build S^T first, as
    :meth:`~distmm.algorithms.stats.MatrixStats.expected_words`).

    On 1.5D dense shifting, those of one single-value call of width heads * features (the
    family model's ``exact_words``; p must divide m and n). On the families that cut the
    dense width (``splits_r``), the family model's ``exact_words`` at that width with
    ``heads``: the dense words of one call, S's value words H per nonzero (in S's packets
    on 1.5D sparse shifting and 2.5D dense replicating, 2 + H words a nonzero; in the
    fiber all-gather of the values on 2.5D sparse replicating, H (c - 1) per own nonzero),
    with this rank's counts (exact where the single-value formula is)."""
    m, n = S.shape
    if S.splits_r:
        words = S.model.exact_words(op, m, n, heads * features, S.p, S.c, "none",
                                    heads=heads, **S._exact_counts(op, "none"))
    elif S.name == "15d-dense-shift":
        words = S.model.exact_words(op, m, n, heads * features, S.p, S.c)
    else:  # the sparsity-aware family: its counts follow this rank's exchange
        words = S.stats.expected_words(op, heads * features)
    k = S.p - 1 if first or S.checks == "always" else 0
    words["other"] = {"words": k, "messages": k}
    return words


# ------------------------------------------------------------------------ multi-head SDDMM
def _check_sddmm(S, A, B, heads, values, out) -> int:
    """The call's global width r, after one agreement over every rank on the first call of
    each (heads, r)."""
    msg = None
    rs = []
    for name, side, X in (("A", "a", A), ("B", "b", B)):
        X = np.asarray(X) if not isinstance(X, np.ndarray) else X
        rs.append(int(getattr(X, "r", X.shape[1] if X.ndim == 2 else 0)) if S.splits_r
                  else (X.shape[1] if X.ndim == 2 else 0))
        if msg is None and (X.ndim != 2 or X.dtype != S.dtype):
            msg = f"{name} must be a 2-D {S.dtype} array, got {X.dtype} {X.shape}"
        elif msg is None and X.shape[0] != S._local_rows(side):
            msg = (f"{name} has {X.shape[0]} rows on this rank, expected "
                   f"{S._local_rows(side)}")
    r = rs[0]
    nnz = S.values.shape[0]
    if msg is not None:
        pass
    elif not isinstance(heads, (int, np.integer)) or isinstance(heads, bool) or heads < 1:
        msg, heads = f"heads must be a positive integer, got {heads!r}", 0
    elif rs[0] != rs[1]:
        msg = f"A and B have widths {rs[0]} and {rs[1]}"
    elif r % heads:
        msg = f"the width {r} is not a multiple of {heads} heads"
    elif values is not None and (not isinstance(values, np.ndarray) or values.shape != (nnz,)
                                 or values.dtype != S.dtype):
        msg = (f"values must be a 1-D {S.dtype} array of this rank's {nnz} stored nonzeros, "
               f"got {getattr(values, 'dtype', type(values).__name__)} "
               f"{np.shape(values)}")
    elif out is not None and (not isinstance(out, np.ndarray) or out.shape != (nnz, heads)
                              or out.dtype != S.dtype or not out.flags.c_contiguous
                              or not out.flags.writeable):
        msg = (f"out must be a writeable C-contiguous {S.dtype} array of shape "
               f"{(nnz, heads)}, got {np.shape(out)}")
    _agree_kind(S, ("sddmm", int(heads), r), msg, int(heads), r)
    return r


def sddmm_multi(S, A_loc, B_loc, heads: int, values: np.ndarray | str | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """``S.sddmm(A_loc, B_loc, heads=H)``: for every head h, this rank's nonzeros of
    S(values) * (A_h B_h^T) with A_h, B_h the columns h*F .. (h+1)*F - 1 of the width
    heads * F side-"a" and side-"b" blocks; see the module docstring.

    Returns
    -------
    ndarray (nnz_local, heads)
        In this rank's value order (``out`` when given). Collective."""
    S._require_open()
    if isinstance(values, str):
        values = S.named_values(values)
    r = _check_sddmm(S, A_loc, B_loc, heads, values, out)
    vals = S.values if values is None else np.ascontiguousarray(values)
    res = out if out is not None else np.empty((S.values.shape[0], heads), dtype=S.dtype)
    A = np.ascontiguousarray(np.asarray(A_loc).view(np.ndarray))
    B = np.ascontiguousarray(np.asarray(B_loc).view(np.ndarray))
    _begin_multi(S, "sddmm", heads, r)
    if S.splits_r:  # per-head partial sums of the local columns, reduced together
        S._multi_pass("sddmm", A, B, vals, r, res, MultiHead(S, heads, r))
    else:
        S._sddmm(A, B, vals, r, res)
    return res


def sddmm_multi_words(S, heads: int, features: int, first: bool = True
                      ) -> dict[str, dict[str, float]]:
    """Words and messages per phase one rank sends in one :func:`sddmm_multi`: on the families
    that keep whole rows, those of one single-value SDDMM of width heads * features (the
    family model's exact words with this rank's counts,
    :meth:`~distmm.algorithms.stats.MatrixStats.expected_words`); on the families that cut
    the dense width, the family model's ``exact_words`` at that width with ``heads``: the
    dense words of one call, and H partial sums per nonzero where one call has one (in S's
    packets, 2 + H words a nonzero; in the fiber's reduce-scatter of 2.5D sparse
    replicating, H per nonzero reduced). On the ``first`` call of its kind (and every call
    under checks="always") the input check's agreement adds p - 1 (phase "other"). Not
    collective (as :func:`multi_value_words`)."""
    if S.splits_r:
        m, n = S.shape
        words = S.model.exact_words("sddmm", m, n, heads * features, S.p, S.c, "none",
                                    heads=heads, **S._exact_counts("sddmm", "none"))
    else:
        words = S.stats.expected_words("sddmm", heads * features)
    a = S.p - 1 if first or S.checks == "always" else 0
    words["other"] = {"words": a, "messages": a}
    return words
