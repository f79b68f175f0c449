"""The reference node model: numba kernels for every local operation, and the oracle for the rest.

Every other node model is tested against this one, so it is written for correctness first, but
it is also the model that runs by default, so it is written to be fast on a multicore CPU:

* **Row-parallel, race-free.** Every kernel walks the rows of a CSR structure in parallel and each
  row is owned by exactly one thread, so nothing is ever written by two threads. The operations
  that produce one output row per *column* of the block (``spmm_b``, ``fusedmm_b``) run the same
  row-parallel kernels on the cached transposed structure (:meth:`CSRBlock.transpose`), after
  one parallel gather ``vals[perm]`` into a scratch array of nnz values (measured faster than
  reading ``vals[perm[t]]`` at random inside the kernel).
* **Balanced by nonzeros, not rows.** ``prange`` hands each thread one contiguous range of its
  iterations, so the kernels prange over one chunk per thread, and the chunk boundaries are found
  by binary search so that every chunk holds about the same ``nnz + rows``. A block with a few
  dense rows does not leave one thread with most of the work.
* **Column panels.** The dense rows gathered through the column indices (B for the a-side
  operations, A for the b-side ones) are random accesses; when the gathered matrix is larger than
  the cache budget (``panel_bytes``, default half of the rank's share of its node's
  last-level cache), each thread sweeps its rows once per panel of consecutive columns,
  resuming every row where the previous panel stopped, so the gathers hit the cache instead of
  DRAM. The price is one more pass over the output rows (SpMM, FusedMM) or the rows of A
  (SDDMM) per panel, so panels are only used while a row keeps a few entries per panel on
  average.
* **Software prefetch.** When the gathered matrix is too large to stay in cache and its rows
  are short (at most 256 bytes), the gathered rows of the next few entries (and of the next
  row's first entries) are prefetched with ``llvm.prefetch``; no hardware prefetcher can guess
  them. A longer row is several lines, which the hardware prefetcher follows by itself.
* **Vectorised inner loops.** Dense rows are C-contiguous; the loop over the dense width r is the
  innermost loop and is compiled with the ``reassoc`` and ``contract`` fast-math flags, so LLVM
  vectorises dot products (a reduction) and emits fused multiply-adds. NaN and infinity keep their
  IEEE meaning (no ``nnan``/``ninf``). SpMM and FusedMM process four nonzeros together, so that
  one pass over the accumulator row serves four of them. SDDMM takes its dot products eight
  nonzeros at a time (then four, then one): each element of the shared row of ``A`` is loaded
  once for eight gathered rows, and eight independent reductions keep the FMA pipelines full
  at the small widths of graph models, where fewer reductions wait on each other's latency.
* **Kernels per width.** For the common widths (``SPECIALISED_WIDTHS``) SpMM and FusedMM run a
  kernel compiled for that constant width (lazily, per width and dtype, cached on disk): its
  loops over r are fully unrolled into SIMD instructions, with the accumulator row on the stack
  (in registers), instead of a vector loop that a short row (a few nonzeros of width 16 or 32)
  enters through overlap checks and a remainder loop. The generic kernel's loop shape (and so
  its reduction order) is kept for the dot products, and the row sums are elementwise, so the
  results are bitwise those of the generic kernel.
* **Fused without intermediates.** FusedMM computes each nonzero's weight
  ``vals[k] * dot(A_i, B_j)`` and adds ``w * B_j`` to the row accumulator straight away, while
  ``B_j`` is still in L1; only r values per thread are ever held beyond a few scalars.

Accumulation precision: all arithmetic is done in the dtype of the operands. float64 inputs are
accumulated in float64; float32 inputs are accumulated in float32 (dot products in SDDMM/FusedMM
and the row sums of SpMM). The vectorised reductions keep 8 to 32 independent partial sums, so
the float32 error of a length-r dot product stays far below the worst-case bound
``r * eps32 * sum|a_k b_k|``; the tests check float32 results against a float64 oracle to
``2e-5 * sum of |terms|`` for r up to 128, which the worst-case bound already guarantees for r up
to about 300 and which the typical (sqrt(r)) growth keeps for r ~ 1024. Callers who need more
should pass float64. Panelling changes only the order in which a row's entries are summed.

The public methods of the interface check dtypes, dimensions, shapes and contiguity once
(:mod:`distmm.kernels.checks`, a :class:`ValueError` with a precise message; nothing is cast
silently); the wrappers here then make exactly one numba call.
The kernels are compiled on first use per dtype and cached on disk (``cache=True``).
"""

