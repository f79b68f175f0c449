"""numba.cuda kernels of the ``hash-spgemm`` node model (OpSparse, Du et al. 2022).

The same six steps as the CPU path (:mod:`distmm.kernels.hash_spgemm`), as GPU kernels:

* setup: one thread per row computes nprod;
* binning: Algorithm 1 (count bins with shared-memory counters, one global atomic per bin and
  block, and the maximum row size), Algorithm 2 (place row ids through shared offsets taken
  from the global bin offsets) or, when every row fits bin 0, Algorithm 3 (identity);
* symbolic (Algorithm 4) and numeric (Algorithm 5) hash phases: one thread block per row; the
  block's hash table lives in shared memory when it fits numba's 48 KiB static limit and in a
  per-row region of a global-memory table otherwise (the paper's kernel7/kernel8 use up to 96 KB
  of opt-in shared memory, which numba cannot request); rows of the last symbolic bin whose
  count passes 0.8 x the table are abandoned and recomputed with a global table sized from
  their bound (kernel8); the last numeric bin always uses a global table sized from the row;
* the numeric kernels condense the occupied slots (the paper's ``shared_offset`` atomic) and
  sort each row by counting, for every key, the keys smaller than it (as nsparse does).

Simplifications, stated plainly: every kernel runs one row per block of ``block`` threads (the
paper packs several small rows into one block for bin 0 and scales the block with the table);
the threads of a block split each row of Y among themselves; the exclusive sum that allocates C
is done on the host; kernels are launched one after another on the default stream. These
kernels have only been run in numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``); no GPU was
available, so nothing here has been timed on one.

This module imports numba.cuda; the model imports this module only when ``device="cuda"``,
so importing distmm does not need it.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, from_dtype, int32, int64

from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.kernels.hash_tables import bin_counters, numeric_table_sizes, own_table_sizes

__all__ = ["cuda_hash_spgemm"]

_HASH_SCALE = 107
_STATIC_SHARED_BYTES = 48 * 1024  # numba.cuda's static shared memory per block
_MAX_BINS = 16


# --------------------------------------------------------------------------------------------
# kernels (this module is imported only on the GPU path, so numba.cuda is loaded lazily)


@cuda.jit(device=True, inline=True)
def slot(key, size, mask):
    h = int64(key) * _HASH_SCALE
    if mask >= 0:
        return h & mask
    return h % size


@cuda.jit
def nprod_kernel(xp, xi, yp, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        s = 0
        for a in range(xp[i], xp[i + 1]):
            k = xi[a]
            s += yp[k + 1] - yp[k]
        out[i] = s


@cuda.jit
def bin_count(sizes, ranges, bin_size, max_size):
    """Algorithm 1: bin sizes via shared counters, and the largest size."""
    s_size = cuda.shared.array(_MAX_BINS, int64)
    s_max = cuda.shared.array(1, int64)
    tid = cuda.threadIdx.x
    nbins = bin_size.shape[0]
    for b in range(tid, nbins, cuda.blockDim.x):  # blocks may have fewer threads than bins
        s_size[b] = 0
    if tid == 0:
        s_max[0] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < sizes.shape[0]:
        s = sizes[i]
        cuda.atomic.max(s_max, 0, s)
        b = 0
        while b < nbins - 1 and s > ranges[b]:
            b += 1
        cuda.atomic.add(s_size, b, 1)
    cuda.syncthreads()
    for b in range(tid, nbins, cuda.blockDim.x):
        cuda.atomic.add(bin_size, b, s_size[b])
    if tid == 0:
        cuda.atomic.max(max_size, 0, s_max[0])


@cuda.jit
def bin_place(sizes, ranges, fill, order):
    """Algorithm 2: write each row id at its bin's next free place."""
    s_size = cuda.shared.array(_MAX_BINS, int64)
    s_off = cuda.shared.array(_MAX_BINS, int64)
    tid = cuda.threadIdx.x
    nbins = fill.shape[0]
    for b in range(tid, nbins, cuda.blockDim.x):
        s_size[b] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    b = 0
    if i < sizes.shape[0]:
        s = sizes[i]
        while b < nbins - 1 and s > ranges[b]:
            b += 1
        cuda.atomic.add(s_size, b, 1)
    cuda.syncthreads()
    for c in range(tid, nbins, cuda.blockDim.x):
        s_off[c] = cuda.atomic.add(fill, c, s_size[c])
    cuda.syncthreads()
    if i < sizes.shape[0]:
        order[cuda.atomic.add(s_off, b, 1)] = i


