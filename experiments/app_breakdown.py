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
  or ``train`` (forward with dropout, cross-entropy and backward). GAT runs on 15d-dense-shift
  only: for every other family the record says so (``"unsupported"``: the library's message)
  instead of a time. Strategy ``none`` is the unfused attention (``S.sddmm_add``,
  ``S.edge_softmax``, one ``S.spmm_a`` per head); ``fusion`` is the fused online-softmax loop
  (``DenseShift15D.fused_attention``), forward only. The paper did not run fusion
  for GAT ("incompatible with softmax regularization"); distmm's online softmax makes it one.

Split of one epoch / pass (seconds of the slowest rank, the one whose wall time is the
largest; the parts add up to its wall time), from the phases the counting communicator times:

* ``replication``, ``propagation``, ``reduction``, ``compute``: the kernels' phases (the local
  kernel is ``compute``);
* ``kernel_other``: the rest of the time inside the SDDMM/SpMM/FusedMM calls (and the fused
  attention): input checks, buffers, Python;
* ``app_comm``: the application's own counted communication outside those calls (ALS: the CG
  row dot products ``row_dot`` and the loss ``other``; GAT: ``sddmm_add``, ``softmax``,
  ``expand``, ``row_reduce``/``col_reduce``, ``values``, ``gat_weights``);
* ``app_local``: everything else, the application's local work (CG vector updates; X W^T and
  the other dense GEMMs, LeakyReLU, exp and the loss) and its Python.

The kernel calls are timed by wrapping the object's public kernel methods, its bound calls
(the applications bind theirs) and the fused attention for the measurement; every phase second
comes from :class:`distmm.core.comm.CommStats`.
Records also hold ``phase_seconds`` (max over ranks of each timed phase), words and messages
per phase (max and mean over ranks) and the model's words per phase for the kernels (and ALS's
row dot products); ALS's ``model.fusedmm_seconds`` is the planner's time of its FusedMM calls.

    .venv/bin/python experiments/app_breakdown.py --preset laptop
    .venv/bin/python experiments/app_breakdown.py --preset data     # MovieLens (ALS), Cora (GAT)
    .venv/bin/python experiments/plot.py results/app-breakdown-laptop.jsonl --out docs/figures

Presets: ``laptop`` (Erdos-Renyi 8192 x 8192, 8 per row, r = 32, 10 CG iterations per half-step,
4 heads of 8, p = 1, 2, 4), ``paper`` (Erdos-Renyi with amazon-large's 14,249,639 rows and 16
per row, r = 128, 10 CG iterations per half-step, 4 heads of 32, p = 256, c up to 16) and
``data`` (../shared/data: MovieLens 100K for ALS, Cora for GAT, r = 32, p = 1, 2, 4). The
cost model has no term for the applications' own work, so ``--project`` is refused.
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
SEGMENTS = (*KERNEL_PHASES, "kernel_other", "app_comm", "app_local")
KERNEL_METHODS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")
GAT_FAMILY = "15d-dense-shift"
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
    """GAT layers of ``matrix`` (input width r, ``heads`` x ``features`` out): forward (unfused
    and fused) and training passes (unfused) on 15d-dense-shift at every valid c, and one
    record per other family, at its smallest valid c, that says it is not supported."""
    out = []
    width = heads * features
    for gat_pass, strategies in (("forward", ("none", "fusion")), ("train", ("none",))):
        workload = {"app": "gat", "pass": gat_pass, "heads": int(heads),
                    "features": int(features)}
        for p in ps:
            for algorithm in ALGORITHMS:
                valid = [c for c in costmodel.valid_cs(algorithm, p, width)
                         if cs is None or c in cs]
                if algorithm != GAT_FAMILY:
                    valid = valid[:1]
                for strategy in (strategies if algorithm == GAT_FAMILY else ("none",)):
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
        seg["app_comm"] = sum(s - clock.inside.get(ph, 0.0) for ph, s in tot.items()
                              if ph not in KERNEL_PHASES)
        outside_kernels = sum(tot.get(ph, 0.0) - clock.inside.get(ph, 0.0)
                              for ph in KERNEL_PHASES)
        seg["app_local"] = wall - clock.wall - seg["app_comm"] - outside_kernels
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
            "phase_seconds": over_ranks(lambda r, ph: r["seconds"].get(ph, 0.0), "max"),
            "words_max": over_ranks(words, "max"), "words_mean": over_ranks(words, "mean"),
            "messages_max": over_ranks(messages, "max")}


