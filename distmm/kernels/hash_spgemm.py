"""The ``hash-spgemm`` node model: OpSparse's two-phase hash SpGEMM (Du et al. 2022) on CSR.

C = X @ Y is computed row by row (the row-wise dataflow of section 2.1, equation 2) in the six
steps of the paper's Fig. 2:

1. **Setup**: the number of intermediate products ``nprod`` of every output row.
2. **Symbolic binning** (section 5.1, Algorithms 1 and 2): rows are grouped into 8 bins by
   the bound ``min(nprod, ncols)`` of their nnz (the paper bins by ``nprod``; the two differ
   only for rows with more products than C has columns, which the cap gives a table they fit
   instead of the largest one) with one array of M row ids plus bin offsets (two passes:
   count, then place). When
   every row fits the smallest bin the second pass is skipped and the bins array is the
   identity (Algorithm 3, the one-bin shortcut).
3. **Symbolic hash phase** (Algorithm 4): each row inserts its column keys into a hash table of
   its bin's fixed size and counts the distinct ones. Rows of the last bin whose count passes
   0.8 x the table size are abandoned and recomputed with a table sized from the row's own bound
   ``min(nprod, ncols)`` (the paper's kernel7 -> kernel8 fallback, section 5.6.1).
4. **Allocation** of C from the prefix sum of the row counts.
5. **Numeric binning** by the row nnz, into 7 fixed-table bins and a last bin whose rows get a
   table sized from their nnz (the paper's global-memory kernel7, section 5.6.2), then the
   **numeric hash phase** (Algorithm 5): products are accumulated in the table, the slots of
   new keys are recorded as they are inserted (the paper's condensing), sorted by column and
   written to C. The paper sorts by rank (each key's place = the number of smaller keys);
   here that is kept for rows of up to 32 keys, and longer rows are sorted through a bitmap
   of their key range or, when their keys are too sparse in it, by a counting/radix sort
   (``sort_*_rows`` counters).

Hash function and probing are the paper's: ``hash = (col * 107) & (size - 1)`` for a power-of-two
table and ``% size`` otherwise (section 5.2), then linear probing; every table access is one
probe and is counted.

Binning ranges (section 5.7): bin b takes the rows whose bound (symbolic) or nnz (numeric) is at
most ``floor(table_b / ratio)``; the defaults ``sym_ratio = 1.2`` and ``num_ratio = 2`` with the
paper's nominal table sizes reproduce Tables 1 and 2 exactly. (The paper's actual GPU sizes are
one less, e.g. 255 = 256 - 1, to leave 4 bytes of shared memory for a counter; a CPU table has no
such limit, so the nominal sizes are used.) Both the tables and the ranges are options.

CPU path (``device="cpu"``, default): numba kernels parallel over chunks of every bin's rows
(``prange``); each chunk owns one scratch table reused by all its rows, the CPU analogue of a
thread block's shared-memory table; the rows of Y that the next few entries of X select are
prefetched in software when Y is larger than the cache. A phase whose dense accumulator over
C's columns fits ``dense_max_bytes`` per thread uses it instead of the tables (spECK's dense
accumulator, which OpSparse leaves out; see :func:`hash_spgemm`), and reads dense rows'
columns out of bitmaps of Y's rows when Y is dense enough for those (:func:`_scan_inputs`).
The rows of a C larger than the cache are written with non-temporal stores
(``STREAM_MIN_BYTES``). GPU path (``device="cuda"``): numba.cuda kernels in
:mod:`distmm.kernels.hash_spgemm_cuda`, only ever run in numba's CUDA simulator here.

As a node model for the distributed kernels, the *dense* operands are treated as sparse: SpMM
converts the dense block to CSR (skipping its zeros) and runs the hash SpGEMM, adding the product
into ``out``; SDDMM intersects the sparse rows of A and B (dot over common columns). That is the
right model when the "dense" matrices are mostly zeros (features after ReLU, bag-of-words
features). FusedMM falls back to the reference model. Counters (``self.count``): the density of
the dense operands seen, probes and insertions per phase, rows and mean table occupancy per bin.
"""

from __future__ import annotations

import functools
import time

import numba
import numpy as np
from numba import njit, prange
from numba.cpython.unsafe.numbers import trailing_zeros

from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.kernels.base import NodeModel
from distmm.kernels.hash_tables import (
    bin_counters,
    bin_sizes,
    binning_ranges,
    numeric_table_sizes,
    own_table_sizes,
)
from distmm.kernels.numba_util import (
    STREAM_STORES,
    popcount,
    prefetch_span,
    row_products,
    row_range,
    store_fence,
    stream_store,
    unsigned_view,
)

__all__ = ["HashSpGEMMModel", "SYM_TABLES", "NUM_TABLES", "binning_ranges", "hash_spgemm"]

# The paper's nominal table sizes (Tables 1 and 2 and section 5.6): 8 symbolic bins, all with a
# fixed table; 8 numeric bins, the first 7 with a fixed table and the last sized per row.
SYM_TABLES = (32, 512, 1024, 2048, 4096, 8192, 12288, 24576)
NUM_TABLES = (32, 256, 512, 1024, 2048, 4096, 8192)
HASH_SCALE = 107
# A row of the last symbolic bin is recomputed with its own table once its count passes this
# fraction of the bin's table (section 5.6.1).
SYM_ABORT_FRACTION = 0.8
_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# The rows of Y that a row of X selects are random, so the hardware prefetchers miss them: both
# phases prefetch along the stream of X entries of the rows they are about to do, across row
# ends, the Y rows this many entries ahead and their indptr entries (a miss of its own) this
# many. Short rows (metis-mdual: 4 entries) get their Y rows a few rows in advance.
PREFETCH_ROWS = 8
PREFETCH_INDPTR = 16
# How the hash-table kernels find the entries ahead (their ``prefetch`` argument): not at all,
# by cursors over the bin's rows, or, when the rows are in their own order (one bin: the
# identity order), as the entries a + PREFETCH_ROWS and a + PREFETCH_INDPTR (metis-mdual's
# numeric phase, rows of 4 entries: the cursors cost it a fifth of its time)
PREFETCH_OFF = 0
PREFETCH_CURSORS = 1
PREFETCH_CONTIGUOUS = 2
# ... unless Y (indptr, indices and values) fits one core's L2 (1 MiB here) anyway: then the
# rows are in cache already and the cursors are pure overhead
PREFETCH_MIN_BYTES = 1 << 20
# A C of more bytes than this (a quarter of the last-level cache here) is written with
# non-temporal stores, which do not read each line into the cache before writing it: such a C
# would only evict the inputs on its way to memory. Every row of it is streamed, short ones
# too; what once made short rows slow was LLVM mixing streamed and plain stores in one line
# (see _put). A smaller C stays in the cache for whoever reads it next (docs/performance.md,
# Decisions).
STREAM_MIN_BYTES = 8 << 20
# rows whose key range is at most this wide may be sorted through a bitmap (2 MiB per thread)
BITMAP_SPAN_MAX = 1 << 24
# per-thread budget of the dense accumulator (see hash_spgemm): about one core's L2 here. In
# the numeric phase the random updates of the value array must hit the cache, or the hash
# tables' compact slots win (docs/performance.md, Decisions).
DENSE_MAX_BYTES = 1 << 20
# a dense-accumulator row with at least one key per this many columns is written out sorted by
# scanning its column flags (MovieLens A A^T rows), sparser rows through a bitmap
DENSE_SCAN_COLS = 32
# the dense symbolic phase tags columns with bytes up to this many columns (_tag_dtype)
TAG_BYTE_MAX_COLS = 24 << 10
# where no order is needed (the symbolic count, unsorted output) the scan competes with the
# per-product column tag or new-key list instead, and wins only for rows with about a key per
# flag word, whose scan reads few empty words (docs/performance.md, Decisions)
COUNT_SCAN_COLS = 8


# --------------------------------------------------------------------------------------------
# numba kernels (CPU)


@njit(cache=True, nogil=True, inline="always")
def _hash(key, size, mask):
    """The paper's hash (section 5.2): (key * 107) & (size - 1) for power-of-two tables, as an
    unsigned slot, so that the probes index the table without numba's wraparound (numba_util;
    metis-mdual numeric 0.92x the time)."""
    h = np.uint64(key) * np.uint64(HASH_SCALE)
    if mask >= 0:
        return h & np.uint64(mask)
    return h % np.uint64(size)


@njit(cache=True, nogil=True, inline="always")
def _flag_scanned(ncols, keys, cols_per_key):
    """Whether a dense-accumulator row with at most ``keys`` distinct columns (a bound in the
    symbolic phase, the count in the numeric one) among ``ncols`` has at least one key per
    ``cols_per_key`` columns (DENSE_SCAN_COLS or COUNT_SCAN_COLS), and so is handled by flag
    bytes and a scan of its column range, which needs the Y row ranges of _key_range_kernel."""
    return ncols <= cols_per_key * keys


@njit(parallel=True, cache=True, nogil=True)
def _key_range_kernel(yp, yi, ncols, out):
    """out[k] = (smallest, largest) column of row k of Y; (ncols, 0) for an empty row. The
    dense accumulator's flag scans take a row's range from these instead of a min and a max
    per product (one pass over Y's rows instead of two comparisons per product), without
    relying on Y's rows being sorted."""
    for k in prange(yp.shape[0] - 1):
        lo = ncols
        hi = 0
        for t in row_range(yp, k):
            lo = min(lo, yi[t])
            hi = max(hi, yi[t])
        out[k, 0] = lo
        out[k, 1] = hi


