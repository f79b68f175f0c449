"""Dynamic task scheduling (paper section VI-C, Algorithm 8) with double-buffered loading.

Tasks are taken in the IR's order (output blocks row by row, Algorithm 2/3); whenever a
Computation Core is idle, the soft processor hands it the next task (list scheduling: the
core that frees up first gets it; ties go to the lowest core id). A core runs a task's block
pairs one after another (Algorithm 4). Its buffers are double-buffered (section V-B3): the
next pair's operands stream in from DDR while the current pair computes, so a pair costs
max(compute cycles, transfer cycles), and in steady state the Result Buffer's other half
writes the previous task's output during the first pair of the next (charged to the task's own
first pair: the totals agree). Skipped pairs cost nothing. When a whole operand fits in a
quarter of a core's on-chip memory (``cache_operands``), a core keeps each block of it that it
has loaded and never loads it again. Changing the execution mode costs ``mode_switch_cycles``
(one, section V-B1). All N_CC cores stream at once, so each gets 1/N_CC of the DDR bandwidth.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from distmm.sim.dynaspase.config import DynaspaseConfig
from distmm.sim.dynaspase.perfmodel import EMPTY


@dataclass
class Schedule:
    """Where and when every task ran.

    ``core``, ``start``, ``end`` have one entry per task (IR order), in cycles from the start
    of the kernel; ``busy`` is each core's busy cycles; ``makespan`` the kernel's latency.
    ``compute_cycles`` sums every pair's compute, ``transfer_cycles`` every pair's transfer,
    ``dram_bytes`` the bytes moved (loads and result stores).
    """

    core: np.ndarray
    start: np.ndarray
    end: np.ndarray
    busy: np.ndarray
    makespan: int
    compute_cycles: int
    transfer_cycles: int
    dram_bytes: int
    mode_switches: int


def schedule(prim: np.ndarray, cycles: np.ndarray, x_bytes: np.ndarray, y_bytes: np.ndarray,
             z_bytes: np.ndarray, config: DynaspaseConfig) -> Schedule:
    """Run Algorithm 8 on one kernel and return its schedule.

    ``prim``/``cycles`` (I, T, J) give each block pair's primitive and compute cycles,
    ``x_bytes`` (I, T) and ``y_bytes`` (T, J) the DDR bytes of the input blocks, ``z_bytes``
    (I, J) those of the output blocks. Task (i, j) computes output block (i, j). Not collective.
    """
    n_i, n_t, n_j = prim.shape
    ncc = config.n_cc
    bpc = config.bytes_per_cycle
    budget = config.core_bytes / 4
    cache_x = config.cache_operands and x_bytes.sum() <= budget
    cache_y = config.cache_operands and y_bytes.sum() <= budget
    have_x = np.zeros((ncc, n_i, n_t), dtype=bool) if cache_x else None
    have_y = np.zeros((ncc, n_t, n_j), dtype=bool) if cache_y else None
    last_mode = np.full(ncc, -1, dtype=np.int64)
    n_tasks = n_i * n_j
    core = np.zeros(n_tasks, dtype=np.int64)
    start = np.zeros(n_tasks, dtype=np.int64)
    end = np.zeros(n_tasks, dtype=np.int64)
    busy = np.zeros(ncc, dtype=np.int64)
    free = [(0, c) for c in range(ncc)]  # (time the core becomes idle, core id)
    compute_total = transfer_total = dram = switches = 0
    for task in range(n_tasks):
        i, j = divmod(task, n_j)
        now, c = heapq.heappop(free)
        live = np.flatnonzero(prim[i, :, j] != EMPTY)
        load = x_bytes[i, live].astype(np.int64)
        if cache_x:
            load = np.where(have_x[c, i, live], 0, load)
            have_x[c, i, live] = True
        yl = y_bytes[live, j].astype(np.int64)
        if cache_y:
            yl = np.where(have_y[c, live, j], 0, yl)
            have_y[c, live, j] = True
        load = load + yl
        store = int(z_bytes[i, j])
        dram += int(load.sum()) + store
        if live.size == 0:
            # nothing to multiply: the (zero) output block is still written back
            duration = int(np.ceil(store / bpc))
            transfer_total += duration
        else:
            load[0] += store
            load_cyc = np.ceil(load / bpc).astype(np.int64)
            modes = prim[i, live, j].astype(np.int64)
            switch = np.empty(live.size, dtype=np.int64)
            switch[0] = modes[0] != last_mode[c]
            switch[1:] = modes[1:] != modes[:-1]
            last_mode[c] = modes[-1]
            comp = cycles[i, live, j] + switch * config.mode_switch_cycles
            duration = int(np.maximum(comp, load_cyc).sum())
            compute_total += int(comp.sum())
            transfer_total += int(load_cyc.sum())
            switches += int(switch.sum())
        core[task], start[task], end[task] = c, now, now + duration
        busy[c] += duration
        heapq.heappush(free, (now + duration, c))
    makespan = int(end.max(initial=0))
    return Schedule(core, start, end, busy, makespan, compute_total, transfer_total, dram,
                    switches)
