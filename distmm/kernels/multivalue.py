"""The multi-value SpMM and the multi-head SDDMM on one block: several heads in one pass over
the nonzeros.

    spmm_multi_a:  out[i, h*F:(h+1)*F] (+)= sum_t V[h, off + t] * X[indices[t], h*F:(h+1)*F]
    spmm_multi_b:  the same on S^T (out has the block's columns as rows)

over the stored entries t of row i, for h = 0 .. H-1, with X and out of width H*F (head h's
features are columns h*F .. (h+1)*F - 1, as in the (rows, H, F) arrays of a GAT layer,
reshaped). ``V`` is the (H, nnz_total) array of the caller's value order; a block's entries
read its columns ``off .. off + nnz - 1``, so a block cut from a longer vector needs no
copy. One pass over the block's rows: within a row the heads take turns over its entries,
whose structure and gathered rows are then in cache, where H SpMMs stream the structure H
times and gather each row in H pieces in H passes.

The compiled kernels (:func:`spmm_multi_block`) are row-parallel and race-free like the
reference node model's SpMM (:mod:`distmm.kernels.reference`): one chunk of about equal
nnz + rows per numba thread, a kernel compiled per common head width F with the head's
accumulator on the stack; ``spmm_multi_b`` runs the same kernel on the block's cached
transpose after gathering the values into its order.

The multi-head SDDMM (:func:`sddmm_multi_block`, :func:`prepare_sddmm_multi`) is the
gradient of the multi-value SpMM with respect to its values (GAT's d alpha):

    sddmm_multi:   out[off + t, h] = vals[t] * <A[i, h*F:(h+1)*F], B[indices[t], h*F:(h+1)*F]>

for every stored entry t of row i and every head h, ``out`` of shape (nnz, H): the edge-major
layout of the per-head edge arrays of :mod:`distmm.ops` (``sddmm_add``, ``edge_softmax``), in
which a block's entries are the rows ``off .. off + nnz - 1``, so that every family's loop
cuts a block's piece of the output as it cuts a one-head SDDMM's. Row A[i] and each gathered
row B[j] are read once for all heads (H SDDMMs of width F read them in H pieces in H passes).

Head segments. The families that cut the dense width over ranks hand a kernel a column
slice of the width H*F operands, in which the heads need not be whole: the slice may start
or end inside a head, or hold a piece of one head only. :func:`spmm_segments_block` and
:func:`sddmm_segments_block` take the slice's local columns cut into segments (one per head
that meets the slice, :func:`head_segments`), each with its head: the same one pass over the
block's nonzeros, segment g reading ``V[seg_head[g]]`` (SpMM) or adding its partial dot
product to ``out[t, seg_head[g]]`` (SDDMM, the partial sums of a family that reduces them
over the column pieces).

Every node model runs these kernels for these operations (no model has its own), and their
calls are recorded in the model's statistics as ``spmm_multi_a`` / ``spmm_multi_b`` /
``sddmm_multi``. :func:`spmm_multi_reference` and :func:`sddmm_multi_reference` are the numpy
oracles. Not collective.
"""

from __future__ import annotations

import functools
import time

import numpy as np
from numba import njit, prange

from distmm.core.sparse import CSRBlock
from distmm.kernels.base import NodeModel, kernel_bytes, spmm_flops
from distmm.kernels.numba_util import FASTMATH, slp_vectorized, stack_array
from distmm.kernels.reference import (
    SPECIALISED_WIDTHS,
    ReferenceModel,
    _gather_indices,
    _num_chunks,
    _row_split,
)

__all__ = ["head_segments", "prepare_sddmm_multi", "sddmm_multi_block",
           "sddmm_multi_reference", "sddmm_segments_block", "spmm_multi_block",
           "spmm_multi_reference", "spmm_segments_block"]


