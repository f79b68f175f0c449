"""The planner on a real matrix: every family's busiest-rank words and memory from S's pattern.

:func:`distmm.perf.planner.plan` needs only m, n and nnz, since the paper's four families move
whole blocks whatever S's pattern. The sparsity-aware family's words depend on the pattern and
on the order of S's rows and columns, so :func:`plan_sparse` orders S as a run would (the
``permute`` of :func:`distmm.distribute`: ``"auto"``, ``"kahip"``, a saved
:class:`~distmm.core.partition.Partition`, ...), computes every rank's exchange from the
pattern alone (:func:`distmm.core.exchange.exchange_model`; no MPI job of p ranks), and
returns one row per candidate (family, strategy, c) with:

* ``max_words``: the busiest rank's words sent per FusedMMA call. Exact for the sparsity-aware
  family (its model equals the counters); for the oblivious families the exact formula of
  their balanced blocks (:func:`distmm.perf.costmodel.exact`, exact when p divides m and n);
* ``memory_bytes``: the fullest rank's modelled peak bytes (the family's ``memory_bytes``;
  per rank from the pattern's counts for the sparsity-aware family);
* ``time_s``: the alpha-beta-gamma prediction with the busiest rank's messages and words.

Not collective.
"""

from __future__ import annotations

import time

import numpy as np

from distmm.algorithms import ALGORITHMS
from distmm.algorithms.sparse_aware_15d import (  # noqa: F401 - order etc. are the planner's too
    SparseAware15D,
    busiest_rows,
    default_orders,
    order,
    pick_order,
    sparse_aware_15d_exact,
)
from distmm.core.exchange import ExchangeCounts, exchange_model
from distmm.core.layout import block_offsets
from distmm.core.memory import format_bytes
from distmm.core.partition import partition_peak_bytes, partitioner_at_distribute
from distmm.core.permute import PARTITION_MODES, permute_mode
from distmm.core.relay_rule import relay_name, relay_rule
from distmm.errors import Checks, InputError, wait_quietly
from distmm.perf import costmodel
from distmm.perf.planner import Machine, partitioner_message, plan, predict

AWARE = SparseAware15D.name


