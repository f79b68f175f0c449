"""The applications' time breakdown (paper section VI-E, Figure 9): ALS and GAT on FusedMM.

Figure 9 runs two applications on amazon-large (Table V: 14,249,639 rows, 230,788,269 nonzeros)
at 256 nodes with r = 128 and splits their time into the FusedMM kernels' parts and the rest of
the application: alternating least squares with 20 CG iterations (10 per factor) batched by
FusedMM (Zhao and Canny), and the forward pass of a multi-head graph attention layer with
random weights. This script runs both, through the shared runner (records, resume, launching):

* ``als``: one epoch of :func:`distmm.apps.als.fit` (A half-step, B half-step, each with
  ``cg_iters`` CG iterations, then the training loss), on every (family, strategy, valid c);
  one warm-up epoch, then ``repeat`` timed epochs.
* ``gat``: one layer of :class:`distmm.apps.gat.DistGAT` (X W^T, the per-node scores, the
  attention and its aggregation over ``heads`` heads), pass ``forward`` (inference, as the paper)
  or ``train`` (forward with dropout, cross-entropy and backward), on every family at every
  valid c. Strategy ``none`` is the unfused attention (``S.sddmm_add``, ``S.edge_softmax``, one
  ``S.spmm_a`` per head, and in the families that split the dense width the row-group
  all-gathers and A/B transfers of :mod:`distmm.apps.gat_layout`); ``fusion`` is the fused
  online-softmax loop (``DenseShift15D.fused_attention``), forward only, on 1.5D dense shifting
  only. The paper did not run fusion for GAT ("incompatible with softmax regularization");
  distmm's online softmax makes it one for that family.

Split of one epoch / pass (seconds of the slowest rank, the one whose wall time is the
largest; the parts add up to its wall time), from the phases the counting communicator times:

* ``replication``, ``propagation``, ``reduction``, ``compute``: the kernels' phases (the local
  kernel is ``compute``);
* ``kernel_other``: the rest of the time inside the SDDMM/SpMM/FusedMM calls (and the fused
  attention): input checks, buffers, Python;
* ``layout_comm``: GAT's whole-row layer around the kernel calls (``gat_allgather``: the SpMM
  outputs' row-group all-gathers; ``gat_transfer``: the A/B transfers); 0 for ALS;
* ``app_comm``: the application's own counted communication outside those calls (ALS: the CG
  row dot products ``row_dot`` and the loss ``other``; GAT: ``sddmm_add``, ``softmax``,
  ``expand``, ``row_reduce``/``col_reduce``, ``values``, ``gat_weights``);
* ``app_local``: everything else, the application's local work (CG vector updates; X W^T and
  the other dense GEMMs, LeakyReLU, exp and the loss) and its Python.

The kernel calls are timed by wrapping the object's public kernel methods, its bound calls
(the applications bind theirs) and the fused attention for the measurement; every phase second
comes from :class:`distmm.core.comm.CommStats`.
Figure 9's four parts (``figure9`` in a record; the plot draws them): ``fusedmm_comm`` (the
kernels' replication, propagation and reduction, and GAT's ``layout_comm``),
``fusedmm_compute`` (``compute`` and ``kernel_other``), ``reductions`` (GAT: the softmax's
edge reductions and expansions ``sddmm_add``, ``softmax``, ``expand``, ``row_reduce``,
``col_reduce``, ``plan``; ALS: the CG dot products' ``row_dot``) and ``rest``.
Records also hold ``phase_seconds`` (max over ranks of each timed phase), words and messages
per phase (max and mean over ranks) and the model's words per phase for the kernels (and ALS's
row dot products); ALS's ``model.fusedmm_seconds`` is the planner's time of its FusedMM calls.

    .venv/bin/python experiments/app_breakdown.py --preset laptop
    .venv/bin/python experiments/app_breakdown.py --preset data     # MovieLens (ALS), Cora (GAT)
    .venv/bin/python experiments/plot.py results/app-breakdown-laptop.jsonl --out docs/figures

Presets: ``laptop`` (Erdos-Renyi 8192 x 8192, 8 per row, r = 32, 10 CG iterations per half-step,
4 heads of 8, p = 1, 2, 4), ``paper`` (Erdos-Renyi with amazon-large's 14,249,639 rows and 16
per row, r = 128, 10 CG iterations per half-step, 4 heads of 32, p = 256, c up to 16) and
``data`` (../shared/data: MovieLens 100K for ALS, Cora for GAT, r = 32, p = 1, 2, 4).

``--project MACHINE.json`` (e.g. ``--preset paper --project machines/cori-knl.json``: 256
nodes) writes the cost model's records of the applications' FusedMM parts only (the model has
no term for their own work): ``figure9`` with ``fusedmm_comm`` (alpha-beta of every kernel
call's exact words and messages per phase, :func:`distmm.perf.costmodel.exact`, plus GAT's
all-gathers and transfers, :func:`distmm.apps.gat_layout.allgather_model_words` and
``transfer_model_words``) and ``fusedmm_compute`` (the machine's time of the local kernel calls,
:func:`distmm.perf.costmodel.local_calls`; an SpMM on S^T is costed as one on S, the same
flops). The sparsity-aware family is left out: its words depend on S's pattern.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import defaultdict

import runner

from distmm.algorithms import ALGORITHMS
from distmm.errors import InputError
from distmm.perf import costmodel

EXPERIMENT = "app-breakdown"
KERNEL_PHASES = ("replication", "propagation", "reduction", "compute")
# GAT's whole-row layer (distmm.apps.gat_layout): part of the kernels' communication
LAYOUT_PHASES = ("gat_allgather", "gat_transfer")
SEGMENTS = (*KERNEL_PHASES, "kernel_other", "layout_comm", "app_comm", "app_local")
# Figure 9's reductions outside the kernels: GAT's softmax, ALS's CG dot products
REDUCTION_PHASES = ("sddmm_add", "softmax", "expand", "row_reduce", "col_reduce", "plan",
                    "row_dot")
FIGURE9 = ("fusedmm_comm", "fusedmm_compute", "reductions", "rest")
KERNEL_METHODS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")
FUSED_GAT_FAMILY = "15d-dense-shift"
# Paper Table V / section VI-E: amazon-large, 256 nodes, r = 128, 20 CG iterations.
AMAZON_ROWS, AMAZON_NNZ = 14249639, 230788269
DATA = {"als": "movielens-100k-ratings.mtx.gz", "gat": "cora-adjacency.mtx.gz"}


# ------------------------------------------------------------------------- configurations
def als_configs(matrix: dict, r: int, ps, cg_iters: int, repeat: int, cs=None) -> list[dict]:
    """ALS epochs of ``matrix`` at rank r on every (family, strategy, valid c) and p."""
    workload = {"app": "als", "cg_iters": int(cg_iters)}
    return [dict(cfg, workload=workload) for cfg in runner.sweep(
        EXPERIMENT, [matrix], [r], ps, cs=cs, repeat=repeat, dtype="float64")]


def gat_configs(matrix: dict, r: int, ps, heads: int, features: int, repeat: int,
                cs=None) -> list[dict]:
    """GAT layers of ``matrix`` (input width r, ``heads`` x ``features`` out): forward and
    training passes, unfused, on every family at every valid c, and the fused forward on
    1.5D dense shifting (the one family with the fused loop)."""
    out = []
    for gat_pass in ("forward", "train"):
        workload = {"app": "gat", "pass": gat_pass, "heads": int(heads),
                    "features": int(features)}
        for p in ps:
            for algorithm in ALGORITHMS:
                valid = [c for c in costmodel.valid_cs(algorithm, p) if cs is None or c in cs]
                fused = algorithm == FUSED_GAT_FAMILY and gat_pass == "forward"
                for strategy in (("none", "fusion") if fused else ("none",)):
                    out += [dict(runner.config(EXPERIMENT, matrix, r, p, algorithm, strategy, c,
                                               repeat=repeat), workload=workload)
                            for c in valid]
    return out


def laptop(args) -> list[dict]:
    er = {"kind": "er", "m": 1 << 13, "n": 1 << 13, "d": 8}
    ps = runner.pow2_upto(1, 4)
    return als_configs(er, 32, ps, 10, 2) + gat_configs(er, 32, ps, 4, 8, 3)


def paper(args) -> list[dict]:
    er = {"kind": "er", "m": AMAZON_ROWS, "n": AMAZON_ROWS, "d": round(AMAZON_NNZ / AMAZON_ROWS)}
    cs = range(1, 17)
    return als_configs(er, 128, [256], 10, 2, cs) + gat_configs(er, 128, [256], 4, 32, 2, cs)


def data(args) -> list[dict]:
    als_m, gat_m = ({"kind": "mtx", "path": runner.check_matrix(os.path.join(args.data_dir,
                                                                             DATA[app]))}
                    for app in ("als", "gat"))
    ps = runner.pow2_upto(1, 4)
    return als_configs(als_m, 32, ps, 10, 3) + gat_configs(gat_m, 32, ps, 4, 8, 3)


# ------------------------------------------------------------------------- measuring
class KernelClock:
    """Seconds inside the kernel calls of one distributed object, and the phase seconds spent
    there. Not collective; install with :meth:`wrap_methods` (nested calls count once)."""

    def __init__(self, stats) -> None:
        self.stats = stats
        self.depth = 0
        self.wall = 0.0
        self.inside: dict[str, float] = defaultdict(float)
        self._bound_call = None

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth:
                return fn(*args, **kwargs)
            before = dict(self.stats.seconds)
            self.depth = 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - t0
                self.depth = 0
                for ph, sec in self.stats.seconds.items():
                    self.inside[ph] += sec - before.get(ph, 0.0)
        return timed

    def wrap_methods(self, obj) -> None:
        """Time every public kernel method of ``obj`` (instance attributes shadow the class's)
        and its bound calls (``S.bind``, which the applications make: a replayed bound call
        does not go through the method). :meth:`unwrap` puts the bound calls' class back."""
        from distmm.algorithms.plan import CallPlan as BoundCall

        for name in KERNEL_METHODS:
            setattr(obj, name, self.wrap(getattr(obj, name)))
        original = self._bound_call = BoundCall.__call__
        timed = self.wrap(original)

        def call(bound):
            return timed(bound) if bound.matrix is obj else original(bound)

        BoundCall.__call__ = call

    def unwrap(self) -> None:
        """Undo :meth:`wrap_methods`' change to the bound calls' class."""
        from distmm.algorithms.plan import CallPlan as BoundCall

        if self._bound_call is not None:
            BoundCall.__call__, self._bound_call = self._bound_call, None


class Window:
    """One timed repetition on every rank: :meth:`start` and :meth:`stop` are collective."""

    def __init__(self, obj, clock: KernelClock) -> None:
        self.obj, self.clock = obj, clock

    def start(self) -> None:
        self.obj.comm.Barrier()
        self.seconds0 = dict(self.obj.stats.seconds)
        self.counts0 = {ph: dict(c) for ph, c in self.obj.stats.counts.items()}
        self.clock.wall = 0.0
        self.clock.inside.clear()
        self.t0 = time.perf_counter()

    def stop(self) -> dict | None:
        """This repetition's split, gathered: on rank 0 ``{"ranks": [per-rank dicts]}``."""
        wall = time.perf_counter() - self.t0
        stats, clock = self.obj.stats, self.clock
        tot = {ph: s - self.seconds0.get(ph, 0.0) for ph, s in stats.seconds.items()}
        tot = {ph: s for ph, s in tot.items() if s > 0}
        seg = {ph: tot.get(ph, 0.0) for ph in KERNEL_PHASES}
        seg["kernel_other"] = clock.wall - sum(clock.inside.get(ph, 0.0) for ph in KERNEL_PHASES)
        outside = {ph: s - clock.inside.get(ph, 0.0) for ph, s in tot.items()
                   if ph not in KERNEL_PHASES}
        seg["layout_comm"] = sum(outside.get(ph, 0.0) for ph in LAYOUT_PHASES)
        seg["app_comm"] = sum(s for ph, s in outside.items() if ph not in LAYOUT_PHASES)
        outside_kernels = sum(tot.get(ph, 0.0) - clock.inside.get(ph, 0.0)
                              for ph in KERNEL_PHASES)
        seg["app_local"] = (wall - clock.wall - seg["layout_comm"] - seg["app_comm"]
                            - outside_kernels)
        counts = {}
        for ph, c in stats.counts.items():
            before = self.counts0.get(ph, {})
            counts[ph] = {k: c[k] - before.get(k, 0) for k in ("words_sent", "messages_sent")}
        mine = {"wall": wall, "segments": seg, "seconds": tot, "counts": counts}
        every = self.obj.comm.gather(mine, root=0)
        return None if every is None else {"ranks": every}


def summarise(reps: list[dict]) -> dict:
    """The record fields of the fastest repetition (rank 0). Not collective."""
    walls = [max(r["wall"] for r in rep["ranks"]) for rep in reps]
    best = reps[walls.index(min(walls))]["ranks"]
    slowest = max(best, key=lambda r: r["wall"])
    phases = sorted({ph for r in best for ph in r["seconds"]} |
                    {ph for r in best for ph in r["counts"]})

    def over_ranks(get, how):
        vals = {ph: [get(r, ph) for r in best] for ph in phases}
        return {ph: (max(v) if how == "max" else sum(v) / len(v)) for ph, v in vals.items()}

    def words(r, ph):
        return r["counts"].get(ph, {}).get("words_sent", 0)

    def messages(r, ph):
        return r["counts"].get(ph, {}).get("messages_sent", 0)

    return {"times": walls, "seconds": min(walls), "segments": slowest["segments"],
            "figure9": figure9(slowest),
            "phase_seconds": over_ranks(lambda r, ph: r["seconds"].get(ph, 0.0), "max"),
            "words_max": over_ranks(words, "max"), "words_mean": over_ranks(words, "mean"),
            "messages_max": over_ranks(messages, "max")}


def figure9(rank: dict) -> dict[str, float]:
    """Figure 9's four parts of one rank's repetition (its ``segments`` and phase seconds),
    adding up to its wall time. Not collective."""
    seg, outside = rank["segments"], rank["seconds"]
    comm = sum(seg[ph] for ph in ("replication", "propagation", "reduction", "layout_comm"))
    compute = seg["compute"] + seg["kernel_other"]
    reductions = sum(outside.get(ph, 0.0) for ph in REDUCTION_PHASES)
    return {"fusedmm_comm": comm, "fusedmm_compute": compute, "reductions": reductions,
            "rest": rank["wall"] - comm - compute - reductions}


def exact_heads(algorithm: str, op: str, m: int, n: int, r: int, p: int, c: int,
                strategy: str, nnz: float, heads: int = 1) -> dict[str, dict[str, float]]:
    """:func:`distmm.perf.costmodel.exact`, or with ``heads`` > 1 the family's words of one
    multi-head call of width r (the families that cut the dense width: S's value words H a
    nonzero, :mod:`distmm.algorithms.multivalue`). Not collective."""
    if heads == 1:
        return costmodel.exact(algorithm, op, m, n, r, p, c, strategy, nnz=nnz)
    return ALGORITHMS[algorithm].model.exact_words(op, m, n, r, p, c, "none", nnz=nnz,
                                                   heads=heads)


def kernel_words(cfg: dict, calls: dict[str, int], m: int, n: int, nnz: int, r: int,
                 heads: int = 1) -> dict[str, float]:
    """Model words per rank per kernel phase of ``calls`` = {op: count} (each a multi-head
    call of ``heads`` heads at width r where heads > 1)."""
    out = dict.fromkeys(costmodel.PHASES, 0.0)
    for op, count in calls.items():
        phases = exact_heads(cfg["algorithm"], op, m, n, r, cfg["p"], cfg["c"],
                             cfg["strategy"], nnz, heads)
        for ph, v in phases.items():
            out[ph] += count * v["words"]
    return out


def measure_als(cfg: dict, source, comm, machine) -> dict | None:
    """One warm-up and ``repeat`` timed ALS epochs (collective); the record on rank 0."""
    from distmm.apps import als
    from distmm.perf.planner import predict

    k = cfg["workload"]["cg_iters"]
    reps: list[dict] = []
    state: dict = {}

    def after_epoch(record: dict, res) -> None:
        if "window" in state:
            reps.append(state["window"].stop())
        else:  # epoch 1 built S^T and compiled: time the next ones
            clock = KernelClock(res.obj.stats)
            clock.wrap_methods(res.obj)
            state["window"] = Window(res.obj, clock)
        state["iterations"] = record["cg_iterations"]
        if record["epoch"] <= cfg["repeat"]:
            state["window"].start()

    try:
        res = als.fit(source, comm, rank=cfg["r"], epochs=1 + cfg["repeat"], cg_iters=k,
                      test_fraction=0.0, seed=cfg["seed"], algorithm=cfg["algorithm"],
                      c=cfg["c"], strategy=cfg["strategy"], dtype=cfg["dtype"],
                      callback=after_epoch)
    finally:
        if "window" in state:
            state["window"].clock.unwrap()
    obj = res.obj
    nnz = int(comm.allreduce(obj.values.size))
    row_dot = comm.allreduce(als.epoch_row_dot_words(obj, tuple(state["iterations"]))) / obj.p
    res.close()
    if comm.rank != 0:
        return None
    m, n = obj.shape
    fusedmm = 2 * (1 + k)
    calls = {"fusedmm_a": 1 + k, "fusedmm_b": 1 + k, "spmm_a": 1, "spmm_b": 1, "sddmm": 1}
    pred = predict(cfg["algorithm"], cfg["strategy"], m, n, nnz, cfg["r"], cfg["p"], cfg["c"],
                   machine)
    model = {"words": {**kernel_words(cfg, calls, m, n, nnz, cfg["r"]), "row_dot": row_dot},
             "kernel_calls": calls, "fusedmm_seconds": pred["time_s"] * fusedmm,
             "machine": machine.source}
    return {"m": m, "n": n, "nnz": nnz, "cg_iterations": state["iterations"], **summarise(reps),
            "model": model}


def measure_gat(cfg: dict, source, comm, machine) -> dict | None:
    """One warm-up and ``repeat`` timed GAT passes (collective); the record on rank 0, or the
    library's refusal (``"unsupported"``, raised on every rank alike before any work)."""
    import numpy as np

    from distmm.algorithms.dense_shift_15d import fused_attention_words
    from distmm.apps.als import release
    from distmm.apps.gat import DistGAT, Dropout, distribute_graph
    from distmm.apps.gat_model import GATModel
    from distmm.core.dense import hashed_normal

    w = cfg["workload"]
    H, F = w["heads"], w["features"]
    try:
        obj = distribute_graph(source, comm, algorithm=cfg["algorithm"], c=cfg["c"],
                               dtype=np.dtype(cfg["dtype"]), seed=cfg["seed"])
    except InputError as exc:
        return {"unsupported": str(exc), "seconds": None} if comm.rank == 0 else None
    model = GATModel.init(cfg["r"], F, H, F, out_heads=H, layers=1, seed=cfg["seed"],
                          dtype=obj.dtype)
    fused = cfg["strategy"] == "fusion"
    gat = DistGAT(obj, model, fused=fused)
    lay = gat.layout
    # inputs keyed by node id, so that every holder of a row (a row group) has the same row
    X = hashed_normal(cfg["seed"])(gat.input_nodes, np.arange(cfg["r"])).astype(obj.dtype)
    labels = gat.nodes % F
    mask = np.ones(gat.nodes.size, dtype=bool)
    n_nodes = obj.shape[0]
    steps = iter(range(1 + cfg["repeat"]))

    def one_pass() -> None:
        if w["pass"] == "forward":
            gat.forward(X)
            return
        logits, caches = gat.forward(X, Dropout(step=next(steps), seed=cfg["seed"]))
        _, dlogits = gat.loss(logits, labels, mask, n_nodes)
        gat.backward(dlogits, caches)

    clock = KernelClock(obj.stats)
    clock.wrap_methods(obj)
    if fused:  # DistGAT calls the family's fused loop through the object
        obj.fused_attention = clock.wrap(obj.fused_attention)
    try:
        one_pass()  # warm-up: compilation, edge plans, S^T
        window, reps = Window(obj, clock), []
        for _ in range(cfg["repeat"]):
            window.start()
            one_pass()
            reps.append(window.stop())
    finally:
        obj.__dict__.pop("fused_attention", None)
        clock.unwrap()
    nnz = int(comm.allreduce(obj.values.size))
    if fused:
        per_rank = [fused_attention_words(obj, H, F, k) for k in range(obj.p)]
        words = {ph: sum(d[ph] for d in per_rank) / obj.p for ph in costmodel.PHASES}
    elif obj.splits_r:  # one multi-head call of each kind at width H width(F, H)
        ops = ("spmm_a",) if w["pass"] == "forward" else ("spmm_a", "sddmm", "spmm_b")
        words = kernel_words(cfg, dict.fromkeys(ops, 1), n_nodes, n_nodes, nnz,
                             H * lay.width(F, H), heads=H)
    else:  # one pass at width H F: the words of H calls of width F
        calls = {"spmm_a": H} if w["pass"] == "forward" else {"spmm_a": H, "sddmm": H,
                                                               "spmm_b": H}
        words = kernel_words(cfg, calls, n_nodes, n_nodes, nnz, F)
    if not fused:
        # the layout layer: exact words of every rank (layout arithmetic), their mean
        sides = ("a",) if w["pass"] == "forward" else ("a", "b")
        words["gat_allgather"] = float(np.mean([sum(
            lay.allgather_words(side, H, F, k)["words_sent"] for side in sides)
            for k in range(obj.p)]))
    release(obj)
    if comm.rank != 0:
        return None
    return {"m": n_nodes, "n": n_nodes, "nnz": nnz, "width": lay.width(F, H),
            **summarise(reps),
            "model": {"words": words, "machine": machine.source}}


def measure_app(cfg: dict, source, comm, machine) -> dict | None:
    """The runner's entry for one application configuration (collective)."""
    app = cfg["workload"]["app"]
    return (measure_als if app == "als" else measure_gat)(cfg, source, comm, machine)


# ------------------------------------------------------------------------- projection
def op_seconds(machine, algorithm: str, strategy: str, op: str, m: int, n: int, nnz: int,
               r: int, p: int, c: int, heads: int = 1) -> tuple[float, float]:
    """(communication, computation) seconds the cost model predicts for one kernel call:
    alpha-beta of its exact words and messages per phase (each phase at its measured beta
    where the machine file has them) and the machine's time of its local calls (an SDDMM or
    SpMM: those of that kind in the unfused FusedMM's calls; ``spmm_b`` costed as ``spmm_a``,
    the same flops); with ``heads`` > 1 one multi-head call of width r
    (:func:`exact_heads`). Not collective."""
    phases = exact_heads(algorithm, op, m, n, r, p, c, strategy, nnz, heads)
    betas = {"propagation": machine.beta_shift, "replication": machine.beta_replication,
             "reduction": machine.beta_reduction} if machine.has_bulk_betas else {}
    comm = sum(machine.alpha * v["messages"] + betas.get(ph, machine.beta) * v["words"]
               for ph, v in phases.items())
    if op.startswith("fusedmm"):
        calls = costmodel.local_calls(algorithm, strategy, m, n, nnz, r, p, c)
    else:
        kind = "sddmm" if op == "sddmm" else "spmm_a"
        calls = [k for k in costmodel.local_calls(algorithm, "none", m, n, nnz, r, p, c)
                 if k.kind == kind]
    return comm, sum(machine.call_seconds(k) for k in calls)


def projected(cfg: dict, machine) -> dict:
    """The model's record of one configuration's FusedMM parts (``figure9`` with
    ``fusedmm_comm`` and ``fusedmm_compute``; the applications' own work has no model).
    Not collective."""
    from distmm.apps.gat_layout import (
        allgather_model_words,
        row_group_shape,
        transfer_model_words,
    )

    m, n, nnz = runner.matrix_sizes(cfg["matrix"])
    alg, strategy, r, p, c = cfg["algorithm"], cfg["strategy"], cfg["r"], cfg["p"], cfg["c"]
    w = cfg["workload"]
    parts = []  # (op, strategy, width, count, heads)
    comm = 0.0
    if w["app"] == "als":
        k = w["cg_iters"]
        parts = [("fusedmm_a", strategy, r, 1 + k, 1), ("fusedmm_b", strategy, r, 1 + k, 1),
                 ("spmm_a", "none", r, 1, 1), ("spmm_b", "none", r, 1, 1),
                 ("sddmm", "none", r, 1, 1)]
    else:
        H, F = w["heads"], w["features"]
        train = w["pass"] == "train"
        if strategy == "fusion":
            parts = [("fusedmm_a", "fusion", H * F, 1, 1)]
        else:  # one multi-head call of each kind (one pass at width H F on 1.5D dense
            # shifting: H calls' words); each head padded to ceil(r_min / H) columns
            fam = ALGORITHMS[alg]
            Fp = max(F, -(-fam.model.min_width(p, c) // H))
            one = ("none", H * Fp, 1, H) if fam.splits_r else ("none", F, H, 1)
            parts = [("spmm_a", *one)] + ([("sddmm", *one), ("spmm_b", *one)]
                                          if train else [])
            sides = 2 if train else 1
            _, g = row_group_shape(alg, n, p, c)
            words = sides * allgather_model_words(alg, n, p, c, H, F)
            words += sides * transfer_model_words(alg, n, p, c, H)
            moves = 1.0 if transfer_model_words(alg, n, p, c, 1) else 0.0
            comm += machine.alpha * sides * ((g - 1) + moves) + machine.beta * words
    compute = 0.0
    for op, strat, width, count, heads in parts:
        cm, cp = op_seconds(machine, alg, strat, op, m, n, nnz, width, p, c, heads)
        comm += count * cm
        compute += count * cp
    return {"key": runner.key(cfg), **cfg, "label": runner.matrix_label(cfg["matrix"]),
            "predicted": True, "m": m, "n": n, "nnz": nnz, "seconds": comm + compute,
            "figure9": {"fusedmm_comm": comm, "fusedmm_compute": compute},
            "model": {"kernel_calls": [list(x) for x in parts], "machine": machine.source},
            "machine": runner.machine_info()}


def project_apps(args) -> int | None:
    """``--project``: the FusedMM parts of every configuration of the preset, from the cost
    model (the sparsity-aware family left out: its words depend on S's pattern); appends the
    records not yet in the results file. None without ``--project``. Not collective."""
    from distmm.errors import require
    from distmm.perf.planner import Machine

    if not args.project:
        return None
    require(args.preset in PRESETS, f"unknown preset {args.preset!r}: choose one of "
                                    f"{', '.join(PRESETS)}")
    cfgs = [cfg for cfg in PRESETS[args.preset](args)
            if not ALGORITHMS[cfg["algorithm"]].__dict__.get("needs_pattern", False)
            and (not args.p or cfg["p"] in args.p) and (not args.max_c or cfg["c"] <= args.max_c)]
    if args.list:
        for cfg in cfgs:
            print(runner.key(cfg))
        return 0
    results = args.results or os.path.join("results",
                                           f"{EXPERIMENT}-{args.preset}-projected.jsonl")
    machine = Machine.load(args.project)
    done = runner.recorded_keys(results, EXPERIMENT)
    count = 0
    for cfg in cfgs:
        if runner.key(cfg) in done:
            continue
        runner.append(results, projected(cfg, machine))
        count += 1
    print(f"{count} records appended to {results}")
    return 0


PRESETS = {"laptop": laptop, "paper": paper, "data": data}


def main(argv: list[str] | None = None) -> int:
    return runner.main(EXPERIMENT, PRESETS, __doc__.split("\n")[0], argv,
                       instead=project_apps)


if __name__ == "__main__":
    sys.exit(main())