@cuda.jit
def bin_identity(order):
    """Algorithm 3: every row is in bin 0."""
    i = cuda.grid(1)
    if i < order.shape[0]:
        order[i] = i


@cuda.jit(device=True)
def sym_row(xp, xi, yp, yi, i, table, size, cnt, limit):
    """Algorithm 4 for row i by the calling block; returns this thread's probes."""
    tid = cuda.threadIdx.x
    bd = cuda.blockDim.x
    mask = size - 1 if (size & (size - 1)) == 0 else -1
    pr = 0
    for a in range(xp[i], xp[i + 1]):
        k = xi[a]
        for t in range(yp[k] + tid, yp[k + 1], bd):
            if cnt[0] > limit:
                break
            key = yi[t]
            h = slot(key, size, mask)
            while True:
                pr += 1
                old = cuda.atomic.cas(table, h, -1, key)
                if old == -1:
                    cuda.atomic.add(cnt, 0, 1)
                    break
                if old == key:
                    break
                h += 1
                if h == size:
                    h = 0
    return pr


@cuda.jit(device=True)
def num_row(xp, xi, xv, yp, yi, yv, i, keys, vals, size, off, cp, tk, tv, ci, cv):
    """Algorithm 5 for row i: accumulate, condense, rank-sort into C; returns probes."""
    tid = cuda.threadIdx.x
    bd = cuda.blockDim.x
    mask = size - 1 if (size & (size - 1)) == 0 else -1
    pr = 0
    for a in range(xp[i], xp[i + 1]):
        k = xi[a]
        av = xv[a]
        for t in range(yp[k] + tid, yp[k + 1], bd):
            key = yi[t]
            h = slot(key, size, mask)
            while True:
                pr += 1
                old = cuda.atomic.cas(keys, h, -1, key)
                if old == -1 or old == key:
                    cuda.atomic.add(vals, h, av * yv[t])
                    break
                h += 1
                if h == size:
                    h = 0
    cuda.syncthreads()
    start = cp[i]
    for h in range(tid, size, bd):
        if keys[h] != -1:
            pos = cuda.atomic.add(off, 0, 1)
            tk[start + pos] = keys[h]
            tv[start + pos] = vals[h]
    cuda.syncthreads()
    n = cp[i + 1] - start
    for u in range(tid, n, bd):
        key = tk[start + u]
        r = 0
        for w in range(n):
            if tk[start + w] < key:
                r += 1
        ci[start + r] = key
        cv[start + r] = tv[start + u]
    return pr


@cuda.jit
def sym_global(xp, xi, yp, yi, rows, row0, toff, tsize, gtable, limit, nnz, probes, pb):
    """Symbolic rows with global-memory tables: row rows[row0 + block] uses
    gtable[toff[block] : toff[block] + tsize[block]]."""
    q = cuda.blockIdx.x
    i = rows[row0 + q]
    size = tsize[q]
    table = gtable[toff[q]:toff[q] + size]
    cnt = cuda.shared.array(1, int32)
    for h in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        table[h] = -1
    if cuda.threadIdx.x == 0:
        cnt[0] = 0
    cuda.syncthreads()
    pr = sym_row(xp, xi, yp, yi, i, table, size, cnt, limit)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        nnz[i] = cnt[0] if cnt[0] <= limit else -1
    cuda.atomic.add(probes, pb, pr)