def aware_rows(model: ExchangeCounts, m: int, n: int, nnz: int, r: int, p: int, c: int,
               machine: Machine, dtype=np.float32, offsets: np.ndarray | None = None,
               partitioner: int = 0) -> list[dict]:
    """The sparsity-aware family's candidates at replication c, from every rank's counts;
    ``partitioner``: rank 0's peak bytes partitioning S at distribute (0: S is not
    partitioned there)."""
    rows = []
    # B block k sits on world rank k (fiber order); a partition's blocks are its parts
    if isinstance(offsets, tuple):
        b_rows = np.diff(offsets[1])
    else:
        b_rows = model.a_rows if offsets is not None else np.diff(block_offsets(n, p))
    for strategy in SparseAware15D.strategies:
        best = None
        for k in range(p):
            phases = sparse_aware_15d_exact("fusedmm_a", m, n, r, p, c, strategy,
                                            **model.rank(k))
            words = costmodel.total(phases)
            msgs = costmodel.total(phases, "messages")
            if best is None or (words, msgs) > best[:2]:
                best = (words, msgs)
        memory = max(SparseAware15D.model.memory_bytes(
            "fusedmm_a", strategy, m, n, nnz, r, p, c, dtype,
            local={"rows_a": int(model.a_rows[k]), "rows_b": int(b_rows[k]),
                   "super": int(model.super_rows[k]),
                   "nnz_a": int(model.nnz[k]), "recv": int(model.recv_rows[k]),
                   "send": int(model.send_rows[k]), "share": -(-nnz // p),
                   "partition": 0 if offsets is None
                   else 8 * (m + n) if isinstance(offsets, tuple) else 8 * n,
                   "partitioner": partitioner}).rank_peak(k)
            for k in range(p))
        calls = SparseAware15D.model.local_calls(strategy, m, n, float(model.nnz.max()) * p,
                                                 r, p, c)
        compute = sum(machine.call_seconds(call) for call in calls)
        comm = machine.alpha * best[1] + machine.beta * best[0]
        # with the fields of distmm.perf.planner.plan's rows too (words, memory, calls), so
        # that --algorithm auto ranks them with the others
        rows.append({"algorithm": AWARE, "strategy": strategy, "c": c,
                     "max_words": int(best[0]), "messages": best[1],
                     "memory_bytes": int(memory), "comm_s": comm, "compute_s": compute,
                     "time_s": comm + compute, "words": int(best[0]), "memory": int(memory),
                     "kernel_calls": [call.as_dict() for call in calls],
                     "calls": sum(call.count for call in calls),
                     "visits": sum(call.count * call.nnz for call in calls),
                     "phi": nnz / (n * r) if n and r else 0.0})
    return rows


def plan_sparse(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], r: int, p: int,
                machine: Machine | None = None, permute="auto", seed: int = 0,
                dtype=np.float32, relay=True) -> tuple[list[dict], dict]:
    """Every (family, strategy, c) for S's pattern (``rows``, ``cols``: original coordinates
    of its entries) on p ranks at width r, fastest predicted first, and how S was ordered.
    ``relay``: the sparsity-aware family's relay setting (distribute's ``relay=``; default
    "auto"); its rows say which in ``relay`` ("auto", "on" or "off") and how many rows the
    relays forward (``relayed_rows``), and where the relay engages the same candidates
    without it follow, with ``relay`` "off".

    Not collective."""
    machine = machine or Machine()
    m, n = int(shape[0]), int(shape[1])
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    nnz = int(rows.size)
    orders = default_orders(rows, cols, (m, n), p, permute, seed)
    info = orders[0][3]
    partitioner = partition_peak_bytes(m, n, nnz, p) \
        if info["permute"] in PARTITION_MODES else 0
    out = []
    t0 = time.perf_counter()
    relay = relay_rule(relay)
    for c in costmodel.valid_cs(AWARE, p, r):
        row_inv, col_inv, offsets, used = pick_order(rows, cols, (m, n), p, c, orders, relay)
        # with the relay setting asked for, and without it where the relay engages (so that
        # the rows show what it changes)
        engaged = False
        for setting in (relay, False):
            model = exchange_model(row_inv[rows], col_inv[cols], (m, n), p, c,
                                   offsets=offsets, relay=setting)
            relayed = int(model.relay_rows.sum())
            if setting is False and relay is not False and not engaged:
                break
            engaged = relayed > 0
            # rank 0 partitions S at distribute where the run's order is a partitioner's
            # (even where the default then keeps the natural blocks); a saved one is not made
            found = aware_rows(model, m, n, nnz, r, p, c, machine, dtype, offsets,
                               partitioner)
            for row in found:
                row["permute"] = used["permute"]
                row["relay"] = relay_name(setting).split(":")[0]
                row["relayed_rows"] = relayed
            out += found
            if relay is False:
                break
    info["model_s"] = time.perf_counter() - t0
    # the oblivious families move whole blocks: their words do not depend on the order (a
    # partitioner's order is the sparsity-aware family's only; they run with their own)
    for name in ALGORITHMS:
        if name == AWARE:
            continue
        for strategy in ALGORITHMS[name].strategies:
            for c in costmodel.valid_cs(name, p, r):
                row = predict(name, strategy, m, n, nnz, r, p, c, machine, dtype=dtype)
                phases = costmodel.exact(name, "fusedmm_a", m, n, r, p, c, strategy, nnz=nnz)
                words = costmodel.total(phases)
                msgs = costmodel.total(phases, "messages")
                comm = machine.alpha * msgs + machine.beta * words
                out.append({"algorithm": name, "strategy": strategy, "c": c,
                            "max_words": int(round(words)), "messages": msgs,
                            "memory_bytes": int(row["memory"]), "comm_s": comm,
                            "compute_s": row["compute_s"], "time_s": comm + row["compute_s"]})
    out.sort(key=lambda row: (row["time_s"], row["c"], row["algorithm"]))
    return out, info


def partitioner_fit(permute, m: int, n: int, nnz: int, p: int,
                    memory_limit: int | None) -> tuple[object, str | None]:
    """Whether ``--algorithm auto`` may let rank 0 partition S, from m, n, nnz and p alone
    (no data read; every rank that agreed on S's header decides the same): where rank 0's
    partitioner (:func:`~distmm.core.partition.partition_peak_bytes`) exceeds
    ``memory_limit``, the default order (``permute`` "auto") becomes the natural blocks,
    returned with a note that says so; a partitioner asked for by name ("kahip",
    "kahypar"), the only order the sparsity-aware family would then run in, is an
    InputError naming its share and the ways around it. Else ``(permute, None)``.
    Not collective (call it on every rank)."""
    method = partitioner_at_distribute(permute, (m, n), p)
    if memory_limit is None or method is None:
        return permute, None
    problem = partitioner_message(partition_peak_bytes(m, n, nnz, p), memory_limit, p)
    if problem is None:
        return permute, None
    if permute_mode(permute) != "auto":
        raise InputError(problem)
    return "blocks", (f"{AWARE} ranked in natural blocks, without its default partition: "
                      + problem.split("; ")[0])


