"""Sputnik's GPU kernels in numba.cuda: SpMM (Figure 8 of the paper) and SDDMM (section VI).

Imported only when a :class:`distmm.kernels.sputnik.SputnikModel` is made with
``device="cuda"``. On a machine with a CUDA GPU the kernels run on it; with
``NUMBA_ENABLE_CUDASIM=1`` they run, thread by thread, in numba's CUDA simulator (how the tests
check them; no GPU was available while this was written, so they have only run there).

SpMM, following shared/papers/sputnik-sc2020.txt section V and Figure 8:

* **Hierarchical 1D tiling.** A subwarp of ``lanes`` threads computes one 1D output tile: one
  row, ``tile_width`` consecutive columns; every lane holds ``vw`` consecutive outputs in
  registers (``cuda.local.array``). The tile width, the vector width and the number of
  subwarps per block are compile-time constants (one kernel per configuration, like the
  paper's template parameters).
* **Subwarp tiling.** A thread block holds ``bundle_size`` subwarps, each on its own row
  (threadIdx.y), so narrow problems still fill the block (section V-B1).
* **Row swizzle.** The subwarps read their row from a pre-ordered index array
  (``m_idx = row_indices[m_idx]``, Figure 8 lines 11-13); with the rows sorted by decreasing
  length, a block's rows form a bundle of similar length and blocks are issued heaviest first.
* **Reverse-offset memory alignment (ROMA).** In the prelude every subwarp backs its row offset
  up to the nearest multiple of the vector width and adds the difference to its nonzero count;
  in the first main-loop iteration the values and indices that belong to the previous row (the
  prefix) are masked to zero (section V-B2, Figure 8 lines 20-30).
* **Vector memory operations.** In every iteration the lanes of a subwarp load the row's next
  ``lanes * vw`` values and column indices together into shared memory, each lane ``vw``
  consecutive aligned elements, and each lane reads ``vw`` consecutive aligned elements of a
  dense row; ``vw`` is the widest of 4 (float32) or 2 (float64), 2, 1 that divides r (section
  V-B). numba.cuda has no explicit vector-load instruction, so a lane issues ``vw`` adjacent
  loads from an aligned address (a constant-trip loop); whether NVVM fuses them into one
  LDG.64/128 was not checked (no GPU or NVVM here).

Departures, for the simulator: the paper's subwarps synchronise with warp-level primitives; the
simulator has neither ``syncwarp`` nor shuffles, so the kernels use ``cuda.syncthreads()`` and
all subwarps of a block run the main loop as many times as the block's longest row needs
(predicated off after their own row ends). That is the cost the paper's row bundling removes
(section V-C, "load imbalance within a warp"), and it is reported as ``subwarp_steps_idle``.

SDDMM, following section VI: a subwarp computes one strip of up to 32 consecutive nonzeros of
one row; each lane computes its share of the dot products (columns lane*vw, + lanes*vw, ...)
for every output of the strip, and the lanes' partial sums are reduced through shared memory
(the paper uses warp shuffles). As many strips per row are launched as the longest row needs;
a subwarp without work idles (section VI-A).

Every call copies its operands to the device and the accumulated output back (the distributed
algorithms hand host arrays to the node model).
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import cuda  # this module is imported only for device="cuda"

__all__ = ["CudaKernels", "require_cuda", "vector_width", "SDDMM_TILE"]

SDDMM_TILE = 32  # nonzeros per SDDMM strip (the paper's SDDMM tile size, section VII)
_MAX_THREADS = 1024
_MAX_GRID_Y = 65535


def require_cuda() -> CudaKernels:
    """The CUDA kernels, or ValueError if numba.cuda has neither a GPU nor the simulator."""
    if not cuda.is_available():
        raise ValueError("device='cuda' needs a CUDA GPU (numba.cuda.is_available() is false); "
                         "set NUMBA_ENABLE_CUDASIM=1 to run the kernels in numba's simulator")
    return CudaKernels()


def vector_width(r: int, tile_width: int, dtype: np.dtype) -> int:
    """Elements per vector access: the widest of 128 bits, 2, 1 that divides r and the tile."""
    widest = 16 // np.dtype(dtype).itemsize
    for vw in (4, 2, 1):
        if vw <= widest and r % vw == 0 and tile_width % vw == 0:
            return vw
    return 1


@functools.cache
def _spmm_kernel(dtype_name: str, by: int, tw: int, vw: int):
    """The SpMM kernel for (dtype, subwarps per block, tile width, vector width)."""
    nb_dtype = numba.from_dtype(np.dtype(dtype_name))
    kk = tw  # nonzeros per main-loop step: one vector of vw per lane (kBlockItemsK)

    @cuda.jit
    def spmm(order, indptr, indices, vals, X, out):
        lane = cuda.threadIdx.x
        sub = cuda.threadIdx.y
        m = order.shape[0]
        r = out.shape[1]
        q = cuda.blockIdx.x * by + sub
        c0 = cuda.blockIdx.y * tw + lane * vw
        sv = cuda.shared.array((by, kk), nb_dtype)
        si = cuda.shared.array((by, kk), numba.int32)
        steps = cuda.shared.array(by, numba.int64)
        row = 0
        start = 0
        nnz = 0
        skip = 0
        if q < m:
            row = order[q]  # row swizzle: this subwarp's row from the pre-ordered indices
            start = indptr[row]
            end = indptr[row + 1]
            if end > start:
                # ROMA: back the offset up to a multiple of vw; the prefix is masked below
                aligned = start - start % vw
                skip = start - aligned
                nnz = end - aligned
                start = aligned
        if lane == 0:
            steps[sub] = (nnz + kk - 1) // kk
        cuda.syncthreads()
        nsteps = 0
        for y in range(by):
            nsteps = max(nsteps, steps[y])
        acc = cuda.local.array(vw, nb_dtype)
        for e in range(vw):
            acc[e] = 0
        for step in range(nsteps):
            base = step * kk
            # the subwarp loads its next kk values and indices, vw consecutive ones per lane;
            # beyond the row's end (residue) and before its start (ROMA prefix) they are zero
            for e in range(vw):
                k = lane * vw + e
                if k < nnz - base and base + k >= skip:
                    sv[sub, k] = vals[start + base + k]
                    si[sub, k] = indices[start + base + k]
                else:
                    sv[sub, k] = 0
                    si[sub, k] = 0
            cuda.syncthreads()
            todo = min(kk, nnz - base)
            if c0 < r:
                for k in range(todo):
                    v = sv[sub, k]
                    j = si[sub, k]
                    for e in range(vw):
                        acc[e] += v * X[j, c0 + e]
            cuda.syncthreads()
        if nnz > 0 and c0 < r:
            for e in range(vw):
                out[row, c0 + e] += acc[e]

    return spmm


@functools.cache
def _sddmm_kernel(dtype_name: str, by: int, lanes: int, vw: int):
    """The SDDMM kernel for (dtype, subwarps per block, lanes per subwarp, vector width)."""
    nb_dtype = numba.from_dtype(np.dtype(dtype_name))
    sx = SDDMM_TILE

    @cuda.jit
    def sddmm(indptr, indices, vals, A, B, out):
        lane = cuda.threadIdx.x
        sub = cuda.threadIdx.y
        m = indptr.shape[0] - 1
        r = A.shape[1]
        i = cuda.blockIdx.x * by + sub
        part = cuda.shared.array((by, sx, lanes), nb_dtype)
        p0 = 0
        cnt = 0
        if i < m:
            p0 = indptr[i] + cuda.blockIdx.y * sx
            cnt = min(sx, indptr[i + 1] - p0)  # <= 0: no work for this subwarp
        for k in range(sx):
            s = nb_dtype(0)
            if k < cnt:
                j = indices[p0 + k]
                c = lane * vw
                while c < r:
                    for e in range(vw):
                        s += A[i, c + e] * B[j, c + e]
                    c += lanes * vw
            part[sub, k, lane] = s
        cuda.syncthreads()
        k = lane
        while k < cnt:
            total = nb_dtype(0)
            for ln in range(lanes):
                total += part[sub, k, ln]
            out[p0 + k] += vals[p0 + k] * total
            k += lanes

    return sddmm


class CudaKernels:
    """Host side of the CUDA path: picks the configuration, copies, launches, counts."""

    def spmm(self, indptr: np.ndarray, indices: np.ndarray, vals: np.ndarray, X: np.ndarray,
             out: np.ndarray, order: np.ndarray, by: int, tw: int) -> dict[str, float]:
        """out += M @ X for the CSR structure (indptr, indices) with values ``vals``.

        ``order`` is the row processing order (swizzled or natural), ``by`` the rows (subwarps)
        per thread block, ``tw`` the tile width. Returns the model counters of the launch."""
        m = indptr.shape[0] - 1
        r = out.shape[1]
        vw = vector_width(r, tw, out.dtype)
        lanes = tw // vw
        if lanes * by > _MAX_THREADS:
            raise ValueError(f"tile_width {tw} / vector width {vw} x bundle_size {by} is more "
                             f"than {_MAX_THREADS} threads per block")
        ntiles = -(-r // tw)
        if ntiles > _MAX_GRID_Y:
            raise ValueError(f"r = {r} needs {ntiles} column tiles of {tw}; at most "
                             f"{_MAX_GRID_Y} fit a CUDA grid")
        grid = (-(-m // by), ntiles)
        kernel = _spmm_kernel(out.dtype.name, by, tw, vw)
        d_out = cuda.to_device(out)
        kernel[grid, (lanes, by)](cuda.to_device(order), cuda.to_device(indptr),
                                  cuda.to_device(indices), cuda.to_device(vals),
                                  cuda.to_device(X), d_out)
        d_out.copy_to_host(out)
        # main-loop steps of every subwarp (after ROMA) and of its block's longest row
        start = indptr[:-1][order]
        length = indptr[1:][order] - start
        own = np.where(length > 0, -(-(length + start % vw) // tw), 0)
        pad = (-m) % by
        per_block = np.concatenate([own, np.zeros(pad, own.dtype)]).reshape(-1, by)
        busy = float(own.sum())
        total = float(per_block.max(axis=1).sum() * by)
        return {"blocks": float(grid[0] * grid[1]),
                "subwarp_steps": busy * ntiles, "subwarp_steps_idle": (total - busy) * ntiles}

    def sddmm(self, indptr: np.ndarray, indices: np.ndarray, vals: np.ndarray, A: np.ndarray,
              B: np.ndarray, out: np.ndarray, by: int, tw: int) -> dict[str, float]:
        """out[t] += vals[t] * dot(A[row_t], B[indices[t]]); returns the model counters."""
        m = indptr.shape[0] - 1
        r = A.shape[1]
        vw = vector_width(r, tw, A.dtype)
        lanes = max(1, min(tw, 32) // vw)
        if lanes * by > _MAX_THREADS:
            raise ValueError(f"{lanes} lanes x bundle_size {by} is more than {_MAX_THREADS} "
                             "threads per block")
        longest = int(np.diff(indptr).max(initial=0))
        nstrips = max(1, -(-longest // SDDMM_TILE))
        if nstrips > _MAX_GRID_Y:
            raise ValueError(f"a row of {longest} nonzeros needs {nstrips} SDDMM strips; at "
                             f"most {_MAX_GRID_Y} fit a CUDA grid")
        grid = (-(-m // by), nstrips)
        kernel = _sddmm_kernel(out.dtype.name, by, lanes, vw)
        d_out = cuda.to_device(out)
        kernel[grid, (lanes, by)](cuda.to_device(indptr), cuda.to_device(indices),
                                  cuda.to_device(vals), cuda.to_device(A), cuda.to_device(B),
                                  d_out)
        d_out.copy_to_host(out)
        strips = int((-(-np.diff(indptr) // SDDMM_TILE)).sum())
        return {"blocks": float(grid[0] * grid[1]),
                "strips": float(strips)}
