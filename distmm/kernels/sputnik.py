"""The Sputnik node model: 1D output tiles and row-swizzle load balancing (Gale et al., SC'20).

Sputnik (shared/papers/sputnik-sc2020.txt) computes SpMM with a *hierarchical 1D tiling*: the
output is cut into 1-dimensional tiles (one row, ``tile_width`` consecutive columns) and each
tile is an independent unit of work whose width is a compile-time constant (section V-A), and
it balances load with a *row swizzle*: rows are sorted by decreasing length, consecutive rows of
that order are grouped into *bundles* of similar length, and bundles are handed out heaviest
first to whichever processing element becomes free (section V-C, Figure 6). SDDMM takes its
work in strips of consecutive nonzeros, which balance by themselves (section VI-A).

This module holds the model and its CPU path (numba, the default ``device="cpu"``);
:mod:`distmm.kernels.sputnik_cuda` holds the GPU kernels (``device="cuda"``), which follow the
paper's design thread for thread and run in numba's CUDA simulator where no GPU exists.

What the CPU path keeps of the design, and why:

* **Compile-time tile width.** The kernels are built by a factory per tile width (a closure
  constant, so every width is a separately compiled specialisation, like the paper's template
  parameter): the inner loop over one tile's columns has a constant trip count, which LLVM
  unrolls and turns into SIMD fused multiply-adds. The last, narrower tile of a width r that
  the tile width does not divide is the residue tile, done by the same code with a run-time
  width (section V-D2, residue handling). The dense width is walked in tiles; for every tile the
  row's indices and values are read again, as every thread block of the paper reads its row.
  This is SpMM's decomposition. SDDMM's dot products run over all r columns in one loop:
  tiled, the reduction over a tile of 16 or 32 columns was not vectorised by LLVM and ran 4-8x
  slower (the kernel's docstring has the numbers).
* **Row swizzle, heaviest bundles first, dynamic assignment.** Each thread takes the next bundle
  from a shared atomic counter (``llvm atomicrmw add``) over the swizzled order, which is what
  the GPU's online thread block scheduler does with Sputnik's reordered blocks; with
  ``swizzle=False`` the bundles are consecutive rows in the block's own order, dealt out the
  same way. The order is an argsort of the row lengths, computed once per sparsity structure and
  cached (the paper amortises it over training steps, section V-C2).
* **Not kept:** reverse-offset memory alignment and vector loads of the sparse row. A CPU
  broadcasts each nonzero's value into a SIMD register and loads the dense rows unaligned at no
  cost, so the sparse row is read one element at a time; the CUDA kernels do both.

Load imbalance is reported through model counters (:meth:`NodeModel.count`): the work units
(nonzeros + rows) each thread did, as ``thread_work_max`` and ``thread_work_mean`` summed over
calls, and ``load_imbalance`` = max/mean of each call, summed over calls (divide by ``calls``).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from distmm.core.sparse import CSRBlock
from distmm.kernels.base import NodeModel
from distmm.kernels.numba_util import FASTMATH, gather, prefetch_row, prefetch_span

__all__ = ["SputnikModel", "TILE_WIDTHS", "DEVICES", "swizzle_order"]

# the compile-time tile widths there are specialisations for (powers of two, as in the paper's
# kernel selection heuristic, section VII)
TILE_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEVICES = ("cpu", "cuda")
# the widest tile the automatic choice takes: the paper caps it at 64 on a V100 (section VII);
# on a CPU a wider tile reads each sparse row fewer times and the accumulator still fits in L1
_AUTO_MAX_TILE = {"cpu": 128, "cuda": 64}
# nonzeros per SDDMM strip (the paper's SDDMM tile is 32 outputs; a CPU thread takes several
# thread blocks' worth at once so that the atomic counter is touched rarely)
SDDMM_STRIP = 128
# per-thread counters sit this many int64 apart, one cache line each (no false sharing)
_PAD = 8
_MAX_BUNDLE = 64


# --------------------------------------------------------------------------------------------
# dynamic assignment: one shared counter, incremented atomically


@intrinsic
def _fetch_add(typingctx, arr, idx, val):
    """Atomically add ``val`` to ``arr[idx]`` and return the old value (``atomicrmw add``).

    The threads of a parallel loop take work units from one counter this way, like the GPU's
    block scheduler dispatches thread blocks in index order as resources free up.
    """
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.int64
            and isinstance(idx, types.Integer) and isinstance(val, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty, idxty, valty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], idxty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [index])
        value = context.cast(builder, args[2], valty, types.int64)
        return builder.atomic_rmw("add", ptr, value, "monotonic")

    return types.int64(arr, idx, val), codegen


# --------------------------------------------------------------------------------------------
# CPU kernels, one specialisation per tile width


@njit(cache=True, nogil=True, inline="always", fastmath=FASTMATH)
def _tile(indices, vals, X, s, e, c0, width, acc, o):
    """o[c0:c0+width] += sum over t in [s, e) of vals[t] * X[indices[t], c0:c0+width].

    Four nonzeros per pass over the accumulator (the paper unrolls its inner loop 4x)."""
    for k in range(width):
        acc[k] = 0
    t = s
    while t + 4 <= e:
        v0 = vals[t]
        v1 = vals[t + 1]
        v2 = vals[t + 2]
        v3 = vals[t + 3]
        x0 = X[indices[t]]
        x1 = X[indices[t + 1]]
        x2 = X[indices[t + 2]]
        x3 = X[indices[t + 3]]
        for k in range(width):
            acc[k] += (v0 * x0[c0 + k] + v1 * x1[c0 + k]
                       + v2 * x2[c0 + k] + v3 * x3[c0 + k])
        t += 4
    while t < e:
        v = vals[t]
        x = X[indices[t]]
        for k in range(width):
            acc[k] += v * x[c0 + k]
        t += 1
    for k in range(width):
        o[c0 + k] += acc[k]


@functools.cache
def _cpu_kernels(tw: int):
    """The SpMM kernel for tile width ``tw``, compiled on first use per dtype (SDDMM has no
    tiles on the CPU: :func:`_sddmm_kernel`).

    ``tw`` is a closure constant, so every width is a separate machine-code specialisation with
    constant-trip-count tile loops (numba caches closures by the values they capture).
    """

    @njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
    def spmm(indptr, indices, vals, X, out, order, bundle, counter, work, nthreads):
        """out[i] += sum_t vals[t] * X[indices[t]] for every row i, in 1D tiles of tw columns.

        Rows are taken ``bundle`` at a time, in the order ``order``, from the shared counter.
        """
        r = out.shape[1]
        m = order.shape[0]
        nbundles = (m + bundle - 1) // bundle
        nfull = r // tw
        rem = r - nfull * tw
        for th in prange(nthreads):
            acc = np.empty(tw, dtype=out.dtype)
            done = 0
            while True:
                b = _fetch_add(counter, 0, 1)
                if b >= nbundles:
                    break
                lo = b * bundle
                hi = min(lo + bundle, m)
                for q in range(lo, hi):
                    i = order[q]
                    s = indptr[i]
                    e = indptr[i + 1]
                    done += e - s + 1
                    if q + 1 < m:  # the next row in processing order, which may be anywhere
                        nxt = order[q + 1]
                        prefetch_row(out, nxt)
                        prefetch_span(indices, indptr[nxt], indptr[nxt + 1])
                        prefetch_span(vals, indptr[nxt], indptr[nxt + 1])
                    if e == s:
                        continue
                    o = out[i]
                    for jt in range(nfull):
                        _tile(indices, vals, X, s, e, jt * tw, tw, acc, o)
                    if rem > 0:
                        _tile(indices, vals, X, s, e, nfull * tw, rem, acc, o)
            work[th * _PAD] = done

    return spmm


@njit(parallel=True, cache=True, nogil=True, fastmath=FASTMATH)
def _sddmm_kernel(indptr, indices, vals, A, B, out, strip, counter, work, nthreads):
    """out[t] += vals[t] * dot(A[row_t], B[indices[t]]), strips of ``strip`` nonzeros.

    A strip is consecutive nonzeros (possibly spanning rows), as in the paper's SDDMM, so
    every work unit is the same size and no reordering is needed (section VI-C). The dot
    product is one loop over all r columns, not tiles of the tile width: a reduction over a
    compile-time tile of 16 or 32 columns inside the loop over the tiles is not
    vectorised by LLVM, and ran several times slower than the plain loop, so
    the tile width shapes the CPU's SpMM only."""
    r = A.shape[1]
    nnz = indices.shape[0]
    nstrips = (nnz + strip - 1) // strip
    zero = out.dtype.type(0)
    for th in prange(nthreads):
        done = 0
        while True:
            b = _fetch_add(counter, 0, 1)
            if b >= nstrips:
                break
            p = b * strip
            p1 = min(p + strip, nnz)
            done += p1 - p
            # the row holding nonzero p: the last i with indptr[i] <= p
            i = np.searchsorted(indptr, p, side="right") - 1
            while p < p1:
                while indptr[i + 1] <= p:
                    i += 1
                e = min(indptr[i + 1], p1)
                a = A[i]
                for t in range(p, e):
                    x = B[indices[t]]
                    acc = zero
                    for k in range(r):
                        acc += a[k] * x[k]
                    out[t] += vals[t] * acc
                p = e
        work[th * _PAD] = done


