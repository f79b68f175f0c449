"""Strong scaling on Matrix Market matrices (paper section VI-D, Figure 8): r = 128, 5 FusedMM
calls per timing, every algorithm at its best c from 1 to 16.

The paper preset uses Table V's matrices (amazon-large, uk-2002, eukarya, arabic-2005,
twitter7) as ``--data-dir``/NAME.mtx, from 4 nodes (arabic-2005: 8, twitter7: 16) to 256; with
--project only their sizes (Table V) are needed. The laptop preset runs the development data
(metis-mdual, sparse like uk-2002 at 4 per row, and movielens-100k, dense like eukarya at 106
per row) at r = 32, 2 calls, p = 1, 2, 4. The baseline preset is distmm's default FusedMM
against PETSc in float64 on every development matrix at p = 1, 2, in rounds of jobs that
take turns (docs/performance.md); ``--table RESULTS.jsonl`` prints its comparison.

    .venv/bin/python experiments/strong_scaling.py --preset laptop
    .venv/bin/python experiments/strong_scaling.py --preset paper \
        --project machines/cori-knl.json
"""

from __future__ import annotations

import os
import sys

import petsc_baseline
import runner

from distmm.errors import require
from distmm.runtime.extras import available, require_extra

EXPERIMENT = "strong-scaling"
# Paper Table V: rows (= columns), nonzeros, and the smallest node count the paper ran.
TABLE5 = {"amazon-large": (14249639, 230788269, 4), "uk-2002": (18484117, 298113762, 4),
          "eukarya": (3243106, 359744161, 4), "arabic-2005": (22744080, 639999458, 8),
          "twitter7": (41652230, 1468365182, 16)}
LAPTOP = ("metis-mdual.mtx.gz", "movielens-100k-ratings.mtx.gz")
# The baseline preset: every development matrix, and an Erdos-Renyi one like the README's.
BASELINE = ("metis-mdual.mtx.gz", "genes-pubmed.mtx.gz", "movielens-100k-ratings.mtx.gz",
            "cora-adjacency.mtx.gz")


def paper(args) -> list[dict]:
    out = []
    for name, (n, nnz, lo) in TABLE5.items():
        if args.project:
            matrix = {"kind": "sizes", "name": name, "m": n, "n": n, "nnz": nnz}
        else:
            matrix = {"kind": "mtx", "path": runner.check_matrix(
                os.path.join(args.data_dir, f"{name}.mtx"))}
        ps = runner.pow2_upto(lo, args.max_p or 256)
        out += runner.sweep(EXPERIMENT, [matrix], [128], ps, cs=range(1, 17), calls=5)
        out += with_petsc(args, [matrix], 128, ps, 5)
    return out


def laptop(args) -> list[dict]:
    matrices = [{"kind": "mtx", "path": runner.check_matrix(os.path.join(args.data_dir, name))}
                for name in LAPTOP]
    return runner.sweep(EXPERIMENT, matrices, [32], runner.pow2_upto(1, args.max_p or 4),
                        calls=2, repeat=2) + with_petsc(args, matrices, 32,
                                                        runner.pow2_upto(1, args.max_p or 4), 2)


def baseline(args) -> list[dict]:
    """distmm's default FusedMM (1.5D dense shifting, fusion, c = 1) against PETSc's two
    MatMatMult in float64 on every development matrix at p = 1, 2 and r = 16, 32, 128: the
    PETSc target of docs/performance.md. Needs petsc4py.

    ``args.rounds`` rounds, each a distmm job and a PETSc job per p, in turns (distmm first
    in even rounds, PETSc first in odd ones), so that both libraries see the same minutes of
    a shared machine; :func:`baseline_table` compares them."""
    require_extra("petsc4py", what="strong_scaling.py --preset baseline")
    require(args.rounds >= 1, f"--rounds must be at least 1, got {args.rounds}")
    matrices = [{"kind": "mtx", "path": runner.check_matrix(os.path.join(args.data_dir, name))}
                for name in BASELINE] + [{"kind": "er", "m": 65536, "n": 65536, "d": 32}]
    ps, rs = runner.pow2_upto(1, args.max_p or 2), (16, 32, 128)
    out = []
    for rnd in range(args.rounds):
        for p in ps:
            ours = runner.sweep(EXPERIMENT, matrices, rs, [p],
                                configs=[("15d-dense-shift", "fusion")], cs=[1], calls=5,
                                repeat=3, dtype="float64")
            petsc = [runner.config(EXPERIMENT, matrix, r, p, petsc_baseline.ALGORITHM,
                                   petsc_baseline.STRATEGY, 1, calls=5, repeat=3,
                                   dtype="float64") for matrix in matrices for r in rs]
            for cfg in ours + petsc:
                cfg["round"] = rnd
            out += ours + petsc if rnd % 2 == 0 else petsc + ours
    return out


