"""Measure alpha, beta and gamma of this machine for the planner (``distmm calibrate``).

* alpha and beta: a ping-pong between world ranks 0 and 1 (half the round trip, messages of 1
  to 2^22 words), fitted as t = alpha + beta * words by least squares on the relative error,
  so small and large messages both count. The all-gather and reduce-scatter the algorithms use
  are timed too (all ranks, blocks of 2^18 words), and reported as seconds per word received,
  for comparison; the planner uses the ping-pong beta.
* the local kernels: for each kernel the distributed loops call (fused, SDDMM, SpMMA, SpMMB),
  seconds per nonzero and per block row at dense widths 1 to 512, from Erdos-Renyi blocks of
  two densities, on every rank at once (as in a real run), slowest rank; also the fixed cost
  of a call and of rebuilding or transposing a block that arrived as a packet. The planner
  interpolates these tables at each family's local widths (r, r/q, r/s, r/sqrt(pc)).
  gamma, delta and gamma_unfused (the older affine model) are derived from the tables.
"""

from __future__ import annotations

import json
import os
import platform
import time

import numpy as np
from mpi4py import MPI

from distmm import costmodel
from distmm.comm import mpi_type
from distmm.errors import require
from distmm.kernels import make_node_model
from distmm.sparse import CSRBlock


def _pingpong(comm: MPI.Comm, words: int, dtype, reps: int) -> float:
    buf = np.zeros(words, dtype=dtype)
    rank = comm.Get_rank()
    comm.Barrier()
    best = float("inf")
    for _ in range(reps):
        t0 = MPI.Wtime()
        if rank == 0:
            comm.Send(buf, dest=1, tag=3)
            comm.Recv(buf, source=1, tag=3)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=3)
            comm.Send(buf, dest=0, tag=3)
        best = min(best, (MPI.Wtime() - t0) / 2)
    return comm.bcast(best, root=0)