@functools.cache
def _multi_kernel(width: int):
    """The kernel for a head width ``width`` (0: any, read from the operands), as the
    reference model's SpMM (:func:`distmm.kernels.reference._spmm_kernel`): per row and
    head, the head's F columns accumulate on the stack over the row's entries, four at a
    time, then are written or added to ``out``. The values of head h are read along the
    row (``V[h, off + t]``, contiguous), the gathered rows once per head (a row's later
    heads find it in cache)."""

    @njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
    def kernel(indptr, indices, V, off, X, out, H, Fr, nchunks, overwrite):
        F = width if width > 0 else Fr
        for c in prange(nchunks):
            lo = _row_split(indptr, c, nchunks)
            hi = _row_split(indptr, c + 1, nchunks)
            if hi > lo:
                acc = (stack_array(width, out.dtype) if width > 0
                       else np.empty(F, dtype=out.dtype))
                for i in range(lo, hi):
                    start = indptr[i]
                    end = indptr[i + 1]
                    o = out[i]
                    for h in range(H):
                        base = h * F
                        vh = V[h]
                        for k in range(F):
                            acc[k] = 0
                        t = start
                        while t + 4 <= end:
                            v0 = vh[off + t]
                            v1 = vh[off + t + 1]
                            v2 = vh[off + t + 2]
                            v3 = vh[off + t + 3]
                            x0 = X[indices[t]]
                            x1 = X[indices[t + 1]]
                            x2 = X[indices[t + 2]]
                            x3 = X[indices[t + 3]]
                            for k in range(F):
                                acc[k] += (v0 * x0[base + k] + v1 * x1[base + k]
                                           + v2 * x2[base + k] + v3 * x3[base + k])
                            t += 4
                        while t < end:
                            v = vh[off + t]
                            x = X[indices[t]]
                            for k in range(F):
                                acc[k] += v * x[base + k]
                            t += 1
                        if overwrite:
                            for k in range(F):
                                o[base + k] = acc[k]
                        else:
                            for k in range(F):
                                o[base + k] += acc[k]

    return slp_vectorized(kernel) if width > 0 else kernel


def _check(op: str, S: CSRBlock, V: np.ndarray, off: int, X: np.ndarray, out: np.ndarray,
           heads: int) -> None:
    m, n = S.shape
    xr, orows = (n, m) if op == "spmm_multi_a" else (m, n)
    dt = S.data.dtype
    for name, a in (("V", V), ("X", X), ("out", out)):
        if not isinstance(a, np.ndarray) or a.dtype != dt or a.ndim != 2 \
                or not a.flags.c_contiguous:
            raise ValueError(f"{op}: {name} must be a C-contiguous 2-D {dt} array")
    if V.shape[0] != heads or not 0 <= off <= V.shape[1] - S.nnz:
        raise ValueError(f"{op}: V has shape {V.shape}; expected {heads} rows and columns "
                         f"{off} .. {off + S.nnz - 1}")
    if heads < 1 or X.shape[1] % heads:
        raise ValueError(f"{op}: width {X.shape[1]} is not a multiple of {heads} heads")
    if X.shape[0] != xr or out.shape != (orows, X.shape[1]):
        raise ValueError(f"{op}: X {X.shape} and out {out.shape} do not fit a block of shape "
                         f"{S.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{op}: out must be writeable")


def spmm_multi_block(model: NodeModel | None, op: str, S: CSRBlock, V: np.ndarray, off: int,
                     X: np.ndarray, out: np.ndarray, heads: int,
                     accumulate: bool = True) -> float:
    """One multi-value SpMM on block S (see the module docstring); returns its seconds.

    Parameters
    ----------
    model : NodeModel or None
        Whose statistics record the call (op name, seconds, flops, bytes).
    op : {"spmm_multi_a", "spmm_multi_b"}
    S : CSRBlock (m, n)
    V : ndarray (heads, nnz_total)
        Values per head; block entry t reads ``V[:, off + t]``.
    X : ndarray (n, heads * F) for spmm_multi_a, (m, heads * F) for spmm_multi_b
    out : ndarray (m or n, heads * F)
        Added to, or written when ``accumulate`` is false.

    Not collective.
    """
    _check(op, S, V, off, X, out, heads)
    F = X.shape[1] // heads
    t0 = time.perf_counter()
    if S.nnz == 0 or F == 0:
        if not accumulate:
            out[...] = 0
    elif op == "spmm_multi_a":
        kernel = _multi_kernel(F if F in SPECIALISED_WIDTHS else 0)
        kernel(S.indptr, _gather_indices("spmm_a", S.indices), V, int(off), X, out, heads, F,
               _num_chunks(S.shape[0]), not accumulate)
    else:
        # on the cached transpose, the values gathered into its order first (one pass; as
        # the reference model's spmm_b)
        indptr_t, indices_t, perm = S.transpose()
        Vt = np.take(V, perm + int(off), axis=1)
        kernel = _multi_kernel(F if F in SPECIALISED_WIDTHS else 0)
        kernel(indptr_t, _gather_indices("spmm_a", indices_t), Vt, 0, X, out, heads, F,
               _num_chunks(S.shape[1]), not accumulate)
    dt = time.perf_counter() - t0
    if model is not None:
        m, n = S.shape
        rows_read, rows_written = (n, m) if op == "spmm_multi_a" else (m, n)
        # the structure once, and H values per nonzero (kernel_bytes counts one)
        nbytes = kernel_bytes(S, X.shape[1], rows_read, rows_written, 0, accumulate) \
            + (heads - 1) * S.nnz * S.data.dtype.itemsize
        model.stats.record(op, dt, spmm_flops(S.nnz, X.shape[1]), nbytes)
    return dt