@njit(cache=True, nogil=True)
def _bin_rows(sizes, ranges, nbins):
    """Binning (Algorithms 1 and 2): row ids grouped by bin in one array, plus bin offsets.

    Bin b holds rows with ranges[b-1] < size <= ranges[b]; the last bin everything above
    ranges[nbins-2]. Pass 1 counts the bins and the largest size; if every row fits bin 0 the
    bins array is the identity (Algorithm 3) and pass 2 is skipped.
    """
    m = sizes.shape[0]
    counts = np.zeros(nbins, dtype=np.int64)
    which = np.empty(m, dtype=np.int8)
    biggest = 0
    for i in range(m):
        s = sizes[i]
        if s > biggest:
            biggest = s
        b = 0
        while b < nbins - 1 and s > ranges[b]:
            b += 1
        which[i] = b
        counts[b] += 1
    offsets = np.zeros(nbins + 1, dtype=np.int64)
    for b in range(nbins):
        offsets[b + 1] = offsets[b] + counts[b]
    order = np.empty(m, dtype=np.int64)
    if biggest <= ranges[0]:
        for i in range(m):
            order[i] = i
        return order, offsets, True
    fill = offsets[:nbins].copy()
    for i in range(m):
        b = which[i]
        order[fill[b]] = i
        fill[b] += 1
    return order, offsets, False


@njit(cache=True, nogil=True)
def _work_prefix(order, work):
    """P[q] = the work of the rows order[:q], each row counting work[row] + 1 (a row costs
    something even without products); shape (len(order) + 1,)."""
    m = order.shape[0]
    prefix = np.empty(m + 1, dtype=np.int64)
    run = 0
    for q in range(m):
        prefix[q] = run
        run += work[order[q]] + 1
    prefix[m] = run
    return prefix


@njit(cache=True, nogil=True)
def _split_run(prefix, lo, hi, parts, out):
    """Cut the rows lo:hi (positions into ``prefix``'s order) into ``parts`` consecutive runs
    of about equal work: out[c] is the first position q in lo..hi whose run lo:q holds at least
    c / parts of the work of lo:hi (rows are not split, so a run holds at most its share plus
    one row). out has parts + 1 entries, out[0] = lo and out[parts] = hi. Binary searches in
    the prefix sum: a cut costs a logarithm of the rows, not a pass over them."""
    base = prefix[lo]
    total = prefix[hi] - base
    out[0] = lo
    for c in range(1, parts):
        a = lo
        b = hi  # the answer is in a..b: (prefix[hi] - base) * parts >= total * c
        while a < b:
            mid = (a + b) >> 1
            if (prefix[mid] - base) * parts >= total * c:
                b = mid
            else:
                a = mid + 1
        out[c] = a
    out[parts] = hi


@njit(cache=True, nogil=True)
def _split_bins(prefix, offsets, nchunks):
    """:func:`_split_run` of every bin offsets[b]:offsets[b+1] into nchunks runs; shape
    (nbins, nchunks + 1)."""
    nbins = offsets.shape[0] - 1
    bounds = np.empty((nbins, nchunks + 1), dtype=np.int64)
    for b in range(nbins):
        _split_run(prefix, offsets[b], offsets[b + 1], nchunks, bounds[b])
    return bounds


@njit(cache=True, nogil=True)
def _chunk_bounds(order, offsets, work, nchunks):
    """Split every bin's rows order[offsets[b]:offsets[b+1]] into nchunks runs of about equal
    total work (work[row] = its products, known from the setup step); returns the run bounds
    as positions in ``order``, shape (nbins, nchunks + 1).

    Splitting by row count left one of two threads with 1.26x the mean products on
    genes-pubmed (rows of 100 to 20000 products in one bin); OpenMP's static schedule cannot
    even that out itself.
    """
    return _split_bins(_work_prefix(order, work), offsets, nchunks)


@njit(cache=True, nogil=True)
def _unbinned(work, nbins, nchunks):
    """The rows in their own order, as ``nbins`` consecutive groups of about equal total work
    (work[row] + 1 each), in the shape of :func:`_bin_rows`'s result (one_bin False: no
    binning was done), and each group's split into nchunks runs (as :func:`_chunk_bounds`).
    Binning picks a row's table; under the dense accumulator there is none, and the rows' own
    order writes C front to back. The groups are there for the thread split: every thread
    gets a share of every group, as of every bin, which keeps the threads even where the cost
    per product drifts along the rows (MovieLens A A^T, split in two halves by products:
    2 threads 1.6x slower).

    Returns (order, offsets, one_bin, bounds)."""
    m = work.shape[0]
    order = np.arange(m)
    prefix = _work_prefix(order, work)
    offsets = np.empty(nbins + 1, dtype=np.int64)
    _split_run(prefix, 0, m, nbins, offsets)
    return order, offsets, False, _split_bins(prefix, offsets, nchunks)


@njit(parallel=True, cache=True, nogil=True)
def _symbolic_plan(xp, xi, yp, ncols, ranges, tables, abort_limit, nchunks, binned):
    """Setup and symbolic binning (steps 1-2) in one call, since each call from Python costs
    (a small product's whole symbolic phase is a few such calls): the products of every
    output row (nprod, parallel over rows), their bound min(nprod, ncols) on its nnz, the
    binning by the bound (:func:`_bin_rows`), each binned row's table and count limit (the
    last bin's rows abort at ``abort_limit``), and the chunks (:func:`_chunk_bounds`). With
    ``binned`` False (the dense accumulator takes every row, and no table is sized) the rows
    are not binned: they stay in their order (:func:`_unbinned`).

    Returns (nprod, bound, order, offsets, one_bin, rsize, limit, bounds, products,
    max_bound)."""
    m = xp.shape[0] - 1
    nprod = np.empty(m, dtype=np.int64)
    bound = np.empty(m, dtype=np.int64)
    products = 0
    max_bound = 0
    for i in prange(m):
        s = row_products(xp, xi, yp, i)
        nprod[i] = s
        bound[i] = min(s, ncols)
        products += s
        max_bound = max(max_bound, min(s, ncols))
    nbins = tables.shape[0]
    if binned:
        order, offsets, one_bin = _bin_rows(bound, ranges, nbins)
        rsize = bin_sizes(offsets, tables)
        limit = rsize.copy()
        limit[offsets[nbins - 1]:] = abort_limit
        bounds = _chunk_bounds(order, offsets, nprod, nchunks)
    else:
        order, offsets, one_bin, bounds = _unbinned(nprod, nbins, nchunks)
        rsize = limit = np.zeros(0, dtype=np.int64)  # no tables to size
    return (nprod, bound, order, offsets, one_bin, rsize, limit, bounds, products,
            max_bound)


@njit(cache=True, nogil=True)
def _numeric_plan(nnz, nprod, ranges, tables, top, nchunks, cp, binned):
    """Allocation and numeric binning (steps 4-5) in one call: C's row pointers cp (the
    prefix sum of nnz), the binning by nnz into the fixed-table bins and the last bin,
    each binned row's table (:func:`numeric_table_sizes`) and the chunks; with ``binned``
    False the rows stay in their order (:func:`_unbinned`).

    Returns (order, offsets, one_bin, rsize, bounds, nnz_c, max_nnz, direct_products), the
    last the products of the rows without two products in one column (nnz = nprod)."""
    total = 0
    biggest = 0
    direct = 0
    for i in range(nnz.shape[0]):
        total += nnz[i]
        cp[i + 1] = total
        biggest = max(biggest, nnz[i])
        if nnz[i] == nprod[i]:
            direct += nprod[i]
    if binned:
        order, offsets, one_bin = _bin_rows(nnz, ranges, tables.shape[0] + 1)
        rsize = numeric_table_sizes(nnz, order, offsets, tables, top)
        bounds = _chunk_bounds(order, offsets, nprod, nchunks)
    else:
        order, offsets, one_bin, bounds = _unbinned(nprod, tables.shape[0] + 1, nchunks)
        rsize = np.zeros(0, dtype=np.int64)  # no tables to size
    return order, offsets, one_bin, rsize, bounds, total, biggest, direct


@njit(cache=True, nogil=True, inline="always")
def _prefetch_y_row(xi, yp, yi, yv, a):
    """Prefetch the row of Y that entry a of X selects: its keys, and its values unless yv is
    None (the symbolic phase; the branch is removed at compile time)."""
    k = xi[a]
    prefetch_span(yi, yp[k], yp[k + 1])
    if yv is not None:
        prefetch_span(yv, yp[k], yp[k + 1])


@njit(cache=True, nogil=True, inline="always")
def _chunk_table_max(bounds, rsize, c):
    """The largest table among the rows of chunk c (its scratch table is that big)."""
    tmax = 1
    for b in range(bounds.shape[0]):
        for q in range(bounds[b, c], bounds[b, c + 1]):
            if rsize[q] > tmax:
                tmax = rsize[q]
    return tmax


@njit(cache=True, nogil=True, inline="always")
def _prefetch_ahead(on, xi, yp, yi, yv, a, end):
    """The prefetching of the dense phases, called once per X entry a: their rows are taken
    in their own order, so a chunk's X entries up to ``end`` are contiguous and the entry
    PREFETCH_ROWS ahead is simply a + PREFETCH_ROWS (no cursors over a row order, as
    :func:`_prefetch_step` needs): its Y row is asked for, and the indptr entry of the one
    PREFETCH_INDPTR ahead. With ``on`` False nothing is done."""
    if on:
        b = a + PREFETCH_ROWS
        if b < end:
            _prefetch_y_row(xi, yp, yi, yv, b)
        b = a + PREFETCH_INDPTR
        if b < end:
            k = xi[b]
            prefetch_span(yp, k, k + 2)


@njit(cache=True, nogil=True, inline="always")
def _cursor_step(xp, order, hi, q, a, e):
    """Move a cursor over the X entries of the rows order[q], order[q+1], ..., order[hi-1] on
    by one entry; returns the new (q, a, e) (entry a of row order[q], whose entries end at e);
    a >= e once the rows are exhausted."""
    a += 1
    while a >= e and q + 1 < hi:
        q += 1
        r = order[q]
        a = xp[r]
        e = xp[r + 1]
    return q, a, e


