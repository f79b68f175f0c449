"""A two-layer GAT on Cora in ordinary PyTorch, with distmm doing the sparse, distributed part.

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/gat_torch.py [--epochs 300]

The model is plain ``torch.nn`` (Linear layers, Parameters, dropout, ELU, Adam); only the three
graph operations come from distmm.torch: the additive SDDMM of per-node attention scores, the
edge softmax over each node's in-edges, and the SpMM that aggregates neighbours with the
attention as S's values. Each rank holds the rows of its own nodes (``S.local_rows``); the
parameters are replicated, and their gradients are summed over the ranks with one mpi4py
all-reduce per step (the data-parallel rule, since every rank's loss covers its own nodes).

Setup as in the GAT paper (and GATConv's semantics): 8 heads of 8 features, ELU, 7-class
output head, dropout 0.6 on features and attention, self-loops, Adam (lr 0.005, weight decay
5e-4), 20 training nodes per class, 500 validation and 1000 test nodes, keeping the parameters
of the epoch with the best validation accuracy. S[i, j] != 0 means an edge j -> i, so row i of
S lists the nodes i attends to; Cora is symmetric.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

import distmm
import distmm.torch as dt
from distmm.torch import torch

# the real matrices: $DISTMM_DATA, else ../shared/data beside the checkout
DATA = Path(os.environ.get("DISTMM_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
comm = MPI.COMM_WORLD


def load_cora(data: Path):
    """Adjacency with self-loops (every rank reads it whole: Cora is small), features, labels."""
    with gzip.open(data / "cora-adjacency.mtx.gz") as fh:
        adj = sp.coo_matrix(scipy.io.mmread(fh))
    n = adj.shape[0]
    keep = adj.row != adj.col
    rows = np.concatenate([adj.row[keep], np.arange(n)])
    cols = np.concatenate([adj.col[keep], np.arange(n)])
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    S.data[:] = 1.0  # duplicates summed by tocsr: the pattern is what matters
    with gzip.open(data / "cora-features.mtx.gz") as fh:
        X = sp.csr_matrix(scipy.io.mmread(fh), dtype=np.float32)
    rowsum = np.asarray(X.sum(axis=1)).ravel()
    X = sp.diags(1.0 / np.maximum(rowsum, 1.0)).astype(np.float32) @ X  # row-normalised
    labels = np.loadtxt(data / "cora-labels.txt", dtype=np.int64)
    return S, X, labels


def standard_split(labels: np.ndarray, per_class: int = 20, val: int = 500, test: int = 1000,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Training: the first ``per_class`` nodes of each class in a seeded permutation; then
    ``val`` validation and ``test`` test nodes from the rest, in that order."""
    order = np.random.default_rng(seed).permutation(labels.size)
    train = np.concatenate([order[labels[order] == k][:per_class] for k in np.unique(labels)])
    rest = order[~np.isin(order, train)]
    return {"train": train, "val": rest[:val], "test": rest[val:val + test]}


class GATLayer(torch.nn.Module):
    """GATConv on a distributed S: ``heads`` attention heads of ``out`` features each."""

    def __init__(self, S, fin: int, out: int, heads: int, concat: bool, dropout: float):
        super().__init__()
        self.S, self.heads, self.out, self.concat, self.dropout = S, heads, out, concat, dropout
        self.lin = torch.nn.Linear(fin, heads * out, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(heads, out))
        self.att_dst = torch.nn.Parameter(torch.empty(heads, out))
        self.bias = torch.nn.Parameter(torch.zeros(heads * out if concat else out))
        torch.nn.init.xavier_uniform_(self.lin.weight)
        torch.nn.init.xavier_uniform_(self.att_src)
        torch.nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x):
        if x.is_sparse:  # the bag-of-words input: dropout and product on stored entries only
            kept = torch.nn.functional.dropout(x.values(), self.dropout, self.training)
            x = torch.sparse_coo_tensor(x.indices(), kept, x.shape, check_invariants=False)
            z = torch.sparse.mm(x, self.lin.weight.t())
        else:
            z = self.lin(torch.nn.functional.dropout(x, self.dropout, self.training))
        z = z.view(-1, self.heads, self.out)                    # this rank's nodes
        s_src = (z * self.att_src).sum(-1)                      # (nodes, heads), B side
        s_dst = (z * self.att_dst).sum(-1)                      # (nodes, heads), A side
        e = torch.nn.functional.leaky_relu(dt.sddmm_add(self.S, s_dst, s_src), 0.2)
        alpha = dt.edge_softmax(self.S, e, dim="row")           # (local nnz, heads)
        alpha = torch.nn.functional.dropout(alpha, self.dropout, self.training)
        # one SpMM per head, the head's attention as S's values (copies: per-head slices)
        out = torch.stack([dt.spmm_a(self.S, z[:, h], alpha[:, h])
                           for h in range(self.heads)], dim=1)
        out = out.reshape(-1, self.heads * self.out) if self.concat else out.mean(dim=1)
        return out + self.bias


class GAT(torch.nn.Module):
    def __init__(self, S, fin: int, classes: int, hidden: int = 8, heads: int = 8,
                 dropout: float = 0.6):
        super().__init__()
        self.l1 = GATLayer(S, fin, hidden, heads, True, dropout)
        self.l2 = GATLayer(S, hidden * heads, classes, 1, False, dropout)

    def forward(self, x):
        return self.l2(torch.nn.functional.elu(self.l1(x)))


