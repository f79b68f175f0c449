"""Node-classification data from files, shaped like PyTorch Geometric's ``Planetoid`` data.

:func:`planetoid_files` reads a graph given as three files in a folder, ``NAME-adjacency.mtx``
(Matrix Market; an entry (i, j) is an edge i -> j), ``NAME-features.mtx`` (Matrix Market, one
row per node) and ``NAME-labels.txt`` (one integer label per node; each file may be gzipped,
``.gz``), and returns what ``Planetoid(root, name, transform=NormalizeFeatures())[0]`` holds:
``edge_index``, ``x`` (row-normalised), ``y`` and the three boolean masks, on every rank that
calls it (not collective; a graph of a few thousand nodes is small). The files carry no split,
so the masks are Planetoid's split sizes drawn with a seed: ``per_class`` training nodes per
class, then ``val`` validation and ``test`` test nodes from the rest.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distmm.errors import InputError
from distmm.torch.functions import torch


@dataclass
class NodeData:
    """Global tensors of one graph (every node), as a PyG ``Data`` names them."""

    edge_index: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return int(self.y.numel())

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1


def _find(folder: Path, name: str) -> Path:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.exists():
            return path
    raise InputError(f"{folder} has no {name} (nor {name}.gz)")


def _open(path: Path):
    return gzip.open(path) if path.suffix == ".gz" else open(path, "rb")


def _matrix(path: Path):
    import scipy.io
    with _open(path) as fh:
        return scipy.io.mmread(fh).tocoo()


def planetoid_files(folder, name: str = "cora", seed: int = 0, per_class: int = 20,
                    val: int = 500, test: int = 1000) -> NodeData:
    """The graph ``name`` from the files in ``folder`` (see the module docstring).

    Returns
    -------
    NodeData
        ``edge_index`` (2, E) int64 (row 0 sources), ``x`` (N, F) float32 with rows summing to
        1 (PyG's ``NormalizeFeatures``; all-zero rows stay zero), ``y`` (N,) int64 and the
        masks ``train_mask``, ``val_mask``, ``test_mask`` (N,) bool; ``num_nodes``,
        ``num_features``, ``num_classes``. Not collective.
    """
    folder = Path(folder)
    adj = _matrix(_find(folder, f"{name}-adjacency.mtx"))
    x = torch.from_numpy(_matrix(_find(folder, f"{name}-features.mtx")).toarray()
                         .astype(np.float32))
    x = x / x.sum(dim=1, keepdim=True).clamp(min=1.0)
    with _open(_find(folder, f"{name}-labels.txt")) as fh:
        labels = np.loadtxt(fh, dtype=np.int64).reshape(-1)
    if not (adj.shape[0] == adj.shape[1] == x.shape[0] == labels.size):
        raise InputError(f"{name}: the adjacency is {adj.shape}, the features {tuple(x.shape)}"
                         f" and the labels {labels.size}: one row per node expected in each")
    order = np.random.default_rng(seed).permutation(labels.size)
    train = np.concatenate([order[labels[order] == k][:per_class] for k in np.unique(labels)])
    rest = order[~np.isin(order, train)]
    masks = []
    for ids in (train, rest[:val], rest[val:val + test]):
        mask = torch.zeros(labels.size, dtype=torch.bool)
        mask[torch.from_numpy(ids)] = True
        masks.append(mask)
    edge_index = torch.from_numpy(np.vstack([adj.row, adj.col]).astype(np.int64))
    return NodeData(edge_index, x, torch.from_numpy(labels), *masks)


__all__ = ["NodeData", "planetoid_files"]
