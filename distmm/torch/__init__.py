"""PyTorch adapter: graphs from ``edge_index``, GNN layers and distmm's kernels as autograd ops.

Optional: importing it needs torch (``pip install distmm[torch]``); without it the import raises
:class:`distmm.errors.InputError` naming that command. Nothing else in distmm imports it.

* :func:`graph` (:mod:`distmm.torch.graphs`): a graph from PyTorch data, placed on the ranks,
  with its node layout (``scatter``, ``local``, ``gather``) and edge maps (``to_values``,
  ``to_edges``).
* :mod:`distmm.torch.nn`: ``GCNConv``, ``GATConv``, ``SAGEConv`` (PyTorch Geometric's
  parameters) and ``DataParallel`` (the gradient all-reduce).
* :mod:`distmm.torch.functions`: ``sddmm``, ``spmm_a``, ``spmm_b``, ``fusedmm_a``,
  ``fusedmm_b``, ``sddmm_add``, ``edge_softmax`` on a distmm object, differentiable; re-exported
  here.

Conventions (docs/torch.md): ``edge_index`` row 0 sources, row 1 targets; S's row is the
target and its column the source; node tensors hold this rank's nodes (``graph.nodes``); edge
tensors in distmm's value order hold this rank's nonzeros.
"""

from __future__ import annotations

from distmm.errors import InputError
from distmm.torch import nn  # noqa: E402  (after graph: the layers use it)
from distmm.torch.functions import (
    as_numpy,
    edge_softmax,
    fusedmm_a,
    fusedmm_b,
    sddmm,
    sddmm_add,
    spmm_a,
    spmm_b,
    torch,
)
from distmm.torch.graphs import Graph, NodeTensor, graph

__all__ = ["Graph", "InputError", "NodeTensor", "as_numpy", "edge_softmax", "fusedmm_a",
           "fusedmm_b", "graph", "nn", "sddmm", "sddmm_add", "spmm_a", "spmm_b", "torch"]