@njit(cache=True, nogil=True, inline="always")
def _indptr_cursor_step(xp, xi, yp, order, hi, q, a, e):
    """_cursor_step, then prefetch the indptr entry of the Y row that the new entry selects."""
    q, a, e = _cursor_step(xp, order, hi, q, a, e)
    if a < e:
        k = xi[a]
        prefetch_span(yp, k, k + 2)
    return q, a, e


@njit(cache=True, nogil=True, inline="always")
def _cursors_start(mode, xp, xi, yp, order, lo, hi):
    """The two prefetch cursors of _prefetch_step, placed PREFETCH_ROWS and PREFETCH_INDPTR
    entries ahead of the first entry of row order[lo] (prefetching the indptr entries they
    pass), as one tuple; unless ``mode`` is PREFETCH_CURSORS they stay put and prefetch
    nothing."""
    q1 = lo
    a1 = -1
    e1 = -1
    if mode != PREFETCH_CURSORS:
        return q1, a1, e1, q1, a1, e1
    if lo < hi:
        a1 = xp[order[lo]] - 1
        e1 = xp[order[lo] + 1]
    q2, a2, e2 = q1, a1, e1
    for _ in range(PREFETCH_ROWS):
        q1, a1, e1 = _indptr_cursor_step(xp, xi, yp, order, hi, q1, a1, e1)
    for _ in range(PREFETCH_INDPTR):
        q2, a2, e2 = _indptr_cursor_step(xp, xi, yp, order, hi, q2, a2, e2)
    return q1, a1, e1, q2, a2, e2


@njit(cache=True, nogil=True, inline="always")
def _prefetch_step(mode, xp, xi, yp, yi, yv, order, hi, cur, a, end):
    """Called once per X entry a processed (``mode`` PREFETCH_CURSORS): the near cursor asks
    for the Y row that the entry PREFETCH_ROWS ahead selects (its indptr entry is cached by
    then), the far one for the indptr entry of the entry PREFETCH_INDPTR ahead. The cursors run
    over the rows in their processing order, across row ends, so short rows are covered too.
    ``cur`` is the cursors' state (q1, a1, e1, q2, a2, e2), returned moved on. With
    PREFETCH_CONTIGUOUS (rows in their own order) the entries ahead are simply a + ..., up to
    ``end`` (:func:`_prefetch_ahead`); with PREFETCH_OFF nothing is done."""
    if mode == PREFETCH_CONTIGUOUS:
        _prefetch_ahead(True, xi, yp, yi, yv, a, end)
        return cur
    if mode != PREFETCH_CURSORS:
        return cur
    q1, a1, e1, q2, a2, e2 = cur
    q1, a1, e1 = _cursor_step(xp, order, hi, q1, a1, e1)
    if a1 < e1:
        _prefetch_y_row(xi, yp, yi, yv, a1)
    q2, a2, e2 = _indptr_cursor_step(xp, xi, yp, order, hi, q2, a2, e2)
    return q1, a1, e1, q2, a2, e2


@njit(cache=True, nogil=True, inline="always")
def _put(ci, cv, t, key, val, stream):
    """Entry t of C: ci[t] = key, cv[t] = val; as non-temporal stores when ``stream``.

    In a loop, pass ``stream`` as a literal (one loop per value, as the row writers here are
    called): with a run-time flag LLVM merged the stores of both ways for some of the unrolled
    entries into plain stores, so lines of C were written partly streamed and partly through
    the cache, which ran 4-30x slower (numba's cached code: unsorted ER n=20000 and
    genes-pubmed with hash tables only; sorted, the bucket-sorted rows of a symmetric
    Erdos-Renyi n=500000 A*A, 1.79 s against 0.36 s unstreamed)."""
    if stream:
        stream_store(ci, t, key)
        stream_store(cv, t, val)
    else:
        ci[t] = key
        cv[t] = val


@njit(cache=True, nogil=True, inline="always")
def _copy_products(xa, xe, t, end, prefetch, xi, xv, yp, yi, yv, ci, cv, stream):
    """A row none of whose products share a column (its nnz equals its products): the
    products of its X entries xa:xe, in their order, to ci/cv from entry t on, prefetching
    as :func:`_prefetch_ahead`. The caller passes ``stream`` as a literal True in one call
    and False in another, so that neither copy of the loop has a per-product branch: LLVM
    does not unswitch it by itself in :func:`_numeric_dense_kernel`."""
    for a in range(xa, xe):
        _prefetch_ahead(prefetch, xi, yp, yi, yv, a, end)
        k = xi[a]
        av = xv[a]
        for s in row_range(yp, k):
            _put(ci, cv, t, yi[s], av * yv[s], stream)
            t += 1


@njit(cache=True, nogil=True, inline="always")
def _copy_products_hashed(xa, xe, t, prefetch, xp, xi, xv, yp, yi, yv, order, hi, cur, end, ci,
                          cv, stream):
    """:func:`_copy_products` for the hash kernel's rows, which are taken in bin order, so
    the prefetching follows the cursors ``cur`` (:func:`_prefetch_step`); returns them moved
    on. ``stream`` is passed as a literal for the same reason as there: with a run-time flag
    LLVM merged the two ways' stores of some unrolled entries into plain stores, so lines of C
    got streamed and plain stores mixed, and the unsorted numeric phase of ER n=20000 with
    hash tables only ran 4-5x slower in numba's cached code."""
    for a in range(xa, xe):
        cur = _prefetch_step(prefetch, xp, xi, yp, yi, yv, order, hi, cur, a, end)
        k = xi[a]
        av = xv[a]
        for s in row_range(yp, k):
            _put(ci, cv, t, yi[s], av * yv[s], stream)
            t += 1
    return cur


@njit(cache=True, nogil=True, inline="always")
def _listed_out(new, n, acc, flags, ci, cv, t, stream):
    """Write a dense-accumulator row's n keys in the order listed in ``new`` (first met), with
    their values from ``acc``, to C from entry t on, and clear acc and the flags. ``stream`` is
    a literal at every call (see :func:`_copy_products_hashed`)."""
    for u in range(n):
        key = new[u]
        _put(ci, cv, t + u, key, acc[key], stream)
        acc[key] = 0
        flags[key] = 0


@njit(cache=True, nogil=True, inline="always")
def _slots_out(rkey, rslot, m, keys, vals, ci, cv, t, stream):
    """Write a hashed row's m keys in insertion order (rkey, their slots rslot) with their
    values to C from entry t on, and free the slots. ``stream`` is a literal at every call
    (see :func:`_copy_products_hashed`)."""
    for u in range(m):
        h = rslot[u]
        _put(ci, cv, t + u, rkey[u], vals[h], stream)
        keys[h] = -1


@njit(cache=True, nogil=True, inline="always")
def _marked_out(words, lo, hi, per_word_log2, acc, ci, cv, t, stream):
    """Write the columns marked in words[lo:hi], in increasing order, with their values from
    the dense accumulator ``acc`` to C from entry t on, and clear the marks and the values.
    ``per_word_log2`` 6: the words are a bitmap (bit b of word w marks column 64 w + b); 3: they
    are flag bytes (byte b of word w, 0 or 1, marks column 8 w + b: its bit is bit 8 b)."""
    one = np.uint64(1)
    byte_shift = 3 if per_word_log2 == 3 else 0
    for w in range(lo, hi):
        x = words[w]
        if x == 0:
            continue
        words[w] = 0
        while x:
            key = (w << per_word_log2) + (trailing_zeros(x) >> byte_shift)
            x &= x - one
            _put(ci, cv, t, key, acc[key], stream)
            acc[key] = 0
            t += 1


@njit(parallel=True, cache=True, nogil=True)
def _y_bitmap_kernel(yp, yi, out):
    """out[k] = the columns of row k of Y as a bitmap (bit c & 63 of word c >> 6)."""
    one = np.uint64(1)
    for k in prange(yp.shape[0] - 1):
        out[k, :] = 0
        for t in row_range(yp, k):
            key = yi[t]
            out[k, key >> 6] |= one << np.uint64(key & 63)


@njit(cache=True, nogil=True, inline="always")
def _or_y_row(marks, ybits, yp, yi, k):
    """marks |= the columns of row k of Y: its whole bitmap (a vectorised stream over a fixed
    width: limiting it to the row's column range ran 4x slower on MovieLens), or one bit per
    key for a row with fewer keys than a quarter of the bitmap's words."""
    one = np.uint64(1)
    words = ybits.shape[1]
    if 4 * (yp[k + 1] - yp[k]) >= words:
        row = ybits[k]
        for w in range(words):
            marks[w] |= row[w]
    else:
        for t in row_range(yp, k):
            key = yi[t]
            marks[key >> 6] |= one << np.uint64(key & 63)