from __future__ import annotations

import functools
import os

import numba
import numpy as np
from numba import njit, prange

from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.kernels.base import NodeModel
from distmm.kernels.numba_util import (
    FASTMATH,
    CompiledCall,
    gather,
    prefetch_row,
    slp_vectorized,
    stack_array,
)
from distmm.kernels.threads import STATE
from distmm.runtime.cores import launcher_local_size, node_cpus

__all__ = ["ReferenceModel"]

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# each row costs about as much as this many nonzeros (loop overhead, writing the output row)
_ROW_COST = 1
# the dense widths with kernels specialised for them (compiled on first use, cached on disk);
# every other width runs the generic kernels
SPECIALISED_WIDTHS = (8, 16, 32, 64, 128)
# (width, itemsize) pairs whose SpMM kernel takes a row's last entries in straight-line code
# (see _spmm_kernel): float32 rows of 32, where the looped tail slowed graphs with a few
# entries per row; elsewhere the loop is as fast or faster (docs/performance.md, Decisions)
_STRAIGHT_TAIL = frozenset({(32, 4)})


# --------------------------------------------------------------------------------------------
# software prefetch

# The kernels prefetch only gathered rows of at most this many bytes (ReferenceModel._plan).
_PREFETCH_MAX_ROW_BYTES = 256


