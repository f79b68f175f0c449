"""Counted words equal the model's at p = 16, 32 and 64 ranks, for every family, strategy and
valid c (the counts behind the projections; no timing is needed, so the ranks may
oversubscribe the cores).

    MPIR_CVAR_ENABLE_HEAVY_YIELD=1 NUMBA_NUM_THREADS=1 \
        .venv/bin/python experiments/count_check.py --preset scale
    .venv/bin/python experiments/count_check.py --check results/count-check-scale.jsonl

Each configuration runs one FusedMMA on an Erdos-Renyi 1024 x 1024 matrix with 4 entries per
row at r = 64 and records the words sent per phase, mean over ranks, beside the exact words
of :func:`distmm.perf.costmodel.exact` at the matrix's nonzero count (balanced blocks: the mean over
ranks of each rank's own count is what the balanced formula gives). ``--check`` prints one
row per (p, family, strategy) and exits 1 if any phase differs. Presets: scale (p = 16, 32,
64), laptop (p = 2, 4).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import runner

from distmm.algorithms import ALGORITHMS
from distmm.errors import InputError
from distmm.perf import costmodel

EXPERIMENT = "count-check"


def configs(ps: list[int]) -> list[dict]:
    """Every (p, family, strategy, valid c) of the families whose words follow from m, n and
    nnz alone: a family whose words depend on S's pattern (``needs_pattern``, the
    sparsity-aware one) is held to its pattern model by tests/mpi/test_sparse_aware.py."""
    matrix = {"kind": "er", "m": 1024, "n": 1024, "d": 4}
    pattern_free = [(name, strategy) for name, strategy in costmodel.CONFIGS
                    if not getattr(ALGORITHMS[name], "needs_pattern", False)]
    return runner.sweep(EXPERIMENT, [matrix], [64], ps, configs=pattern_free, repeat=1)


def mismatches(rec: dict, rel: float = 1e-9) -> list[str]:
    """Phases whose mean counted words differ from the model's (relative tolerance)."""
    out = []
    for ph in costmodel.PHASES:
        got, want = rec["words_mean"][ph], rec["model"]["words"][ph]
        if abs(got - want) > rel * max(abs(want), 1.0):
            out.append(f"{ph}: counted {got:g}, model {want:g}")
    return out


def check(paths: list[str]) -> int:
    """Print the comparison table of the files' records; 1 if any phase differs."""
    rows: dict = defaultdict(list)
    bad = []
    for path in paths:
        for rec in runner.read_records(path):
            if rec.get("experiment") != EXPERIMENT:
                raise InputError(f"{path} holds {rec.get('experiment')!r} records, not "
                                 f"{EXPERIMENT!r}")
            rows[rec["p"], rec["algorithm"], rec["strategy"]].append(rec)
            bad += [f"p={rec['p']} {rec['algorithm']} {rec['strategy']} c={rec['c']}: {m}"
                    for m in mismatches(rec)]
    print("| p | family | strategy | c tested | words per rank, counted = model |")
    print("|---|---|---|---|---|")
    for (p, alg, strat), recs in sorted(rows.items()):
        ok = all(not mismatches(rec) for rec in recs)
        cs = ", ".join(str(rec["c"]) for rec in sorted(recs, key=lambda x: x["c"]))
        words = ", ".join(f"{sum(rec['words_mean'].values()):.0f}"
                          for rec in sorted(recs, key=lambda x: x["c"]))
        print(f"| {p} | {alg} | {strat} | {cs} | {words} {'(equal)' if ok else '(DIFFER)'} |")
    for line in bad:
        print(line, file=sys.stderr)
    print(f"{sum(len(v) for v in rows.values())} configurations, {len(bad)} phase mismatches")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--check", nargs="+")
    known, rest = pre.parse_known_args(argv)
    if known.check:
        try:
            return check(known.check)
        except InputError as exc:
            print(f"count_check: {exc}", file=sys.stderr)
            return 2
    presets = {"scale": lambda args: configs([16, 32, 64]),
               "laptop": lambda args: configs([2, 4])}
    return runner.main(EXPERIMENT, presets, __doc__.split("\n")[0], rest)


if __name__ == "__main__":
    sys.exit(main())
