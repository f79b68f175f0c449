"""Draw the section VI figures from results files: one PNG per figure, in the paper's style.

    .venv/bin/python experiments/plot.py results/*.jsonl --out docs/figures

Each file's experiment decides the figure (a projected file, written with --project, gives the
same figure marked "predicted"):

* weak-scaling-1 / weak-scaling-2 (Figure 4): time of one FusedMM vs p, each algorithm at its
  best c, communication dashed under the total; setup 1 also gives the per-phase breakdown
  (Figure 5): stacked bars of replication, propagation, reduction and computation per p.
* rphi-map (Figure 6): the best configuration per (r, nonzeros per row), predicted beside
  observed.
* optimal-c (Figure 7): the best c vs p per strategy, predicted (model over the same c) and
  observed; Table IV's real optimum as a thin line.
* strong-scaling (Figure 8): time of the timed FusedMM calls vs p per matrix, each algorithm at
  its best c, and PETSc (MatMatMult twice per FusedMM) where its records are present.
* app-breakdown (Figure 9): per application (ALS epoch, GAT forward, GAT training step) and
  matrix, one stacked bar per algorithm at its best c, split into Figure 9's four parts
  (FusedMM/SpMM communication, their compute, the softmax or dot-product reductions, the rest
  of the application; a projection has the first two); one row per p. A record without a
  time (a configuration the application refused) is marked "not supported".

Needs matplotlib: pip install distmm[plot].
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import runner

from distmm.errors import InputError, require
from distmm.perf import costmodel
from distmm.runtime.extras import require_extra

PHASES = ("replication", "propagation", "reduction", "compute")
STYLE = {  # (algorithm, strategy) -> (label, colour, marker), as the paper's legends name them
    ("15d-dense-shift", "none"): ("1.5D dense shift, no elision", "tab:blue", "o"),
    ("15d-dense-shift", "reuse"): ("1.5D dense shift, repl. reuse", "tab:cyan", "s"),
    ("15d-dense-shift", "fusion"): ("1.5D dense shift, kernel fusion", "tab:purple", "D"),
    ("15d-sparse-shift", "none"): ("1.5D sparse shift, no elision", "tab:red", "o"),
    ("15d-sparse-shift", "reuse"): ("1.5D sparse shift, repl. reuse", "tab:orange", "s"),
    ("25d-dense-replicate", "none"): ("2.5D dense repl., no elision", "tab:green", "o"),
    ("25d-dense-replicate", "reuse"): ("2.5D dense repl., repl. reuse", "olive", "s"),
    ("25d-sparse-replicate", "none"): ("2.5D sparse repl., no elision", "tab:brown", "^"),
    ("15d-sparse-aware", "none"): ("1.5D sparsity-aware, no elision", "tab:pink", "P"),
    ("15d-sparse-aware", "reuse"): ("1.5D sparsity-aware, repl. reuse", "hotpink", "X"),
    ("15d-sparse-aware", "fusion"): ("1.5D sparsity-aware, kernel fusion", "deeppink", "*"),
    ("petsc", "matmatmult-x2"): ("PETSc MatMatMult x2", "black", "v"),
}


def config_of(rec: dict) -> tuple[str, str]:
    return rec["algorithm"], rec["strategy"]


def best_over_c(records: list[dict], group) -> dict:
    """{group(rec) + (algorithm, strategy): the record of the fastest c}."""
    best: dict = {}
    for rec in records:
        k = (*group(rec), *config_of(rec))
        if k not in best or rec["seconds"] < best[k]["seconds"]:
            best[k] = rec
    return best


def comm_seconds(rec: dict) -> float:
    """Communication seconds: the model's, or the measured phases' sum."""
    if rec["predicted"]:
        return rec["model"]["comm_s"]
    return sum(rec["phase_seconds"].get(ph, 0.0) for ph in costmodel.PHASES)


def phase_breakdown(rec: dict) -> dict[str, float]:
    """Seconds per phase: measured, or the model's communication split by words per phase."""
    if not rec["predicted"]:
        out = {ph: rec["phase_seconds"].get(ph, 0.0) for ph in PHASES}
        out["compute"] = max(rec["seconds"] - sum(out[ph] for ph in costmodel.PHASES), 0.0)
        return out
    words = rec["model"]["words"]
    total = sum(words.values()) or 1.0
    out = {ph: rec["model"]["comm_s"] * words[ph] / total for ph in costmodel.PHASES}
    out["compute"] = rec["model"]["compute_s"]
    return out