def compare_with_pyg(model: GAT, S_glob, X_glob, x, nodes) -> float | None:
    """Largest difference between this model's logits (inference, this rank's nodes) and
    PyTorch Geometric's GATConv with the same parameters on the whole graph, or None when
    torch_geometric is not installed. Collective (the distributed forward runs on every rank).
    """
    model.eval()
    with torch.no_grad():
        ours = model(x)
    try:
        from torch_geometric.nn import GATConv
    except ImportError:
        return None
    coo = S_glob.tocoo()  # S[i, j] != 0: an edge j -> i, i.e. source j, target i
    edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
    convs = []
    for layer in (model.l1, model.l2):
        conv = GATConv(layer.lin.in_features, layer.out, heads=layer.heads, concat=layer.concat,
                       negative_slope=0.2, dropout=0.0, add_self_loops=False)  # S has them
        with torch.no_grad():
            conv.lin.weight.copy_(layer.lin.weight)
            conv.att_src.copy_(layer.att_src[None])
            conv.att_dst.copy_(layer.att_dst[None])
            conv.bias.copy_(layer.bias)
        convs.append(conv.eval())
    dense_x = torch.from_numpy(X_glob.toarray())
    with torch.no_grad():
        theirs = convs[1](torch.nn.functional.elu(convs[0](dense_x, edge_index)), edge_index)
    return float((ours - theirs[torch.from_numpy(nodes)]).abs().max())


def allreduce_grads(model: torch.nn.Module) -> None:
    """Sum every parameter's gradient over the ranks (one packed mpi4py all-reduce)."""
    params = [p for p in model.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
    pos = 0
    for p in params:
        p.grad.copy_(flat[pos:pos + p.numel()].view_as(p.grad))
        pos += p.numel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    S_glob, X_glob, labels_glob = load_cora(args.data)
    S = distmm.distribute(S_glob, comm, algorithm="15d-dense-shift", dtype=np.float32,
                          root=None)
    # For a square S on 15d-dense-shift, the A side (rows) and B side (columns) of a rank are
    # the same nodes, so a layer's output (A side) is the next layer's input (B side).
    nodes = S.local_rows("a")
    assert np.array_equal(nodes, S.local_rows("b"))
    mine = X_glob[nodes].tocoo()  # this rank's nodes' features, sparse, in block order
    x = torch.sparse_coo_tensor(np.vstack([mine.row, mine.col]).astype(np.int64),
                                mine.data, mine.shape, check_invariants=True).coalesce()
    labels = torch.from_numpy(labels_glob[nodes])
    split = standard_split(labels_glob, seed=args.seed)
    masks = {k: torch.from_numpy(np.isin(nodes, v)) for k, v in split.items()}
    counts = {k: v.size for k, v in split.items()}

    torch.manual_seed(args.seed)  # identical initial parameters on every rank
    model = GAT(S, X_glob.shape[1], int(labels_glob.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    # dropout masks differ per rank (each rank drops its own nodes' features and edges)
    gen_seed = args.seed * 1000 + comm.rank + 1

    def evaluate():
        model.eval()
        with torch.no_grad():
            logits = model(x)
        pred = logits.argmax(dim=1)
        local = np.array([float((pred[m] == labels[m]).sum()) for m in masks.values()]
                         + [float(torch.nn.functional.cross_entropy(
                             logits[masks["val"]], labels[masks["val"]], reduction="sum"))])
        total = comm.allreduce(local)
        acc = {k: total[i] / counts[k] for i, k in enumerate(masks)}
        return acc, total[-1] / counts["val"]

    best = (-1.0, np.inf, 0, None)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        torch.manual_seed(gen_seed + epoch * comm.size)
        model.train()
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(
            logits[masks["train"]], labels[masks["train"]], reduction="sum") / counts["train"]
        loss.backward()       # collective: distmm's backward kernels run on every rank
        allreduce_grads(model)
        opt.step()
        acc, val_loss = evaluate()
        if acc["val"] > best[0] or (acc["val"] == best[0] and val_loss < best[1]):
            best = (acc["val"], val_loss, epoch, acc["test"])
        train_loss = comm.allreduce(loss.item())  # every rank: a collective
        if comm.rank == 0 and epoch % 20 == 0:
            print(f"epoch {epoch:4d}  train loss {train_loss:.4f}  "
                  f"val acc {acc['val']:.3f}  test acc {acc['test']:.3f}", flush=True)
    elapsed = time.perf_counter() - start
    if comm.rank == 0:
        print(f"best validation accuracy {best[0]:.3f} at epoch {best[2]}; test accuracy "
              f"there {best[3]:.3f}; p = {comm.size}, {elapsed / args.epochs * 1e3:.1f} ms "
              "per epoch (train step + evaluation)")
    diff = compare_with_pyg(model, S_glob, X_glob, x, nodes)
    diff = comm.allreduce(-1.0 if diff is None else diff, op=MPI.MAX)
    if comm.rank == 0:
        print("torch_geometric is not installed: no GATConv comparison" if diff < 0 else
              f"GATConv with the same parameters: largest logit difference {diff:.2e}")


if __name__ == "__main__":
    main()
