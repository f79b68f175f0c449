"""distmm's distributed kernels as differentiable ``torch.autograd`` operations.

Re-exported by :mod:`distmm.torch` (``dt.spmm_a`` and so on). Optional: importing this module
needs torch (``pip install distmm[torch]``); without it the import raises
:class:`distmm.errors.InputError` naming that command. Nothing else in distmm imports it.

Every function takes ``S``, an object from :func:`distmm.distribute`, and CPU tensors holding
this rank's blocks in S's distribution, and returns this rank's block of the result:

=====================================  ==========================================  ==========
function                               forward (per rank: this rank's block)        output
=====================================  ==========================================  ==========
``sddmm(S, A, B, values=None)``        ``R_e = v_e <A_i, B_j>``                     edges
``spmm_a(S, B, values=None)``          ``Y = S(v) B``                               A side
``spmm_b(S, A, values=None)``          ``Z = S(v)^T A``                             B side
``fusedmm_a(S, A, B, values=None)``    ``Y = S(v * (A B^T)) B``                     A side
``fusedmm_b(S, A, B, values=None)``    ``Z = S(v * (A B^T))^T A``                   B side
``sddmm_add(S, u, w)``                 ``e_e = u_i + w_j`` (per head)               edges
``edge_softmax(S, e, dim="row")``      softmax of e over each row (column) of S     edges
=====================================  ==========================================  ==========

Here e = (i, j) runs over S's nonzeros, ``v`` are S's values (``values``, a tensor in value
order, or S's own values when None, which then get no gradient), A is A-side (rows of S, m x r),
B is B-side (columns of S, n x r), u / w are per-node A-side / B-side arrays (n_local,) or
(n_local, h) with one column per head, and edge arrays are in value order (1-D, or (nnz, h)).

Backward passes (G is the gradient of the loss with respect to the output; each line is one
distributed, counted call of distmm, so the backward is as distributed as the forward; ``1`` is
a vector of ones in value order, ``*`` the element-wise product):

* SDDMM, ``R = v * (A B^T)|_S``:
  ``dA = S(G * v) B`` (SpMMA), ``dB = S(G * v)^T A`` (SpMMB), ``dv = G * (A B^T)|_S``
  (SDDMM with values G).
* SpMMA, ``Y = S(v) B``: ``dB = S(v)^T G`` (SpMMB of the A-side G), ``dv_e = <G_i, B_j>``
  (SDDMM of G and B with values 1).
* SpMMB, ``Z = S(v)^T A``: ``dA = S(v) G`` (SpMMA of the B-side G), ``dv_e = <A_i, G_j>``
  (SDDMM of A and G with values 1).
* FusedMMA, ``Y = S(R) B`` with ``R = v * P``, ``P = (A B^T)|_S``: with ``H_e = <G_i, B_j>``
  (SDDMM with values 1) and P (SDDMM with values 1),
  ``dA = S(v * H) B``, ``dB = S(R)^T G + S(v * H)^T A``, ``dv = H * P``
  (two SDDMMs, one SpMMA, two SpMMBs).
* FusedMMB, ``Z = S(R)^T A``: with ``H_e = <A_i, G_j>`` and P,
  ``dA = S(R) G + S(v * H) B``, ``dB = S(v * H)^T A``, ``dv = H * P``.
* Additive SDDMM, ``e_ij = u_i + w_j``: ``du_i = sum_j G_ij`` (row sum), ``dw_j = sum_i G_ij``
  (column sum), per head.
* Edge softmax, ``alpha = softmax_row(e)``: ``de = alpha * (G - sum_row(alpha * G))`` (one
  row all-reduce; :func:`distmm.ops.softmax.edge_softmax_backward`). Masked edges (-inf
  scores, alpha 0) get 0.

Per-node arrays in the column-split families (every family but 15d-dense-shift) are held by
every rank of a row group (:mod:`distmm.ops.groups`): such a tensor is one logical variable
replicated there, and its gradient is the full gradient, identical on every rank of the group
(the row sums reach every member). Dense blocks A and B and edge arrays are partitioned: every
entry lives on exactly one rank.

Copies. Inputs are read through ``tensor.detach().numpy()`` views and results are wrapped with
``torch.from_numpy``, so nothing is copied when a tensor is a contiguous CPU tensor of S's
dtype. A non-contiguous tensor (a transpose, a per-head slice, the expanded gradient of a sum)
is copied once into contiguous memory, because the kernels read C-contiguous blocks. A tensor of
another dtype is not converted: distmm refuses it (InputError on every rank), as the numpy API
does. FusedMM's backward recomputes ``A B^T`` at S's nonzeros instead of keeping it from the
forward, whose fused kernel never materialises it.

Collective rules. Every rank must call the same functions in the same order, with inputs that
require gradients on all ranks alike (checked: one small all-reduce per call when p > 1,
counted under phase "other", raises InputError everywhere on a mismatch), and must
backpropagate through every call (a loss that sums an empty block is fine), because each
backward is collective too. S's own values must not change (``set_values``) between a forward
and its backward when ``values`` is None. Every problem these functions find in their
arguments (type, device, dtype, which require gradients) is agreed in that all-reduce, on every
call, so a mistake on one rank raises on all of them instead of hanging the others.

Second derivatives: the backward passes are distmm calls on numpy arrays, which autograd
cannot differentiate again, so a backward with ``create_graph=True`` through any of these
functions raises a RuntimeError saying so, instead of silently dropping distmm's part of the
second derivative.

``torch.compile``: each call is kept out of the compiled graph (``torch.compiler.disable``: a
graph break around it), since it runs numpy kernels and MPI collectives that dynamo cannot
trace.
"""

