"""Cora-like node classification data from files, shaped like a PyTorch Geometric ``Data``.

``load(adjacency, features, labels)`` reads a Matrix Market adjacency (gzip or not; an entry
(i, j) is an edge i -> j), a Matrix Market feature matrix and a text file of one integer label
per node, and returns every global tensor on every rank (Cora is small): ``edge_index`` (2, E),
``x`` (row-normalised, as PyG's ``NormalizeFeatures``), ``y`` and the boolean masks of
Planetoid's split sizes (20 training nodes per class, 500 validation, 1000 test; seeded, since
the files carry no split). The examples gcn.py and gat.py use it where PyG's use ``Planetoid``.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import scipy.io
import torch


def _mm(path: Path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path) as fh:
        return scipy.io.mmread(fh).tocoo()


def load(adjacency: Path, features: Path, labels: Path, seed: int = 0, per_class: int = 20,
         val: int = 500, test: int = 1000) -> SimpleNamespace:
    adj = _mm(adjacency)
    x = torch.from_numpy(_mm(features).toarray().astype(np.float32))
    x = x / x.sum(dim=1, keepdim=True).clamp(min=1.0)
    y = torch.from_numpy(np.loadtxt(labels, dtype=np.int64).reshape(-1))
    order = np.random.default_rng(seed).permutation(y.numel())
    train = np.concatenate([order[y.numpy()[order] == k][:per_class] for k in np.unique(y)])
    rest = order[~np.isin(order, train)]
    masks = []
    for ids in (train, rest[:val], rest[val:val + test]):
        m = torch.zeros(y.numel(), dtype=torch.bool)
        m[torch.from_numpy(ids)] = True
        masks.append(m)
    edge_index = torch.from_numpy(np.vstack([adj.row, adj.col]).astype(np.int64))
    return SimpleNamespace(edge_index=edge_index, x=x, y=y, num_nodes=y.numel(),
                           num_features=x.shape[1], num_classes=int(y.max()) + 1,
                           train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])