@njit(parallel=True, cache=True, nogil=True)
def _symbolic_dense_kernel(xp, xi, yp, yi, bounds, nchunks, ncols, nprod, yrange, ybits,
                           use_ybits, prefetch, tags, nnz):
    """Symbolic phase on spECK's dense accumulator (see :func:`hash_spgemm`): the distinct
    column count of every row to nnz[row], with a per-thread array over C's ``ncols`` columns
    instead of a hash table (no probes, no overflow). The rows are in their own order; chunk
    c takes the rows bounds[b, c]:bounds[b, c+1] of every group b (:func:`_unbinned`).

    Rows whose products could fill one column in 8 (``COUNT_SCAN_COLS``) set flags and count
    them by a scan over their column range, 8 flags per word (the range from yrange, the
    smallest and largest column of every row of Y); with ``use_ybits`` they OR the bitmaps of
    their Y rows (``ybits``, see :func:`_scan_inputs`) and count the bits instead. Sparser rows
    tag their columns with the row's number.

    A kernel of its own, apart from the hash tables' :func:`_symbolic_hash_kernel`: in one
    kernel with them, ER n=20000 A*A's count was about 20% slower (LLVM optimises the smaller
    loop nest better)."""
    bytesum = np.uint64(0x0101010101010101)
    for c in prange(nchunks):
        flags64 = np.zeros((ncols >> 3) + 1, dtype=np.uint64)
        flags = flags64.view(np.uint8)  # all 0 between rows
        tag = tags[c]  # all 0 on entry
        top = np.iinfo(tags.dtype).max
        gen = 0
        marks = np.zeros(ybits.shape[1], dtype=np.uint64)
        for b in range(bounds.shape[0]):
            lo = bounds[b, c]
            hi = bounds[b, c + 1]
            end = xp[hi]
            for i in range(lo, hi):
                xa = xp[i]
                xe = xp[i + 1]
                if _flag_scanned(ncols, min(nprod[i], ncols), COUNT_SCAN_COLS):
                    if use_ybits:
                        for a in range(xa, xe):
                            _prefetch_ahead(prefetch, xi, yp, yi, None, a, end)
                            _or_y_row(marks, ybits, yp, yi, xi[a])
                        cnt = 0
                        for w in range(marks.shape[0]):
                            cnt += np.int64(popcount(marks[w]))
                            marks[w] = 0
                        nnz[i] = cnt
                        continue
                    kmin = ncols
                    kmax = 0
                    for a in range(xa, xe):
                        _prefetch_ahead(prefetch, xi, yp, yi, None, a, end)
                        k = xi[a]
                        kmin = min(kmin, yrange[k, 0])
                        kmax = max(kmax, yrange[k, 1])
                        for t in row_range(yp, k):
                            flags[yi[t]] = 1
                    cnt = 0
                    for w in range(kmin >> 3, (kmax >> 3) + 1):
                        # the 8 flag bytes (each 0 or 1) summed by one multiply
                        cnt += np.int64((flags64[w] * bytesum) >> np.uint64(56))
                        flags64[w] = 0
                    nnz[i] = cnt
                    continue
                # a column is new to the row when its tag is not the row's generation number
                # (scipy's mask): branch-free, and nothing to reset after the row; the tags
                # are cleared once every ``top`` rows (see _tag_dtype)
                gen += 1
                if gen > top:
                    tag[:] = 0
                    gen = 1
                g = tag.dtype.type(gen)
                cnt = 0
                for a in range(xa, xe):
                    _prefetch_ahead(prefetch, xi, yp, yi, None, a, end)
                    k = xi[a]
                    for t in row_range(yp, k):
                        key = yi[t]
                        cnt += tag[key] != g
                        tag[key] = g
                nnz[i] = cnt


@njit(parallel=True, cache=True, nogil=True)
def _symbolic_hash_kernel(xp, xi, yp, yi, order, bounds, rsize, limit, nchunks, prefetch, nnz,
                          probes):
    """Symbolic hash phase (Algorithm 4) for the rows ``order``, bins split by ``bounds``.

    Row order[q] uses a table of rsize[q] slots; its distinct column count goes to nnz[row],
    or -1 if the count passed limit[q] (then the row must be recomputed with a bigger table).
    Chunk c takes the rows bounds[b, c]:bounds[b, c+1] of every bin b (see _chunk_bounds) and
    keeps one scratch table. probes[c, b] counts the table accesses of chunk c in bin b.
    """
    nbins = bounds.shape[0]
    for c in prange(nchunks):
        table = np.empty(_chunk_table_max(bounds, rsize, c), dtype=np.int32)
        for b in range(nbins):
            lo = bounds[b, c]
            hi = bounds[b, c + 1]
            pr = 0
            cur = _cursors_start(prefetch, xp, xi, yp, order, lo, hi)
            end = xp[order[hi - 1] + 1] if hi > lo else 0  # for PREFETCH_CONTIGUOUS
            for q in range(lo, hi):
                i = order[q]
                xe = xp[i + 1]
                size = rsize[q]
                mask = size - 1 if (size & (size - 1)) == 0 else -1
                lim = limit[q]
                table[:size] = -1
                cnt = 0
                aborted = False
                for a in range(xp[i], xe):
                    cur = _prefetch_step(prefetch, xp, xi, yp, yi, None, order, hi, cur, a, end)
                    k = xi[a]
                    for t in row_range(yp, k):
                        key = yi[t]
                        h = _hash(key, size, mask)
                        while True:
                            pr += 1
                            old = table[h]
                            if old == -1:
                                table[h] = key
                                cnt += 1
                                break
                            if old == key:
                                break
                            h += np.uint64(1)
                            if h == np.uint64(size):
                                h = np.uint64(0)
                        if cnt > lim:
                            aborted = True
                            break
                    if aborted:
                        for a2 in range(a + 1, xe):  # keep the cursors ahead
                            cur = _prefetch_step(prefetch, xp, xi, yp, yi, None, order, hi, cur,
                                                 a2, end)
                        break
                nnz[i] = -1 if aborted else cnt
            probes[c, b] += pr


@njit(cache=True, nogil=True, inline="always")
def _insertion_sort(a, lo, hi):
    for u in range(lo + 1, hi):
        x = a[u]
        w = u
        while w > lo and a[w - 1] > x:
            a[w] = a[w - 1]
            w -= 1
        a[w] = x


@njit(cache=True, nogil=True)
def _sort_row(a, tmp, counts, n, kmin, kmax, passes):
    """Sort a[:n] (keys in bits 32.. of each int64, within [kmin, kmax]); returns the buffer
    that holds the sorted row (``a`` or ``tmp``).

    Comparison sorts mispredict a branch per comparison on random rows, which cost more than
    the hashing itself (measured), so rows are sorted by distribution instead:

    * up to 32 keys: insertion sort;
    * otherwise one counting pass over about n buckets of the key range [kmin, kmax] (one key
      per bucket on average), then one insertion-sort pass over the nearly sorted row;
    * if some bucket holds more than 32 keys (clustered keys), a least-significant-digit radix
      sort on 8-bit digits (``passes`` passes) instead, whose cost does not depend on the keys.
    """
    if n <= 32:
        _insertion_sort(a, 0, n)
        return a
    nb = counts.shape[0] - 1  # buckets 0..nb-1 use counts[0..nb]
    while nb > 64 and nb // 2 >= n:
        nb //= 2
    span = kmax - kmin + 1
    shift = 0
    while (span - 1) >> shift >= nb:
        shift += 1
    counts[:nb + 1] = 0
    for u in range(n):
        counts[(((a[u] >> 32) - kmin) >> shift) + 1] += 1
    biggest = 0
    for d in range(nb):
        c = counts[d + 1]
        if c > biggest:
            biggest = c
        counts[d + 1] = counts[d] + c
    if biggest <= 32:
        for u in range(n):
            x = a[u]
            d = ((x >> 32) - kmin) >> shift
            tmp[counts[d]] = x
            counts[d] += 1
        # keys are now out of order only inside their bucket (at most 32 each, about one on
        # average): one insertion-sort pass over the whole row costs little more than a scan
        _insertion_sort(tmp, 0, n)
        return tmp
    src = a
    dst = tmp
    for p in range(passes):
        shift = 32 + 8 * p
        counts[:256] = 0
        for u in range(n):
            counts[(src[u] >> shift) & 255] += 1
        run = 0
        for d in range(256):
            c = counts[d]
            counts[d] = run
            run += c
        for u in range(n):
            x = src[u]
            d = (x >> shift) & 255
            dst[counts[d]] = x
            counts[d] += 1
        src, dst = dst, src
    return src


@njit(cache=True, nogil=True, inline="always")
def _find(keys, key, size, mask):
    """The slot of a key known to be in the table (linear probing from its hash)."""
    h = _hash(key, size, mask)
    while keys[h] != key:
        h += np.uint64(1)
        if h == np.uint64(size):
            h = np.uint64(0)
    return h


@njit(cache=True, nogil=True, inline="always")
def _bitmap_keys_out(bitmap, summary, nsum, base, ci, start):
    """Write base + the position of every set bit of ``bitmap`` to ci[start:] in increasing
    order and clear both levels; ``summary`` has one bit per nonzero bitmap word, in its first
    ``nsum`` words. Returns the number of keys. Skipping whole summary words and then whole
    bitmap words costs O(keys + words / 64)."""
    one = np.uint64(1)
    t = start
    for s in range(nsum):
        y = summary[s]
        if y == 0:
            continue
        summary[s] = 0
        while y:
            w = (s << 6) + trailing_zeros(y)
            y &= y - one
            x = bitmap[w]
            bitmap[w] = 0
            wbase = base + (w << 6)
            while x:
                ci[t] = wbase + trailing_zeros(x)
                x &= x - one
                t += 1
    return t - start


@njit(cache=True, nogil=True)
def _write_bitmap_row(rkey, m, kmin, span, keys, vals, size, mask, bitmap, summary, ci, cv,
                      start):
    """Write the row's m keys rkey[:m] (all in [kmin, kmin + span)) in increasing order, with
    their values from the table, to ci/cv[start:], and empty their slots.

    Sorting through a two-level bitmap: one bit per key of the range, and one summary bit per
    64-bit word; scanning the summary and then the marked words yields the keys in order. It
    costs O(m + span / 4096), so it is used when the keys are not too sparse in their range
    (genes-pubmed rows: about 5000 keys in a range of 20000). ``bitmap`` and ``summary`` are
    all zero on entry and on exit.
    """
    one = np.uint64(1)
    for u in range(m):
        d = np.int64(rkey[u]) - kmin
        bitmap[d >> 6] |= one << np.uint64(d & 63)
        summary[d >> 12] |= one << np.uint64((d >> 6) & 63)
    _bitmap_keys_out(bitmap, summary, (span + 4095) >> 12, kmin, ci, start)
    for t in range(start, start + m):
        # emptying the slot at once is safe: _find never stops at an empty slot, and every
        # key it looks for later is still in the table
        h = _find(keys, ci[t], size, mask)
        cv[t] = vals[h]
        keys[h] = -1


