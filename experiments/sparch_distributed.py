"""Per rank: communication measured here + local computation modelled on one SpArch chip.

    mpiexec -n 4 distmm bench --node-model sparch --ops spmm-a --log-dir logs ...
    python experiments/sparch_distributed.py logs

Reads the per-rank logs that ``--log-dir`` writes (each rank's communication phases and its
node model's kernel stats) and prints, for every logged measurement and rank, the measured
communication seconds (replication + propagation + reduction), the measured seconds of the
local kernel on this CPU (the simulator's own time), the modelled SpArch seconds
(``model_seconds``), and the estimate "communication here + computation on SpArch chips"
= communication + modelled seconds (+ the measured CPU seconds of any operation that fell back
to the reference model). The run's estimate is the slowest rank's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

COMM_PHASES = ("replication", "propagation", "reduction")


def load(log_dir: str) -> dict[int, list[dict]]:
    """rank -> its logged records, in order."""
    out = {}
    for path in sorted(glob.glob(os.path.join(log_dir, "rank-*.jsonl"))):
        with open(path) as fh:
            recs = [json.loads(line) for line in fh if line.strip()]
        if recs:
            out[recs[0]["rank"]] = recs
    if not out:
        raise SystemExit(f"no rank-*.jsonl files in {log_dir}")
    return out


def table(logs: dict[int, list[dict]]) -> str:
    """A markdown table: one row per (measurement, rank), then the run's estimate."""
    lines = ["| op | rank | comm measured (s) | kernel on CPU (s) | SpArch modelled (s) | "
             "comm + SpArch (s) | SpArch DRAM MB | prefetch hit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    n = min(len(v) for v in logs.values())
    for i in range(n):
        worst = 0.0
        for rank in sorted(logs):
            rec = logs[rank][i]
            comm = sum(rec["comm"].get(ph, {}).get("seconds", 0.0) for ph in COMM_PHASES)
            kern = rec["kernel"]
            cpu = sum(k["seconds"] for k in kern.values())
            model = sum(k.get("model_seconds", 0.0) for k in kern.values())
            dram = sum(k.get("dram_read_bytes", 0.0) + k.get("dram_write_bytes", 0.0)
                       for k in kern.values())
            acc = sum(k.get("prefetch_accesses", 0.0) for k in kern.values())
            hit = sum(k.get("prefetch_hits", 0.0) for k in kern.values())
            fallback = sum(k.get("fallback_calls", 0) for k in kern.values())
            # operations SpArch does not run (fallback to the reference model) count with
            # their measured CPU time, so the estimate never leaves work out
            cpu_fallback = sum(k["seconds"] for k in kern.values() if k.get("fallback_calls"))
            note = f" ({fallback} fallback calls: CPU time used)" if fallback else ""
            est = comm + model + cpu_fallback
            worst = max(worst, est)
            lines.append(f"| {rec.get('op')}{note} | {rank} | {comm:.4g} | {cpu:.4g} | "
                         f"{model:.4g} | {est:.4g} | {dram / 1e6:.2f} | "
                         f"{hit / acc if acc else 0:.0%} |")
        lines.append(f"| {logs[0][i].get('op')} | **max** | | | | **{worst:.4g}** | | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log_dir", help="the --log-dir of a distmm run/bench with --node-model sparch")
    print(table(load(ap.parse_args().log_dir)))


if __name__ == "__main__":
    main()
