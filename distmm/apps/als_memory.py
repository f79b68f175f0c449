"""The memory model of ALS (:func:`distmm.apps.als.fit`): the bytes one rank holds.

Built on the family's kernel model (:mod:`distmm.core.memory`; what ``distmm plan`` prints
for one operation), extended by what the solver keeps:

* the kernels: ALS calls FusedMMA, FusedMMB, SpMMA, SpMMB and SDDMM on one object, so it holds
  the union of what those calls keep (S in each stored orientation, cached transposes, the
  replication, reduction and shift buffers: per part, the largest over the operations) and
  the largest of their call temporaries; the replication and reduction buffers once per
  side, as the object keeps them per stored orientation;
* the factor blocks A and B, and per side the bound calls' three blocks (CG direction P, the
  matvec result Y, the right-hand side), all kept from epoch to epoch;
* during a half-step, three more blocks of that side (the residual, a product's temporary and
  ``lambda * P``);
* per stored rating three value vectors (the ratings in value order, the ones of the pattern,
  the prediction), and the same for a held-out test set on its own object;
* while the ratings are read and split: the COO share (24 bytes an entry) and the train and
  test shares split from it, beside the family's placement peak.

The model assumes the nonzeros and rows spread evenly (nnz/p a rank, m/p dense rows), as the
kernels' models do without a rank's own counts.
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms import ALGORITHMS
from distmm.apps.kernel_memory import kernels_held
from distmm.core.memory import COO_ENTRY, Memory, ceil_div, format_bytes
from distmm.core.partition import partitioner_counts
from distmm.perf.planner import partitioner_problem

OPS_USED = ("fusedmm_a", "fusedmm_b", "spmm_a", "spmm_b", "sddmm")


def als_memory(algorithm: str, strategy: str, m: int, n: int, nnz: int, nnz_test: int,
               rank: int, p: int, c: int, dtype="float64", overlap: bool = False,
               local: dict[str, int] | None = None, permute="auto") -> Memory:
    """Bytes the fullest rank holds for ALS of factor width ``rank`` on an m x n ratings
    matrix with ``nnz`` training and ``nnz_test`` held-out ratings. Not collective.

    ``local``: one rank's sizes of the training matrix's layout (the family's
    ``memory_counts``), for that rank's bytes rather than the pattern-free bound.
    ``permute``: distribute's, for rank 0's partitioning of the ratings where the family
    orders them by a partition (:func:`distmm.core.partition.partitioner_counts`)."""
    model = ALGORITHMS[algorithm].model
    it = np.dtype(dtype).itemsize
    local = {**(partitioner_counts(ALGORITHMS[algorithm], permute, m, n, nnz, p) or {}),
             **(local or {})} or None
    kernels = [model.memory_bytes(op, strategy, m, n, nnz, rank, p, c, dtype, overlap, local)
               for op in OPS_USED]
    parts = kernels_held(kernels)
    # The replication and reduction buffers are kept per stored orientation, and ALS runs
    # both sides: one of the side-"a" calls' and one of the side-"b" calls'.
    for name in ("replication", "reduction"):
        halves = [max(mem.parts.get(name, 0) for mem, op in zip(kernels, OPS_USED, strict=True)
                      if op.endswith(side) or (side == "a" and op == "sddmm"))
                  for side in "ab"]
        if any(halves):
            parts[name] = int(sum(halves))
    block = {"a": ceil_div(m, p) * rank * it, "b": ceil_div(n, p) * rank * it}
    local_nnz = ceil_div(nnz, p)
    parts["factor blocks A, B"] = block["a"] + block["b"]
    parts["CG blocks (P, Y, right-hand side per side)"] = 3 * (block["a"] + block["b"])
    parts["value vectors (ratings, ones, prediction)"] = 3 * local_nnz * it
    parts["per-row lambda and counts"] = 3 * 8 * (ceil_div(m, p) + ceil_div(n, p))
    if nnz_test:
        test = model.memory_bytes("sddmm", strategy, m, n, nnz_test, rank, p, c, dtype, overlap)
        parts["test set S"] = sum(v for k, v in test.parts.items() if k.startswith("S"))
        parts["test value vectors"] = 3 * ceil_div(nnz_test, p) * it
    call = {"kernel temporaries": max(sum(mem.call.values()) for mem in kernels),
            "half-step blocks (residual, temporaries)": 3 * max(block.values())}
    shares = 2 * COO_ENTRY * ceil_div(nnz + nnz_test, p)  # the share, and train + test split
    distribute = max(mem.distribute for mem in kernels) + shares
    # rank 0 partitions the training ratings while it still holds the share and its split
    partitioner = max(mem.partitioner for mem in kernels)
    return Memory(parts, call, distribute, max(mem.build for mem in kernels),
                  partitioner + shares if partitioner else 0)


def als_memory_problem(limit: int | None, algorithm: str, strategy: str, m: int, n: int,
                       nnz: int, nnz_test: int, rank: int, p: int, c: int, dtype="float64",
                       overlap: bool = False, permute="auto") -> str | None:
    """Why ALS cannot fit ``limit`` bytes per rank, naming the largest --rank that fits, or,
    where rank 0's partitioning of the ratings at distribute (``permute``) is what does not
    fit, its share and the ways around it; None when it fits or there is no limit. Not
    collective."""
    if limit is None:
        return None
    memory = als_memory(algorithm, strategy, m, n, nnz, nnz_test, rank, p, c, dtype,
                        overlap, permute=permute)
    problem = partitioner_problem(memory, limit, p)
    if problem is not None:
        return "ALS: " + problem
    need = memory.peak
    if need <= limit:
        return None
    low, high = 0, rank  # the largest width that fits: the model grows with the width
    while high - low > 1:
        mid = (low + high) // 2
        fits = als_memory(algorithm, strategy, m, n, nnz, nnz_test, mid, p, c, dtype,
                          overlap, permute=permute).peak <= limit
        low, high = (mid, high) if fits else (low, mid)
    hint = (f"--rank {low} fits" if low >= 1 else
            "not even --rank 1 fits: use more ranks or a larger --memory-limit")
    return (f"ALS with --rank {rank} ({algorithm}, strategy {strategy}, c = {c}) on {p} "
            f"ranks needs about {format_bytes(need)} per rank (ratings {m} x {n} with "
            f"{nnz + nnz_test} entries, {np.dtype(dtype)}), more than the memory limit of "
            f"{format_bytes(limit)} per rank; {hint} (docs/memory.md)")
