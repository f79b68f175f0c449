"""The hash SpGEMM's tables: the bins' ranges, each binned row's table size and the per-bin
counters (Du et al., OpSparse, sections 5.6-5.7; :mod:`distmm.kernels.hash_spgemm`).

Shared by the CPU kernels (:mod:`distmm.kernels.hash_spgemm`) and the GPU kernels
(:mod:`distmm.kernels.hash_spgemm_cuda`), which size their tables and report their counters
alike; kept apart so that neither imports the other.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["bin_counters", "bin_sizes", "binning_ranges", "numeric_table_sizes", "own_table_sizes"]


def binning_ranges(tables: tuple[int, ...], ratio: float) -> tuple[int, ...]:
    """Upper bounds of the bins: bin b takes rows with a size <= floor(tables[b] / ratio).

    The paper keeps every table at least ``ratio`` times larger than the largest row of its bin
    (section 5.7; ratio 1.2 symbolic, 2 numeric; section 6.3.3 tries 1, 1.2, 1.5 and 1, 1.5, 2, 3).
    """
    return tuple(int(np.floor(t / ratio + 1e-9)) for t in tables)


@njit(cache=True, nogil=True)
def _own_table_size(bound, table, top):
    """The table of a row with at most ``bound`` keys, sized as the last bin's fixed
    ``table`` is from its range ``top``: the same table / range ratio, rounded up to a power of
    two, and always at least one free slot."""
    want = np.ceil(bound * (table / max(top, 1)))
    size = 1
    while size < want:
        size <<= 1
    return max(size, bound + 1)


@njit(cache=True, nogil=True)
def own_table_sizes(bound, table, top):
    """Tables sized per row from a bound on its keys (:func:`_own_table_size`, elementwise):
    the paper's kernel8 (symbolic) and global kernel7 (numeric)."""
    out = np.empty(bound.shape[0], dtype=np.int64)
    for j in range(bound.shape[0]):
        out[j] = _own_table_size(bound[j], table, top)
    return out


@njit(cache=True, nogil=True)
def numeric_table_sizes(nnz, order, offsets, tables, top):
    """The table size of each binned row (in bin order) for the numeric phase: the fixed
    ``tables`` of the first bins, then for the last bin (range ``top`` = its fixed table's
    range) tables sized per row from its nnz."""
    rsize = bin_sizes(offsets, tables)
    for q in range(offsets[tables.shape[0]], offsets[-1]):
        rsize[q] = _own_table_size(nnz[order[q]], tables[-1], top)
    return rsize


_COUNTER_NAMES: dict[tuple[str, int], tuple[tuple[str, str, str], ...]] = {}
_NO_TABLE_COUNTERS: dict[tuple[str, int], dict[str, float]] = {}


def _counter_names(phase: str, nbins: int) -> tuple[tuple[str, str, str], ...]:
    """(rows, probes, fill) counter names of every bin, made once: formatting 3 names per bin
    weighed on small products."""
    names = _COUNTER_NAMES.get((phase, nbins))
    if names is None:
        names = _COUNTER_NAMES[phase, nbins] = tuple(
            (f"{phase}_bin{b}_rows", f"{phase}_bin{b}_probes", f"{phase}_bin{b}_fill")
            for b in range(nbins))
    return names


def bin_counters(counters: dict, phase: str, offsets: np.ndarray, probes: np.ndarray | None,
                 nnz: np.ndarray, order: np.ndarray, rsize: np.ndarray,
                 tables: bool = True) -> None:
    """The per-bin counters of one phase: rows, probes (``probes[b]``) and summed table
    occupancy (min(nnz, table) / table of every binned row) of every bin of ``offsets``; all 0
    when the phase used no tables (``tables`` False: the dense accumulator, which bins no rows;
    ``probes`` is not read then)."""
    nbins = offsets.shape[0] - 1
    if not tables:
        zeros = _NO_TABLE_COUNTERS.get((phase, nbins))
        if zeros is None:
            zeros = _NO_TABLE_COUNTERS[phase, nbins] = {
                name: 0.0 if name.endswith("_fill") else 0
                for trio in _counter_names(phase, nbins) for name in trio}
        counters.update(zeros)
        return
    fill = _bin_fill(order, offsets, nnz, rsize).tolist()
    rows = np.diff(offsets).tolist()
    for (rname, pname, fname), r, pr, f in zip(_counter_names(phase, nbins), rows,
                                               probes.tolist(), fill, strict=True):
        counters[rname] = r
        counters[pname] = pr
        counters[fname] = f


@njit(cache=True, nogil=True)
def bin_sizes(offsets, tables):
    """Per binned row, the table of its bin (tables[b] for the rows offsets[b]:offsets[b+1];
    rows past the last table get 0)."""
    out = np.zeros(offsets[-1], dtype=np.int64)
    for b in range(min(tables.shape[0], offsets.shape[0] - 1)):
        out[offsets[b]:offsets[b + 1]] = tables[b]
    return out


@njit(cache=True, nogil=True)
def _bin_fill(order, offsets, nnz, rsize):
    """Per bin, the sum over its rows of min(nnz, table) / table. The rows of a fixed-table
    bin share one table, so their min(nnz, table) is summed in integers and divided once (a
    float sum per row chained 3-4 cycles per row: 0.36 ms on metis-mdual's 258569 rows)."""
    nbins = offsets.shape[0] - 1
    fill = np.zeros(nbins, dtype=np.float64)
    for b in range(nbins):
        lo = offsets[b]
        hi = offsets[b + 1]
        if hi == lo:
            continue
        first = rsize[lo]
        same = 0  # rows with the bin's first table
        other = 0.0  # rows with tables of their own (the last numeric bin)
        for q in range(lo, hi):
            t = rsize[q]
            used = min(nnz[order[q]], t)
            if t == first:
                same += used
            else:
                other += used / t
        fill[b] = same / first + other
    return fill
