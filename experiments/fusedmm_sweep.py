"""FusedMM on p ranks for every algorithm, strategy and replication factor; planner check.

Run under the installed MPI, e.g.::

    .venv/bin/mpiexec -n 2 .venv/bin/python experiments/fusedmm_sweep.py \
        --n 65536 --r 32,128,512 --d 8,32,128 --machine results/machine.json \
        --jsonl results/sweep-p2.jsonl --markdown results/sweep-p2.md

For each (r, nonzeros per row d) it generates one Erdos-Renyi S (the same for any p), then
for every algorithm family, FusedMM strategy and valid c it distributes S, times FusedMMA
(best of --repeat after a warm-up) and records the per-phase breakdown with the words counted
against the model (costmodel.implemented) and the model's predicted time. Then it runs the
measured planner (distmm.perf.tuning.tune with --tune K candidates) on the same S. The markdown
summary gives, per (r, d), each (algorithm, strategy) at its best measured c, the measured
winner, the model's pick and the tuned pick, each with the sweep's measured time of that
configuration relative to the winner. --matrix replaces the generator by a Matrix Market file
(e.g. ../shared/data/metis-mdual.mtx.gz); --algorithms and --c restrict the sweep.

Each (r, d) also appends one "picks" record to --jsonl; ``--summarize FILE...`` reads those
records (from any number of runs, e.g. one per r) and prints one markdown table of the picks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform

import numpy as np
from mpi4py import MPI

import distmm
from distmm.io.generate import erdos_renyi
from distmm.perf import costmodel
from distmm.perf.bench import measure, random_blocks
from distmm.perf.planner import Machine, plan, predict
from distmm.perf.tuning import tune


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--r", type=ints, default=[128], help="comma-separated dense widths")
    ap.add_argument("--d", type=ints, default=[32], help="comma-separated nonzeros per row")
    ap.add_argument("--matrix", help="Matrix Market file instead of Erdos-Renyi (--d unused)")
    ap.add_argument("--algorithms", default=",".join(distmm.ALGORITHMS))
    ap.add_argument("--strategies", default="all")
    ap.add_argument("--c", type=ints, help="only these replication factors")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument("--machine", help="machine file for the planner (distmm calibrate)")
    ap.add_argument("--jsonl", help="append every measurement here (rank 0)")
    ap.add_argument("--markdown", help="write the summary tables here (rank 0)")
    ap.add_argument("--every-c", action="store_true",
                    help="list every c in the tables, not only each strategy's best")
    ap.add_argument("--tune", type=int, default=3,
                    help="candidates the measured planner times (1: the model alone)")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL",
                    help="print the picks table of earlier runs' --jsonl files and exit")
    args = ap.parse_args()
    if args.summarize:
        if MPI.COMM_WORLD.rank == 0:
            print(picks_table(args.summarize))
        return
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    machine = Machine.load(args.machine) if args.machine else Machine()
    algorithms = args.algorithms.split(",")
    sections = []
    for d in ([0] if args.matrix else args.d):
        if args.matrix:
            from distmm.io.matrix_market import read_matrix_market

            source = read_matrix_market(args.matrix, comm)
            label = os.path.basename(args.matrix)
        else:
            source = erdos_renyi(args.n, args.n, d, args.seed, comm)
            label = f"Erdos-Renyi n={args.n}, {d} per row"
        m, n = source.shape
        nnz = int(comm.allreduce(source.nnz))
        for r in args.r:
            rows = []
            for algorithm in algorithms:
                cls = distmm.ALGORITHMS[algorithm]
                strategies = (cls.strategies if args.strategies == "all"
                              else [s for s in args.strategies.split(",")
                                    if s in cls.strategies])
                for c in costmodel.valid_cs(algorithm, p, r):
                    if args.c and c not in args.c:
                        continue
                    obj = distmm.distribute(source, comm, algorithm=algorithm, c=c, r=r,
                                            dtype=np.dtype(args.dtype), seed=args.seed,
                                            overlap=args.overlap and cls.supports_overlap)
                    A_loc, B_loc = random_blocks(obj, r, args.seed)
                    for strategy in strategies:
                        rec = measure(obj, "fusedmm-a", A_loc, B_loc, r, strategy, args.repeat)
                        phi = nnz / (((m + n) / 2) * r)
                        pred = predict(algorithm, strategy, m, n, nnz, r, p, c, machine)
                        rec.update(matrix=label, d=d, model_words=costmodel.implemented(
                            algorithm, strategy, (m + n) / 2, r, p, c, phi)[1],
                            predicted_s=pred["time_s"], predicted_compute_s=pred["compute_s"],
                            threads=int(os.environ.get("NUMBA_NUM_THREADS", "0")))
                        rows.append(rec)
                        if comm.rank == 0 and args.jsonl:
                            with open(args.jsonl, "a") as fh:
                                fh.write(json.dumps(rec, sort_keys=True) + "\n")
                        if comm.rank == 0:
                            print(f"{label} r={r} {algorithm} {strategy} c={c}: "
                                  f"{rec['seconds']:.4f} s", flush=True)
                    obj.close()
            tuned = tune(source, comm, r, args.tune, machine,
                         algorithms=tuple(algorithms), dtype=np.dtype(args.dtype),
                         seed=args.seed, overlap=args.overlap)
            tuned.obj.close()
            if comm.rank == 0:
                best_plan = plan(m, n, nnz, r, p, machine, algorithms=tuple(algorithms))[0]
                sections.append(summary(label, r, p, rows, best_plan, args.every_c,
                                        tuned.best))
                picks = picks_record(label, d, r, p, rows, best_plan, tuned)
                if args.jsonl:
                    with open(args.jsonl, "a") as fh:
                        fh.write(json.dumps(picks, sort_keys=True) + "\n")
    if comm.rank == 0 and args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(f"p = {p}, FusedMMA, {args.dtype}, NUMBA_NUM_THREADS="
                     f"{os.environ.get('NUMBA_NUM_THREADS', 'default')}, "
                     f"{platform.processor() or platform.machine()}, planner machine: "
                     f"{machine.source}\n\n" + "\n".join(sections))


def _key(rec: dict) -> tuple:
    return rec["algorithm"], rec["strategy"], rec["c"]


def _best_measured(rows: list[dict], key: tuple) -> dict | None:
    """The sweep's record of one (algorithm, strategy, c), if it was measured."""
    return next((x for x in rows if _key(x) == key), None)