@njit(cache=True, nogil=True, inline="always")
def _write_row(rkey, rslot, m, keys, vals, size, mask, span_max, passes, bitmap, summary,
               packed, tmp, counts, ci, cv, start, stream):
    """Write the row whose m keys rkey[:m] sit in slots rslot[:m] of the table ``keys`` /
    ``vals`` to ci/cv[start:start+m] sorted by column, and empty the slots. The sort takes one
    of three ways, returned as 0, 1 or 2: a rank sort for rows of up to 32 keys, a bitmap over
    the keys' range when the keys are dense enough in it (_write_bitmap_row), else a
    counting/radix sort of (key << 32 | slot) pairs (_sort_row)."""
    if m <= 32:
        # short rows: each key's place is the number of smaller keys (branch-free compares
        # over int32 keys that vectorise 8 wide, where int64 (key, slot) pairs would take
        # twice the lanes; an insertion sort mispredicts at every step)
        for u in range(m):
            x = rkey[u]
            rank = 0
            for w in range(m):
                rank += rkey[w] < x
            h = rslot[u]
            _put(ci, cv, start + rank, x, vals[h], stream)
            keys[h] = -1
        return 0
    kmin = np.int64(2**31)
    kmax = np.int64(-1)
    for u in range(m):
        kh = np.int64(rkey[u])
        kmin = min(kmin, kh)
        kmax = max(kmax, kh)
    span = kmax - kmin + 1
    if span <= span_max and (span + 4095) >> 12 <= m:
        _write_bitmap_row(rkey, m, kmin, span, keys, vals, size, mask, bitmap, summary, ci,
                          cv, start)
        return 1
    for u in range(m):
        packed[u] = (np.int64(rkey[u]) << 32) | rslot[u]
    srt = _sort_row(packed, tmp, counts, m, kmin, kmax, passes)
    for u in range(m):
        h = srt[u] & 0xFFFFFFFF
        _put(ci, cv, start + u, np.int32(srt[u] >> 32), vals[h], stream)
        keys[h] = -1
    return 2


@njit(parallel=True, cache=True, nogil=True)
def _numeric_dense_kernel(xp, xi, xv, yp, yi, yv, bounds, nchunks, ncols, sort_rows, nprod,
                          yrange, ybits, use_ybits, prefetch, stream, cp, ci, cv, sorts):
    """Numeric phase on spECK's dense accumulator (see :func:`hash_spgemm`): every row of C
    accumulates into a per-thread array over the ``ncols`` columns, in the rows' own order
    (chunk c takes the rows bounds[b, c]:bounds[b, c+1] of every group b, :func:`_unbinned`).

    Rows with at least one key per 32 columns (``DENSE_SCAN_COLS``) flag their columns in a
    byte array that is scanned 8 columns per word over the row's range, known from yrange
    (sorts[c, 3]), or, with ``use_ybits``, OR the bitmaps of their Y rows and read the keys out
    of that (sorts[c, 7]); both come out sorted. With ``sort_rows`` sparser rows mark a bitmap,
    and a summary bit per bitmap word on its first mark, which are scanned through (sorts[c,
    4]). With ``sort_rows`` False a row whose products all have distinct columns (its nnz
    equals its nprod) is written straight from them (sorts[c, 6]); other rows are written in
    the order their columns were first met (sorts[c, 5]), as scipy's SMMP does, except that
    rows with a key per 8 columns (``COUNT_SCAN_COLS``) still take the flag or bitmap scan,
    which costs less than a new-key list there.

    A kernel of its own, apart from the hash tables' :func:`_numeric_hash_kernel`: in one
    kernel with them, this phase ran slower than alone (the same loops; LLVM optimises the
    smaller loop nest better, and the prefetching needs no cursors here)."""
    one = np.uint64(1)
    for c in prange(nchunks):
        # a value, a flag byte and a bitmap bit per column of C, all 0 between rows; the
        # bitmap summary has one bit per bitmap word
        acc = np.zeros(ncols, dtype=cv.dtype)
        flags64 = np.zeros((ncols >> 3) + 1, dtype=np.uint64)
        flags = flags64.view(np.uint8)
        marks = np.zeros((ncols >> 6) + 1, dtype=np.uint64)
        marks_summary = np.zeros((ncols >> 12) + 1, dtype=np.uint64)
        new = np.empty(1 if sort_rows else ncols + 1, dtype=np.uint32)
        # rows per way, kept in registers: two threads' increments of sorts[c, :] per row can
        # share a cache line
        way3 = way4 = way5 = way6 = way7 = 0
        for b in range(bounds.shape[0]):
            lo = bounds[b, c]
            hi = bounds[b, c + 1]
            end = xp[hi]
            for i in range(lo, hi):
                start = cp[i]
                n = cp[i + 1] - start
                xa = xp[i]
                xe = xp[i + 1]
                if n == 0:  # no products
                    continue
                if not sort_rows and n == nprod[i]:
                    # no two products share a column (Erdos-Renyi rows mostly): the products,
                    # in their order, are the row, and the accumulator is not touched
                    if stream:
                        _copy_products(xa, xe, start, end, prefetch, xi, xv, yp, yi, yv, ci, cv,
                                       True)
                    else:
                        _copy_products(xa, xe, start, end, prefetch, xi, xv, yp, yi, yv, ci, cv,
                                       False)
                    way6 += 1
                    continue
                if use_ybits and _flag_scanned(
                        ncols, n, DENSE_SCAN_COLS if sort_rows else COUNT_SCAN_COLS):
                    # the row's columns are the OR of its Y rows' bitmaps: no per-product mark
                    for a in range(xa, xe):
                        _prefetch_ahead(prefetch, xi, yp, yi, yv, a, end)
                        k = xi[a]
                        av = xv[a]
                        _or_y_row(marks, ybits, yp, yi, k)
                        for t in row_range(yp, k):
                            acc[yi[t]] += av * yv[t]
                    if stream:
                        _marked_out(marks, 0, marks.shape[0], 6, acc, ci, cv, start, True)
                    else:
                        _marked_out(marks, 0, marks.shape[0], 6, acc, ci, cv, start, False)
                    way7 += 1
                    continue
                if not sort_rows and not _flag_scanned(ncols, n, COUNT_SCAN_COLS):
                    # the symbolic phase's branch-free new-key list, then the row in that order
                    # (rows dense in the columns take the flag scan below: it costs less than
                    # the list, and sorts for free)
                    cnt = np.uint64(0)  # unsigned: new[cnt] without wraparound
                    for a in range(xa, xe):
                        _prefetch_ahead(prefetch, xi, yp, yi, yv, a, end)
                        k = xi[a]
                        av = xv[a]
                        for t in row_range(yp, k):
                            key = yi[t]
                            acc[key] += av * yv[t]
                            new[cnt] = key
                            cnt += np.uint64(1 - flags[key])
                            flags[key] = 1
                    if stream:
                        _listed_out(new, n, acc, flags, ci, cv, start, True)
                    else:
                        _listed_out(new, n, acc, flags, ci, cv, start, False)
                    way5 += 1
                    continue
                if _flag_scanned(ncols, n, DENSE_SCAN_COLS):
                    # flags are plain stores: marking a bitmap instead costs a read-modify-
                    # write per product on words that the next keys of a dense Y row share
                    kmin = ncols
                    kmax = 0
                    for a in range(xa, xe):
                        _prefetch_ahead(prefetch, xi, yp, yi, yv, a, end)
                        k = xi[a]
                        av = xv[a]
                        kmin = min(kmin, yrange[k, 0])
                        kmax = max(kmax, yrange[k, 1])
                        for t in row_range(yp, k):
                            key = yi[t]
                            acc[key] += av * yv[t]
                            flags[key] = 1
                    wlo = kmin >> 3
                    whi = (kmax >> 3) + 1
                    if stream:
                        _marked_out(flags64, wlo, whi, 3, acc, ci, cv, start, True)
                    else:
                        _marked_out(flags64, wlo, whi, 3, acc, ci, cv, start, False)
                    way3 += 1
                    continue
                for a in range(xa, xe):
                    _prefetch_ahead(prefetch, xi, yp, yi, yv, a, end)
                    k = xi[a]
                    av = xv[a]
                    for t in row_range(yp, k):
                        key = yi[t]
                        acc[key] += av * yv[t]
                        w = key >> 6
                        word = marks[w]
                        if word == 0:
                            marks_summary[w >> 6] |= one << np.uint64(w & 63)
                        marks[w] = word | (one << np.uint64(key & 63))
                _bitmap_keys_out(marks, marks_summary, marks_summary.shape[0], 0, ci, start)
                for t in range(start, start + n):
                    key = ci[t]
                    cv[t] = acc[key]
                    acc[key] = 0
                way4 += 1
        sorts[c, 3] = way3
        sorts[c, 4] = way4
        sorts[c, 5] = way5
        sorts[c, 6] = way6
        sorts[c, 7] = way7
        if stream:
            store_fence()