@cuda.jit
def num_global(xp, xi, xv, yp, yi, yv, rows, row0, toff, tsize, gkeys, gvals, cp, tk, tv,
               ci, cv, probes, pb):
    q = cuda.blockIdx.x
    i = rows[row0 + q]
    size = tsize[q]
    keys = gkeys[toff[q]:toff[q] + size]
    vals = gvals[toff[q]:toff[q] + size]
    off = cuda.shared.array(1, int32)
    for h in range(cuda.threadIdx.x, size, cuda.blockDim.x):
        keys[h] = -1
        vals[h] = 0
    if cuda.threadIdx.x == 0:
        off[0] = 0
    cuda.syncthreads()
    pr = num_row(xp, xi, xv, yp, yi, yv, i, keys, vals, size, off, cp, tk, tv, ci, cv)
    cuda.atomic.add(probes, pb, pr)


@functools.cache
def sym_shared(tsize):
    """Symbolic kernel with a shared-memory table of tsize slots (one per table size)."""
    @cuda.jit
    def kernel(xp, xi, yp, yi, rows, row0, limit, nnz, probes, pb):
        i = rows[row0 + cuda.blockIdx.x]
        table = cuda.shared.array(tsize, int32)
        cnt = cuda.shared.array(1, int32)
        for h in range(cuda.threadIdx.x, tsize, cuda.blockDim.x):
            table[h] = -1
        if cuda.threadIdx.x == 0:
            cnt[0] = 0
        cuda.syncthreads()
        pr = sym_row(xp, xi, yp, yi, i, table, tsize, cnt, limit)
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            nnz[i] = cnt[0] if cnt[0] <= limit else -1
        cuda.atomic.add(probes, pb, pr)
    return kernel


@functools.cache
def num_shared(tsize, dtype):
    """Numeric kernel with shared-memory keys and values of tsize slots."""
    vt = from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(xp, xi, xv, yp, yi, yv, rows, row0, cp, tk, tv, ci, cv, probes, pb):
        i = rows[row0 + cuda.blockIdx.x]
        keys = cuda.shared.array(tsize, int32)
        vals = cuda.shared.array(tsize, vt)
        off = cuda.shared.array(1, int32)
        for h in range(cuda.threadIdx.x, tsize, cuda.blockDim.x):
            keys[h] = -1
            vals[h] = 0
        if cuda.threadIdx.x == 0:
            off[0] = 0
        cuda.syncthreads()
        pr = num_row(xp, xi, xv, yp, yi, yv, i, keys, vals, tsize, off, cp, tk, tv, ci, cv)
        cuda.atomic.add(probes, pb, pr)
    return kernel


_K = {"cuda": cuda, "nprod": nprod_kernel, "bin_count": bin_count, "bin_place": bin_place,
      "bin_identity": bin_identity, "sym_global": sym_global, "num_global": num_global,
      "sym_shared": sym_shared, "num_shared": num_shared}