def picks_record(label: str, d: int, r: int, p: int, rows: list[dict], best_plan: dict,
                 tuned) -> dict:
    """The measured winner, the model's pick and the tuned pick for one (r, d), with the
    sweep's measured time of each pick relative to the winner (None if not measured)."""
    winner = min(rows, key=lambda x: x["seconds"])
    # The minimum over many noisy timings is biased low (the winner's curse); the ratio of
    # medians over the repetitions is reported beside the ratio of best times.
    best_median = min(float(np.median(x["times"])) for x in rows)

    def pick(row: dict) -> dict:
        rec = _best_measured(rows, _key(row))
        return {"algorithm": row["algorithm"], "strategy": row["strategy"], "c": row["c"],
                "seconds": rec["seconds"] if rec else None,
                "ratio": rec["seconds"] / winner["seconds"] if rec else None,
                "ratio_median": float(np.median(rec["times"])) / best_median if rec else None}

    return {"event": "picks", "matrix": label, "d": d, "r": r, "p": p,
            "winner": {**pick(winner), "predicted_s": winner.get("predicted_s")},
            "model": {**pick(best_plan), "predicted_s": best_plan["time_s"]},
            "tuned": {**pick(tuned.best), "tune_measured_s": tuned.best["measured_s"]},
            "candidates": [{k: row[k] for k in ("algorithm", "strategy", "c", "predicted_s",
                                                "measured_s")} for row in tuned.candidates]}


