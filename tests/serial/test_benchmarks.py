"""The reusable benchmarks of benchmarks/: their records, tables and A/B arithmetic on tiny
cases (seconds), never their speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

HAS_MPIEXEC = os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec"))


def test_run_record_takes_the_best_timed_repetition():
    import bench_end_to_end as e2e

    def line(rep, seconds, compute, shift):
        return json.dumps({"event": "run", "repeat": rep, "seconds": seconds,
                           "permute": "blocks", "phases": {
                               "compute": {"seconds": compute, "words_sent": 0.0},
                               "propagation": {"seconds": shift, "words_sent": 8.0}}})

    lines = ["MPI startup chatter", line(0, 0.001, 0.0005, 0.0001),  # the warm-up: skipped
             line(1, 0.010, 0.006, 0.002), line(2, 0.008, 0.005, 0.002),
             json.dumps({"event": "other"})]
    rec = e2e._run_record(lines, "float32", 16, "spmm_a")
    assert rec["seconds"] == 0.008 and rec["compute"] == 0.005 and rec["comm"] == 0.002
    assert abs(rec["rest"] - 0.001) < 1e-12 and rec["permute"] == "blocks"
    with pytest.raises(SystemExit, match="no timed repetition"):
        e2e._run_record(lines[:2], "float32", 16, "spmm_a")


def test_cases_below_the_torch_targets_show_each_rounds_own_ratio(tmp_path, capsys):
    """--from-jsonl over two record files (each with its own round 0): a case whose best /
    best ratio is below its target is listed with every round's own ratio, the rounds of the
    two files kept apart and in order; cases at or above their targets are not listed."""
    import bench_end_to_end as e2e

    def rec(variant, op, rnd, seconds):
        return json.dumps({"variant": variant, "matrix": "m", "dtype": "float32", "r": 16,
                           "op": op, "round": rnd, "seconds": seconds, "machine": {},
                           "compute": seconds, "comm": 0.0, "rest": 0.0})

    first = tmp_path / "a.jsonl"  # FusedMMA: torch 2.0x in round 0, 3.0x in round 1
    first.write_text("\n".join([rec("distmm-p1", "fusedmm_a", 0, 1.0),
                                rec("torch", "fusedmm_a", 0, 2.0),
                                rec("distmm-p1", "fusedmm_a", 1, 1.0),
                                rec("torch", "fusedmm_a", 1, 3.0),
                                rec("distmm-p1", "spmm_a", 0, 1.0),  # 1.0x: meets 1x
                                rec("torch", "spmm_a", 0, 1.0)]) + "\n")
    second = tmp_path / "b.jsonl"  # round 0 of another file: torch's lucky round, 0.8x
    second.write_text("\n".join([rec("distmm-p1", "fusedmm_a", 0, 1.5),
                                 rec("torch", "fusedmm_a", 0, 1.3),
                                 rec("torch", "fusedmm_a", 0, 1.2)]) + "\n")
    assert e2e.main(["--from-jsonl", f"{first},{second}", "--matrices", "m", "--rs", "16",
                     "--dtypes", "float32", "--ops", "fusedmm_a,spmm_a"]) == 0
    part = capsys.readouterr().out.split("**Cases below the PyTorch targets**")[1]
    listed = [x for x in part.split("\n\n")[1].splitlines()]
    # best over best: torch 1.2 / distmm 1.0; the rounds: 2.0, 3.0, then 1.2 / 1.5
    assert listed == ["- m, float32, fusedmm_a, r = 16: 1.20x (target 1.5x); each round's "
                      "own: 2.00x, 3.00x, 0.80x"]
    best: dict = {}
    rounds: dict = {}
    for line in first.read_text().splitlines()[4:]:
        r = json.loads(line)
        e2e.keep_best(best, r)
        e2e.keep_round(rounds, r, (0, r["round"]))
    args = argparse.Namespace(matrices=["m"], dtypes=["float32"], ops=["spmm_a"], rs=[16])
    assert e2e.short_cells(best, rounds, args) == "None: every case meets its target.\n"


@pytest.mark.skipif(not HAS_MPIEXEC, reason="needs the mpich wheel's mpiexec")
def test_distmm_run_variant_beside_the_api(tmp_path, capsys):
    """The benchmark's distmm run variant runs the command on files, one job per case, and
    its table sets each case beside the API's call."""
    import bench_end_to_end as e2e

    path = tmp_path / "e2e.jsonl"
    assert e2e.main(["--matrices", "er-64", "--variants", "distmm-p1,run-p1", "--rs", "8",
                     "--dtypes", "float64", "--ops", "spmm_a,sddmm", "--calls", "2",
                     "--rounds", "1", "--jsonl", str(path)]) == 0
    records = [json.loads(x) for x in path.read_text().splitlines()]
    runs = {rec["op"]: rec for rec in records if rec["variant"] == "run-p1"}
    assert sorted(runs) == ["sddmm", "spmm_a"]
    for rec in runs.values():
        assert 0 < rec["compute"] <= rec["seconds"] and rec["comm"] == 0
        assert rec["permute"] == "none"  # the default on one rank
    out = capsys.readouterr().out
    table = out.split("**distmm run against the API**")[1]
    assert "| er-64 | float64 | spmm_a | 8 |" in table and "x |" in table
    # every API case also as a bound call, and a memory figure beside the model's
    api = {rec["op"]: rec for rec in records if rec["variant"] == "distmm-p1"}
    bound = {rec["op"]: rec for rec in records if rec["variant"] == "distmm-p1-bound"}
    assert sorted(api) == sorted(bound) == ["sddmm", "spmm_a"]
    for rec in bound.values():
        assert rec["call"] == "bound" and 0 < rec["compute"] <= rec["seconds"]
    for rec in api.values():
        assert rec["call"] == "method" and isinstance(rec["peak_rss"], int)
        assert rec["model_bytes"] > 0
    bound_table = out.split("**Bound calls against method calls**")[1]
    assert "| er-64 | float64 | sddmm | 8 |" in bound_table