def kernel_words(cfg: dict, calls: dict[str, int], m: int, n: int, nnz: int, r: int
                 ) -> dict[str, float]:
    """Model words per rank per kernel phase of ``calls`` = {op: count}."""
    out = dict.fromkeys(costmodel.PHASES, 0.0)
    for op, count in calls.items():
        phases = costmodel.exact(cfg["algorithm"], op, m, n, r, cfg["p"], cfg["c"],
                                 cfg["strategy"], nnz=nnz)
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
    library's refusal (``"unsupported"``) for a family GAT does not run on."""
    import numpy as np

    from distmm.algorithms.dense_shift_15d import fused_attention_words
    from distmm.apps.als import release
    from distmm.apps.gat import DistGAT, Dropout, cross_entropy, distribute_graph
    from distmm.apps.gat_model import GATModel

    w = cfg["workload"]
    H, F = w["heads"], w["features"]
    try:
        obj = distribute_graph(source, comm, algorithm=cfg["algorithm"], c=cfg["c"],
                               dtype=np.dtype(cfg["dtype"]), seed=cfg["seed"])
    except InputError as exc:  # raised on every rank alike, before any work
        return {"unsupported": str(exc), "seconds": None} if comm.rank == 0 else None
    model = GATModel.init(cfg["r"], F, H, F, out_heads=H, layers=1, seed=cfg["seed"],
                          dtype=obj.dtype)
    fused = cfg["strategy"] == "fusion"
    gat = DistGAT(obj, model, fused=fused)
    rng = np.random.default_rng([cfg["seed"], comm.rank])
    X = rng.standard_normal((gat.nodes.size, cfg["r"])).astype(obj.dtype)
    labels = rng.integers(0, F, gat.nodes.size)
    mask = np.ones(gat.nodes.size, dtype=bool)
    n_nodes = obj.shape[0]
    steps = iter(range(1 + cfg["repeat"]))

    def one_pass() -> None:
        if w["pass"] == "forward":
            gat.forward(X)
            return
        logits, caches = gat.forward(X, Dropout(step=next(steps), seed=cfg["seed"]))
        _, dlogits = cross_entropy(logits, labels, mask, n_nodes)
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
    else:
        calls = {"spmm_a": H} if w["pass"] == "forward" else {"spmm_a": H, "sddmm": H,
                                                               "spmm_b": H}
        words = kernel_words(cfg, calls, n_nodes, n_nodes, nnz, F)
    release(obj)
    if comm.rank != 0:
        return None
    return {"m": n_nodes, "n": n_nodes, "nnz": nnz, **summarise(reps),
            "model": {"words": words, "machine": machine.source}}


def measure_app(cfg: dict, source, comm, machine) -> dict | None:
    """The runner's entry for one application configuration (collective)."""
    app = cfg["workload"]["app"]
    return (measure_als if app == "als" else measure_gat)(cfg, source, comm, machine)


def main(argv: list[str] | None = None) -> int:
    return runner.main(EXPERIMENT, {"laptop": laptop, "paper": paper, "data": data},
                       __doc__.split("\n")[0], argv,
                       no_projection="the cost model has no term for the applications' own "
                                     "work (CG vector updates, edge operations, GEMMs); "
                                     "project the FusedMM calls with weak_scaling.py or "
                                     "strong_scaling.py")


if __name__ == "__main__":
    sys.exit(main())
