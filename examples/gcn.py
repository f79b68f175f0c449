"""GCN on Cora with distmm.torch: PyTorch Geometric's examples/gcn.py, distributed.

    mpiexec -n 2 python examples/gcn.py --data DIR   (DIR holds cora-adjacency.mtx.gz,
                                                      cora-features.mtx.gz, cora-labels.txt)

The data come from distmm.torch.datasets.planetoid_files where PyG's example uses Planetoid.
"""
import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from mpi4py import MPI

import distmm.torch as dt
from distmm.torch.datasets import planetoid_files
from distmm.torch.nn import GCNConv

parser = argparse.ArgumentParser()
parser.add_argument('--data', type=Path, required=True)
parser.add_argument('--dataset', type=str, default='cora')
parser.add_argument('--hidden_channels', type=int, default=16)
parser.add_argument('--lr', type=float, default=0.01)
parser.add_argument('--epochs', type=int, default=200)
args = parser.parse_args()

data = planetoid_files(args.data, args.dataset)
graph = dt.graph(data.edge_index, data.num_nodes, MPI.COMM_WORLD)
x, y = graph.local(data.x), graph.local(data.y)
masks = [graph.local(m) for m in (data.train_mask, data.val_mask, data.test_mask)]


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, out_channels)

    def forward(self, x, graph):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, graph).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv2(x, graph)
        return x


model = dt.nn.DataParallel(GCN(
    in_channels=data.num_features,
    hidden_channels=args.hidden_channels,
    out_channels=data.num_classes,
))

optimizer = torch.optim.Adam([
    dict(params=model.module.conv1.parameters(), weight_decay=5e-4),
    dict(params=model.module.conv2.parameters(), weight_decay=0)
], lr=args.lr)  # Only perform weight-decay on first convolution.


def train():
    model.train()
    optimizer.zero_grad()
    out = model(x, graph)
    loss = graph.mean(F.cross_entropy(out[masks[0]], y[masks[0]], reduction='none'))
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def test():
    model.eval()
    pred = model(x, graph).argmax(dim=-1)

    accs = []
    for mask in masks:
        accs.append(float(graph.mean((pred[mask] == y[mask]).float())))
    return accs


best_val_acc = test_acc = 0
times = []
for epoch in range(1, args.epochs + 1):
    start = time.time()
    loss = train()
    if epoch >= 10:  # We treat the first 10 iterations as a warm-up
        times.append(time.time() - start)

    train_acc, val_acc, tmp_test_acc = test()
    if val_acc > best_val_acc:
        best_val_acc = val_acc
        test_acc = tmp_test_acc
    if graph.rank == 0:
        print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}, Train: {train_acc:.4f}, '
              f'Val: {val_acc:.4f}, Test: {test_acc:.4f}')
if graph.rank == 0:
    print(f'Median time per epoch: {torch.tensor(times).median():.4f}s')
