"""The paper's reported speed ratios (section VI) beside the same ratios in results files
(projected with --project, or measured), as one markdown table.

    .venv/bin/python experiments/paper_ratios.py results/*-paper-projected*.jsonl

Each ratio compares two (algorithm, strategy) pairs, each at its best c, at one p (the largest
p in the files, 256 for the paper preset) on one matrix: slower / faster, so a value above 1
means the paper's winner wins here too.
"""

from __future__ import annotations

import sys

import runner

# (experiment, matrix label or None, faster, slower, the paper's ratio, where it says so)
PAPER = (
    ("weak-scaling-1", None, ("15d-sparse-shift", "reuse"), ("25d-sparse-replicate", "none"),
     1.15, "VI-B setup 1"),
    ("weak-scaling-1", None, ("15d-dense-shift", "fusion"), ("15d-dense-shift", "none"), 1.38,
     "VI-B setup 1"),
    ("weak-scaling-1", None, ("15d-dense-shift", "reuse"), ("15d-dense-shift", "none"), 1.16,
     "VI-B setup 1"),
    ("weak-scaling-2", None, ("15d-dense-shift", "fusion"), ("15d-sparse-shift", "reuse"), 1.94,
     "VI-B setup 2"),
    ("strong-scaling", "uk-2002", ("15d-sparse-shift", "reuse"), ("15d-sparse-shift", "none"),
     1.19, "VI-D"),
    ("strong-scaling", "uk-2002", ("15d-sparse-shift", "reuse"), ("15d-dense-shift", "fusion"),
     2.1, "VI-D"),
    ("strong-scaling", "eukarya", ("15d-dense-shift", "fusion"), ("15d-dense-shift", "none"),
     1.6, "VI-D"),
    ("strong-scaling", "eukarya", ("15d-dense-shift", "fusion"), ("15d-sparse-shift", "reuse"),
     1.9, "VI-D"),
)


def best(records: list[dict], label: str | None, p: int, cfg: tuple[str, str]) -> dict | None:
    """The fastest c of one (algorithm, strategy) at p on one matrix."""
    recs = [rec for rec in records if rec["p"] == p and (rec["algorithm"], rec["strategy"]) == cfg
            and (label is None or rec["label"] == label)]
    return min(recs, key=lambda rec: rec["seconds"]) if recs else None


def table(paths: list[str]) -> str:
    by_exp: dict[str, list[dict]] = {}
    for path in paths:
        for rec in runner.read_records(path):
            by_exp.setdefault(rec["experiment"], []).append(rec)
    out = ["| experiment | matrix | p | faster | slower | paper | here | here: faster's c, "
           "slower's c | source |", "|---|---|---|---|---|---|---|---|---|"]
    for experiment, label, fast, slow, paper, where in PAPER:
        records = by_exp.get(experiment)
        if not records:
            continue
        p = max(rec["p"] for rec in records)
        a, b = best(records, label, p, fast), best(records, label, p, slow)
        if a is None or b is None:
            continue
        kind = "predicted" if a["predicted"] else "measured"
        out.append(f"| {experiment} | {label or a['label']} | {p} | {' '.join(fast)} | "
                   f"{' '.join(slow)} | {paper:.2f}x | {b['seconds'] / a['seconds']:.2f}x "
                   f"({kind}) | {a['c']}, {b['c']} | {where} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return runner.table_main("paper_ratios", __doc__.split("\n")[0], table, argv)


if __name__ == "__main__":
    sys.exit(main())
