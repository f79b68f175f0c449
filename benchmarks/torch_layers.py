"""A GCN and a GAT training epoch on distmm.torch's layers against PyTorch Geometric's, same run.

    .venv/bin/mpiexec -n 1 .venv/bin/python benchmarks/torch_layers.py --data DIR \
        [--graphs cora movielens mesh genes] [--rounds 7] [--clock wall|cpu]

One epoch is what the PyG examples time: ``zero_grad``, the forward on every node, the
cross-entropy over the training nodes, the backward and an Adam step. The two models have the
same architecture as PyG's examples/gcn.py (16 hidden, 2 layers) and examples/gat.py (8 heads
of 8, then one head), the same initial weights (the PyG model's ``state_dict`` loaded into
distmm's), float32, no dropout (so both do the same work every epoch). Epochs alternate
between the variants after two warm-up epochs each; the table gives the median time of each
and the median of the per-round ratios to PyG's. The variants: PyG's model; distmm's; distmm's
with its layers' kept sparse form of a constant input turned off (``SPARSE_INPUT_DENSITY =
0``: the first layer's product by the weights dense, as PyG's); and, where the features are at
most 10% nonzero, PyG's model given them as a sparse COO tensor (its ``Linear`` then takes a
sparse product too). With more than one rank only distmm's epochs run (PyG has no distributed
counterpart); the table then gives their times.

Graphs, from DIR (the files of the project's data folder): Cora (its features and labels),
MovieLens 100K and genes x PubMed papers (``genes``, 801,757 nodes) as bipartite graphs (both
directions; 64 random features, 5 random classes) and the mesh's dual graph (258,569 nodes;
64 random features, 5 classes). Edges are made symmetric and coalesced.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch
from mpi4py import MPI

import distmm.torch as dt

F = torch.nn.functional
COMM = MPI.COMM_WORLD
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def read(path: Path) -> sp.coo_matrix:
    with gzip.open(path) as fh:
        return sp.coo_matrix(scipy.io.mmread(fh))


def load(name: str, data: Path, width: int = 64, classes: int = 5):
    """(edge_index, x, y, train mask) on every rank."""
    rng = np.random.default_rng(0)
    if name == "cora":
        A = read(data / "cora-adjacency.mtx.gz")
        X = read(data / "cora-features.mtx.gz").toarray().astype(np.float32)
        X /= np.maximum(X.sum(axis=1, keepdims=True), 1.0)
        y = np.loadtxt(data / "cora-labels.txt", dtype=np.int64)
    else:
        R = read(data / {"movielens": "movielens-100k-ratings.mtx.gz",
                         "genes": "genes-pubmed.mtx.gz"}.get(name, "metis-mdual.mtx.gz"))
        if name in ("movielens", "genes"):
            m, n = R.shape
            A = sp.coo_matrix((np.ones(R.nnz), (R.row, R.col + m)), shape=(m + n, m + n))
        else:
            A = R
        X = rng.standard_normal((A.shape[0], width)).astype(np.float32)
        y = rng.integers(0, classes, A.shape[0])
    A = ((A + A.T) != 0).tocoo()
    keep = A.row != A.col
    edge_index = torch.from_numpy(np.vstack([A.col[keep], A.row[keep]]).astype(np.int64))
    train = torch.from_numpy(rng.random(y.size) < 0.1)
    return edge_index, torch.from_numpy(X), torch.from_numpy(y), train


def models(kind: str, fin: int, classes: int):
    """(PyG's model, distmm's model with the same weights)."""
    import torch_geometric.nn as pyg

    def build(nn):
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                if kind == "gcn":
                    self.conv1, self.conv2 = nn.GCNConv(fin, 16), nn.GCNConv(16, classes)
                else:
                    self.conv1 = nn.GATConv(fin, 8, heads=8)
                    self.conv2 = nn.GATConv(64, classes, heads=1, concat=False)

            def forward(self, x, e):
                act = torch.relu if kind == "gcn" else F.elu
                return self.conv2(act(self.conv1(x, e)), e)
        return Net()

    torch.manual_seed(0)
    theirs = build(pyg)
    ours = build(dt.nn)
    ours.load_state_dict(theirs.state_dict())
    return theirs, dt.nn.DataParallel(ours, COMM)


def epoch_fn(model, x, y, train, edges, graph=None):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def epoch() -> float:
        start = clock()
        opt.zero_grad()
        out = model(x, edges)
        if graph is None:
            loss = F.cross_entropy(out[train], y[train])
        else:
            loss = graph.mean(F.cross_entropy(out[train], y[train], reduction="none"))
        loss.backward()
        opt.step()
        return clock() - start
    return epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--graphs", nargs="+", default=["cora", "movielens", "mesh"])
    ap.add_argument("--models", nargs="+", default=["gcn", "gat"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--clock", choices=list(CLOCK), default="wall",
                    help="wall: elapsed time; cpu: this process's CPU time (every thread's), "
                         "less disturbed by other jobs on a shared host")
    args = ap.parse_args()
    global clock
    clock = CLOCK[args.clock]
    p = COMM.Get_size()
    dt.graph(torch.zeros(2, 0, dtype=torch.int64), 1, COMM)  # distmm settles its threads
    from distmm.kernels import threads
    share = int(threads.STATE["threads"])
    torch.set_num_threads(share)  # the same count for PyG's and distmm's torch operations
    if COMM.rank == 0:
        print(f"p = {p}, torch {torch.__version__}, {share} thread(s) per rank for torch "
              f"(both models) and distmm's kernels, {args.clock} clock")
        print("| graph | nodes | edges | model | PyG ms | distmm ms | distmm / PyG | distmm, "
              "dense input ms | its / PyG | PyG, sparse x ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.graphs:
        edge_index, X, y, train = load(name, args.data)
        g = dt.graph(edge_index, X.shape[0], COMM)
        x_l, y_l, t_l = g.local(X), g.local(y), g.local(train)
        sparse_x = X.to_sparse() if (X != 0).float().mean() <= 0.1 else None
        for kind in args.models:
            theirs, ours = models(kind, X.shape[1], int(y.max()) + 1)
            runs = {"distmm": epoch_fn(ours, x_l, y_l, t_l, g, graph=g),
                    "dense": dense_input(epoch_fn(ours, x_l, y_l, t_l, g, graph=g))}
            if p == 1:
                runs["pyg"] = epoch_fn(theirs, X, y, train, edge_index)
                if sparse_x is not None:
                    runs["pyg_sparse"] = epoch_fn(theirs, sparse_x, y, train, edge_index)
            for _ in range(2):
                for run in runs.values():
                    run()
            times = {k: [] for k in runs}
            for _ in range(args.rounds):
                for k, run in runs.items():
                    times[k].append(COMM.allreduce(run(), op=MPI.MAX))
            if COMM.rank == 0:
                print(f"| {name} | {X.shape[0]} | {edge_index.shape[1]} | {kind} | "
                      + " | ".join(columns(times)) + " |", flush=True)


def dense_input(epoch):
    """``epoch`` with the layers' kept sparse form of a constant input turned off."""
    import distmm.torch.nn as dnn

    def run() -> float:
        keep, dnn.SPARSE_INPUT_DENSITY = dnn.SPARSE_INPUT_DENSITY, 0.0
        try:
            return epoch()
        finally:
            dnn.SPARSE_INPUT_DENSITY = keep
    return run


def columns(times: dict) -> list[str]:
    """Median ms of each variant and the median per-round ratio to PyG's (dense x)."""
    med = statistics.median

    def ms(k):
        return f"{med(times[k]) * 1e3:.1f}" if k in times else "-"

    def ratio(k):
        if "pyg" not in times:
            return "-"
        return f"{med([a / b for a, b in zip(times[k], times['pyg'], strict=True)]):.2f}"
    return [ms("pyg"), ms("distmm"), ratio("distmm"), ms("dense"), ratio("dense"),
            ms("pyg_sparse")]

if __name__ == "__main__":
    main()
