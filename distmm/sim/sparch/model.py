"""The transaction-level SpArch model: per-round traffic and cycles, totals and energy.

One call models C = X @ Y on one chip from the structures of X (m x k) and Y (k x n) alone
(see the package docstring for the flow and the assumptions). Per merge round r:

* inputs: leaves (multiplied on the fly when pipelined) and earlier rounds' results (read back
  from DRAM as partial matrices, ``partial_element_bytes`` each);
* left-matrix reads: every X element of the round's leaves (``element_bytes``) plus two row
  pointers per row touched (condensed: CSR rows; uncondensed: CSC columns, two per leaf);
* right-matrix reads: the Y lines the prefetch buffer misses, plus two row pointers for every
  access that goes to DRAM;
* writes: the round's result, as a partial matrix, or as the CSR final result at the root;
* cycles = max(compute bound, DRAM bound) + fill/drain, where the compute bound is
  max(products / multipliers, merge-tree input elements / merger_width) -- each tree layer has
  one 16-wide merger and every input element passes every layer (II-A3) -- and the DRAM bound
  is bytes / (channels x GB/s / GHz); fill/drain = DRAM latency + tree depth x layer latency +
  filling the look-ahead FIFO + flushing the partial-matrix writer FIFO.

Without pipelining (OuterSPACE's flow) a separate multiply phase writes every leaf to DRAM and
the rounds read them back.
"""

from __future__ import annotations

import math

import numpy as np

from distmm.sim.sparch.config import SpArchConfig
from distmm.sim.sparch.prefetch import POLICY_CODES, next_use, simulate_buffer
from distmm.sim.sparch.schedule import estimated_weight, make_schedule
from distmm.sim.sparch.structure import column_leaves, condensed_leaves, node_sizes


def _dense_rows(y_ptr: np.ndarray, n: int) -> bool:
    """Every row of Y holds all n columns (the dense right matrix of SpMM)."""
    return n > 1 and bool(np.all(np.diff(y_ptr) == n))