from __future__ import annotations

import numpy as np

from distmm.errors import InputError, agree
from distmm.runtime.extras import require_extra

torch = require_extra("torch", what="distmm.torch")

TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}

AGREE_PHASE = "other"


# ---------------------------------------------------------------------------- second order
def _first_order(backward):
    """Refuse a backward that builds a graph for second derivatives (``create_graph=True``):
    its distmm calls on numpy arrays cannot be differentiated again, and leaving them out
    would make the second derivative silently wrong."""
    import functools

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "distmm.torch does not support second derivatives: its backward passes are "
                "distributed distmm calls that autograd cannot differentiate again; call "
                "backward / torch.autograd.grad without create_graph=True through distmm's "
                "operations")
        return backward(ctx, *grads)
    return wrapper


# ---------------------------------------------------------------------------- conversions
def as_numpy(t) -> np.ndarray:
    """A numpy view of a CPU tensor (detached), copied only if it is not contiguous."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def _tensor(a: np.ndarray):
    return torch.from_numpy(a)


def _run(obj, op: str, *dense: np.ndarray, values: np.ndarray | None = None,
         strategy: str | None = None):
    """``getattr(obj, op)(*dense, values=values)`` through the call plan this module keeps
    on ``obj`` per (operation, strategy, width, values given or not) (``S.plan``): each
    autograd call brings new arrays, which the plan puts in its kept steps where the family
    replays (:mod:`distmm.algorithms.plan`), instead of checking and running the call in
    full. Collective, like the method."""
    plans = obj.__dict__.get("_torch_plans")
    if plans is None:
        plans = obj.__dict__["_torch_plans"] = {}
    key = (op, strategy, values is None, dense[0].shape[-1])
    plan = plans.get(key)
    if plan is None:
        options = {} if strategy is None else {"strategy": strategy}
        plan = plans[key] = obj.plan(op, *dense, values=values, **options)
        return plan()
    return plan(*dense, values=values)


def _ones(obj) -> np.ndarray:
    """A cached vector of ones in value order (SDDMM values that leave the dots unscaled)."""
    cache = obj.__dict__.setdefault("_torch_ones", {})
    n = obj.values.shape[0]
    if n not in cache:
        cache[n] = np.ones(n, dtype=obj.dtype)
    return cache[n]


def _check_call(obj, problem: str | None = None, **tensors) -> None:
    """Check the tensors of one call on every rank alike (collective when p > 1).

    Locally: each named argument is a CPU tensor of S's dtype (or None where the caller
    allows it); ``problem`` is a caller's own finding (a layer's node-tensor check). Across
    ranks: which of them require gradients must agree, since each needed gradient is a
    collective call in the backward. One all-reduce of three integers (phase "other"); the
    error texts travel only when something is wrong.
    """
    msg, code = problem, 0
    want = TORCH_DTYPES.get(np.dtype(obj.dtype))
    grad_on = torch.is_grad_enabled()
    for k, (name, t) in enumerate(tensors.items()):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            msg = msg or f"{name} must be a torch.Tensor, got {type(t).__name__}"
        elif not t.is_cpu:
            msg = msg or (f"{name} is on {t.device}; distmm.torch takes CPU tensors "
                          "(move it with .cpu())")
        elif want is not None and t.dtype != want:
            msg = msg or (f"{name} has dtype {t.dtype}; this S computes in {want} (make the "
                          "tensor's dtype match, or build S with that dtype)")
        elif grad_on and t.requires_grad:
            code |= 1 << k
        code |= 1 << (k + len(tensors))  # which arguments are given at all
    if obj.p == 1:
        if msg is not None:
            raise InputError(msg)
        return
    local = np.array([msg is not None, code, code * code], dtype=np.int64)
    total = np.empty_like(local)
    obj.world.allreduce(local, total, phase=AGREE_PHASE)
    if total[0]:
        agree(obj.comm, msg)
    # All codes are equal iff p * sum(c^2) == (sum c)^2 (exact in integers, same everywhere).
    if obj.p * int(total[2]) != int(total[1]) ** 2:
        raise InputError("the ranks disagree on which of " + ", ".join(tensors) + " are given "
                         "or require gradients; every rank must pass the same kinds of "
                         "arguments, each requiring a gradient everywhere or nowhere")


def _values(obj, ctx_values) -> tuple[np.ndarray, bool]:
    """(S's values to use, whether they came from a tensor)."""
    if ctx_values is None:
        return obj.values, False
    return as_numpy(ctx_values), True


def _saved(ctx):
    """The saved (A, B, values) as numpy views; values may be None."""
    return [None if t is None else as_numpy(t) for t in ctx.saved_tensors]


# ---------------------------------------------------------------------------- Functions
class SDDMM(torch.autograd.Function):
    """``R = v * (A B^T)`` at S's nonzeros (value order); see the module docstring."""

    @staticmethod
    def forward(ctx, obj, A, B, values):
        ctx.obj = obj
        ctx.save_for_backward(A, B, values)
        v = None if values is None else as_numpy(values)
        return _tensor(_run(obj, "sddmm", as_numpy(A), as_numpy(B), values=v))

    @staticmethod
    @_first_order
    def backward(ctx, G):
        obj = ctx.obj
        A, B, vt = _saved(ctx)
        v = obj.values if vt is None else vt
        g = as_numpy(G)
        dA = dB = dv = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            gv = g * v
            if ctx.needs_input_grad[1]:
                dA = _tensor(_run(obj, "spmm_a", B, values=gv))
            if ctx.needs_input_grad[2]:
                dB = _tensor(_run(obj, "spmm_b", A, values=gv))
        if ctx.needs_input_grad[3]:
            dv = _tensor(_run(obj, "sddmm", A, B, values=g))
        return None, dA, dB, dv


class SpMMA(torch.autograd.Function):
    """``Y = S(v) B`` (A-side output); see the module docstring."""

    @staticmethod
    def forward(ctx, obj, B, values):
        ctx.obj = obj
        ctx.save_for_backward(B, values)
        v = None if values is None else as_numpy(values)
        return _tensor(_run(obj, "spmm_a", as_numpy(B), values=v))

    @staticmethod
    @_first_order
    def backward(ctx, G):
        obj = ctx.obj
        B, vt = _saved(ctx)
        g = as_numpy(G)
        dB = dv = None
        if ctx.needs_input_grad[1]:
            dB = _tensor(_run(obj, "spmm_b", g, values=vt))
        if ctx.needs_input_grad[2]:
            dv = _tensor(_run(obj, "sddmm", g, B, values=_ones(obj)))
        return None, dB, dv


class SpMMB(torch.autograd.Function):
    """``Z = S(v)^T A`` (B-side output); see the module docstring."""

    @staticmethod
    def forward(ctx, obj, A, values):
        ctx.obj = obj
        ctx.save_for_backward(A, values)
        v = None if values is None else as_numpy(values)
        return _tensor(_run(obj, "spmm_b", as_numpy(A), values=v))

    @staticmethod
    @_first_order
    def backward(ctx, G):
        obj = ctx.obj
        A, vt = _saved(ctx)
        g = as_numpy(G)
        dA = dv = None
        if ctx.needs_input_grad[1]:
            dA = _tensor(_run(obj, "spmm_a", g, values=vt))
        if ctx.needs_input_grad[2]:
            dv = _tensor(_run(obj, "sddmm", A, g, values=_ones(obj)))
        return None, dA, dv


def _fused_call(obj, side: str, A: np.ndarray, B: np.ndarray, values, strategy):
    op = "fusedmm_a" if side == "a" else "fusedmm_b"
    return _run(obj, op, A, B, values=None if values is None else as_numpy(values),
                strategy=strategy or obj.strategies[-1])


class FusedMM(torch.autograd.Function):
    """FusedMMA (``side="a"``: ``S(v * (A B^T)) B``) or FusedMMB (``side="b"``:
    ``S(v * (A B^T))^T A``); see the module docstring."""

    @staticmethod
    def forward(ctx, obj, side, strategy, A, B, values):
        ctx.obj, ctx.side = obj, side
        ctx.save_for_backward(A, B, values)
        return _tensor(_fused_call(obj, side, as_numpy(A), as_numpy(B), values, strategy))

    @staticmethod
    @_first_order
    def backward(ctx, G):
        obj, side = ctx.obj, ctx.side
        A, B, vt = _saved(ctx)
        v = obj.values if vt is None else vt
        g = as_numpy(G)
        ones = _ones(obj)
        need_a, need_b, need_v = ctx.needs_input_grad[3:6]
        # H_e: the output gradient's dot with the other operand's row at each nonzero.
        H = _run(obj, "sddmm", *((g, B) if side == "a" else (A, g)), values=ones)
        P = _run(obj, "sddmm", A, B, values=ones) if (need_v or (side == "a" and need_b)
                                                      or (side == "b" and need_a)) else None
        vh = H * v
        dA = dB = dv = None
        if side == "a":
            if need_a:
                dA = _tensor(_run(obj, "spmm_a", B, values=vh))
            if need_b:
                dB = _tensor(_run(obj, "spmm_b", g, values=P * v)
                             + _run(obj, "spmm_b", A, values=vh))
        else:
            if need_a:
                dA = _tensor(_run(obj, "spmm_a", g, values=P * v)
                             + _run(obj, "spmm_a", B, values=vh))
            if need_b:
                dB = _tensor(_run(obj, "spmm_b", A, values=vh))
        if need_v:
            dv = _tensor(H * P)
        return None, None, None, dA, dB, dv


class SDDMMAdd(torch.autograd.Function):
    """``e_ij = u_i + w_j`` at S's nonzeros, per head; see the module docstring."""

    @staticmethod
    def forward(ctx, obj, u, w):
        ctx.obj = obj
        return _tensor(obj.sddmm_add(as_numpy(u), as_numpy(w)))

    @staticmethod
    @_first_order
    def backward(ctx, G):
        obj = ctx.obj
        g = as_numpy(G)
        du = _tensor(obj.reduce(g, "row", "sum")) if ctx.needs_input_grad[1] else None
        dw = _tensor(obj.reduce(g, "col", "sum")) if ctx.needs_input_grad[2] else None
        return None, du, dw


class EdgeSoftmax(torch.autograd.Function):
    """Softmax of edge scores within each row (``dim="row"``) or column of S."""

    @staticmethod
    def forward(ctx, obj, e, dim):
        ctx.obj, ctx.dim = obj, dim
        alpha = _tensor(obj.edge_softmax(as_numpy(e), dim))
        ctx.save_for_backward(alpha)
        return alpha

    @staticmethod
    @_first_order
    def backward(ctx, G):
        (alpha,) = ctx.saved_tensors
        de = ctx.obj.edge_softmax_backward(as_numpy(alpha), as_numpy(G), ctx.dim)
        return None, _tensor(de), None


# ---------------------------------------------------------------------------- public API
def _eager(f):
    """Keep ``f`` out of torch.compile's graphs (a graph break; see the module docstring)."""
    compiler = getattr(torch, "compiler", None)
    return compiler.disable(f) if compiler is not None and hasattr(compiler, "disable") else f


@_eager
def sddmm(S, A, B, values=None):
    """Sampled dense-dense product ``R_e = v_e <A_i, B_j>`` at S's nonzeros, differentiable.

    Parameters
    ----------
    S : DistributedMatrix
        The distributed sparse matrix (:func:`distmm.distribute`).
    A : Tensor, shape (local A rows, local columns)
        This rank's A-side block, in S's dtype.
    B : Tensor, shape (local B rows, local columns)
        This rank's B-side block.
    values : Tensor, shape (local nnz,), optional
        S's values in value order; None uses S's own values (no gradient for them).

    Returns
    -------
    Tensor, shape (local nnz,)
        This rank's R in value order (``S.value_coordinates()``).

    Collective over ``S.comm``, in the forward and in the backward (SpMMA, SpMMB, SDDMM).
    """
    _check_call(S, A=A, B=B, values=values)
    return SDDMM.apply(S, A, B, values)


@_eager
def spmm_a(S, B, values=None):
    """``S(v) @ B`` (m x r), this rank's A-side block; differentiable in B and ``values``.

    ``B`` is this rank's B-side block, ``values`` as in :func:`sddmm`. Collective over
    ``S.comm`` in the forward and the backward (SpMMB, SDDMM).
    """
    _check_call(S, B=B, values=values)
    return SpMMA.apply(S, B, values)


@_eager
def spmm_b(S, A, values=None):
    """``S(v)^T @ A`` (n x r), this rank's B-side block; differentiable in A and ``values``.

    ``A`` is this rank's A-side block. Collective over ``S.comm`` in the forward and the
    backward (SpMMA, SDDMM).
    """
    _check_call(S, A=A, values=values)
    return SpMMB.apply(S, A, values)


@_eager
def fusedmm_a(S, A, B, values=None, strategy: str | None = None):
    """FusedMMA ``(S(v) * (A B^T)) @ B`` (m x r), this rank's A-side block, differentiable.

    ``strategy`` picks the forward's communication elision (``S.strategies``; default: the
    family's most eliding one). The backward is two SDDMMs and three SpMMs (module docstring).
    Collective over ``S.comm``.
    """
    _check_call(S, A=A, B=B, values=values)
    return FusedMM.apply(S, "a", strategy, A, B, values)


@_eager
def fusedmm_b(S, A, B, values=None, strategy: str | None = None):
    """FusedMMB ``(S(v) * (A B^T))^T @ A`` (n x r), this rank's B-side block; the mirror of
    :func:`fusedmm_a`. Collective over ``S.comm``."""
    _check_call(S, A=A, B=B, values=values)
    return FusedMM.apply(S, "b", strategy, A, B, values)


@_eager
def sddmm_add(S, u, w):
    """The additive SDDMM of per-node scalars, ``e_ij = u_i + w_j`` at S's nonzeros.

    GAT's edge score before the LeakyReLU (``a_dst . z_i + a_src . z_j``, one column per head).

    Parameters
    ----------
    u : Tensor, shape (local A rows,) or (local A rows, h)
        A-side per-node values (identical on the ranks of a row group in the column-split
        families).
    w : Tensor, shape (local B rows,) or (local B rows, h)
        B-side per-node values, same h.

    Returns
    -------
    Tensor, shape (local nnz,) or (local nnz, h), value order.

    Collective over ``S.comm`` in the forward (two expands) and the backward (a row and a
    column reduction).
    """
    _check_call(S, u=u, w=w)
    return SDDMMAdd.apply(S, u, w)


@_eager
def edge_softmax(S, e, dim: str = "row"):
    """Softmax of edge scores within each row (``"row"``) or column (``"col"``) of S.

    ``e`` has shape (local nnz,) or (local nnz, h) in value order; -inf masks an edge. Returns
    the attention coefficients, same shape. Collective over ``S.comm`` in the forward (row
    maximum and sum, all-reduced over the ranks sharing each row) and the backward (one row
    all-reduce).
    """
    _check_call(S, e=e)
    return EdgeSoftmax.apply(S, e, dim)


__all__ = ["as_numpy", "edge_softmax", "fusedmm_a", "fusedmm_b", "sddmm", "sddmm_add",
           "spmm_a", "spmm_b"]