@njit(parallel=True, cache=True, nogil=True)
def _numeric_hash_kernel(xp, xi, xv, yp, yi, yv, order, bounds, rsize, nchunks, passes, ncols,
                         sort_rows, nprod, prefetch, stream, cp, ci, cv, probes, sorts):
    """Numeric hash phase (Algorithm 5): accumulate, condense, sort and write each row of C.

    Row order[q] uses a table of rsize[q] slots. Every new key and its slot are recorded when
    the key is inserted (the condensing of the paper's ``shared_offset``, done during the
    insertion, so no scan of the table is needed), then the row is sorted by column and written
    out (_write_row, sort ways counted in sorts[c, 0..2]), and only the used slots are reset.
    probes[c, b] counts the accumulation probes.

    With ``sort_rows`` False a row whose products all have distinct columns (its nnz equals
    its nprod) is written straight from them (sorts[c, 6]); other rows are written in the
    order their columns were first met (sorts[c, 5]), as scipy's SMMP does.
    """
    nbins = bounds.shape[0]
    for c in prange(nchunks):
        tmax = _chunk_table_max(bounds, rsize, c)
        keys = np.full(tmax, -1, dtype=np.int32)  # kept all -1 between rows
        vals = np.empty(tmax, dtype=cv.dtype)
        packed = np.empty(tmax, dtype=np.int64)
        rkey = np.empty(tmax, dtype=np.int32)  # the row's new keys and their slots, in
        rslot = np.empty(tmax, dtype=np.int32)  # insertion order
        tmp = np.empty(tmax, dtype=np.int64)
        counts = np.empty(max(257, min(tmax, 1 << 16) + 1), dtype=np.int64)
        span_max = min(ncols, BITMAP_SPAN_MAX)
        bitmap = np.zeros((span_max + 63) // 64 + 1, dtype=np.uint64)
        summary = np.zeros((span_max + 4095) // 4096 + 1, dtype=np.uint64)
        way0 = way1 = way2 = way5 = way6 = 0  # rows per way (see _numeric_dense_kernel)
        for b in range(nbins):
            lo = bounds[b, c]
            hi = bounds[b, c + 1]
            pr = 0
            cur = _cursors_start(prefetch, xp, xi, yp, order, lo, hi)
            end = xp[order[hi - 1] + 1] if hi > lo else 0  # for PREFETCH_CONTIGUOUS
            for q in range(lo, hi):
                i = order[q]
                start = cp[i]
                n = cp[i + 1] - start
                xa = xp[i]
                xe = xp[i + 1]
                if n == 0:
                    for a in range(xa, xe):  # keep the cursors ahead
                        cur = _prefetch_step(prefetch, xp, xi, yp, yi, yv, order, hi, cur, a,
                                             end)
                    continue
                if not sort_rows and n == nprod[i]:
                    # no two products share a column: the products, in their order, are the
                    # row, and no table is touched
                    if stream:
                        cur = _copy_products_hashed(xa, xe, start, prefetch, xp, xi, xv, yp, yi,
                                                    yv, order, hi, cur, end, ci, cv, True)
                    else:
                        cur = _copy_products_hashed(xa, xe, start, prefetch, xp, xi, xv, yp, yi,
                                                    yv, order, hi, cur, end, ci, cv, False)
                    way6 += 1
                    continue
                size = rsize[q]
                mask = size - 1 if (size & (size - 1)) == 0 else -1
                m = np.uint64(0)  # unsigned: rkey[m] and rslot[m] without wraparound
                for a in range(xa, xe):
                    cur = _prefetch_step(prefetch, xp, xi, yp, yi, yv, order, hi, cur, a, end)
                    k = xi[a]
                    av = xv[a]
                    for t in row_range(yp, k):
                        key = yi[t]
                        h = _hash(key, size, mask)
                        while True:
                            pr += 1
                            old = keys[h]
                            if old == key:
                                vals[h] += av * yv[t]
                                break
                            if old == -1:
                                keys[h] = key
                                vals[h] = av * yv[t]  # so vals need no reset
                                rkey[m] = key
                                rslot[m] = h
                                m += np.uint64(1)
                                break
                            h += np.uint64(1)
                            if h == np.uint64(size):
                                h = np.uint64(0)
                m = np.int64(m)
                if not sort_rows:
                    if stream:
                        _slots_out(rkey, rslot, m, keys, vals, ci, cv, start, True)
                    else:
                        _slots_out(rkey, rslot, m, keys, vals, ci, cv, start, False)
                    way5 += 1
                    continue
                if stream:
                    way = _write_row(rkey, rslot, m, keys, vals, size, mask, span_max, passes,
                                     bitmap, summary, packed, tmp, counts, ci, cv, start, True)
                else:
                    way = _write_row(rkey, rslot, m, keys, vals, size, mask, span_max, passes,
                                     bitmap, summary, packed, tmp, counts, ci, cv, start, False)
                way0 += way == 0
                way1 += way == 1
                way2 += way == 2
            probes[c, b] += pr
        sorts[c, 0] = way0
        sorts[c, 1] = way1
        sorts[c, 2] = way2
        sorts[c, 5] = way5
        sorts[c, 6] = way6
        if stream:
            store_fence()


@njit(parallel=True, cache=True, nogil=True)
def _dense_to_csr_kernel(D, indptr, indices, data):
    """The nonzeros of the dense C-contiguous D into preallocated CSR arrays (row-parallel)."""
    for i in prange(D.shape[0]):
        t = indptr[i]
        row = D[i]
        for j in range(D.shape[1]):
            if row[j] != 0:
                indices[t] = j
                data[t] = row[j]
                t += 1


@njit(parallel=True, cache=True, nogil=True)
def _row_nnz_kernel(D, out):
    for i in prange(D.shape[0]):
        s = 0
        row = D[i]
        for j in range(D.shape[1]):
            s += row[j] != 0  # branch-free, vectorises
        out[i] = s


@njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
def _spmm_direct_kernel(sp_, si, vals, bp, bi, bv, out):
    """out[i] += sum over stored (i, k) of vals * (sparse row k of B), scattered straight into
    the dense output row (Gustavson's row-wise product with the output row as accumulator)."""
    for i in prange(sp_.shape[0] - 1):
        o = out[i]
        for t in range(sp_[i], sp_[i + 1]):
            k = si[t]
            v = vals[t]
            for u in row_range(bp, k):
                o[bi[u]] += v * bv[u]


@njit(parallel=True, cache=True, nogil=True)
def _scatter_add_kernel(cp, ci, cv, out):
    """out[i, ci[t]] += cv[t] for every entry t of row i of a CSR matrix (row-parallel)."""
    for i in prange(cp.shape[0] - 1):
        o = out[i]
        for t in row_range(cp, i):
            o[ci[t]] += cv[t]


@njit(parallel=True, cache=True, nogil=True)
def _sddmm_intersect_kernel(sp_, si, vals, ap, ai, av, bp, bi, bv, out, steps):
    """out[t] += vals[t] * sum over common columns of the sparse rows A[i] and B[j].

    The sorted column lists of the two rows are merged; steps[i] counts the merge steps."""
    zero = out.dtype.type(0)
    for i in prange(sp_.shape[0] - 1):
        a_lo = ap[i]
        a_hi = ap[i + 1]
        st = 0
        for t in range(sp_[i], sp_[i + 1]):
            j = si[t]
            x = a_lo
            y = bp[j]
            y_hi = bp[j + 1]
            s = zero
            while x < a_hi and y < y_hi:
                st += 1
                ca = ai[x]
                cb = bi[y]
                if ca == cb:
                    s += av[x] * bv[y]
                    x += 1
                    y += 1
                elif ca < cb:
                    x += 1
                else:
                    y += 1
            out[t] += vals[t] * s
        steps[i] = st


# --------------------------------------------------------------------------------------------
# the algorithm, driven from Python


def _num_chunks(rows: int) -> int:
    """Chunks per phase: one per numba thread, never more than rows (computed outside numba so
    the kernels stay cacheable)."""
    return max(1, min(numba.get_num_threads(), rows))


def _key_ranges(yp: np.ndarray, yi: np.ndarray, ncols: int) -> np.ndarray:
    """(rows of Y, 2) int32: the smallest and largest column of every row (ncols, 0 if empty)."""
    out = np.empty((yp.shape[0] - 1, 2), dtype=np.int32)
    _key_range_kernel(yp, yi, ncols, out)
    return out


def _scan_inputs(yp: np.ndarray, yi: np.ndarray, ncols: int
                 ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """What the flag-scanned dense rows read about Y, as (yrange, ybits), one of them None:
    Y's rows as bitmaps of ``ncols`` bits when those take no more words than Y has keys (at
    least one key per 64 columns on average: MovieLens A^T, or the dense block of an SpMM;
    a sparser Y's bitmaps would be mostly zeros), else the column range of every row
    (:func:`_key_ranges`) for the flag scans."""
    rows = yp.shape[0] - 1
    words = (ncols >> 6) + 1
    if rows * words > yi.shape[0]:
        return _key_ranges(yp, yi, ncols), None
    ybits = np.empty((rows, words), dtype=np.uint64)
    _y_bitmap_kernel(yp, yi, ybits)
    return None, ybits


def _tag_dtype(ncols: int) -> type:
    """The dense symbolic phase's column tags: bytes when a byte per column fits the L1 cache
    with room to spare (ER n=20000: 20000 columns, symbolic phase 5% less than with 16-bit
    tags, which did not fit), else 16 bits, since byte tags are cleared every 255 rows, a cost
    of ncols / 255 bytes per row (metis-mdual's 258569 columns: 8.5% slower with bytes)."""
    return np.uint8 if ncols <= TAG_BYTE_MAX_COLS else np.uint16


def _prefetch_mode(prefetch: bool, identity_order: bool) -> int:
    """The hash kernels' prefetch mode: PREFETCH_CONTIGUOUS for rows in their own order (the
    one-bin shortcut), PREFETCH_CURSORS otherwise, PREFETCH_OFF without prefetching."""
    if not prefetch:
        return PREFETCH_OFF
    return PREFETCH_CONTIGUOUS if identity_order else PREFETCH_CURSORS


def dense_phases(ncols: int, itemsize: int, dense_max_bytes: int) -> tuple[bool, bool]:
    """(symbolic, numeric): whether each phase uses the dense accumulator for C's ``ncols``
    columns, i.e. whether the per-thread arrays that its rows update at random fit
    ``dense_max_bytes``, counted as 2 bytes per column in the symbolic phase (its column tags,
    a byte or 16 bits by :func:`_tag_dtype`, and flag bytes) and a value and a flag byte in the
    numeric phase. 0 disables it."""
    return (dense_max_bytes > 0 and 2 * ncols <= dense_max_bytes,
            dense_max_bytes > 0 and ncols * (itemsize + 1) <= dense_max_bytes)


# the kernels' stand-ins for the Y row ranges and bitmaps when they are not made
_NO_RANGES = np.zeros((1, 2), dtype=np.int32)
_NO_BITS = np.zeros((1, 1), dtype=np.uint64)
_SORT_WAYS = tuple(f"sort_{way}_rows" for way in (
    "rank", "bitmap", "bucket", "dense_scan", "dense_bitmap", "skipped", "direct", "y_bitmap"))


@functools.lru_cache(maxsize=64)
def _bin_arrays(sym_tables: tuple, sym_ranges: tuple | None, num_tables: tuple,
                num_ranges: tuple | None) -> tuple[np.ndarray, ...]:
    """The tables and binning ranges of both phases as int64 arrays (the ranges from the
    paper's ratios where None), made once per configuration; the arrays are shared, so
    nothing may write to them."""
    if sym_ranges is None:
        sym_ranges = binning_ranges(sym_tables, 1.2)
    if num_ranges is None:
        num_ranges = binning_ranges(num_tables, 2.0)
    return tuple(np.array(v, dtype=np.int64) for v in (sym_tables, sym_ranges, num_tables,
                                                       num_ranges))


def hash_spgemm(X: CSRBlock, Y: CSRBlock, sym_tables=SYM_TABLES, sym_ranges=None,
                num_tables=NUM_TABLES, num_ranges=None, values: np.ndarray | None = None,
                dense_max_bytes: int = DENSE_MAX_BYTES, sort_output: bool = True
                ) -> tuple[CSRBlock, dict[str, float]]:
    """C = X @ Y by OpSparse's two-phase hash SpGEMM on the CPU; returns (C, counters).

    ``sym_ranges``/``num_ranges`` are the bins' upper bounds (same length as the tables); None
    means the paper's ratios 1.2 and 2. ``values`` replaces X.data if given. C has sorted column
    indices, int64 indptr and int32 indices. Not collective.

    A phase whose per-thread dense accumulator over C's columns fits ``dense_max_bytes``
    (:func:`dense_phases`; 0 = never) uses it for every row instead of the hash tables: spECK's
    dense accumulator, which OpSparse leaves out (its section 3) and which a CPU's L2 cache
    holds for matrices of up to about 10^5 columns. Such a phase bins no rows (a bin only picks
    a table size): its threads split the rows in their own order by products, and its bin
    counters are 0. The rows are counted in ``sym_dense_rows`` / ``num_dense_rows``, and
    probes and insertions count the hashed rows only.

    ``sort_output=False`` writes each row of C in the order its columns were first met, as
    scipy's ``X @ Y`` does: cheaper, for callers that do not need sorted rows (SpMM adds C into
    a dense block). Such a C breaks CSRBlock's sorted-rows invariant; do not pass it on to code
    that relies on it.
    """
    st, sr, nt, nr = _bin_arrays(tuple(sym_tables), None if sym_ranges is None else
                                 tuple(sym_ranges), tuple(num_tables),
                                 None if num_ranges is None else tuple(num_ranges))
    xv = X.data if values is None else values
    m, n = X.shape[0], Y.shape[1]
    dtype = xv.dtype
    counters: dict[str, float] = {}
    cp = np.zeros(m + 1, dtype=INDPTR_DTYPE)
    if m == 0 or X.nnz == 0 or Y.nnz == 0 or n == 0:
        return CSRBlock((m, n), cp, np.zeros(0, INDEX_DTYPE), np.zeros(0, dtype)), counters
    # column indices as uint32 in the kernels: no wraparound per access (numba_util)
    xp, yp, yv = X.indptr, Y.indptr, Y.data
    xi, yi = unsigned_view(X.indices), unsigned_view(Y.indices)

    t0 = time.perf_counter()
    # 1-2. setup (products per row) and symbolic binning. A row has at most min(nprod, ncols)
    # distinct columns: binning by that bound rather than by nprod alone gives rows with many
    # products but few possible columns a table they fit (MovieLens A A^T: 943 columns but
    # thousands of products per row, so a table of 2048 slots rather than 24576). Only the
    # last bin can overflow its table; its rows abort at
    # 0.8 x the table.
    nsb = st.shape[0]
    chunks = _num_chunks(m)
    sym_dense, num_dense = dense_phases(n, np.dtype(dtype).itemsize, dense_max_bytes)
    (nprod, bound, order, offsets, one_bin, rsize, limit, bounds, products, max_bound
     ) = _symbolic_plan(xp, xi, yp, n, sr, st, int(SYM_ABORT_FRACTION * st[-1]), chunks,
                        not sym_dense)
    nnz = np.empty(m, dtype=np.int64)
    # the column range (and maybe the bitmap) of every row of Y, for the flag scans of dense
    # rows; a pass over Y, so only made when some row is flag-scanned (the kernels never read
    # them otherwise)
    yrange = ybits = None
    if sym_dense and _flag_scanned(n, max_bound, COUNT_SCAN_COLS):
        yrange, ybits = _scan_inputs(yp, yi, n)
    # prefetching Y's rows only pays when Y does not sit in the cache already
    prefetch = yp.nbytes + yi.nbytes + yv.nbytes > PREFETCH_MIN_BYTES
    t1 = time.perf_counter()
    sym_probes = None  # per bin; none without tables
    if sym_dense:
        _symbolic_dense_kernel(xp, xi, yp, yi, bounds, chunks, n, nprod,
                               _NO_RANGES if yrange is None else yrange,
                               _NO_BITS if ybits is None else ybits, ybits is not None,
                               prefetch, np.zeros((chunks, n), dtype=_tag_dtype(n)), nnz)
    else:
        probes = np.zeros((chunks, nsb), dtype=np.int64)
        _symbolic_hash_kernel(xp, xi, yp, yi, order, bounds, rsize, limit, chunks,
                              _prefetch_mode(prefetch, one_bin), nnz, probes)
        sym_probes = probes.sum(axis=0)
    fallback_rows = 0
    fallback_probes = 0
    if not sym_dense and offsets[nsb] > offsets[nsb - 1]:
        redo = np.flatnonzero(nnz < 0)
        fallback_rows = redo.size
    if fallback_rows:
        # kernel8: a table of its own, sized from the row's bound min(nprod, ncols)
        size_r = own_table_sizes(bound[redo], int(st[-1]), int(sr[-1]))
        off_r = np.array([0, redo.size], dtype=np.int64)
        ch = _num_chunks(redo.size)
        pr = np.zeros((ch, 1), dtype=np.int64)
        redo = redo.astype(np.int64)
        _symbolic_hash_kernel(xp, xi, yp, yi, redo, _chunk_bounds(redo, off_r, nprod, ch),
                              size_r, size_r, ch, _prefetch_mode(prefetch, False), nnz, pr)
        fallback_probes = int(pr.sum())
    t2 = time.perf_counter()
    bin_counters(counters, "sym", offsets, sym_probes, nnz, order, rsize, tables=not sym_dense)
    counters["sym_one_bin"] = int(one_bin)
    counters["sym_fallback_rows"] = fallback_rows
    counters["sym_probes"] = (0 if sym_probes is None else int(sym_probes.sum())
                              ) + fallback_probes
    # every product of a hashed row is one insertion; the probes include those wasted on
    # abandoned rows
    counters["sym_insertions"] = 0 if sym_dense else products
    counters["sym_dense_rows"] = m if sym_dense else 0

    # 4-5. allocate C; numeric binning (the last bin sizes its tables per row)
    t3 = time.perf_counter()
    (order, offsets, one_bin, rsize, bounds, total, max_nnz, direct_products
     ) = _numeric_plan(nnz, nprod, nr, nt, int(nr[-1]), chunks, cp, not num_dense)
    ci = np.empty(total, dtype=INDEX_DTYPE)
    cv = np.empty(total, dtype=dtype)
    # a C much larger than the cache is written with non-temporal stores
    stream = STREAM_STORES and ci.nbytes + cv.nbytes > STREAM_MIN_BYTES
    if num_dense and yrange is None and ybits is None and _flag_scanned(
            n, max_nnz, DENSE_SCAN_COLS if sort_output else COUNT_SCAN_COLS):
        yrange, ybits = _scan_inputs(yp, yi, n)
    t4 = time.perf_counter()
    passes = max(1, -(-int(n - 1).bit_length() // 8))  # 8-bit radix digits of a column index
    sorts = np.zeros((chunks, 8), dtype=np.int64)
    # 6. numeric hash phase
    if num_dense:
        _numeric_dense_kernel(xp, xi, xv, yp, yi, yv, bounds, chunks, n, sort_output, nprod,
                              _NO_RANGES if yrange is None else yrange,
                              _NO_BITS if ybits is None else ybits, ybits is not None,
                              prefetch, stream, cp, ci, cv, sorts)
        num_probes = None
    else:
        probes = np.zeros((chunks, nt.shape[0] + 1), dtype=np.int64)
        _numeric_hash_kernel(xp, xi, xv, yp, yi, yv, order, bounds, rsize, chunks, passes, n,
                             sort_output, nprod, _prefetch_mode(prefetch, one_bin), stream,
                             cp, ci, cv, probes, sorts)
        num_probes = probes.sum(axis=0)
    t5 = time.perf_counter()
    bin_counters(counters, "num", offsets, num_probes, nnz, order, rsize, tables=not num_dense)
    counters["num_one_bin"] = int(one_bin)
    for way, rows in zip(_SORT_WAYS, sorts.sum(axis=0).tolist(), strict=True):
        counters[way] = rows
    counters["num_probes"] = 0 if num_probes is None else int(num_probes.sum())
    # unsorted rows whose products all have distinct columns are written without a table
    counters["num_insertions"] = 0 if num_dense else products if sort_output else (
        products - direct_products)
    counters["num_dense_rows"] = m if num_dense else 0
    counters["y_bitmaps"] = int(ybits is not None)
    counters["stream_stores"] = int(stream)
    counters["products"] = products
    counters["nnz_c"] = total
    # wall time of each step (binning and bookkeeping included in the step that needs it)
    counters["seconds_setup_binning"] = (t1 - t0) + (t4 - t3)
    counters["seconds_symbolic"] = t2 - t1
    counters["seconds_numeric"] = t5 - t4
    return CSRBlock((m, n), cp, ci, cv), counters


def dense_to_csr(D: np.ndarray) -> CSRBlock:
    """The nonzeros of a dense C-contiguous 2-D array as a CSR block (sorted columns)."""
    m = D.shape[0]
    row_nnz = np.empty(m, dtype=np.int64)
    _row_nnz_kernel(D, row_nnz)
    indptr = np.zeros(m + 1, dtype=INDPTR_DTYPE)
    np.cumsum(row_nnz, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=INDEX_DTYPE)
    data = np.empty(int(indptr[-1]), dtype=D.dtype)
    _dense_to_csr_kernel(D, indptr, indices, data)
    return CSRBlock((m, D.shape[1]), indptr, indices, data)


# --------------------------------------------------------------------------------------------
# the node model


def _check_tables(name: str, tables, ranges, count: int | None) -> tuple[tuple, tuple]:
    try:
        tables = tuple(int(t) for t in tables)
    except (TypeError, ValueError):
        raise ValueError(f"{name}_tables must be a list of integers, got {tables!r}") from None
    if count is not None and len(tables) != count:
        raise ValueError(f"{name}_tables must have {count} entries (one per bin), got "
                         f"{len(tables)}")
    if not tables or any(t < 2 or t >= 2**31 for t in tables):
        raise ValueError(f"{name}_tables must be sizes in [2, 2^31), got {tables}")
    if any(b <= a for a, b in zip(tables, tables[1:], strict=False)):
        raise ValueError(f"{name}_tables must increase, got {tables}")
    try:
        ranges = tuple(int(r) for r in ranges)
    except (TypeError, ValueError):
        raise ValueError(f"{name}_ranges must be a list of integers, got {ranges!r}") from None
    if len(ranges) != len(tables):
        raise ValueError(f"{name}_ranges must have one entry per table ({len(tables)}), got "
                         f"{len(ranges)}")
    if any(r < 1 or r > t for r, t in zip(ranges, tables, strict=True)):
        raise ValueError(f"{name}_ranges must lie in [1, table size] (a row larger than its "
                         f"table cannot be hashed into it), got {ranges} for tables {tables}")
    if any(b <= a for a, b in zip(ranges, ranges[1:], strict=False)):
        raise ValueError(f"{name}_ranges must increase, got {ranges}")
    return tables, ranges


class HashSpGEMMModel(NodeModel):
    """OpSparse-style hash SpGEMM node model (see the module docstring).

    Options (constructor keywords, reported by :meth:`options`):
    ``device`` "cpu" (numba, default) or "cuda" (numba.cuda kernels; the CUDA simulator when no
    GPU is present); ``sym_tables`` (8 increasing sizes), ``num_tables`` (7 sizes: the 8th numeric
    bin sizes its tables per row); ``sym_ratio`` (1.2) and ``num_ratio`` (2.0), which give the
    binning ranges floor(table / ratio), or explicit ``sym_ranges``/``num_ranges``;
    ``cuda_block`` threads per block of the GPU kernels (64); ``spmm`` how SpMM accumulates
    once the dense operand is in CSR: "hash" (default) runs the full two-phase hash SpGEMM and
    adds C into ``out``, "direct" adds every product straight into the dense output row (no
    hash tables, no sort: the output is dense anyway; CPU only, the GPU path always hashes);
    ``dense_max_bytes`` (1 MiB) the per-thread budget under which a CPU phase uses spECK's
    dense accumulator instead of hash tables (see :func:`hash_spgemm`; 0 = always hash, the
    paper's design; the GPU path always hashes).
    """

    name = "hash-spgemm"
    native = frozenset({"spgemm", "spmm_a", "spmm_b", "sddmm"})

    def __init__(self, fallback: NodeModel | None = None, device: str = "cpu",
                 sym_tables=SYM_TABLES, num_tables=NUM_TABLES, sym_ratio: float = 1.2,
                 num_ratio: float = 2.0, sym_ranges=None, num_ranges=None,
                 cuda_block: int = 64, spmm: str = "hash",
                 dense_max_bytes: int = DENSE_MAX_BYTES) -> None:
        super().__init__(fallback)
        if isinstance(dense_max_bytes, bool) or not isinstance(dense_max_bytes, int) \
                or dense_max_bytes < 0:
            raise ValueError(f"dense_max_bytes must be an integer >= 0 (bytes per thread; 0 = "
                             f"hash tables only), got {dense_max_bytes!r}")
        self.dense_max_bytes = dense_max_bytes
        if spmm not in ("hash", "direct"):
            raise ValueError(f"spmm must be 'hash' or 'direct', got {spmm!r}")
        self.spmm = spmm
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        for nm, ratio in (("sym_ratio", sym_ratio), ("num_ratio", num_ratio)):
            if not isinstance(ratio, (int, float)) or not ratio >= 1.0:
                raise ValueError(f"{nm} must be a number >= 1 (table size / largest row), "
                                 f"got {ratio!r}")
        if sym_ranges is None:
            sym_ranges = binning_ranges(tuple(int(t) for t in sym_tables), float(sym_ratio))
        if num_ranges is None:
            num_ranges = binning_ranges(tuple(int(t) for t in num_tables), float(num_ratio))
        self.sym_tables, self.sym_ranges = _check_tables("sym", sym_tables, sym_ranges, 8)
        self.num_tables, self.num_ranges = _check_tables("num", num_tables, num_ranges, 7)
        if int(SYM_ABORT_FRACTION * self.sym_tables[-1]) < 1:
            raise ValueError("the last symbolic table is too small")
        if not isinstance(cuda_block, int) or not 1 <= cuda_block <= 1024:
            raise ValueError(f"cuda_block must be an integer in [1, 1024], got {cuda_block!r}")
        self.device = device
        self.sym_ratio, self.num_ratio = float(sym_ratio), float(num_ratio)
        self.cuda_block = cuda_block

    def options(self) -> dict:
        return {"device": self.device, "sym_tables": list(self.sym_tables),
                "num_tables": list(self.num_tables), "sym_ranges": list(self.sym_ranges),
                "num_ranges": list(self.num_ranges), "cuda_block": self.cuda_block,
                "spmm": self.spmm, "dense_max_bytes": self.dense_max_bytes}

    def multiply(self, X: CSRBlock, Y: CSRBlock, values: np.ndarray | None = None,
                 sort_output: bool = True) -> CSRBlock:
        """C = X(values) @ Y on the configured device, counters added to the running op.

        ``sort_output=False`` lets the CPU path write C's rows unsorted (see
        :func:`hash_spgemm`); the GPU path always sorts. Not collective."""
        if self.device == "cuda":
            from distmm.kernels.hash_spgemm_cuda import cuda_hash_spgemm

            C, counters = cuda_hash_spgemm(X, Y, self.sym_tables, self.sym_ranges,
                                           self.num_tables, self.num_ranges,
                                           self.cuda_block, values)
        else:
            C, counters = hash_spgemm(X, Y, self.sym_tables, self.sym_ranges,
                                      self.num_tables, self.num_ranges, values,
                                      self.dense_max_bytes, sort_output)
        self.count(**counters)
        return C

    def _spgemm(self, X: CSRBlock, Y: CSRBlock) -> CSRBlock:
        for nm, M in (("X", X), ("Y", Y)):
            if M.dtype not in _FLOAT_DTYPES:
                raise ValueError(f"spgemm: {nm} has dtype {M.dtype}; only float32/float64")
        return self.multiply(X, Y)

    def _dense_as_sparse(self, D: np.ndarray) -> CSRBlock:
        Dc = dense_to_csr(D)
        self.count(dense_entries=D.size, dense_nonzeros=Dc.nnz)
        return Dc

    def _sparse_product(self, S: CSRBlock, vals: np.ndarray, Dc: CSRBlock,
                        out: np.ndarray) -> None:
        """out += S(vals) @ Dc for a CSR Dc, by the configured ``spmm`` method."""
        if S.nnz == 0 or Dc.nnz == 0:
            return
        if self.spmm == "direct" and self.device == "cpu":
            _spmm_direct_kernel(S.indptr, S.indices, vals, Dc.indptr, Dc.indices, Dc.data, out)
            return
        # C goes straight into a dense block, so its rows need no sort
        C = self.multiply(S, Dc, values=vals, sort_output=False)
        _scatter_add_kernel(C.indptr, C.indices, C.data, out)

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals) @ B, B's zeros skipped: the hash SpGEMM of S and CSR(B)."""
        # operands were checked by the interface (kernels/checks.py)
        self._sparse_product(S, vals, self._dense_as_sparse(B), out)

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals)^T @ A over the cached transposed structure, A's zeros skipped."""
        m, n = S.shape
        indptr_t, indices_t, perm = S.transpose()
        St = CSRBlock((n, m), indptr_t, indices_t, vals[perm])
        self._sparse_product(St, St.data, self._dense_as_sparse(A), out)

    def _sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
               out: np.ndarray) -> None:
        """out[k] += vals[k] * <A[i], B[j]>, the dot taken over the columns both rows store."""
        m = S.shape[0]
        if S.nnz == 0 or A.shape[1] == 0:
            return
        Ac, Bc = self._dense_as_sparse(A), self._dense_as_sparse(B)
        steps = np.zeros(m, dtype=np.int64)
        _sddmm_intersect_kernel(S.indptr, S.indices, vals, Ac.indptr, Ac.indices, Ac.data,
                                Bc.indptr, Bc.indices, Bc.data, out, steps)
        self.count(intersection_steps=int(steps.sum()))