def _prefetch_distance(r: int, itemsize: int) -> int:
    """How many nonzeros ahead to prefetch gathered rows: about 2 KiB ahead, 4 to 16 rows."""
    return max(4, min(16, 2048 // max(1, r * itemsize)))


# --------------------------------------------------------------------------------------------
# load balance and column panels


@njit(cache=True, nogil=True)
def _row_split(indptr, chunk, nchunks):
    """The first row of ``chunk`` out of ``nchunks`` chunks of about equal nnz + rows."""
    m = indptr.shape[0] - 1
    if chunk <= 0:
        return 0
    if chunk >= nchunks:
        return m
    total = indptr[m] + _ROW_COST * m
    target = (total * chunk) // nchunks
    # smallest i in [0, m] with indptr[i] + ROW_COST * i >= target (the cost is monotone in i)
    lo = 0
    hi = m
    while lo < hi:
        mid = (lo + hi) // 2
        if indptr[mid] + _ROW_COST * mid < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _num_chunks(m: int) -> int:
    """One chunk per numba thread (never more chunks than rows, never fewer than one).

    Computed in Python and passed in: ``numba.get_num_threads`` inside a kernel would stop numba
    from caching the compiled kernel on disk.
    """
    return max(1, min(numba.get_num_threads(), m))


@njit(cache=True, nogil=True, inline="always")
def _scan(indices, X, t, end, col_end, ncols, npf):
    """End of the run of entries in [t, end) with column < col_end (columns are sorted).

    Also prefetches the gathered rows of the first ``npf`` entries of that run: the scan of row
    i + 1 is done before row i is processed, so those rows arrive while row i computes.
    """
    if col_end >= ncols:
        stop = end
    else:
        stop = t
        while stop < end and indices[stop] < col_end:
            stop += 1
    for q in range(t, min(stop, t + npf)):
        prefetch_row(X, indices[q])
    return stop


@njit(cache=True, nogil=True, inline="always")
def _prefetch_next(Y, indices, t, seg, dist, group):
    """Prefetch the gathered rows of the ``group`` entries ``dist`` ahead of entry t (those
    before ``seg``)."""
    for q in range(group):
        tp = t + dist + q
        if tp < seg:
            prefetch_row(Y, indices[tp])


@njit(cache=True, nogil=True, inline="always", fastmath=FASTMATH)
def _dots8(x, y0, y1, y2, y3, y4, y5, y6, y7, r, zero):
    """The dot products of x with eight rows over the first r columns.

    Eight at once: each x[k] is loaded once for eight rows, and eight independent vectorised
    reductions keep the FMA units busy where fewer would wait on each other (a graph kernel's
    dense width is often 16-64 columns, a handful of vector registers)."""
    s0 = zero
    s1 = zero
    s2 = zero
    s3 = zero
    s4 = zero
    s5 = zero
    s6 = zero
    s7 = zero
    for k in range(r):
        xk = x[k]
        s0 += xk * y0[k]
        s1 += xk * y1[k]
        s2 += xk * y2[k]
        s3 += xk * y3[k]
        s4 += xk * y4[k]
        s5 += xk * y5[k]
        s6 += xk * y6[k]
        s7 += xk * y7[k]
    return (s0, s1, s2, s3, s4, s5, s6, s7)


@njit(cache=True, nogil=True, inline="always", fastmath=FASTMATH)
def _dots4(x, y0, y1, y2, y3, r, zero):
    """The dot products of x with four rows over the first r columns (FusedMM's groups of
    four, SDDMM's tail after its groups of eight)."""
    s0 = zero
    s1 = zero
    s2 = zero
    s3 = zero
    for k in range(r):
        xk = x[k]
        s0 += xk * y0[k]
        s1 += xk * y1[k]
        s2 += xk * y2[k]
        s3 += xk * y3[k]
    return (s0, s1, s2, s3)


@njit(cache=True, nogil=True, inline="always", fastmath=FASTMATH)
def _add_scaled(acc, v, x, r):
    """acc[:r] += v * x[:r]: one stored entry's term of an SpMM row."""
    for k in range(r):
        acc[k] += v * x[k]


# --------------------------------------------------------------------------------------------
# kernels
#
# All three share one skeleton. Rows are split into one chunk per thread (equal nnz + rows).
# The gathered dense matrix X (B for the a-side operations, A for the b-side ones) is cut into
# ``npanels`` panels of consecutive rows (= columns of the sparse structure) that fit in the
# last-level cache; each thread sweeps its rows once per panel, resuming every row where the
# previous panel stopped (``cur``), so the random gathers hit cache instead of DRAM. With
# npanels = 1 this is a plain row-by-row CSR kernel. On the cached transposed structure the
# values are first gathered through ``perm`` (one parallel pass, much cheaper than reading
# vals[perm[t]] at random inside the kernel).


@functools.cache
def _spmm_kernel(width: int, straight_tail: bool = False):
    """The SpMM kernel for the dense width ``width`` (0: any width, read from ``out``).

    ``width`` is a closure constant, so each width is its own machine-code specialisation (numba
    caches closures by the values they capture): the loops over r have a constant trip count,
    which LLVM fully unrolls into a few SIMD registers instead of a vector loop whose step is
    longer than a short row. Every specialisation sums a row's terms in the same order as the
    generic kernel, so the results are bitwise the same.

    ``straight_tail`` writes a row's last (at most three) entries after its groups of four as
    straight-line code instead of a loop. Where that loop is a short sum over entries, LLVM
    vectorises it across entries (a gather per column), a path that the tail of a row never
    enters but whose registers and checks slow every row (``_STRAIGHT_TAIL`` lists where
    this was measured to matter). Same terms in the same order: bitwise the same results.
    """

    @njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
    def spmm(indptr, indices, vals, X, out, nchunks, dist, npanels, overwrite):
        """out[i] += sum_t vals[t] * X[indices[t]] over the stored entries t of row i (``=``
        when ``overwrite``: the first panel writes every row of the chunk, empty ones as
        zeros)."""
        r = width if width > 0 else out.shape[1]
        ncols = X.shape[0]
        for c in prange(nchunks):
            lo = _row_split(indptr, c, nchunks)
            hi = _row_split(indptr, c + 1, nchunks)
            if hi > lo:
                # a constant width keeps the accumulator row on the stack (in registers)
                acc = (stack_array(width, out.dtype) if width > 0
                       else np.empty(r, dtype=out.dtype))
                cur = indptr[lo:hi].copy()
                for p in range(npanels):
                    first = overwrite and p == 0
                    col_end = ((p + 1) * ncols) // npanels
                    nxt = _scan(indices, X, cur[0], indptr[lo + 1], col_end, ncols, dist)
                    for i in range(lo, hi):
                        start = cur[i - lo]
                        seg = nxt
                        cur[i - lo] = seg
                        if i + 1 < hi:
                            nxt = _scan(indices, X, cur[i + 1 - lo], indptr[i + 2],
                                        col_end, ncols, dist)
                        if seg == start:
                            if first:
                                o = out[i]
                                for k in range(r):
                                    o[k] = 0
                            continue
                        for k in range(r):
                            acc[k] = 0
                        t = start
                        while t + 4 <= seg:
                            if dist > 0:
                                _prefetch_next(X, indices, t, seg, dist, 4)
                            v0 = vals[t]
                            v1 = vals[t + 1]
                            v2 = vals[t + 2]
                            v3 = vals[t + 3]
                            x0 = X[indices[t]]
                            x1 = X[indices[t + 1]]
                            x2 = X[indices[t + 2]]
                            x3 = X[indices[t + 3]]
                            for k in range(r):
                                acc[k] += v0 * x0[k] + v1 * x1[k] + v2 * x2[k] + v3 * x3[k]
                            t += 4
                        if straight_tail:
                            # fewer than four entries are left (the loop above took the rest)
                            if t < seg:
                                _add_scaled(acc, vals[t], X[indices[t]], r)
                                if t + 1 < seg:
                                    _add_scaled(acc, vals[t + 1], X[indices[t + 1]], r)
                                    if t + 2 < seg:
                                        _add_scaled(acc, vals[t + 2], X[indices[t + 2]], r)
                        else:
                            while t < seg:
                                _add_scaled(acc, vals[t], X[indices[t]], r)
                                t += 1
                        o = out[i]
                        if first:
                            for k in range(r):
                                o[k] = acc[k]
                        else:
                            for k in range(r):
                                o[k] += acc[k]

    return slp_vectorized(spmm) if width > 0 else spmm


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _sddmm_kernel(indptr, indices, vals, A, B, out, nchunks, dist, npanels, overwrite):
    """out[t] += vals[t] * dot(A[i], B[indices[t]]) for every stored entry t of every row i
    (``=`` when ``overwrite``: every entry is visited exactly once, in one panel)."""
    r = A.shape[1]
    ncols = B.shape[0]
    zero = out.dtype.type(0)
    for c in prange(nchunks):
        lo = _row_split(indptr, c, nchunks)
        hi = _row_split(indptr, c + 1, nchunks)
        if hi > lo:
            cur = indptr[lo:hi].copy()
            for p in range(npanels):
                col_end = ((p + 1) * ncols) // npanels
                nxt = _scan(indices, B, cur[0], indptr[lo + 1], col_end,
                            ncols, dist)
                for i in range(lo, hi):
                    start = cur[i - lo]
                    seg = nxt
                    cur[i - lo] = seg
                    if i + 1 < hi:
                        nxt = _scan(indices, B, cur[i + 1 - lo],
                                    indptr[i + 2], col_end, ncols, dist)
                    a = A[i]
                    t = start
                    while t + 8 <= seg:
                        if dist > 0:
                            _prefetch_next(B, indices, t, seg, dist, 8)
                        d = _dots8(a, B[indices[t]], B[indices[t + 1]], B[indices[t + 2]],
                                   B[indices[t + 3]], B[indices[t + 4]], B[indices[t + 5]],
                                   B[indices[t + 6]], B[indices[t + 7]], r, zero)
                        for q in range(8):
                            if overwrite:
                                out[t + q] = vals[t + q] * d[q]
                            else:
                                out[t + q] += vals[t + q] * d[q]
                        t += 8
                    if t + 4 <= seg:
                        d4 = _dots4(a, B[indices[t]], B[indices[t + 1]], B[indices[t + 2]],
                                    B[indices[t + 3]], r, zero)
                        for q in range(4):
                            if overwrite:
                                out[t + q] = vals[t + q] * d4[q]
                            else:
                                out[t + q] += vals[t + q] * d4[q]
                        t += 4
                    while t < seg:
                        b = B[indices[t]]
                        s = zero
                        for k in range(r):
                            s += a[k] * b[k]
                        if overwrite:
                            out[t] = vals[t] * s
                        else:
                            out[t] += vals[t] * s
                        t += 1


@functools.cache
def _fused_kernel(width: int):
    """The FusedMM kernel for the dense width ``width`` (0: any width), as :func:`_spmm_kernel`.

    Only the accumulation into the output row uses the constant width; the dot products keep
    the run-time width, so their reduction order (a vectorised reduction's partial sums depend
    on the loop's shape) and hence every weight stay bitwise those of the generic kernel.
    """

    @njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
    def fused(indptr, indices, vals, X, Y, out, nchunks, dist, npanels, overwrite):
        """out[i] += sum_t w_t * Y[j_t] with w_t = vals[t] * dot(X[i], Y[j_t]),
        j_t = indices[t] (``=`` when ``overwrite``, as in :func:`_spmm_kernel`).

        On a block's own structure (X, Y) = (A, B) gives fusedmm_a; on the transposed
        structure (X, Y) = (B, A) gives fusedmm_b.
        """
        rdot = out.shape[1]
        r = width if width > 0 else rdot
        ncols = Y.shape[0]
        zero = out.dtype.type(0)
        for c in prange(nchunks):
            lo = _row_split(indptr, c, nchunks)
            hi = _row_split(indptr, c + 1, nchunks)
            if hi > lo:
                # a constant width keeps the accumulator row on the stack (in registers)
                acc = (stack_array(width, out.dtype) if width > 0
                       else np.empty(r, dtype=out.dtype))
                cur = indptr[lo:hi].copy()
                for p in range(npanels):
                    first = overwrite and p == 0
                    col_end = ((p + 1) * ncols) // npanels
                    nxt = _scan(indices, Y, cur[0], indptr[lo + 1], col_end, ncols, dist)
                    for i in range(lo, hi):
                        start = cur[i - lo]
                        seg = nxt
                        cur[i - lo] = seg
                        if i + 1 < hi:
                            nxt = _scan(indices, Y, cur[i + 1 - lo], indptr[i + 2],
                                        col_end, ncols, dist)
                        if seg == start:
                            if first:
                                o = out[i]
                                for k in range(r):
                                    o[k] = 0
                            continue
                        for k in range(r):
                            acc[k] = 0
                        x = X[i]
                        t = start
                        while t + 4 <= seg:
                            if dist > 0:
                                _prefetch_next(Y, indices, t, seg, dist, 4)
                            y0 = Y[indices[t]]
                            y1 = Y[indices[t + 1]]
                            y2 = Y[indices[t + 2]]
                            y3 = Y[indices[t + 3]]
                            d = _dots4(x, y0, y1, y2, y3, rdot, zero)
                            w0 = vals[t] * d[0]
                            w1 = vals[t + 1] * d[1]
                            w2 = vals[t + 2] * d[2]
                            w3 = vals[t + 3] * d[3]
                            for k in range(r):
                                acc[k] += w0 * y0[k] + w1 * y1[k] + w2 * y2[k] + w3 * y3[k]
                            t += 4
                        while t < seg:
                            y = Y[indices[t]]
                            s = zero
                            for k in range(rdot):
                                s += x[k] * y[k]
                            w = vals[t] * s
                            for k in range(r):
                                acc[k] += w * y[k]
                            t += 1
                        o = out[i]
                        if first:
                            for k in range(r):
                                o[k] = acc[k]
                        else:
                            for k in range(r):
                                o[k] += acc[k]

    return slp_vectorized(fused) if width > 0 else fused


# --------------------------------------------------------------------------------------------


def _width(r: int) -> int:
    """The compile-time width of the kernel that serves width ``r`` (0: the generic one)."""
    return r if r in SPECIALISED_WIDTHS else 0


def _gather_indices(op: str, indices: np.ndarray) -> np.ndarray:
    """The column indices an operation's kernel gathers dense rows through.

    SpMM reads int32 indices as uint32 (a view, no copy): numba gives a signed index into the
    gathered matrix a negative-index wraparound that costs instructions on every nonzero, and
    SpMM's loop does little else per nonzero (:func:`~distmm.kernels.numba_util.unsigned_view`).
    SDDMM and FusedMM, whose dot products dominate, showed no consistent gain and keep the
    signed indices (one compiled kernel less)."""
    if op.startswith("spmm") and indices.dtype == np.int32:
        return indices.view(np.uint32)
    return indices


def _clear(out: np.ndarray, accumulate: bool) -> None:
    """What a call with nothing to add does to ``out``: nothing when accumulating, zero it when
    writing."""
    if not accumulate:
        out[...] = 0



def _count_cpus(cpu_list: str) -> int:
    """How many CPUs a sysfs CPU list names ("0-3,8-11" -> 8)."""
    count = 0
    for part in cpu_list.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            count += int(hi or lo) - int(lo) + 1
    return count


@functools.lru_cache(maxsize=1)
def _last_level_cache() -> tuple[int, int]:
    """(bytes, CPUs sharing it) of the largest cache of level 2 or more that CPU 0 sees, from
    sysfs; (0, 0) where sysfs does not say."""
    best = (0, 0)
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for name in sorted(os.listdir(base)):
            if not name.startswith("index"):
                continue
            with open(os.path.join(base, name, "level")) as fh:
                level = int(fh.read())
            with open(os.path.join(base, name, "size")) as fh:
                text = fh.read().strip().upper()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * mult
            try:
                with open(os.path.join(base, name, "shared_cpu_list")) as fh:
                    sharing = _count_cpus(fh.read())
            except OSError:
                sharing = 0
            if level >= 2 and size > best[0]:
                best = (size, sharing)
    except (OSError, ValueError):
        return (0, 0)
    return best


def cache_share(ranks_on_node: int) -> dict:
    """The default cache budget of one of ``ranks_on_node`` ranks on a node, and what it rests
    on: half of the rank's share of the last-level cache (the cache / the ranks that share it,
    counting the node's ranks as spread evenly over its caches), within [1 MiB, 64 MiB]; 8 MiB
    where sysfs does not say. Not collective (the kernels' plans and ``distmm info``'s row).

    The threads of one process sweep the panels in step and share the panel in cache; the
    other half is left for the streamed sparse structure, the output rows and the rows of the
    other operand. Ranks that share a cache each hold a panel of their own, so each gets its
    part: on the development machine (32 MiB shared by 2 CPUs) two ranks of one thread ran
    1.04-1.33x faster with 8 MiB panels than with 16 MiB ones, where one rank of two threads
    ran best with 16 MiB (docs/performance.md, "Column panels: a share of the cache per
    rank"). The share depends on the ranks, not on the threads, so that the thread count keeps
    changing no result's bits (docs/reliability.md).

    Returns
    -------
    dict
        ``cache_bytes`` and ``cache_cpus`` (the last-level cache and the CPUs sharing it,
        from sysfs; 0 where it does not say), ``ranks_sharing`` (the ranks counted on that
        cache) and ``panel_bytes`` (the budget).
    """
    llc, sharing = _last_level_cache()
    node = node_cpus()
    ranks = max(1, ranks_on_node)
    if 0 < sharing < node:  # the node has several caches: its ranks are spread over them
        ranks = max(1.0, ranks * sharing / node)
    budget = (8 * 2**20 if llc <= 0
              else int(min(max(llc / ranks // 2, 2**20), 64 * 2**20)))
    return {"cache_bytes": llc, "cache_cpus": sharing, "ranks_sharing": ranks,
            "panel_bytes": budget}


class ReferenceModel(NodeModel):
    """Numba CPU kernels for SDDMM, SpMM (both sides) and FusedMM (both sides).

    Every operation accumulates into ``out``, or writes it when called with ``accumulate=False``
    (see :mod:`distmm.kernels.base` for shapes). The
    ``_b`` operations use the block's cached transpose, built on their first call.

    ``panel_bytes`` is the cache budget for the gathered dense matrix: when that matrix is larger,
    the kernels sweep the block in column panels whose slice of it fits (default: half of this
    rank's share of its node's last-level cache, :func:`cache_share`). It changes speed
    only; results agree to rounding.
    """

    name = "reference"
    native = frozenset({"sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b", "spgemm"})
    overwrites = frozenset({"sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"})

    def __init__(self, fallback: NodeModel | None = None, panel_bytes: int | None = None) -> None:
        super().__init__(fallback)
        if panel_bytes is not None and int(panel_bytes) <= 0:
            raise ValueError(f"panel_bytes must be positive, got {panel_bytes}")
        self._panel_bytes = None if panel_bytes is None else int(panel_bytes)

    @property
    def panel_bytes(self) -> int:
        """The cache budget in force: the one given, else this rank's share of its node's
        last-level cache (:func:`cache_share`), with the ranks on the node as the
        last :func:`~distmm.kernels.threads.settle` counted them (the launcher's count
        before any; one without either). Read when a call is planned."""
        if self._panel_bytes is not None:
            return self._panel_bytes
        ranks = STATE.get("ranks_on_node") or launcher_local_size() or 1
        return cache_share(ranks)["panel_bytes"]

    def options(self) -> dict:
        """The constructor's options: ``panel_bytes`` as given, None for the default (whose
        value follows the ranks on the node, known once the rank's share is settled)."""
        return {"panel_bytes": self._panel_bytes}

    def _spgemm(self, X: CSRBlock, Y: CSRBlock) -> CSRBlock:
        # scipy's SMMP SpGEMM is the oracle here; the hash-SpGEMM and SpArch models are the
        # fast or modelled ones.
        C = (X.to_scipy() @ Y.to_scipy()).tocsr()
        C.sort_indices()
        return CSRBlock((X.shape[0], Y.shape[1]), C.indptr.astype(INDPTR_DTYPE),
                        C.indices.astype(INDEX_DTYPE), C.data.astype(X.dtype, copy=False))

    def _panels(self, gathered_rows: int, r: int, itemsize: int, nnz: int, rows: int,
                min_run: int) -> int:
        """Number of column panels: enough for a panel of the gathered matrix to fit
        ``panel_bytes``, but keeping about ``min_run`` entries per row per panel on average (each
        panel costs a pass over the rows, and for SpMM/FusedMM a read-modify-write of the output
        rows)."""
        size = gathered_rows * r * itemsize
        if size <= self.panel_bytes:
            return 1
        want = -(-size // self.panel_bytes)
        cap = nnz // (max(rows, 1) * min_run)
        return int(max(1, min(want, cap, gathered_rows)))

    def _plan(self, gathered_rows: int, r: int, itemsize: int, nnz: int, rows: int,
              min_run: int) -> tuple[int, int]:
        """(prefetch distance, number of panels) for one call.

        Software prefetch pays off only when the gathered matrix is unlikely to sit in cache
        already (above a quarter of the panel budget; below, it cost up to about 25% in SDDMM)
        and its rows are short (``_PREFETCH_MAX_ROW_BYTES``): a longer row is several lines,
        which the hardware prefetcher follows once the first is touched, and there the extra
        instructions cost SDDMM and SpMM about 10% and gained FusedMM nothing
        (docs/performance.md, "Software prefetch by row length").
        """
        size = gathered_rows * r * itemsize
        prefetch = r * itemsize <= _PREFETCH_MAX_ROW_BYTES and size > self.panel_bytes // 4
        dist = _prefetch_distance(r, itemsize) if prefetch else 0
        return dist, self._panels(gathered_rows, r, itemsize, nnz, rows, min_run)

    def _bind(self, op: str, S: CSRBlock, r: int, accumulate: bool):
        """One numba call for ``op`` on block S at width r, planned once (prefetch distance,
        panels, chunks per numba thread, the width's kernel): ``fn(vals, *dense, out)``.

        The ``_b`` operations run the row-parallel kernels on S's cached transpose (built
        here on first use), gathering ``vals`` into S^T's order at each call."""
        m, n = S.shape
        if S.nnz == 0 or r == 0:
            return lambda *operands: _clear(operands[-1], accumulate)
        transposed = op in ("spmm_b", "fusedmm_b")
        gathered, rows = (m, n) if transposed else (n, m)
        dist, panels = self._plan(gathered, r, S.data.dtype.itemsize, S.nnz, rows,
                                  2 if op == "sddmm" else 4)
        tail = (_num_chunks(rows), dist, panels, not accumulate)
        if op == "sddmm":
            kernel = _sddmm_kernel
        elif op.startswith("spmm"):
            kernel = _spmm_kernel(_width(r), (r, S.data.dtype.itemsize) in _STRAIGHT_TAIL)
        else:
            kernel = _fused_kernel(_width(r))
        if not transposed:
            indptr, indices = S.indptr, _gather_indices(op, S.indices)
            return CompiledCall(kernel, (indptr, indices), tail)
        indptr_t, indices_t, perm = S.transpose()
        indices_t = _gather_indices(op, indices_t)

        def run(vals, *dense):
            vals_t = np.empty_like(vals)
            gather(vals, perm, vals_t)
            if len(dense) == 3:  # fusedmm_b: S^T's rows meet B, its columns A
                dense = (dense[1], dense[0], dense[2])
            kernel(indptr_t, indices_t, vals_t, *dense, *tail)

        return run

    def _sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
               out: np.ndarray, accumulate: bool = True) -> None:
        """out[k] += vals[k] * dot(A[row_k], B[col_k]) (``=`` unless ``accumulate``)."""
        self._bind("sddmm", S, A.shape[1], accumulate)(vals, A, B, out)

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray,
                accumulate: bool = True) -> None:
        """out += S(vals) @ B (``=`` unless ``accumulate``)."""
        self._bind("spmm_a", S, B.shape[1], accumulate)(vals, B, out)

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray,
                accumulate: bool = True) -> None:
        """out += S(vals)^T @ A (``=`` unless ``accumulate``), row-parallel over the cached
        transpose."""
        self._bind("spmm_b", S, A.shape[1], accumulate)(vals, A, out)

    def _fusedmm_a(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                   out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T)) @ B (``=`` unless ``accumulate``), one row's worth of
        intermediates per thread."""
        self._bind("fusedmm_a", S, A.shape[1], accumulate)(vals, A, B, out)

    def _fusedmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                   out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T))^T @ A (``=`` unless ``accumulate``), row-parallel over
        the cached transpose."""
        self._bind("fusedmm_b", S, A.shape[1], accumulate)(vals, A, B, out)