def plan_distributed(share, comm, r: int, machine: Machine | None = None,
                     algorithms: tuple[str, ...] | None = None, dtype=np.float32,
                     overlap: bool = False, memory_limit: int | None = None,
                     permute="auto", seed: int = 0) -> tuple[list[dict], object]:
    """What ``--algorithm auto`` ranks: :func:`distmm.perf.planner.plan`'s rows for the
    sparsity-oblivious families (m, n and nnz decide their words) and, when the
    sparsity-aware family is among ``algorithms``, its rows priced from S's pattern ordered
    as ``permute`` orders it (:func:`aware_rows`), fastest predicted first, in ``plan``'s row
    format (this family's rows say in ``permute`` which order they were priced in); and
    what the caller may pass as ``permute`` when it distributes S for the sparsity-aware
    pick: the partition the default made, or ``"blocks"`` where the default keeps the
    natural blocks at the pick's c (:func:`pick_order`), or None.

    Collective over ``comm``: ``share`` (a :class:`~distmm.core.coo.CooShare`) is this rank's
    part of S; rank 0 gathers the pattern and plans (a partitioner runs there), every rank
    gets the same rows, and a problem is the same InputError on every rank. A partitioner's
    order (``permute`` "kahip", "kahypar" or a saved partition) leaves only the
    sparsity-aware family, which alone runs on it."""
    machine = machine or Machine()
    algorithms = tuple(ALGORITHMS) if algorithms is None else tuple(algorithms)
    m, n = share.shape
    p = comm.Get_size()
    nnz = int(comm.allreduce(int(share.nnz)))
    # rank 0's partitioner against the limit before it runs (the same on every rank)
    permute, left_out = partitioner_fit(permute, m, n, nnz, p, memory_limit) \
        if AWARE in algorithms else (permute, None)
    partitioned = (getattr(permute, "is_partition", False)
                   or (isinstance(permute, str) and permute in PARTITION_MODES))
    oblivious = () if partitioned else tuple(a for a in algorithms if a != AWARE)
    rows = plan(m, n, nnz, r, p, machine, oblivious, dtype=dtype, overlap=overlap) \
        if oblivious else []
    part = None
    if AWARE in algorithms and min(m, n, r) >= 1:
        pieces = comm.gather((share.rows, share.cols), root=0)
        checks, found = Checks(comm), None
        with checks.guard():
            if comm.Get_rank() == 0:
                grows = np.concatenate([x[0] for x in pieces]).astype(np.int64)
                gcols = np.concatenate([x[1] for x in pieces]).astype(np.int64)
                orders = default_orders(grows, gcols, (m, n), p, permute, seed)
                # the partition made here, on rank 0 (the run then reuses it)
                partitioner = partition_peak_bytes(m, n, nnz, p) \
                    if orders[0][3]["permute"] in PARTITION_MODES else 0
                found = []
                for c in costmodel.valid_cs(AWARE, p, r):
                    row_inv, col_inv, offsets, used = pick_order(grows, gcols, (m, n), p, c,
                                                                 orders)
                    model = exchange_model(row_inv[grows], col_inv[gcols], (m, n), p, c,
                                           offsets=offsets)
                    rows_c = aware_rows(model, m, n, nnz, r, p, c, machine, dtype, offsets,
                                        partitioner)
                    for row in rows_c:
                        row["permute"] = used["permute"]
                    found += rows_c
                part = orders[0][3].get("partition")
                if permute_mode(permute) != "auto":  # a given order: the run makes its own
                    part = None
        wait_quietly(comm, 0)
        checks.agree()
        found, part = comm.bcast((found, part), root=0)
        rows += found
        if left_out is not None:  # the natural blocks the run must keep, not the default
            part = "blocks"
    if memory_limit is not None:
        fit = [row for row in rows if row["memory"] <= memory_limit]
        if not fit and oblivious:  # the planner's own message: what c or p would fit
            plan(m, n, nnz, r, p, machine, oblivious, dtype=dtype, overlap=overlap,
                 memory_limit=memory_limit)
        if not fit and rows:
            least = min(rows, key=lambda row: row["memory"])
            raise InputError(
                f"no candidate fits the memory limit of {format_bytes(memory_limit)} per "
                f"rank: the one that needs least, {least['algorithm']} {least['strategy']} "
                f"c={least['c']}, needs {format_bytes(least['memory'])} on the fullest rank")
        rows = fit
    if not rows:
        raise InputError(f"no algorithm fits p={p}, r={r}")
    rows.sort(key=lambda row: (row["time_s"], row["c"], row["algorithm"]))
    if left_out is not None:
        for row in rows:
            row["left_out"] = left_out
    # the pick's order: the partition where the pick placed S in it, "blocks" where the
    # default chose the natural blocks over it (so that the run does not partition again)
    pick = rows[0].get("permute") if rows[0]["algorithm"] == AWARE else None
    if part is None or pick is None:
        return rows, None
    return rows, (part if pick in PARTITION_MODES else "blocks")


__all__ = ["aware_rows", "busiest_rows", "default_orders", "order", "partitioner_fit",
           "pick_order", "plan_distributed", "plan_sparse"]