def picks_table(paths: list[str]) -> str:
    """One markdown table of the "picks" records in ``paths`` (later records of the same
    (p, matrix, d, r) replace earlier ones), the count within 15% of the winner, and, as a
    measure of the machine's noise, the median over the configurations of (slowest / fastest
    repetition) from the same files' measurement records."""
    recs, spreads = {}, {}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                if rec.get("event") == "picks":
                    recs[rec["p"], rec["d"], rec["r"], rec["matrix"]] = rec
                elif len(rec.get("times", ())) > 1:
                    key = (rec["p"], rec["d"], rec["r"], rec["matrix"])
                    spreads.setdefault(key, []).append(max(rec["times"]) / min(rec["times"]))
    out = ["| p | nnz/row | r | measured winner | model pick | model / winner | tuned pick "
           "| tuned / winner | repetition spread |", "|---|---|---|---|---|---|---|---|---|"]

    def name(x):
        return f"{x['algorithm']} / {x['strategy']} / {x['c']}"

    def ratio(x):
        if x["ratio"] is None:
            return "not measured"
        med = x.get("ratio_median")
        return f"{x['ratio']:.2f}x" + (f" ({med:.2f}x)" if med is not None else "")

    within = {"model": 0, "tuned": 0}
    within_median = {"model": 0, "tuned": 0}
    for key in sorted(recs):
        rec = recs[key]
        for who in within:
            within[who] += rec[who]["ratio"] is not None and rec[who]["ratio"] <= 1.15
            within_median[who] += rec[who].get("ratio_median") is not None and \
                rec[who]["ratio_median"] <= 1.15
        spread = spreads.get(key)
        noise = f"{float(np.median(spread)):.2f}" if spread else "-"
        out.append(f"| {rec['p']} | {rec['d']} | {rec['r']} | {name(rec['winner'])} | "
                   f"{name(rec['model'])} | {ratio(rec['model'])} | {name(rec['tuned'])} | "
                   f"{ratio(rec['tuned'])} | {noise} |")
    out.append(f"\nWithin 15% of the measured winner (best times): model {within['model']} of "
               f"{len(recs)}, tuned {within['tuned']} of {len(recs)}; comparing medians of the "
               f"repetitions (in parentheses): model {within_median['model']}, tuned "
               f"{within_median['tuned']}.")
    return "\n".join(out)


def summary(label: str, r: int, p: int, rows: list[dict], best_plan: dict,
            every_c: bool = False, tuned_best: dict | None = None) -> str:
    """One markdown section: every (algorithm, strategy) at its best measured c (or at every
    c with ``every_c``), with the model's predicted time next to the measured one."""
    best: dict[tuple, dict] = {}
    for rec in rows:
        key = (rec["algorithm"], rec["strategy"]) + ((rec["c"],) if every_c else ())
        if key not in best or rec["seconds"] < best[key]["seconds"]:
            best[key] = rec
    winner = min(best.values(), key=lambda x: x["seconds"])
    out = [f"### {label}, r = {r}, p = {p}\n",
           f"| algorithm | strategy | {'c' if every_c else 'best c'} | time (s) | predicted (s) "
           "| GFLOP/s | comm s | compute s | predicted compute s | words/rank counted | "
           "words/rank model |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (alg, strat, *_), rec in sorted(best.items(), key=lambda kv: kv[1]["seconds"]):
        ph = rec["phases"]
        comm_s = sum(ph.get(k, {}).get("seconds", 0.0)
                     for k in ("replication", "propagation", "reduction"))
        words = sum(ph.get(k, {}).get("words_sent", 0.0)
                    for k in ("replication", "propagation", "reduction"))
        out.append(f"| {alg} | {strat} | {rec['c']} | {rec['seconds']:.4f} | "
                   f"{rec['predicted_s']:.4f} | {rec['gflops']:.2f} | {comm_s:.4f} | "
                   f"{ph.get('compute', {}).get('seconds', 0.0):.4f} | "
                   f"{rec['predicted_compute_s']:.4f} | {int(words)} | "
                   f"{int(rec['model_words'])} |")

    def verdict(row: dict | None) -> str:
        if row is None:
            return "not run"
        rec = _best_measured(rows, _key(row))
        where = f"{row['algorithm']} / {row['strategy']} / c={row['c']}"
        if rec is None:
            return f"{where} (not measured)"
        return (f"{where} (measured {rec['seconds']:.4f} s, "
                f"{rec['seconds'] / winner['seconds']:.2f}x the winner)")

    out.append(f"\nMeasured winner: {winner['algorithm']} / {winner['strategy']} / "
               f"c={winner['c']}. Model pick: {verdict(best_plan)}. Tuned pick: "
               f"{verdict(tuned_best)}.\n")
    return "\n".join(out)


if __name__ == "__main__":
    main()