# --------------------------------------------------------------------------------------------
# the row swizzle


def swizzle_order(indptr: np.ndarray) -> np.ndarray:
    """The row swizzle: row indices sorted by decreasing length (ties by index), int64.

    Consecutive rows of this order have similar lengths, so bundles cut from it are balanced
    inside, and dealing them out in order gives the heaviest first (paper section V-C2).
    """
    lengths = np.diff(indptr)
    return np.argsort(-lengths, kind="stable").astype(np.int64)


def auto_tile_width(r: int, device: str) -> int:
    """The paper's heuristic (section VII): r rounded up to a power of two, capped per device."""
    width = 1
    while width < r and width < _AUTO_MAX_TILE[device]:
        width *= 2
    return width


def _as_bool(name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be true or false, got {value!r}")


class SputnikModel(NodeModel):
    """Sputnik's SpMM and SDDMM: 1D output tiles, row swizzle, on the CPU or a CUDA GPU.

    Native operations: ``sddmm``, ``spmm_a`` and ``spmm_b`` (on the block's cached transpose);
    FusedMM and SpGEMM fall back to the reference model (recorded as ``fallback_calls``).

    Options (constructor keywords, also ``--node-config`` JSON keys):

    * ``tile_width``: columns per 1D output tile, one of :data:`TILE_WIDTHS`, or ``None``
      (default) for r rounded up to a power of two, at most 128 on the CPU and 64 on CUDA;
    * ``swizzle``: process rows in bundles of similar length, heaviest first (default true);
      false keeps the block's row order;
    * ``bundle_size``: rows per bundle, 1 to 64 (default 4); on CUDA the rows (subwarps) of
      one thread block;
    * ``device``: ``"cpu"`` (numba threads, default) or ``"cuda"`` (numba.cuda kernels: a GPU
      if present, else numba's simulator when ``NUMBA_ENABLE_CUDASIM=1``).
    """

    name = "sputnik"
    native = frozenset({"sddmm", "spmm_a", "spmm_b"})

    def __init__(self, fallback: NodeModel | None = None, tile_width: int | None = None,
                 swizzle: bool = True, bundle_size: int = 4, device: str = "cpu") -> None:
        super().__init__(fallback)
        if device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        if tile_width is not None and (isinstance(tile_width, bool)
                                       or tile_width not in TILE_WIDTHS):
            raise ValueError(f"tile_width must be one of {TILE_WIDTHS} or None, "
                             f"got {tile_width!r}")
        if (isinstance(bundle_size, bool) or not isinstance(bundle_size, (int, np.integer))
                or not 1 <= bundle_size <= _MAX_BUNDLE):
            raise ValueError(f"bundle_size must be an integer from 1 to {_MAX_BUNDLE}, "
                             f"got {bundle_size!r}")
        self.tile_width = None if tile_width is None else int(tile_width)
        self.swizzle = _as_bool("swizzle", swizzle)
        self.bundle_size = int(bundle_size)
        self.device = device
        self._gpu = None
        if device == "cuda":
            from distmm.kernels import sputnik_cuda  # numba.cuda only when asked for

            self._gpu = sputnik_cuda.require_cuda()
        # id(indptr) -> (indptr, order): the swizzle of each structure seen, computed once
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def options(self) -> dict:
        return {"tile_width": self.tile_width, "swizzle": self.swizzle,
                "bundle_size": self.bundle_size, "device": self.device}

    # ---------------------------------------------------------------------------------------

    def _order(self, indptr: np.ndarray) -> np.ndarray:
        """The processing order of the rows of ``indptr``: swizzled (cached) or natural."""
        m = indptr.shape[0] - 1
        if not self.swizzle:
            return np.arange(m, dtype=np.int64)
        hit = self._orders.get(id(indptr))
        if hit is not None and hit[0] is indptr:
            return hit[1]
        order = swizzle_order(indptr)
        if len(self._orders) >= 16:  # a rank holds a few blocks; keep the cache small
            self._orders.pop(next(iter(self._orders)))
        self._orders[id(indptr)] = (indptr, order)
        return order

    def _width(self, r: int) -> int:
        return self.tile_width or auto_tile_width(r, self.device)

    def _count_work(self, work: np.ndarray, nthreads: int) -> None:
        per = work[::_PAD][:nthreads].astype(np.float64)
        mean = per.mean() if per.size else 0.0
        self.count(thread_work_max=per.max(initial=0.0), thread_work_mean=mean,
                   load_imbalance=per.max() / mean if mean > 0 else 1.0)

    def _spmm(self, indptr, indices, vals, X, out) -> None:
        """out += M @ X for the CSR structure (indptr, indices) with values vals."""
        m = indptr.shape[0] - 1
        r = out.shape[1]
        tw = self._width(r)
        order = self._order(indptr)
        nonempty = int(np.count_nonzero(np.diff(indptr)))
        tiles = nonempty * (-(-r // tw))
        nbundles = -(-m // self.bundle_size)
        self.count(tiles=tiles, bundles=nbundles, swizzle=int(self.swizzle))
        if self.device == "cuda":
            self.count(**self._gpu.spmm(indptr, indices, vals, X, out, order,
                                        self.bundle_size, tw))
            return
        nthreads = max(1, min(numba.get_num_threads(), nbundles))
        counter = np.zeros(_PAD, dtype=np.int64)
        work = np.zeros(nthreads * _PAD, dtype=np.int64)
        spmm = _cpu_kernels(tw)
        spmm(indptr, indices, vals, X, out, order, self.bundle_size, counter, work, nthreads)
        self._count_work(work, nthreads)

    # ---------------------------------------------------------------------------------------

    def _sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
               out: np.ndarray) -> None:
        """out[k] += vals[k] * dot(A[row_k], B[col_k]), in strips of consecutive nonzeros."""
        r = A.shape[1]  # operands were checked by the interface (kernels/checks.py)
        if S.nnz == 0 or r == 0:
            return
        tw = self._width(r)
        if self.device == "cuda":
            self.count(**self._gpu.sddmm(S.indptr, S.indices, vals, A, B, out,
                                                        self.bundle_size, tw))
            return
        nstrips = -(-S.nnz // SDDMM_STRIP)
        nthreads = max(1, min(numba.get_num_threads(), nstrips))
        counter = np.zeros(_PAD, dtype=np.int64)
        work = np.zeros(nthreads * _PAD, dtype=np.int64)
        _sddmm_kernel(S.indptr, S.indices, vals, A, B, out, SDDMM_STRIP, counter, work, nthreads)
        self.count(strips=nstrips)
        self._count_work(work, nthreads)

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals) @ B."""
        if S.nnz == 0 or B.shape[1] == 0:
            return
        self._spmm(S.indptr, S.indices, vals, B, out)

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals)^T @ A: the same kernel on the cached transposed structure."""
        if S.nnz == 0 or A.shape[1] == 0:
            return
        indptr_t, indices_t, perm = S.transpose()
        vals_t = np.empty_like(vals)
        gather(vals, perm, vals_t)
        self._spmm(indptr_t, indices_t, vals_t, A, out)