@pytest.mark.skipif(not HAS_MPIEXEC, reason="needs the mpich wheel's mpiexec")
def test_gather_floor_bench_times_kernel_and_bare_reads_in_turns():
    """bench_gather_floor at p = 2: the kernel's and the bare gather loop's rows (the loop's
    sums checked against B's inside), their GB/s from the best times, and the ratio."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", MPIR_CVAR_ENABLE_HEAVY_YIELD="1")
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", "2", sys.executable,
         os.path.join(ROOT, "benchmarks", "bench_gather_floor.py"), "--n", "512",
         "--nnz-per-row", "8", "--r", "16", "--rounds", "2"],
        capture_output=True, text=True, timeout=300, env=env, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("p = 2, 1 thread(s) per rank; Erdős–Rényi n = 512, 8 per row")
    mb = float(lines[0].split(" MB of gathered rows")[0].rsplit("; ", 1)[1])
    for name in ("kernel", "gather"):
        cells = [c.strip() for c in next(x for x in lines if x.startswith(f"| {name} |"))
                 .strip("|").split("|")]
        best, median, rate = (float(x) for x in cells[1:])
        assert 0 < best <= median
        # within what the printed digits allow: best to 0.001 ms, MB to 0.001, GB/s to 0.01
        # (the errors add up: the rate is printed rounded from the unrounded figures)
        slack = 0.0005 / best + 0.0005 / mb
        assert abs(rate - mb / best) <= 0.005 + slack * mb / best, (rate, mb, best)
    assert lines[-1].startswith("kernel / gather, median over rounds: ")


def test_kernel_ab_bench_compares_two_versions_in_one_process():
    """bench_kernel_ab with this checkout's reference.py as the base: a row per case with both
    versions' times, the ratio's median within its quartiles and bitwise results; an unknown
    operation is refused."""
    # The base copy keeps one path, rewritten only when reference.py changes: numba caches its
    # kernels by the file's path and stamp, so later runs load them instead of compiling them
    # again, and the cache does not gain a directory per run (a temporary path would do both)
    base = Path(ROOT, ".pytest_cache", "kernel_ab_base", "reference_base.py")
    source = Path(ROOT, "distmm", "kernels", "reference.py").read_text()
    if not base.is_file() or base.read_text() != source:
        base.parent.mkdir(parents=True, exist_ok=True)
        base.write_text(source)
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    script = os.path.join(ROOT, "benchmarks", "bench_kernel_ab.py")
    proc = subprocess.run(
        [sys.executable, script, "--base", str(base), "--matrices", "er-256", "--rs", "8",
         "--dtypes", "float64", "--ops", "spmm_a,fusedmm_a", "--calls", "3", "--rounds", "3"],
        capture_output=True, text=True, timeout=300, env=env, check=True)
    rows = [x for x in proc.stdout.splitlines() if x.startswith("| er-256 |")]
    assert [x.split("|")[4].strip() for x in rows] == ["spmm_a", "fusedmm_a"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[4]) > 0 and float(cells[5]) > 0
        median, quartiles = cells[6].split(" (")
        lo, hi = (float(x) for x in quartiles.rstrip(")").split("-"))
        assert lo <= float(median) <= hi
        assert cells[7] == "bitwise"
    bad = subprocess.run([sys.executable, script, "--base", str(base), "--ops", "spmm_b"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2 and "unknown operations ['spmm_b']" in bad.stderr


def test_end_to_end_ab_table_pairs_each_round():
    """bench_end_to_end_ab's table: the best over rounds of each version, and the median of
    each round's after / before, which one lucky round of "before" does not decide."""
    import bench_end_to_end_ab

    recs = [{"matrix": "m", "dtype": "float32", "op": "spmm_a", "r": 16, "variant": v,
             "round": k, "seconds": s, "rest": 0.1 * s}
            for k, (before, after) in enumerate(((1.0, 0.9), (0.5, 0.9), (1.0, 0.8)))
            for v, s in (("before-p1", before), ("after-p1", after))]
    row = next(x for x in bench_end_to_end_ab.table(recs).splitlines()
               if x.startswith("| m | float32 | spmm_a | 16 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:9] == ["0.5", "0.8", "1.60", "0.90", "10%, 10%"]
    assert cells[9:12] == ["-", "-", "-"]


def test_bench_plans_table_has_a_row_per_case_and_ratios_to_plain():
    """bench_plans.table: one row per case, times in microseconds, each other variant's
    ratio to this version's plain call, '-' where a variant has no such call."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_plans", os.path.join(ROOT, "benchmarks", "bench_plans.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    best = {("plain", c): 100e-6 for c in bench.CASES}
    best.update({("plan", c): 50e-6 for c in bench.CASES})
    best["old bind", "sddmm"] = 80e-6
    lines = bench.table(best, ["plain", "plan", "old bind"]).splitlines()
    assert len(lines) == 2 + len(bench.CASES)
    assert lines[2] == "| sddmm | 100.0 | 50.0 | 80.0 | 0.50 | 0.80 |"
    assert lines[3].endswith("| 100.0 | 50.0 | - | 0.50 | - |")
