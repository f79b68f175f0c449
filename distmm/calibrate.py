"""Measure alpha, beta and gamma of this machine for the planner (``distmm calibrate``).

* alpha and beta: a ping-pong between world ranks 0 and 1 (half the round trip, messages of 1
  to 2^22 words), fitted as t = alpha + beta * words by least squares on the relative error,
  so small and large messages both count. The all-gather and reduce-scatter the algorithms use
  are timed too (all ranks, blocks of 2^18 words), and reported as seconds per word received,
  for comparison; the planner uses the ping-pong beta.
* gamma and delta: seconds per flop and per nonzero walked of the node model's fused local
  kernel on an Erdos-Renyi block at widths r and 1, on every rank at once (as in a real run),
  slowest rank.
"""

from __future__ import annotations

import json
import os
import platform
import time

import numpy as np
from mpi4py import MPI

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


def measure_gamma_delta(comm: MPI.Comm, node_model: str, dtype, n: int = 1 << 15,
                        d: int = 32, r: int = 64, reps: int = 3) -> tuple[float, float, float]:
    """Seconds per flop of the fused local kernel (gamma) and of SDDMM then SpMMA
    (gamma_unfused), and per nonzero walked (delta), slowest rank (collective). Two widths,
    r and 1: t(w) = nnz (delta + 4 gamma w) for the fused kernel."""
    rng = np.random.default_rng(comm.Get_rank())
    rows = np.repeat(np.arange(n), d)
    cols = rng.integers(0, n, size=n * d)
    S = CSRBlock.from_coo(rows, cols, rng.random(n * d), (n, n), dtype)
    model = make_node_model(node_model)
    R = np.zeros(S.nnz, dtype=dtype)

    def fused(A, B, out):
        model.fusedmm_a(S, S.data, A, B, out)

    def separate(A, B, out):
        R[:] = 0
        model.sddmm(S, S.data, A, B, R)
        model.spmm_a(S, R, B, out)

    seconds = {}
    for name, w, fn in (("fused", 1, fused), ("fused", r, fused), ("separate", r, separate)):
        A = rng.standard_normal((n, w)).astype(dtype)
        B = rng.standard_normal((n, w)).astype(dtype)
        out = np.zeros((n, w), dtype=dtype)
        fn(A, B, out)  # compile
        best = float("inf")
        for _ in range(reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn(A, B, out)
            best = min(best, time.perf_counter() - t0)
        seconds[name, w] = comm.allreduce(best, op=MPI.MAX) / S.nnz
    gamma = max((seconds["fused", r] - seconds["fused", 1]) / (4.0 * (r - 1)), 0.0)
    delta = max(seconds["fused", 1] - 4.0 * gamma, 0.0)
    # The separate kernels walk S twice: 2 delta per nonzero, the rest is flops.
    gamma_unfused = max((seconds["separate", r] - 2 * delta) / (4.0 * r), 0.0)
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
    gamma, delta, gamma_unfused = measure_gamma_delta(comm, node_model, dtype,
                                                      n=1 << (12 if quick else 15))
    return {
        "alpha": alpha,
        "beta": beta,
        "gamma": gamma,
        "gamma_unfused": gamma_unfused,
        "delta": delta,
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
