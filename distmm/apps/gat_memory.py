"""The memory model of GAT training (:func:`distmm.apps.gat_train.train` on a
:class:`distmm.apps.gat.DistGAT`): the bytes one rank holds.

Built on the 15d-dense-shift kernel model (:mod:`distmm.core.memory`) at each layer's head
width, extended by what the layers keep. With ``nl`` nodes and ``el`` edges (self-loops
included) a rank, for a layer of H heads of F features reading W features:

* the kernels: S in the orientations SpMMA, SpMMB and SDDMM use and their buffers (the
  union, per part the largest), at the widest layer's H F (every head in one multi-value or
  multi-head call; no per-head buffers);
* the features (nl x W of the first layer, dense);
* the caches a training forward keeps for the backward: the input's dropout factors and the
  masked input (nl x W each), Z and the heads' outputs (nl x H F each), four edge arrays
  (el x H: scores, attention, attention after dropout, the dropout factors), the layer's
  output and its ELU (nl x H F each);
* on top of that, the largest temporaries of one layer: the dropout factors' int64 keys
  (two arrays of nl x W or el x H) in the forward, six el x H arrays and four nl x H F blocks
  in the backward, or the evaluation forward (made while the training caches are alive),
  each with the attention transposed into the multi-value SpMM's (H, el) values;
  and from the second epoch on, the last epoch's caches beside the new forward's, until it
  returns;
* the parameters, their gradients, Adam's two moments and the best model's copy.

The model assumes nodes and edges spread evenly over the ranks. Its ``edges`` are S's
(:func:`graph_edges`): a graph file's stored self-loops are not edges of their own, and a
symmetric file's entries are mirrored; ``distmm gat train --memory-limit`` refuses from the
header alone when even the fewest edges it allows do not fit (:func:`edge_bounds`), and
counts the stored self-loops only when the answer depends on them.
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms import ALGORITHMS
from distmm.apps.kernel_memory import kernels_held
from distmm.core.memory import COO_ENTRY, Memory, ceil_div
from distmm.core.partition import partitioner_counts

ALGORITHM = "15d-dense-shift"


def layer_shapes(in_channels: int, hidden: int, heads: int, classes: int, out_heads: int,
                 layers: int) -> list[tuple[int, int, int]]:
    """(W, H, F) of each layer, as :meth:`distmm.apps.gat_model.GATModel.init` builds them:
    hidden layers concatenate H F features, the last averages its heads into the classes."""
    shapes, width = [], in_channels
    for k in range(layers):
        last = k == layers - 1
        H, F = (out_heads, classes) if last else (heads, hidden)
        shapes.append((width, H, F))
        width = H * F
    return shapes


def graph_edges(n: int, stored: int, symmetric: bool, loops_stored: int,
                self_loops: bool) -> int:
    """The edges of GAT's S (:func:`distmm.apps.gat.graph_share`) from a graph file of ``n``
    nodes with ``stored`` entries, ``loops_stored`` of them on the diagonal: the stored
    self-loops are dropped, a symmetric file's other entries count twice (mirrored), and with
    ``self_loops`` one self-loop per node is added. Duplicate entries (merged when S is
    placed) are counted as stored. Not collective."""
    return (2 if symmetric else 1) * (stored - loops_stored) + (n if self_loops else 0)


def edge_bounds(n: int, stored: int, symmetric: bool, self_loops: bool) -> tuple[int, int]:
    """(fewest, most) edges of GAT's S that a graph file's header allows (:func:`graph_edges`
    with every stored entry on the diagonal, and with none). Not collective."""
    return (graph_edges(n, stored, symmetric, stored, self_loops),
            graph_edges(n, stored, symmetric, 0, self_loops))


def gat_memory(n: int, edges: int, in_channels: int, hidden: int, heads: int, classes: int,
               out_heads: int, layers: int, p: int, c: int = 1, dtype="float32",
               feature_entries: int | None = None, algorithm: str = ALGORITHM,
               permute="auto") -> Memory:
    """Bytes the fullest rank holds training GAT on an n-node graph with ``edges`` edges
    (self-loops included) and ``in_channels`` input features: dense, or sparse with
    ``feature_entries`` stored entries (a CSR block, its dropout factors per stored entry).
    ``algorithm`` and ``permute`` (distribute's) add rank 0's partitioning of S at distribute
    where that family orders S by a partition
    (:func:`distmm.core.partition.partitioner_counts`); the kernels' bytes are modelled on
    :data:`ALGORITHM`'s. Not collective."""
    it = np.dtype(dtype).itemsize
    shapes = layer_shapes(in_channels, hidden, heads, classes, out_heads, layers)
    nl, el = ceil_div(n, p), ceil_div(edges, p)
    # the first layer's input entries a rank holds, and the bytes of one copy of them
    entries = nl * in_channels if feature_entries is None else ceil_div(feature_entries, p)
    copy = entries * it if feature_entries is None else entries * (it + 4) + (nl + 1) * 8
    model = ALGORITHMS[ALGORITHM].model
    widest = max(H * F for _, H, F in shapes)
    kernels = [model.memory_bytes(op, "none", n, n, edges, widest, p, c, dtype)
               for op in ("spmm_a", "spmm_b", "sddmm")]
    parts = kernels_held(kernels)  # the layers' blocks: below
    parts["features"] = copy
    # per layer: the input's dropout factors and masked copy (the first layer's: its entries)
    inputs = [entries * it + copy] + [2 * nl * W * it for W, _, _ in shapes[1:]]
    parts["forward caches"] = sum(x + (4 * nl * H * F + 4 * el * H) * it
                                  for x, (_, H, F) in zip(inputs, shapes, strict=True))
    params = sum(W * H * F + 3 * H * F for W, H, F in shapes) * it
    parts["parameters, gradients, Adam moments, best model"] = 5 * params
    # the dropout factors' int64 keys (and the product they are made from), per input entry
    # and per edge and head
    dropout = max(2 * 8 * max(entries if k == 0 else nl * W, el * H)
                  for k, (W, H, _) in enumerate(shapes))
    # the backward of one layer; the evaluation forward, made while the training caches live
    backward = max((7 * el * H + 4 * nl * H * F) * it for _, H, F in shapes)
    evaluation = max((4 * el * H + 4 * nl * H * F) * it for _, H, F in shapes)
    # a training forward runs while the last epoch's caches are still referenced (they are
    # released when it returns): two sets of caches at its end
    call = {"layer temporaries": max(parts["forward caches"] + dropout, backward, evaluation),
            "kernel temporaries": max(sum(mem.call.values()) for mem in kernels)}
    distribute = max(mem.distribute for mem in kernels) + 2 * COO_ENTRY * el
    partitioner = (partitioner_counts(ALGORITHMS[algorithm], permute, n, n, edges, p)
                   or {}).get("partitioner", 0)
    return Memory(parts, call, distribute, max(mem.build for mem in kernels), partitioner)