def spmm_multi_reference(S: CSRBlock, V: np.ndarray, X: np.ndarray, heads: int,
                         transpose: bool = False) -> np.ndarray:
    """The multi-value SpMM in scipy, one product per head (the oracle): S(V[h]) @ X_h, or
    S(V[h])^T @ X_h with ``transpose``, concatenated over h. V is (heads, nnz). Not
    collective."""
    F = X.shape[1] // heads
    outs = []
    for h in range(heads):
        M = S.to_scipy(np.ascontiguousarray(V[h, :S.nnz]))
        M = M.T if transpose else M
        outs.append(np.asarray(M @ X[:, h * F:(h + 1) * F]))
    return np.concatenate(outs, axis=1) if outs else np.zeros((S.shape[1 if transpose else 0],
                                                               0))


# ------------------------------------------------------------------------ multi-head SDDMM
@functools.cache
def _sddmm_multi_kernel(width: int):
    """The multi-head SDDMM kernel for a head width ``width`` (0: any): row-parallel (one
    chunk of about equal nnz + rows per thread, each entry written once, no race); per entry,
    the gathered row's H dot products of F columns, four columns at a time."""

    @njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
    def kernel(indptr, indices, vals, A, B, out, H, Fr, nchunks):
        F = width if width > 0 else Fr
        for c in prange(nchunks):
            lo = _row_split(indptr, c, nchunks)
            hi = _row_split(indptr, c + 1, nchunks)
            for i in range(lo, hi):
                a = A[i]
                for t in range(indptr[i], indptr[i + 1]):
                    b = B[indices[t]]
                    o = out[t]
                    v = vals[t]
                    for h in range(H):
                        base = h * F
                        s = a[base] * b[base] if F > 0 else a.dtype.type(0)
                        for k in range(1, F):
                            s += a[base + k] * b[base + k]
                        o[h] = v * s

    return slp_vectorized(kernel) if width > 0 else kernel


def _check_sddmm(S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                 out: np.ndarray) -> int:
    """Heads of a valid multi-head SDDMM on S (ValueError otherwise). Not collective."""
    m, n = S.shape
    dt = S.data.dtype
    for name, a, nd in (("vals", vals, 1), ("A", A, 2), ("B", B, 2), ("out", out, 2)):
        if not isinstance(a, np.ndarray) or a.dtype != dt or a.ndim != nd \
                or not a.flags.c_contiguous:
            raise ValueError(f"sddmm_multi: {name} must be a C-contiguous {nd}-D {dt} array")
    heads = out.shape[1]
    if heads < 1 or A.shape[1] % heads:
        raise ValueError(f"sddmm_multi: width {A.shape[1]} is not a multiple of {heads} heads")
    if A.shape[0] != m or B.shape != (n, A.shape[1]) or out.shape[0] != S.nnz \
            or vals.shape != (S.nnz,):
        raise ValueError(f"sddmm_multi: A {A.shape}, B {B.shape}, vals {vals.shape} and out "
                         f"{out.shape} do not fit a block of shape {S.shape} with {S.nnz} "
                         "nonzeros")
    if not out.flags.writeable:
        raise ValueError("sddmm_multi: out must be writeable")
    return heads


def prepare_sddmm_multi(model: NodeModel, S: CSRBlock, vals: np.ndarray, A: np.ndarray,
                        B: np.ndarray, out: np.ndarray):
    """The multi-head SDDMM on block S checked and accounted once, as
    :meth:`NodeModel.prepare` does for the single-value operations (which hands an SDDMM
    whose ``out`` is 2-D here): ``run(vals, A, B, out) -> seconds`` writes ``out`` (nnz, H)
    and records one ``sddmm_multi`` call in ``model.stats`` (one head: the model's own
    ``sddmm`` on out's 1-D view, recorded as that). Not collective."""
    heads = _check_sddmm(S, vals, A, B, out)
    if heads == 1:  # the model's own single-value SDDMM (its prefetch and panels), on out's view
        one = model.prepare("sddmm", S, vals, A, B, out.reshape(-1), accumulate=False)
        return lambda vals, A, B, out: one(vals, A, B, out.reshape(-1))
    F = A.shape[1] // heads
    m, n = S.shape
    # as a single-value SDDMM of width H F (A's and B's rows, the structure and values
    # once), with H outputs per entry
    nbytes = kernel_bytes(S, A.shape[1], m + n, 0, S.nnz * heads, False)
    flops = spmm_flops(S.nnz, A.shape[1])
    kernel = _sddmm_multi_kernel(F if F in SPECIALISED_WIDTHS else 0)
    nchunks = _num_chunks(m)
    indptr, indices = S.indptr, S.indices
    stats = model.stats

    def run(vals, A, B, out) -> float:
        t0 = time.perf_counter()
        if S.nnz:
            kernel(indptr, indices, vals, A, B, out, heads, F, nchunks)
        dt = time.perf_counter() - t0
        stats.record("sddmm_multi", dt, flops, nbytes)
        return dt

    return run


