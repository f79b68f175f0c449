"""The cost of distmm.torch's wrapper against calling distmm's numpy API directly.

One rank (or more, under mpiexec), an Erdos-Renyi S of ``--n`` x ``--n`` with ``--per-row``
draws per row, float32, dense width ``--r``. Two comparisons, each in alternating rounds (A, B,
A, B, ...; a shared machine's slow phases then hit both alike), after one warm-up call each:

* forward: ``S.fusedmm_a(A, B)`` against ``distmm.torch.fusedmm_a(S, A_t, B_t)`` with tensors
  that require gradients (the training case: the autograd graph is recorded);
* backward: the numpy calls FusedMMA's backward makes (SDDMM twice, one SpMMA, two SpMMBs)
  against ``Y.backward(G)`` on the torch result (each torch round also runs its forward first,
  untimed).

Prints one JSON object per comparison (best and median seconds of each side, the overhead as a
fraction of the numpy time, by best and by median) on rank 0.

Example::

    python benchmarks/bench_torch_overhead.py --n 65536 --r 128 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import distmm
import distmm.torch as dt
from distmm.io.generate import erdos_renyi
from distmm.torch import torch


def timed(fn) -> float:
    MPI.COMM_WORLD.Barrier()
    t = time.perf_counter()
    fn()
    MPI.COMM_WORLD.Barrier()
    return time.perf_counter() - t


def compare(name: str, time_direct, time_wrapped, rounds: int) -> dict:
    """Alternate the two timers (each returns seconds) after one untimed call of each."""
    time_direct()
    time_wrapped()
    a, b = [], []
    for _ in range(rounds):
        a.append(time_direct())
        b.append(time_wrapped())
    best_a, best_b = min(a), min(b)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    return {"what": name, "numpy_best_s": best_a, "torch_best_s": best_b,
            "numpy_median_s": med_a, "torch_median_s": med_b,
            "overhead_best": best_b / best_a - 1.0, "overhead_median": med_b / med_a - 1.0,
            "rounds": rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--per-row", type=int, default=16)
    ap.add_argument("--r", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--algorithm", default="15d-dense-shift")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    share = erdos_renyi(args.n, args.n, args.per_row, seed=0, comm=comm)
    S = distmm.distribute(share, comm, algorithm=args.algorithm, r=args.r, dtype=np.float32)
    rng = np.random.default_rng(comm.rank)
    shape_a = (S.dense_rows("a", S.rank).size, len(range(args.r)[S.dense_cols("a", S.rank)]))
    shape_b = (S.dense_rows("b", S.rank).size, len(range(args.r)[S.dense_cols("b", S.rank)]))
    A = rng.standard_normal(shape_a).astype(np.float32)
    B = rng.standard_normal(shape_b).astype(np.float32)
    G = rng.standard_normal(shape_a).astype(np.float32)
    At = torch.from_numpy(A).requires_grad_()
    Bt = torch.from_numpy(B).requires_grad_()
    Gt = torch.from_numpy(G)
    ones = np.ones_like(S.values)
    v = S.values

    def backward_numpy():
        H = S.sddmm(G, B, values=ones)
        P = S.sddmm(A, B, values=ones)
        S.spmm_a(B, values=H * v)
        S.spmm_b(G, values=P * v) + S.spmm_b(A, values=H * v)

    state = {}

    def torch_backward() -> float:
        At.grad = Bt.grad = None
        state["Y"] = dt.fusedmm_a(S, At, Bt)
        return timed(lambda: state["Y"].backward(Gt))

    out = [compare("fusedmm_a forward", lambda: timed(lambda: S.fusedmm_a(A, B)),
                   lambda: timed(lambda: dt.fusedmm_a(S, At, Bt)), args.rounds),
           compare("fusedmm_a backward", lambda: timed(backward_numpy), torch_backward,
                   args.rounds)]
    nnz = int(comm.allreduce(S.values.size))
    if comm.rank == 0:
        for rec in out:
            rec.update(n=args.n, r=args.r, nnz=nnz, p=comm.size, algorithm=args.algorithm)
            print(json.dumps(rec))


if __name__ == "__main__":
    main()