def _collective(comm: MPI.Comm, words: int, dtype, reps: int, which: str) -> float:
    p = comm.Get_size()
    send = np.ones(words * (p if which == "reduce_scatter" else 1), dtype=dtype)
    recv = np.empty(words * (p if which == "allgather" else 1), dtype=dtype)
    t = mpi_type(np.dtype(dtype))
    best = float("inf")
    for _ in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        if which == "allgather":
            comm.Allgather([send, t], [recv, t])
        else:
            comm.Reduce_scatter_block([send, t], [recv, t], op=MPI.SUM)
        best = min(best, comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return best / (words * (p - 1))


def fit_alpha_beta(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of t = alpha + beta * size, weighting each point by 1 / t."""
    X = np.stack([np.ones_like(sizes, dtype=float), sizes.astype(float)], axis=1) / times[:, None]
    coef, *_ = np.linalg.lstsq(X, np.ones_like(times), rcond=None)
    return max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)


def _er_block(rng: np.random.Generator, n: int, d: int, dtype) -> CSRBlock:
    """An n x n block with d uniformly random columns in every row."""
    rows = np.repeat(np.arange(n), d)
    cols = rng.integers(0, n, size=n * d)
    return CSRBlock.from_coo(rows, cols, rng.random(n * d), (n, n), dtype)


def _best(comm: MPI.Comm, fn, reps: int) -> float:
    """Best of ``reps`` timed calls of ``fn`` after one untimed one, slowest rank (collective).

    Every rank runs at once, as in a real run, so ranks that share cores or memory bandwidth
    are measured sharing them."""
    fn()
    best = float("inf")
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return comm.allreduce(best, op=MPI.MAX)


def _solve_rows_nonzeros(t_lo: float, t_hi: float, n: int, z_lo: int, z_hi: int,
                         fixed: float = 0.0) -> tuple[float, float]:
    """(per row, per nonzero) from two timings on n rows with z_lo and z_hi nonzeros.

    t = fixed + n * row + z * nonzero; both clamped at zero (noise can make one negative)."""
    nonzero = max((t_hi - t_lo) / (z_hi - z_lo), 0.0)
    row = max((t_lo - fixed - z_lo * nonzero) / n, 0.0)
    return row, nonzero


def measure_kernels(comm: MPI.Comm, node_model: str, dtype, n: int = 1 << 15,
                    d_lo: int = 2, d_hi: int = 16, widths: tuple[int, ...] = (
                        1, 2, 4, 8, 16, 32, 64, 128, 256, 512), reps: int = 3) -> dict:
    """Width tables of the node model's local kernels (collective).

    For every kernel kind of :data:`costmodel.KERNEL_KINDS` and every width w, the kernel is
    timed on two n x n Erdos-Renyi blocks with d_lo and d_hi nonzeros per row, on every rank
    at once (slowest rank); the two timings give seconds per nonzero and per row at width w.
    Also measured: the fixed cost of one call (a 1 x 1 block), the cost of rebuilding a block
    from a COO packet (what the shifting-S families do every step) and of building a block's
    transpose, per nonzero and per row. Returns the fields of :class:`distmm.planner.Machine`
    they fill (``kernels``, ``per_call``, ``unpack_nonzero``, ``unpack_row``,
    ``transpose_nonzero``)."""
    rng = np.random.default_rng(comm.Get_rank())
    model = make_node_model(node_model)
    blocks = {d: _er_block(rng, n, d, dtype) for d in (d_lo, d_hi)}
    tiny = CSRBlock.from_coo(np.zeros(1, int), np.zeros(1, int), np.ones(1), (1, 1), dtype)
    one = np.ones((1, 1), dtype=dtype)
    per_call = _best(comm, lambda: model.fusedmm_a(tiny, tiny.data, one, one, one), 5 * reps)

    def kernel(kind: str, S: CSRBlock, A, B, out, R):
        if kind == "fusedmm":
            return lambda: model.fusedmm_a(S, S.data, A, B, out)
        if kind == "sddmm":
            return lambda: model.sddmm(S, S.data, A, B, R)
        if kind == "spmm_a":
            return lambda: model.spmm_a(S, S.data, B, out)
        return lambda: model.spmm_b(S, S.data, A, out)

    tables = {kind: {"widths": list(widths), "per_nonzero": [], "per_row": []}
              for kind in costmodel.KERNEL_KINDS}
    for w in widths:
        A = rng.standard_normal((n, w)).astype(dtype)
        B = rng.standard_normal((n, w)).astype(dtype)
        out = np.zeros((n, w), dtype=dtype)
        for kind in costmodel.KERNEL_KINDS:
            t = {}
            for d, S in blocks.items():
                R = np.zeros(S.nnz, dtype=dtype)
                S.transpose()  # spmm_b's cached transpose: built once per stored block
                t[d] = _best(comm, kernel(kind, S, A, B, out, R), reps)
            row, nonzero = _solve_rows_nonzeros(t[d_lo], t[d_hi], n, blocks[d_lo].nnz,
                                                blocks[d_hi].nnz, per_call)
            tables[kind]["per_nonzero"].append(nonzero)
            tables[kind]["per_row"].append(row)

    def unpack(S: CSRBlock):
        # What the shifting-S families do with every received packet (sparse_shift_15d,
        # dense_replicate_25d ``_unpack``): rebuild indptr by a bincount of the rows.
        rows = S.row_ids().astype(S.indices.dtype)

        def fn():
            indptr = np.zeros(n + 1, dtype=S.indptr.dtype)
            np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
            S.indices.astype(S.indices.dtype, copy=False)
        return fn

    def transpose(S: CSRBlock):
        def fn():
            CSRBlock(S.shape, S.indptr, S.indices, S.data).transpose()
        return fn

    t_un = {d: _best(comm, unpack(S), reps) for d, S in blocks.items()}
    t_tr = {d: _best(comm, transpose(S), reps) for d, S in blocks.items()}
    z_lo, z_hi = blocks[d_lo].nnz, blocks[d_hi].nnz
    unpack_row, unpack_nonzero = _solve_rows_nonzeros(t_un[d_lo], t_un[d_hi], n, z_lo, z_hi)
    _, transpose_nonzero = _solve_rows_nonzeros(t_tr[d_lo], t_tr[d_hi], n, z_lo, z_hi)
    return {"kernels": tables, "per_call": per_call, "unpack_nonzero": unpack_nonzero,
            "unpack_row": unpack_row, "transpose_nonzero": transpose_nonzero,
            "kernel_block": {"n": n, "nnz_per_row": [d_lo, d_hi], "reps": reps}}


def affine_from_tables(tables: dict, r: int = 64) -> tuple[float, float, float]:
    """gamma, delta and gamma_unfused of the affine model (what machine files without width
    tables hold) from the width tables: the fused kernel's cost per nonzero at widths 1 and r
    is delta + 4 gamma w; SDDMM plus SpMMA at width r is 2 delta + 4 gamma_unfused r."""
    fused = tables["fusedmm"]
    ws = fused["widths"]
    r = max(w for w in ws if w <= max(r, ws[0]))
    at = {w: k for k, w in enumerate(ws)}
    if r == ws[0]:
        return 0.0, fused["per_nonzero"][0], 0.0
    u1, ur = fused["per_nonzero"][0], fused["per_nonzero"][at[r]]
    gamma = max((ur - u1) / (4.0 * (r - ws[0])), 0.0)
    delta = max(u1 - 4.0 * gamma * ws[0], 0.0)
    sep = tables["sddmm"]["per_nonzero"][at[r]] + tables["spmm_a"]["per_nonzero"][at[r]]
    gamma_unfused = max((sep - 2 * delta) / (4.0 * r), 0.0)
    return gamma, delta, gamma_unfused


def calibrate(comm: MPI.Comm, node_model: str = "reference", dtype=np.float32,
              quick: bool = False) -> dict:
    """Measure the machine (collective); returns the dict ``distmm calibrate`` saves."""
    p = comm.Get_size()
    require(p >= 2, "calibrate needs at least 2 ranks to measure messages "
                    "(run it as mpiexec -n 2 distmm calibrate ...)")
    sizes = np.array([1, 16, 256, 4096, 65536] + ([] if quick else [1 << 20, 1 << 22]))
    reps = 5 if quick else 20
    times = np.array([_pingpong(comm, int(s), dtype, reps) for s in sizes])
    alpha, beta = fit_alpha_beta(sizes, times)
    words = 1 << (14 if quick else 18)
    local = measure_kernels(comm, node_model, dtype, n=1 << (12 if quick else 15),
                            widths=(1, 8, 64) if quick else (1, 2, 4, 8, 16, 32, 64, 128,
                                                             256, 512),
                            reps=2 if quick else 3)
    gamma, delta, gamma_unfused = affine_from_tables(local["kernels"])
    return {
        "alpha": alpha,
        "beta": beta,
        "gamma": gamma,
        "gamma_unfused": gamma_unfused,
        "delta": delta,
        **local,
        "beta_allgather": _collective(comm, words, dtype, reps, "allgather"),
        "beta_reduce_scatter": _collective(comm, words, dtype, reps, "reduce_scatter"),
        "pingpong": {"words": sizes.tolist(), "seconds": times.tolist()},
        "p": p, "node_model": node_model, "dtype": str(np.dtype(dtype)),
        "numba_threads": int(os.environ.get("NUMBA_NUM_THREADS", "0")) or None,
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
        "mpi": MPI.Get_library_version().split("\n")[0].strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def save(path: str, data: dict) -> None:
    """Write the calibration as JSON, atomically (call on one rank)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)