def sddmm_multi_block(model: NodeModel | None, S: CSRBlock, vals: np.ndarray, A: np.ndarray,
                      B: np.ndarray, out: np.ndarray) -> float:
    """One multi-head SDDMM on block S (see the module docstring): ``out`` (S.nnz, heads) is
    written; returns the kernel's seconds. Not collective."""
    if model is None:
        model = ReferenceModel()
    return prepare_sddmm_multi(model, S, vals, A, B, out)(vals, A, B, out)


def sddmm_multi_reference(S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                          heads: int) -> np.ndarray:
    """The multi-head SDDMM in numpy (the oracle): (S.nnz, heads). Not collective."""
    F = A.shape[1] // heads
    rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
    cols = S.indices[:S.nnz]
    prod = (A[rows] * B[cols]).reshape(S.nnz, heads, F).sum(axis=2)
    return vals[:S.nnz, None] * prod


# ------------------------------------------------------------------------ head segments
def head_segments(lo: int, hi: int, F: int) -> tuple[np.ndarray, np.ndarray]:
    """The heads that meet the global columns ``lo .. hi - 1`` of a width H*F operand, as
    (seg_head, seg_lo): segment g is local columns ``seg_lo[g] .. seg_lo[g + 1] - 1`` (of
    the slice's hi - lo) and belongs to head ``seg_head[g]``. Not collective."""
    if hi <= lo or F < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    heads = np.arange(lo // F, (hi - 1) // F + 1, dtype=np.int64)
    bounds = np.clip(np.concatenate((heads * F, [(heads[-1] + 1) * F])), lo, hi) - lo
    return heads, bounds.astype(np.int64)


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _spmm_segments_kernel(indptr, indices, V, off, X, out, seg_head, seg_lo, wmax, nchunks,
                          overwrite):
    """Row-parallel as :func:`_multi_kernel`; per row and segment, the segment's columns
    accumulate over the row's entries with its head's values."""
    nseg = seg_head.shape[0]
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        if hi > lo:
            acc = np.empty(wmax, dtype=out.dtype)
            for i in range(lo, hi):
                start = indptr[i]
                end = indptr[i + 1]
                o = out[i]
                for g in range(nseg):
                    a = seg_lo[g]
                    w = seg_lo[g + 1] - a
                    vh = V[seg_head[g]]
                    for k in range(w):
                        acc[k] = 0
                    for t in range(start, end):
                        v = vh[off + t]
                        x = X[indices[t]]
                        for k in range(w):
                            acc[k] += v * x[a + k]
                    if overwrite:
                        for k in range(w):
                            o[a + k] = acc[k]
                    else:
                        for k in range(w):
                            o[a + k] += acc[k]


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _sddmm_segments_kernel(indptr, indices, A, B, out, seg_head, seg_lo, nchunks, overwrite):
    """Row-parallel as :func:`_sddmm_multi_kernel`; per entry, each segment's partial dot
    product added to (or, with ``overwrite``, written into) its head's column of ``out``; the
    heads without a segment are zeroed by ``overwrite`` and kept otherwise."""
    nseg = seg_head.shape[0]
    H = out.shape[1]
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        for i in range(lo, hi):
            a = A[i]
            for t in range(indptr[i], indptr[i + 1]):
                b = B[indices[t]]
                o = out[t]
                if overwrite:
                    for h in range(H):
                        o[h] = 0
                for g in range(nseg):
                    s = a[0] * 0
                    for k in range(seg_lo[g], seg_lo[g + 1]):
                        s += a[k] * b[k]
                    o[seg_head[g]] += s


def _check_segments(what: str, width: int, seg_head: np.ndarray, seg_lo: np.ndarray,
                    heads: int) -> None:
    if seg_lo.shape != (seg_head.size + 1,) or seg_lo[0] != 0 or seg_lo[-1] != width \
            or np.any(np.diff(seg_lo) < 0) or np.any(seg_head < 0) \
            or np.any(seg_head >= heads):
        raise ValueError(f"{what}: the segments {seg_lo.tolist()} (heads "
                         f"{seg_head.tolist()}) do not cut the {width} columns among "
                         f"{heads} heads")


def spmm_segments_block(model: NodeModel | None, op: str, S: CSRBlock, V: np.ndarray,
                        off: int, X: np.ndarray, out: np.ndarray, seg_head: np.ndarray,
                        seg_lo: np.ndarray, accumulate: bool = True) -> float:
    """One multi-value SpMM on block S over a column slice cut into head segments (see the
    module docstring); returns its seconds.

    Parameters
    ----------
    op : {"spmm_multi_a", "spmm_multi_b"}
        S (or S^T) times X.
    V : ndarray (heads, nnz_total)
        Values per head; block entry t reads ``V[:, off + t]``.
    X, out : ndarray (rows, w)
        The slice's columns of the input and the output (rows may be views of larger
        C-contiguous arrays); ``out`` is added to, or written when ``accumulate`` is false.
    seg_head, seg_lo : ndarray of int64
        From :func:`head_segments`: segment g is columns ``seg_lo[g] .. seg_lo[g + 1] - 1``
        of head ``seg_head[g]``.

    Not collective.
    """
    m, n = S.shape
    xr, orows = (n, m) if op == "spmm_multi_a" else (m, n)
    w = X.shape[1]
    if X.shape[0] != xr or out.shape != (orows, w) or V.ndim != 2 \
            or not 0 <= off <= V.shape[1] - S.nnz:
        raise ValueError(f"{op}: X {X.shape}, out {out.shape} and V {V.shape} do not fit a "
                         f"block of shape {S.shape} with {S.nnz} nonzeros at {off}")
    _check_segments(op, w, seg_head, seg_lo, V.shape[0])
    t0 = time.perf_counter()
    if S.nnz == 0 or w == 0:
        if not accumulate:
            out[...] = 0
    else:
        wmax = int(np.diff(seg_lo).max())
        if op == "spmm_multi_a":
            indptr, indices, Vk, o, rows = S.indptr, S.indices, V, int(off), m
        else:  # on the cached transpose, the values gathered into its order (one pass)
            indptr, indices, perm = S.transpose()
            Vk, o, rows = np.take(V, perm + int(off), axis=1), 0, n
        _spmm_segments_kernel(indptr, _gather_indices("spmm_a", indices), Vk, o, X, out,
                              seg_head, seg_lo, wmax, _num_chunks(rows), not accumulate)
    dt = time.perf_counter() - t0
    if model is not None:
        heads = seg_head.size
        nbytes = kernel_bytes(S, w, xr, orows, 0, accumulate) \
            + max(heads - 1, 0) * S.nnz * S.data.dtype.itemsize
        model.stats.record(op, dt, spmm_flops(S.nnz, w), nbytes)
    return dt


def sddmm_segments_block(model: NodeModel | None, S: CSRBlock, A: np.ndarray, B: np.ndarray,
                         out: np.ndarray, seg_head: np.ndarray, seg_lo: np.ndarray,
                         accumulate: bool = True) -> float:
    """The partial multi-head SDDMM of a column slice on block S: for every stored entry
    t = (i, j) and segment g, ``out[t, seg_head[g]] (+)= <A[i, seg], B[j, seg]>`` (no values
    of S: the families apply them once the partial sums are complete). ``out`` (S.nnz, heads)
    is added to, or written (heads without a segment zeroed) when ``accumulate`` is false.
    Returns its seconds. Not collective."""
    m, n = S.shape
    w = A.shape[1]
    if A.shape[0] != m or B.shape != (n, w) or out.ndim != 2 or out.shape[0] != S.nnz:
        raise ValueError(f"sddmm_multi: A {A.shape}, B {B.shape} and out {out.shape} do not "
                         f"fit a block of shape {S.shape} with {S.nnz} nonzeros")
    _check_segments("sddmm_multi", w, seg_head, seg_lo, out.shape[1])
    t0 = time.perf_counter()
    if S.nnz:
        _sddmm_segments_kernel(S.indptr, S.indices, A, B, out, seg_head, seg_lo,
                               _num_chunks(m), not accumulate)
    dt = time.perf_counter() - t0
    if model is not None:
        nbytes = kernel_bytes(S, w, m + n, 0, S.nnz * out.shape[1], accumulate)
        model.stats.record("sddmm_multi", dt, spmm_flops(S.nnz, w), nbytes)
    return dt