def suffix(records: list[dict]) -> str:
    return " (predicted)" if records and records[0]["predicted"] else " (measured)"


def plot_weak(plt, records: list[dict], experiment: str, out: str) -> list[str]:
    best = best_over_c(records, lambda rec: (rec["p"],))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for cfg, (label, colour, marker) in STYLE.items():
        pts = sorted((k[0], rec) for k, rec in best.items() if k[1:] == cfg)
        if not pts:
            continue
        ps = [p for p, _ in pts]
        ax.plot(ps, [rec["seconds"] for _, rec in pts], marker=marker, color=colour, label=label)
        ax.plot(ps, [comm_seconds(rec) for _, rec in pts], ls="--", color=colour, lw=0.8)
    setup = experiment[-1]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("nodes p")
    ax.set_ylabel("seconds per FusedMM (dashed: communication)")
    ax.set_title(f"Weak scaling, setup {setup}{suffix(records)}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    paths = [_save(fig, out, experiment, records)]
    if setup == "1":
        paths.append(plot_breakdown(plt, best, records, out))
    return paths


def plot_breakdown(plt, best: dict, records: list[dict], out: str) -> str:
    """Figure 5: per configuration, one stacked bar per p."""
    ps = sorted({k[0] for k in best})
    cfgs = [cfg for cfg in STYLE if any(k[1:] == cfg for k in best)]
    fig, ax = plt.subplots(figsize=(9, 4.4))
    colours = {"replication": "tab:blue", "propagation": "tab:orange",
               "reduction": "tab:green", "compute": "tab:gray"}
    x, ticks, labels = 0.0, [], []
    for cfg in cfgs:
        start = x
        for p in ps:
            rec = best.get((p, *cfg))
            if rec is not None:
                parts, bottom = phase_breakdown(rec), 0.0
                for ph in PHASES:
                    ax.bar(x, parts[ph], bottom=bottom, color=colours[ph], width=0.9,
                           label=ph if x == 0 else None)
                    bottom += parts[ph]
            x += 1
        ticks.append((start + x - 1) / 2)
        labels.append(STYLE[cfg][0].replace(", ", "\n"))
        x += 1
    ax.set_xticks(ticks, labels, fontsize=6)
    ax.set_ylabel("seconds per FusedMM")
    ax.set_title(f"Weak scaling setup 1, time breakdown, p = {ps[0]}..{ps[-1]} left to right"
                 f"{suffix(records)}")
    ax.legend(fontsize=7)
    return _save(fig, out, "weak-scaling-1-breakdown", records)


def plot_rphi(plt, records: list[dict], out: str) -> list[str]:
    cells: dict = defaultdict(list)
    for rec in records:
        cells[(rec["matrix"].get("d", rec["nnz"] / rec["m"]), rec["r"])].append(rec)
    ds = sorted({k[0] for k in cells})
    rs = sorted({k[1] for k in cells})
    measured = not records[0]["predicted"]
    panels = [("predicted", lambda rec: rec["model"]["seconds"])]
    if measured:
        panels.append(("observed", lambda rec: rec["seconds"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.2 * len(panels), 8), 5),
                             squeeze=False)
    used = set()
    for ax, (title, seconds) in zip(axes[0], panels, strict=True):
        for (d, r), recs in cells.items():
            win = min(recs, key=seconds)
            cfg = config_of(win)
            used.add(cfg)
            label, colour, marker = STYLE[cfg]
            x, y = rs.index(r), ds.index(d)
            ax.scatter(x, y, s=900, color=colour, marker="s")
            ax.text(x, y, f"c={win['c']}", ha="center", va="center", fontsize=7, color="white")
        ax.set_xticks(range(len(rs)), [str(r) for r in rs])
        ax.set_yticks(range(len(ds)), [f"{d:g}" for d in ds])
        ax.set_xlim(-0.6, len(rs) - 0.4)
        ax.set_ylim(-0.6, len(ds) - 0.4)
        ax.set_xlabel("r")
        ax.set_ylabel("nonzeros per row")
        p = records[0]["p"]
        ax.set_title(f"{title} best, p = {p}, m = {records[0]['m']}")
    handles = [plt.Line2D([], [], ls="", marker="s", markersize=10, color=STYLE[cfg][1],
                          label=STYLE[cfg][0]) for cfg in STYLE if cfg in used]
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return [_save(fig, out, "rphi-map", records, tight=False)]


def plot_optimal_c(plt, records: list[dict], out: str) -> list[str]:
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    measured = not records[0]["predicted"]
    for cfg in STYLE:
        recs = [rec for rec in records if config_of(rec) == cfg]
        if not recs:
            continue
        label, colour, marker = STYLE[cfg]
        ps = sorted({rec["p"] for rec in recs})

        def pick(seconds, recs=recs, ps=ps):
            return [min((rec for rec in recs if rec["p"] == p), key=seconds)["c"] for p in ps]

        ax.plot(ps, pick(lambda rec: rec["model"]["seconds"]), ls="--", marker=marker,
                color=colour, mfc="none", label=f"{label}, predicted")
        if measured:
            ax.plot(ps, pick(lambda rec: rec["seconds"]), marker=marker, color=colour,
                    label=f"{label}, observed")
        ax.plot(ps, [costmodel.table4_best_c(*cfg, p) for p in ps], color=colour, lw=0.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("nodes p")
    ax.set_ylabel("optimal replication factor c (thin: Table IV)")
    ax.set_title(f"Optimal c, weak scaling setup 1{suffix(records)}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return [_save(fig, out, "optimal-c", records)]


def plot_strong(plt, records: list[dict], out: str) -> list[str]:
    labels = sorted({rec["label"] for rec in records})
    fig, axes = plt.subplots(1, len(labels), figsize=(4.6 * len(labels), 4.2), squeeze=False)
    best = best_over_c(records, lambda rec: (rec["label"], rec["p"]))
    for ax, name in zip(axes[0], labels, strict=True):
        for cfg, (label, colour, marker) in STYLE.items():
            pts = sorted((k[1], rec) for k, rec in best.items() if k[0] == name and k[2:] == cfg)
            if pts:
                ax.plot([p for p, _ in pts], [rec["seconds"] for _, rec in pts], marker=marker,
                        color=colour, label=label)
        calls = records[0]["calls"]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes p")
        ax.set_ylabel(f"seconds, {calls} FusedMM calls")
        ax.set_title(f"{name}, r = {records[0]['r']}")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"Strong scaling{suffix(records)}")
    return [_save(fig, out, "strong-scaling", records)]


# Figure 9's four parts (app_breakdown.py's "figure9" of a record; a projection has the first two)
APP_COLOURS = {"fusedmm_comm": "tab:blue", "fusedmm_compute": "tab:gray",
               "reductions": "tab:red", "rest": "tab:purple"}
APP_LABELS = {"fusedmm_comm": "FusedMM / SpMM communication",
              "fusedmm_compute": "FusedMM / SpMM compute",
              "reductions": "softmax (GAT) / dot-product (ALS) reductions",
              "rest": "rest of the application"}


def app_panel(rec: dict) -> str:
    """The panel of an app-breakdown record: application (and GAT pass) and matrix."""
    w = rec["workload"]
    if w["app"] == "als":
        what = f"ALS epoch, {2 * w['cg_iters']} CG iterations"
    else:
        what = f"GAT {w['pass']}, {w['heads']} heads x {w['features']}"
    return f"{what}\n{rec['label']}, r = {rec['r']}"


def plot_apps(plt, records: list[dict], out: str) -> list[str]:
    """Figure 9: stacked bars per algorithm (best c), one panel per application and matrix, one
    row per p."""
    ps = sorted({rec["p"] for rec in records})
    panels = sorted({app_panel(rec) for rec in records})
    fig, axes = plt.subplots(len(ps), len(panels), figsize=(4.4 * len(panels), 3.8 * len(ps)),
                             squeeze=False)
    for row, p in enumerate(ps):
        for col, panel in enumerate(panels):
            ax = axes[row][col]
            recs = [rec for rec in records if rec["p"] == p and app_panel(rec) == panel]
            ran = best_over_c([rec for rec in recs if rec["seconds"] is not None],
                              lambda rec: ())
            refused = {config_of(rec): rec for rec in recs if rec["seconds"] is None}
            cfgs = [cfg for cfg in STYLE if cfg in ran or cfg in refused]
            top = max((rec["seconds"] for rec in ran.values()), default=1.0)
            for x, cfg in enumerate(cfgs):
                if cfg not in ran:
                    ax.text(x, 0.02 * top, "not supported", rotation=90, ha="center",
                            va="bottom", fontsize=7, color="dimgray")
                    continue
                bottom = 0.0
                for seg, colour in APP_COLOURS.items():
                    height = ran[cfg]["figure9"].get(seg, 0.0)
                    ax.bar(x, height, bottom=bottom, color=colour, width=0.8,
                           label=APP_LABELS.get(seg, seg))
                    bottom += height
                ax.text(x, bottom, f"c={ran[cfg]['c']}", ha="center", va="bottom", fontsize=6)
            ax.set_xticks(range(len(cfgs)), [STYLE[cfg][0].replace(", ", "\n") for cfg in cfgs],
                          fontsize=6, rotation=90)
            ax.set_xlim(-0.6, len(cfgs) - 0.4)
            ax.set_ylabel("seconds (model)" if recs and recs[0]["predicted"]
                          else "seconds (slowest rank)")
            ax.set_title(f"{panel}, p = {p}", fontsize=8)
    handles, labels = next(((h, lab) for ax in axes.flat
                            for h, lab in [ax.get_legend_handles_labels()] if h), ([], []))
    fig.legend(handles[:len(APP_COLOURS)], labels[:len(APP_COLOURS)], loc="lower center",
               ncol=len(APP_COLOURS), fontsize=7)
    fig.suptitle(f"Application time breakdown (Figure 9){suffix(records)}")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return [_save(fig, out, "app-breakdown", records, tight=False)]


def _save(fig, out: str, name: str, records: list[dict], tight: bool = True) -> str:
    path = os.path.join(out, f"{name}{'-projected' if records[0]['predicted'] else ''}.png")
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.clf()
    return path


def plot(paths: list[str], out: str) -> list[str]:
    """Draw every figure the files hold; returns the PNG paths. Not collective."""
    require(paths, "give at least one results file")
    groups: dict = defaultdict(list)
    for path in paths:
        require(os.path.isfile(path), f"results file {path} does not exist")
        for rec in runner.read_records(path):
            groups[rec["experiment"], rec["predicted"]].append(rec)
    plt = require_extra("matplotlib.pyplot", what="experiments/plot.py")
    os.makedirs(out, exist_ok=True)
    written = []
    for (experiment, _), records in sorted(groups.items()):
        if experiment.startswith("weak-scaling"):
            written += plot_weak(plt, records, experiment, out)
        elif experiment == "rphi-map":
            written += plot_rphi(plt, records, out)
        elif experiment == "optimal-c":
            written += plot_optimal_c(plt, records, out)
        elif experiment == "strong-scaling":
            written += plot_strong(plt, records, out)
        elif experiment == "app-breakdown":
            written += plot_apps(plt, records, out)
        else:
            print(f"plot.py: no figure for experiment {experiment!r}; skipped", file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="JSON Lines results files")
    ap.add_argument("--out", required=True, help="folder for the PNGs")
    args = ap.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        pass  # plot() raises the install message
    try:
        for path in plot(args.results, args.out):
            print(path)
    except InputError as exc:
        print(f"plot.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