def baseline_table(records: list[dict]) -> str:
    """The baseline preset's comparison as a markdown table: for each matrix, p and r, PETSc's
    best time over distmm's best time (over all rounds; PETSc's time is for twice as many
    calls, one FusedMM being two MatMatMult), and the range of the same ratio within each
    round. Not collective."""
    rounds: dict[tuple, dict] = {}  # (matrix, p, r) -> {round: {library: seconds}}
    for rec in records:
        if rec.get("seconds") is not None:
            lib = "petsc" if rec["algorithm"] == petsc_baseline.ALGORITHM else "distmm"
            cell = rounds.setdefault((rec["label"], rec["p"], rec["r"]), {})
            cell.setdefault(rec.get("round"), {})[lib] = rec["seconds"]
    lines = ["| matrix | p | r | PETSc / distmm (best over rounds) | within a round |",
             "|---|---:|---:|---:|---|"]
    for (label, p, r), by_round in sorted(rounds.items()):
        times = {lib: [t[lib] for t in by_round.values() if lib in t]
                 for lib in ("petsc", "distmm")}
        if not (times["petsc"] and times["distmm"]):
            continue
        ratios = sorted(t["petsc"] / t["distmm"] for t in by_round.values() if len(t) == 2)
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}x ({len(ratios)})" if ratios else "-"
        ratio = min(times["petsc"]) / min(times["distmm"])
        lines.append(f"| {label} | {p} | {r} | {ratio:.2f}x{' **' if ratio < 3 else ''} | "
                     f"{spread} |")
    return "\n".join(lines)


def with_petsc(args, matrices: list[dict], r: int, ps: list[int], calls: int) -> list[dict]:
    """The PETSc baseline's configurations (2 x calls MatMatMult), when measuring with petsc4py
    installed or with --petsc (which fails, naming the extra, without petsc4py)."""
    if args.project or not (args.petsc or available("petsc4py")):
        return []
    require_extra("petsc4py", what="strong_scaling.py --petsc")
    return [runner.config(EXPERIMENT, matrix, r, p, petsc_baseline.ALGORITHM,
                          petsc_baseline.STRATEGY, 1, calls=calls, repeat=2)
            for p in ps for matrix in matrices]


def main(argv: list[str] | None = None) -> int:
    def add(ap):
        ap.add_argument("--petsc", action="store_true",
                        help="also run the PETSc baseline (needs petsc4py: pip install "
                             "distmm[petsc]); on by default when petsc4py is installed")
        ap.add_argument("--rounds", type=int, default=3,
                        help="baseline preset: rounds of distmm and PETSc jobs in turns "
                             "(default 3)")
        ap.add_argument("--table", metavar="RESULTS.jsonl",
                        help="measure nothing: print the baseline preset's PETSc / distmm "
                             "table from these records")

    def table(args) -> int | None:  # measure nothing: the baseline preset's comparison
        if not args.table:
            return None
        require(os.path.exists(args.table), f"--table: no such file {args.table!r}")
        print(baseline_table(runner.read_records(args.table)))
        return 0

    presets = {"laptop": laptop, "paper": paper, "baseline": baseline}
    return runner.main(EXPERIMENT, presets, __doc__.split("\n")[0], argv, add,
                       instead=table)


if __name__ == "__main__":
    sys.exit(main())