def _bin_on_device(K, d_sizes, ranges: np.ndarray, nbins: int, block: int):
    """Binning on the GPU; returns (device order, host offsets, one_bin)."""
    cuda = K["cuda"]
    m = d_sizes.shape[0]
    grid = (m + block - 1) // block
    d_ranges = cuda.to_device(np.asarray(ranges, dtype=np.int64))
    d_bin_size = cuda.to_device(np.zeros(nbins, dtype=np.int64))
    d_max = cuda.to_device(np.zeros(1, dtype=np.int64))
    K["bin_count"][grid, block](d_sizes, d_ranges, d_bin_size, d_max)
    counts = d_bin_size.copy_to_host()
    offsets = np.zeros(nbins + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    d_order = cuda.device_array(m, dtype=np.int64)
    one_bin = int(d_max.copy_to_host()[0]) <= int(ranges[0])
    if one_bin:
        K["bin_identity"][grid, block](d_order)
    else:
        K["bin_place"][grid, block](d_sizes, d_ranges, cuda.to_device(offsets[:nbins].copy()),
                                    d_order)
    return d_order, offsets, one_bin


def cuda_hash_spgemm(X: CSRBlock, Y: CSRBlock, sym_tables, sym_ranges, num_tables,
                     num_ranges, block: int = 64, values: np.ndarray | None = None
                     ) -> tuple[CSRBlock, dict[str, float]]:
    """C = X(values) @ Y by the OpSparse steps on a CUDA device (or the CUDA simulator).

    Same arguments and result as :func:`distmm.kernels.hash_spgemm.hash_spgemm`, plus
    ``block`` threads per block. Column indices of C are sorted. Not collective.
    """
    K = _K
    cuda = K["cuda"]
    xv = X.data if values is None else values
    dtype = xv.dtype
    m, n = X.shape[0], Y.shape[1]
    cp = np.zeros(m + 1, dtype=INDPTR_DTYPE)
    counters: dict[str, float] = {}
    if m == 0 or X.nnz == 0 or Y.nnz == 0 or n == 0:
        return CSRBlock((m, n), cp, np.zeros(0, INDEX_DTYPE), np.zeros(0, dtype)), counters
    itemsize = np.dtype(dtype).itemsize
    d_xp, d_xi, d_xv = (cuda.to_device(a) for a in (X.indptr, X.indices, xv))
    d_yp, d_yi, d_yv = (cuda.to_device(a) for a in (Y.indptr, Y.indices, Y.data))
    grid = (m + block - 1) // block

    # 1. setup
    d_nprod = cuda.device_array(m, dtype=np.int64)
    K["nprod"][grid, block](d_xp, d_xi, d_yp, d_nprod)
    nprod = d_nprod.copy_to_host()

    # 2-3. symbolic binning and hash phase
    st = np.asarray(sym_tables, dtype=np.int64)
    nsb = st.shape[0]
    # binned by the bound min(nprod, ncols) of the row's nnz, as on the CPU (hash_spgemm.py)
    d_order, offsets, one_bin = _bin_on_device(K, cuda.to_device(np.minimum(nprod, n)),
                                               np.asarray(sym_ranges), nsb, block)
    d_nnz = cuda.device_array(m, dtype=np.int64)
    d_probes = cuda.to_device(np.zeros(nsb + 1, dtype=np.int64))
    # the last bin's rows are abandoned past 0.8 x the table; threads may each insert one more
    # key after the count passes the limit, so the limit also leaves room for one per thread
    last_limit = min(int(0.8 * st[-1]), int(st[-1]) - block - 1)
    for b in range(nsb):
        rows_b = int(offsets[b + 1] - offsets[b])
        if rows_b == 0:
            continue
        t = int(st[b])
        limit = last_limit if b == nsb - 1 else t
        if 4 * t <= _STATIC_SHARED_BYTES:
            K["sym_shared"](t)[rows_b, block](d_xp, d_xi, d_yp, d_yi, d_order, offsets[b],
                                              limit, d_nnz, d_probes, b)
        else:
            toff = np.arange(rows_b, dtype=np.int64) * t
            K["sym_global"][rows_b, block](
                d_xp, d_xi, d_yp, d_yi, d_order, offsets[b], cuda.to_device(toff),
                cuda.to_device(np.full(rows_b, t, dtype=np.int64)),
                cuda.device_array(rows_b * t, dtype=np.int32), limit, d_nnz, d_probes, b)
    nnz = d_nnz.copy_to_host()
    redo = np.flatnonzero(nnz < 0)
    if redo.size:
        # kernel8: a global table per row sized from its bound min(nprod, ncols)
        bound = np.minimum(nprod[redo], n)
        tsz = own_table_sizes(bound, int(st[-1]), int(sym_ranges[-1]))
        toff = np.concatenate(([0], np.cumsum(tsz)[:-1])).astype(np.int64)
        K["sym_global"][redo.size, block](
            d_xp, d_xi, d_yp, d_yi, cuda.to_device(redo.astype(np.int64)), 0,
            cuda.to_device(toff), cuda.to_device(tsz),
            cuda.device_array(int(tsz.sum()), dtype=np.int32), int(2**62), d_nnz, d_probes,
            nsb)
        nnz = d_nnz.copy_to_host()
    sym_probes = d_probes.copy_to_host()
    order = d_order.copy_to_host()
    bin_counters(counters, "sym", offsets, sym_probes[:nsb], nnz, order,
                 np.repeat(st, np.diff(offsets)))
    counters["sym_one_bin"] = int(one_bin)
    counters["sym_fallback_rows"] = int(redo.size)
    counters["sym_probes"] = int(sym_probes.sum())
    counters["sym_insertions"] = int(nprod.sum())
    counters["sym_dense_rows"] = 0  # no dense accumulator on the GPU path

    # 4. allocate C (the exclusive sum on the host)
    np.cumsum(nnz, out=cp[1:])
    total = int(cp[-1])
    d_cp = cuda.to_device(cp)
    d_ci = cuda.device_array(max(total, 1), dtype=INDEX_DTYPE)
    d_cv = cuda.device_array(max(total, 1), dtype=dtype)
    d_tk = cuda.device_array(max(total, 1), dtype=INDEX_DTYPE)
    d_tv = cuda.device_array(max(total, 1), dtype=dtype)

    # 5-6. numeric binning and hash phase; the last bin's tables are sized per row
    nt = np.asarray(num_tables, dtype=np.int64)
    nnb = nt.shape[0] + 1
    d_nnz = cuda.to_device(nnz)
    d_order, offsets, one_bin = _bin_on_device(K, d_nnz, np.asarray(num_ranges), nnb, block)
    order = d_order.copy_to_host()
    rsize = numeric_table_sizes(nnz, order, offsets, nt, int(num_ranges[-1]))
    d_probes = cuda.to_device(np.zeros(nnb, dtype=np.int64))
    for b in range(nnb):
        lo, hi = int(offsets[b]), int(offsets[b + 1])
        if hi == lo:
            continue
        if b < nnb - 1 and (4 + itemsize) * int(nt[b]) <= _STATIC_SHARED_BYTES:
            K["num_shared"](int(nt[b]), np.dtype(dtype).str)[hi - lo, block](
                d_xp, d_xi, d_xv, d_yp, d_yi, d_yv, d_order, lo, d_cp, d_tk, d_tv, d_ci, d_cv,
                d_probes, b)
        else:
            tsz = rsize[lo:hi]
            toff = np.concatenate(([0], np.cumsum(tsz)[:-1])).astype(np.int64)
            K["num_global"][hi - lo, block](
                d_xp, d_xi, d_xv, d_yp, d_yi, d_yv, d_order, lo, cuda.to_device(toff),
                cuda.to_device(tsz), cuda.device_array(int(tsz.sum()), dtype=np.int32),
                cuda.device_array(int(tsz.sum()), dtype=dtype), d_cp, d_tk, d_tv, d_ci, d_cv,
                d_probes, b)
    num_probes = d_probes.copy_to_host()
    bin_counters(counters, "num", offsets, num_probes, nnz, order, rsize)
    counters["num_one_bin"] = int(one_bin)
    counters["num_probes"] = int(num_probes.sum())
    counters["num_insertions"] = int(nprod.sum())
    counters["num_dense_rows"] = 0
    counters["products"] = int(nprod.sum())
    counters["nnz_c"] = total
    ci = d_ci.copy_to_host()[:total]
    cv = d_cv.copy_to_host()[:total]
    return CSRBlock((m, n), cp, ci, cv), counters
