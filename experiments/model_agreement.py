"""How well the cost model picked the fastest configuration in measured results files, and how
steady the measurements were, as one markdown table.

    .venv/bin/python experiments/model_agreement.py results/*-laptop.jsonl

A point is what a figure compares at one place: the configurations of one experiment that
share a matrix, r, p and dtype (for optimal-c also the algorithm and strategy, since that
figure picks c alone). At each point the measured winner (fewest seconds) is set against the
model's pick (fewest predicted seconds, ``model.seconds``); a row per experiment gives

* the records and points it has;
* the points where the model's pick is the measured winner;
* the model's pick's measured seconds over the winner's, lowest and highest over the points;
* the median over records of the slowest repetition over the fastest (``times``), the
  measurement's own spread;
* at p = 1, where no configuration sends anything, the slowest configuration of a point
  over its fastest (the highest over those points): differences there are not communication.

Projected records (``--project``), records not run and PETSc's (which have no model) are
left out.
"""

from __future__ import annotations

import statistics
import sys

import runner

# the fields a point is chosen by: what differs between the configurations it compares
CHOICE = {"optimal-c": ("c",)}
DEFAULT_CHOICE = ("algorithm", "strategy", "c")


def _point(rec: dict) -> tuple:
    choice = CHOICE.get(rec["experiment"], DEFAULT_CHOICE)
    return tuple((k, str(rec.get(k))) for k in ("label", "r", "p", "dtype", "algorithm",
                                                 "strategy", "c") if k not in choice)


def summary(records: list[dict]) -> dict[str, dict]:
    """Per experiment: records, points, agreements, the pick's ratios, the repetition spread
    and the p = 1 spread (see the module docstring)."""
    usable = [rec for rec in records
              if not rec.get("predicted") and rec.get("seconds") is not None
              and (rec.get("model") or {}).get("seconds") is not None]
    out: dict[str, dict] = {}
    for experiment in sorted({rec["experiment"] for rec in usable}):
        recs = [rec for rec in usable if rec["experiment"] == experiment]
        points: dict[tuple, list[dict]] = {}
        for rec in recs:
            points.setdefault(_point(rec), []).append(rec)
        agree, ratios, flat = 0, [], []
        for group in points.values():
            winner = min(group, key=lambda rec: rec["seconds"])
            pick = min(group, key=lambda rec: rec["model"]["seconds"])
            agree += pick is winner
            ratios.append(pick["seconds"] / winner["seconds"])
            if group[0]["p"] == 1 and len(group) > 1:
                flat.append(max(rec["seconds"] for rec in group) / winner["seconds"])
        spreads = [max(rec["times"]) / min(rec["times"]) for rec in recs if rec.get("times")]
        out[experiment] = {
            "records": len(recs), "points": len(points), "agree": agree,
            "pick_over_winner": (min(ratios), max(ratios)),
            "repetition_spread": statistics.median(spreads) if spreads else None,
            "p1_spread": max(flat) if flat else None}
    return out


def table(paths: list[str]) -> str:
    records = [rec for path in paths for rec in runner.read_records(path)]
    rows = ["| experiment | records | points | model's pick = winner | pick / winner | "
            "median repetition spread | p = 1: slowest / fastest |",
            "|---|---:|---:|---|---|---|---|"]
    for experiment, s in summary(records).items():
        lo, hi = s["pick_over_winner"]
        spread = "-" if s["repetition_spread"] is None else f"{s['repetition_spread']:.2f}"
        flat = "-" if s["p1_spread"] is None else f"{s['p1_spread']:.2f}x"
        rows.append(f"| {experiment} | {s['records']} | {s['points']} | {s['agree']} of "
                    f"{s['points']} | {lo:.2f}-{hi:.2f}x | {spread} | {flat} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    return runner.table_main("model_agreement", __doc__.split("\n")[0], table, argv)


if __name__ == "__main__":
    sys.exit(main())
