"""GAT training steps with one part of DistGAT made the way it is against the way it was
before, taking turns in one process.

One step is what ``distmm gat train`` does per epoch: a forward pass with dropout, the
backward pass and an inference forward pass, on Cora (``--data``: ../shared/data) with the
GAT paper's model (2 layers, ``--heads`` heads of 8, 7 classes). ``--part`` picks what differs:

* ``heads``: a layer's per-head calls through one bound call on shared buffers
  (:class:`distmm.apps.gat.HeadCall`) against method calls on new contiguous copies of each
  head's slices (never replayed);
* ``elu``: the compiled :func:`distmm.apps.gat.elu` against numpy's
  ``np.where(Y > 0, Y, np.expm1(np.minimum(Y, 0)))``;
* ``features``: the first layer's products with the sparse features through the SpMM kernels
  (:class:`distmm.apps.gat_features.SparseFeatures`) against scipy's;
* ``leaky``: the compiled :func:`distmm.apps.gat.leaky_relu` and its backward against numpy's
  ``np.where`` expressions;
* ``gather``: the edge primitives' compiled gathers (:mod:`distmm.ops.gather`: the additive
  SDDMM's scores, the expands) against numpy's fancy indexing.

Every other part of the step is the same code. Each round times ``--steps`` steps of each way
(after two untimed ones, which make the bound calls' replays), the ways taking turns round by
round (the order reversed every other round), and prints the median step of each round and
the ratios; run it under ``mpiexec`` for p > 1::

    .venv/bin/python experiments/bench_gat_step.py --part heads --rounds 10 --steps 20
    .venv/bin/mpiexec -n 2 .venv/bin/python experiments/bench_gat_step.py --part elu
"""

from __future__ import annotations

import argparse
import gzip
import os
import time

import distmm  # noqa: F401  (before numpy loads OpenBLAS: distmm sets its thread spin)

# isort: split
import numpy as np
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

import distmm.apps.gat as gat_module
import distmm.ops.edges as edges_module
from distmm.apps.gat import DistGAT, Dropout, HeadCall, cross_entropy, distribute_graph
from distmm.apps.gat_model import GATModel

BOUND = HeadCall.__call__
COMPILED_ELU = gat_module.elu
SPARSE_FEATURES = gat_module.SparseFeatures.of
COMPILED_LEAKY = (gat_module.leaky_relu, gat_module.leaky_relu_backward)
COMPILED_GATHERS = (edges_module.gather_add, edges_module.gather_rows)


def numpy_gathers() -> tuple:
    """The gathers as numpy's fancy indexing."""
    return (lambda u, iu, v, iv: u[iu] + v[iv]), (lambda x, ix: x[ix])


def numpy_leaky(X: np.ndarray, slope: float) -> np.ndarray:
    """LeakyReLU as DistGAT computed it before the compiled one."""
    return np.where(X > 0, X, slope * X)


def numpy_leaky_backward(G: np.ndarray, X: np.ndarray, slope: float) -> np.ndarray:
    """Its gradient as DistGAT computed it before."""
    return G * np.where(X > 0, 1.0, slope).astype(G.dtype)


def method_call(self: HeadCall, *operands: np.ndarray, values=None) -> np.ndarray:
    """A head's call as DistGAT made it before it bound them: the method, on new contiguous
    copies of the head's slices (never replayed: new objects every call)."""
    vals = self.values if values is None else np.ascontiguousarray(values)
    return getattr(self.call._obj, self.call._kind)(
        *(np.ascontiguousarray(x) for x in operands), values=vals)


def numpy_elu(Y: np.ndarray) -> np.ndarray:
    """The ELU as DistGAT computed it before the compiled one."""
    return np.where(Y > 0, Y, np.expm1(np.minimum(Y, 0)))


def use(part: str, new: bool) -> None:
    """Make ``part`` the current (``new``) or the former way."""
    if part == "heads":
        HeadCall.__call__ = BOUND if new else method_call
    elif part == "elu":
        gat_module.elu = COMPILED_ELU if new else numpy_elu
    elif part == "gather":
        edges_module.gather_add, edges_module.gather_rows = (
            COMPILED_GATHERS if new else numpy_gathers())
    elif part == "leaky":
        gat_module.leaky_relu, gat_module.leaky_relu_backward = (
            COMPILED_LEAKY if new else (numpy_leaky, numpy_leaky_backward))
    else:  # scipy's products: no input is taken as SparseFeatures
        gat_module.SparseFeatures.of = (SPARSE_FEATURES if new
                                        else staticmethod(lambda *args, **kwargs: None))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["heads", "elu", "features", "leaky", "gather"],
                    default="heads")
    ap.add_argument("--data", default=os.environ.get("DISTMM_DATA", "../shared/data"))
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--steps", type=int, default=15, help="timed steps per way and round")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)

    comm = MPI.COMM_WORLD
    dtype = np.dtype(args.dtype)
    obj = distribute_graph(os.path.join(args.data, "cora-adjacency.mtx.gz"), comm,
                           dtype=dtype)
    with gzip.open(os.path.join(args.data, "cora-features.mtx.gz")) as fh:
        features = sp.csr_matrix(scipy.io.mmread(fh))
    labels = np.loadtxt(os.path.join(args.data, "cora-labels.txt"), dtype=np.int64)
    X = features[obj.local_rows("a")].astype(dtype).tocsr()
    y = labels[obj.local_rows("a")]
    train = np.zeros(y.size, dtype=bool)
    train[::20] = True
    gat = DistGAT(obj, GATModel.init(X.shape[1], 8, args.heads, int(labels.max()) + 1, 1, 2,
                                     0, dtype))

    def step(k: int) -> None:
        logits, caches = gat.forward(X, Dropout(0.6, 0.6, 0, k))
        dlog = cross_entropy(logits, y, train, comm.allreduce(int(train.sum())))[1]
        gat.backward(dlog, caches)
        gat.forward(X, None)

    medians: dict[str, list[float]] = {"new": [], "old": []}
    for rnd in range(args.rounds):
        ways = ("new", "old") if rnd % 2 == 0 else ("old", "new")
        for way in ways:
            use(args.part, way == "new")
            step(0)
            step(1)
            times = []
            for k in range(args.steps):
                comm.Barrier()
                t0 = time.perf_counter()
                step(k)
                times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            medians[way].append(float(np.median(times)))
    use(args.part, True)
    obj.close()
    if comm.rank == 0:
        b, m = np.array(medians["new"]), np.array(medians["old"])
        print(f"Cora GAT step, {args.part}, p = {comm.size}, {args.heads} heads, {dtype}: median "
              f"over rounds now {np.median(b) * 1e3:.2f} ms, before {np.median(m) * 1e3:.2f} ms; "
              f"now / before per round {' '.join(f'{x:.2f}' for x in b / m)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