def run_model(x_ptr: np.ndarray, x_idx: np.ndarray, y_ptr: np.ndarray, y_idx: np.ndarray,
              shape: tuple[int, int, int], cfg: SpArchConfig) -> dict:
    """Model C = X @ Y (X: m x k CSR ``x_ptr``/``x_idx``, Y: k x n CSR) on one SpArch chip.

    Returns the report: ``counters`` (additive totals: cycles, seconds, bytes by kind, energy,
    partial matrices, rounds, prefetch hits/accesses, ...), ``derived`` ratios, and
    ``rounds`` (per-round arrays summarised). Not collective."""
    m, k, n = (int(v) for v in shape)
    x_ptr = np.asarray(x_ptr, dtype=np.int64)
    y_ptr = np.asarray(y_ptr, dtype=np.int64)
    x_idx = np.asarray(x_idx)
    y_idx = np.asarray(y_idx)
    nnz_x = int(x_idx.size)
    ylen = np.diff(y_ptr)
    row_of = np.repeat(np.arange(m, dtype=np.int64), np.diff(x_ptr))

    # ---- leaves (II-B) and their weights: products per partial matrix
    nonempty_cols = int(np.unique(x_idx).size) if nnz_x else 0
    if cfg.condense:
        elem_leaf, L = condensed_leaves(x_ptr, nnz_x)
    else:
        elem_leaf, L, _ = column_leaves(x_idx, k)
    prod_per_elem = ylen[x_idx] if nnz_x else np.zeros(0, dtype=np.int64)
    weights = np.bincount(elem_leaf, weights=prod_per_elem, minlength=L).astype(np.int64)
    multiplications = int(prod_per_elem.sum())

    # ---- schedule (II-C) and exact node sizes
    tree = make_schedule(cfg.scheduler, weights, cfg.merge_ways, cfg.seed)
    R = tree.rounds
    if _dense_rows(y_ptr, n):
        # every row of a dense Y has the same columns: (i, *) enter and leave nodes together
        ones_ptr = np.arange(k + 1, dtype=np.int64)
        sizes = node_sizes(x_ptr, x_idx, elem_leaf, ones_ptr,
                           np.zeros(k, dtype=np.int32), tree) * n
    else:
        sizes = node_sizes(x_ptr, x_idx, elem_leaf, y_ptr, y_idx, tree)
    out_nnz = int(sizes[-1]) if R else 0

    # ---- access order of the left matrix and the prefetch buffer (II-D)
    leaf_round = (tree.parent[:L] - L) if L else np.zeros(0, dtype=np.int64)
    elem_round = leaf_round[elem_leaf]
    if cfg.pipeline:
        order = np.lexsort((elem_leaf, row_of, elem_round))
    else:
        order = np.lexsort((row_of, elem_leaf))
    seq = x_idx[order].astype(np.int64)
    nxt = next_use(seq, max(k, 1))
    missed, fetched, line_hits, line_accesses, evictions = simulate_buffer(
        seq, nxt, y_ptr, cfg.line_elements, cfg.prefetch_lines, cfg.lookahead_fifo,
        POLICY_CODES[cfg.prefetch])
    eb, pb, ptr = cfg.element_bytes, cfg.partial_element_bytes, cfg.pointer_bytes
    right_elem_bytes = missed * eb + fetched * (2 * ptr)

    # ---- per-round accounting
    leaf_mask = tree.child_idx < L
    child_round = np.repeat(np.arange(R, dtype=np.int64), np.diff(tree.child_ptr))
    child_size = sizes[tree.child_idx]
    merge_in = np.bincount(child_round, weights=child_size, minlength=R)
    leaf_in = np.bincount(child_round, weights=child_size * leaf_mask, minlength=R)
    partial_in = merge_in - leaf_in
    out_size = sizes[L:].astype(np.float64)
    is_root = np.zeros(R, dtype=bool)
    if R:
        is_root[-1] = True
    final_write = (out_nnz * eb + (m + 1) * ptr) if R else 0
    partial_write_r = np.where(is_root, 0.0, out_size * pb)
    write_r = partial_write_r + np.where(is_root, float(final_write), 0.0)
    x_elems_r = np.bincount(elem_round, minlength=R).astype(np.float64)
    if cfg.condense:
        # two row pointers per (round, row) the round's leaves touch
        pairs = np.unique(elem_round * max(m, 1) + row_of)
        left_ptr_r = np.bincount(pairs // max(m, 1), minlength=R) * (2.0 * ptr)
    else:
        left_ptr_r = np.bincount(leaf_round, minlength=R) * (2.0 * ptr)
    left_r = x_elems_r * eb + left_ptr_r
    right_r = np.bincount(elem_round[order], weights=right_elem_bytes, minlength=R)

    bpc = cfg.bytes_per_cycle
    depth_latency = cfg.merge_tree_layers * cfg.layer_latency_cycles
    if cfg.pipeline:
        read_r = left_r + right_r + partial_in * pb
        compute_r = np.maximum(np.ceil(leaf_in / cfg.multipliers),
                               np.ceil(merge_in / cfg.merger_width))
        fill_r = np.minimum(x_elems_r, cfg.lookahead_fifo) * eb / bpc
        mult_phase = dict(cycles=0.0, read=0.0, write=0.0)
    else:
        # OuterSPACE-style: multiply everything to DRAM first, then merge from DRAM
        read_r = merge_in * pb
        compute_r = np.ceil(merge_in / cfg.merger_width)
        fill_r = np.zeros(R)
        mread = float(left_r.sum() + right_r.sum())
        mwrite = float(multiplications * pb)
        mcycles = (max(math.ceil(multiplications / cfg.multipliers), (mread + mwrite) / bpc)
                   + cfg.dram_latency_cycles + min(nnz_x, cfg.lookahead_fifo) * eb / bpc
                   if nnz_x else 0.0)
        mult_phase = dict(cycles=float(mcycles), read=mread, write=mwrite)
    dram_r = (read_r + write_r) / bpc
    drain_r = np.minimum(out_size, cfg.writer_fifo) * np.where(is_root, eb, pb) / bpc
    cycles_r = (np.maximum(compute_r, dram_r) + cfg.dram_latency_cycles + depth_latency
                + fill_r + drain_r)
    cycles = float(cycles_r.sum()) + mult_phase["cycles"]
    seconds = cycles / (cfg.clock_ghz * 1e9)

    left_read = float(left_r.sum())
    right_read = float(right_r.sum())
    partial_read = float(partial_in.sum() * pb) if cfg.pipeline else float(merge_in.sum() * pb)
    partial_write = float(partial_write_r.sum()) + mult_phase["write"]
    dram_read = left_read + right_read + partial_read
    dram_write = partial_write + float(final_write)
    flops = 2.0 * multiplications
    e_compute = flops * cfg.energy_compute_nj_per_flop
    e_sram = flops * cfg.energy_sram_nj_per_flop
    e_dram = (dram_read + dram_write) * cfg.energy_dram_nj_per_byte
    access_elems = int(prod_per_elem.sum())
    hit_elems = access_elems - int(missed.sum())

    counters = {
        "model_cycles": cycles,
        "model_seconds": seconds,
        "dram_read_bytes": dram_read,
        "dram_write_bytes": dram_write,
        "left_read_bytes": left_read,
        "right_read_bytes": right_read,
        "partial_read_bytes": partial_read,
        "partial_write_bytes": partial_write,
        "final_write_bytes": float(final_write),
        "energy_nj": e_compute + e_sram + e_dram,
        "energy_compute_nj": e_compute,
        "energy_sram_nj": e_sram,
        "energy_dram_nj": e_dram,
        "multiplications": float(multiplications),
        "merge_input_elements": float(merge_in.sum()),
        "output_nnz": float(out_nnz),
        "partial_matrices": float(L),
        "merge_rounds": float(R),
        "prefetch_hits": float(hit_elems),
        "prefetch_accesses": float(access_elems),
        "prefetch_line_hits": float(line_hits),
        "prefetch_line_accesses": float(line_accesses),
        "prefetch_evictions": float(evictions),
        "dram_bound_rounds": float(np.count_nonzero(dram_r > compute_r)),
    }
    derived = {
        "gflops": flops / seconds / 1e9 if seconds > 0 else 0.0,
        "prefetch_hit_rate": hit_elems / access_elems if access_elems else 0.0,
        "bandwidth_utilization": ((dram_read + dram_write) / (cycles * bpc)) if cycles else 0.0,
        "partial_matrices_uncondensed": nonempty_cols,
        "partial_matrices_condensed": int(np.diff(x_ptr).max()) if m and nnz_x else 0,
        "huffman_estimated_weight": estimated_weight(tree, weights),
        "partial_traffic_per_multiplication": ((partial_read + partial_write) / pb
                                               / multiplications if multiplications else 0.0),
        "dram_elements_per_multiplication": ((dram_read + dram_write) / eb / multiplications
                                             if multiplications else 0.0),
    }
    rounds = {
        "count": R,
        "max_inputs": int(np.diff(tree.child_ptr).max()) if R else 0,
        "first_round_inputs": int(tree.child_ptr[1]) if R else 0,
        "cycles_max": float(cycles_r.max()) if R else 0.0,
        "multiply_phase_cycles": mult_phase["cycles"],
    }
    return {"shape": [m, k, n], "config": cfg.as_dict(), "counters": counters,
            "derived": derived, "rounds": rounds}
