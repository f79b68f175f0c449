"""A/B of two distmm versions with bench_end_to_end's workers, taking turns in one run.

The "before" version is a source tree of distmm (for example ``git archive BASE distmm | tar -x
-C /tmp/base``) put first on ``PYTHONPATH`` of its workers, with a numba cache of its own; the
"after" version is this checkout. Each round runs, per matrix, before and after at p = 1 and
p = 2 and PyTorch, one process (or mpiexec job) each, so that every variant samples the same
moments of a shared machine (odd rounds in the reverse order, so that no variant always
follows another). One JSON line per measurement goes to ``--jsonl`` (the worker's
record plus ``variant``, ``matrix`` and ``round``); ``--markdown`` writes the table of the
best over rounds: seconds before and after, their ratio, the median over rounds of each
round's after / before, the share of the call outside the kernels and communication ("rest")
before and after, and PyTorch's time over distmm's::

    git archive 8380b6a distmm | tar -x -C /tmp/base
    .venv/bin/python benchmarks/bench_end_to_end_ab.py --base /tmp/base \\
        --matrices metis-mdual,er-65536 --rs 16,32,128 --jsonl ab.jsonl --markdown ab.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_end_to_end as e2e  # noqa: E402

VARIANTS = ("before-p1", "after-p1", "before-p2", "after-p2", "torch")


def run_variant(variant: str, matrix: str, args) -> list[dict]:
    """One worker of one variant, with the environment that selects its distmm version."""
    saved = dict(os.environ)
    try:
        if variant.startswith("before"):
            os.environ["PYTHONPATH"] = os.path.abspath(args.base)
            os.environ["NUMBA_CACHE_DIR"] = os.path.join(os.path.abspath(args.base),
                                                         ".numba_cache")
        name = "torch" if variant == "torch" else "distmm-" + variant.split("-")[1]
        return e2e.launch(name, matrix, args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def table(records: list[dict]) -> str:
    """Markdown table per (matrix, dtype, op, r): the best over rounds of each variant, and
    the median over rounds of each round's after / before at p = 1 and p = 2 (one lucky
    round of the host decides a best, not a median of paired ratios)."""
    best: dict = {}
    rounds: dict = {}
    for rec in records:
        key = (rec["matrix"], rec["dtype"], rec["op"], rec["r"], rec["variant"])
        if key not in best or rec["seconds"] < best[key]["seconds"]:
            best[key] = rec
        rounds.setdefault(key, {})[rec["round"]] = rec["seconds"]
    lines = ["| matrix | dtype | op | r | p=1 before (s) | p=1 after (s) | after / before "
             "| p=1 after / before, median of rounds | rest p=1 before, after "
             "| p=2 before (s) | p=2 after (s) | p=2 after / before, median of rounds "
             "| rest p=2 before, after | torch (s) | torch / p=1 after |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"]

    def secs(x):
        return f"{x['seconds']:.3g}" if x else "-"

    def rest(x):
        return f"{100 * x['rest'] / x['seconds']:.0f}%" if x else "-"

    def paired(case, p):
        after = rounds.get((*case, f"after-p{p}"), {})
        before = rounds.get((*case, f"before-p{p}"), {})
        ratios = [after[k] / before[k] for k in after if k in before]
        return f"{statistics.median(ratios):.2f}" if ratios else "-"

    for case in sorted({k[:4] for k in best}):
        b1, a1, b2, a2, t = (best.get((*case, v)) for v in VARIANTS)
        ratio = f"{a1['seconds'] / b1['seconds']:.2f}" if a1 and b1 else "-"
        vs = f"{t['seconds'] / a1['seconds']:.2f}x" if t and a1 else "-"
        lines.append(f"| {' | '.join(map(str, case))} | {secs(b1)} | {secs(a1)} | {ratio} "
                     f"| {paired(case, 1)} | {rest(b1)}, {rest(a1)} | {secs(b2)} | {secs(a2)} "
                     f"| {paired(case, 2)} | {rest(b2)}, {rest(a2)} | {secs(t)} | {vs} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="source tree holding the 'before' distmm/")
    ap.add_argument("--matrices", type=e2e.csv_list(str), default=list(e2e.MATRICES))
    ap.add_argument("--variants", type=e2e.csv_list(str), default=list(VARIANTS))
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 32, 128])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32"])
    ap.add_argument("--ops", type=e2e.csv_list(str), default=list(e2e.OPS))
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--jsonl", help="append every record here")
    ap.add_argument("--markdown", help="write the table here")
    args = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(args.base, "distmm")):
        ap.error(f"--base {args.base} holds no distmm/ package")
    for v in args.variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    records = []
    with open(args.jsonl, "a") if args.jsonl else contextlib.nullcontext() as out:
        for rnd in range(args.rounds):
            # Odd rounds run the variants in reverse: on a large matrix the job that follows
            # another finds the caches and the memory in the state the first one left.
            order = args.variants if rnd % 2 == 0 else args.variants[::-1]
            for matrix in args.matrices:
                for variant in order:
                    t0 = time.perf_counter()
                    for rec in run_variant(variant, matrix, args):
                        if rec.get("call") == "bound":  # method calls only: both versions have them
                            continue
                        rec.update(variant=variant, matrix=matrix, round=rnd)
                        records.append(rec)
                        if out:
                            out.write(json.dumps(rec) + "\n")
                            out.flush()
                    print(f"round {rnd + 1}/{args.rounds} {matrix} {variant}: "
                          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    text = table(records)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
