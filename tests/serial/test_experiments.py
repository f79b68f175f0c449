"""The section VI experiment scripts: bad input, one real measured round trip with resume, the
projection against the planner, the count check, the plots and the launcher's command line.

The round trip launches the venv's mpiexec at p = 1 and 2 on a tiny matrix (seconds); no sweep
runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import app_breakdown  # noqa: E402
import count_check  # noqa: E402
import paper_ratios  # noqa: E402
import plot  # noqa: E402
import rphi_map  # noqa: E402
import runner  # noqa: E402
import strong_scaling  # noqa: E402
import weak_scaling  # noqa: E402

from distmm.algorithms import ALGORITHMS  # noqa: E402
from distmm.errors import InputError  # noqa: E402
from distmm.perf import costmodel  # noqa: E402
from distmm.perf.planner import Machine, predict  # noqa: E402
from distmm.runtime.extras import available  # noqa: E402

MACHINE = os.path.join(ROOT, "machines", "this-machine.json")
HAS_MPIEXEC = os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec"))


def record(experiment: str, **kw) -> dict:
    cfg = runner.config(experiment, {"kind": "er", "m": 8, "n": 8, "d": 1}, 4, 1,
                        "15d-dense-shift", "none", 1)
    return {"key": runner.key(cfg), **cfg, "predicted": True, **kw}


# --------------------------------------------------------------------------------- bad input


def test_unknown_preset(capsys):
    assert weak_scaling.main(["--preset", "huge"]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'huge'" in err and "laptop, paper" in err


def test_results_of_another_experiment_refused(tmp_path, capsys):
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(record("rphi-map")) + "\n")
    assert count_check.main(["--preset", "laptop", "--results", str(path)]) == 2
    err = capsys.readouterr().err
    assert "holds results of experiment 'rphi-map', not 'count-check'" in err
    assert path.read_text().count("\n") == 1  # nothing appended


def test_missing_matrix_file(tmp_path, capsys):
    assert strong_scaling.main(["--data-dir", str(tmp_path), "--list"]) == 2
    err = capsys.readouterr().err
    assert f"matrix file {tmp_path}/metis-mdual.mtx.gz does not exist" in err


def test_node_count_the_experiment_cannot_use(capsys):
    # Setup 2 quadruples p: 1, 4, 16, ...; p = 2 has no square-root side.
    assert weak_scaling.main(["--setup", "2", "--p", "2", "--list"]) == 2
    assert "cannot use p = 2" in capsys.readouterr().err
    # The r/phi map runs at one p only.
    assert rphi_map.main(["--p", "8", "--list"]) == 2


@pytest.mark.skipif(available("petsc4py"), reason="petsc4py is installed here")
def test_missing_petsc4py(tmp_path, capsys):
    # the laptop preset's matrices, present but empty: --list reads nothing, and the test
    # must not depend on ../shared/data being beside the checkout
    for name in strong_scaling.LAPTOP:
        (tmp_path / name).touch()
    assert strong_scaling.main(["--petsc", "--list", "--data-dir", str(tmp_path)]) == 2
    assert "--petsc needs the optional package petsc4py: pip install distmm[petsc]" in \
        capsys.readouterr().err


def test_max_p_needs_project(capsys):
    assert weak_scaling.main(["--max-p", "64", "--list"]) == 2
    assert "--max-p only applies with --project" in capsys.readouterr().err


def test_missing_matplotlib(tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(record("optimal-c")) + "\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert plot.main([str(path), "--out", str(tmp_path)]) == 2
    assert "needs the optional package matplotlib: pip install distmm[plot]" in \
        capsys.readouterr().err


def test_not_a_results_file(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text("{not json\n")
    assert paper_ratios.main([str(path)]) == 2
    assert f"{path}:1: not a JSON Lines results file" in capsys.readouterr().err


# ------------------------------------------------------------------------ configurations


def test_presets_follow_the_paper_sizes():
    ns = type("A", (), {"max_p": None, "project": "x", "data_dir": "/nowhere"})
    cfgs = weak_scaling.setup_configs(1, 1 << 16, 32, 256, [1, 256], "weak-scaling-1")
    big = [cfg for cfg in cfgs if cfg["p"] == 256]
    assert {cfg["matrix"]["m"] for cfg in big} == {1 << 24} and big[0]["matrix"]["d"] == 32
    cfgs2 = weak_scaling.setup_configs(2, 1 << 16, 32, 256, [256], "weak-scaling-2")
    assert cfgs2[0]["matrix"]["m"] == 1 << 20 and cfgs2[0]["matrix"]["d"] == 512
    strong = strong_scaling.paper(ns)
    assert {cfg["r"] for cfg in strong} == {128} and {cfg["calls"] for cfg in strong} == {5}
    assert min(cfg["p"] for cfg in strong if cfg["matrix"]["name"] == "twitter7") == 16
    assert max(cfg["c"] for cfg in strong) == 16
    # Every configuration is one the grid allows, and keys are unique.
    for cfg in cfgs + strong:
        assert cfg["c"] in costmodel.valid_cs(cfg["algorithm"], cfg["p"], cfg["r"])
    assert len({runner.key(cfg) for cfg in strong}) == len(strong)


# ------------------------------------------------------------------------ projection


def test_projection_equals_the_planner_and_resumes(tmp_path):
    path = str(tmp_path / "proj.jsonl")
    cfgs = runner.sweep("weak-scaling-1", [{"kind": "er", "m": 3000, "n": 2000, "d": 5}],
                        [32], [4, 16], calls=3)
    assert runner.project(cfgs, path, MACHINE) == len(cfgs)
    recs = runner.read_records(path)
    machine = Machine.load(MACHINE)
    for cfg, rec in zip(cfgs, recs, strict=True):
        assert rec["predicted"] is True and rec["nnz"] == 3000 * 5
        want = predict(cfg["algorithm"], cfg["strategy"], 3000, 2000, 15000, 32, cfg["p"],
                       cfg["c"], machine)["time_s"] * 3
        assert rec["seconds"] == pytest.approx(want, rel=1e-12)
    # Resume: nothing new is written; one more configuration is.
    assert runner.project(cfgs, path, MACHINE) == 0
    extra = runner.sweep("weak-scaling-1", [{"kind": "er", "m": 3000, "n": 2000, "d": 5}],
                         [32], [2], configs=[("15d-dense-shift", "fusion")])
    assert runner.project(cfgs + extra, path, MACHINE) == len(extra)


def test_matrix_market_size_and_projected_mtx(tmp_path):
    """The header's sizes, against scipy's reading of the same files (plain and gzip)."""
    import gzip

    import scipy.io
    import scipy.sparse

    from distmm.errors import InputError
    from distmm.io.matrix_market import matrix_market_size

    A = scipy.sparse.random(7, 5, density=0.4, random_state=1, format="coo")
    general = tmp_path / "g.mtx"
    scipy.io.mmwrite(str(general), A)
    sym = scipy.sparse.tril(scipy.sparse.random(6, 6, density=0.5, random_state=2)) + \
        scipy.sparse.eye(6)
    sym = (sym + sym.T).tocoo()
    scipy.io.mmwrite(str(tmp_path / "s.mtx"), sym, symmetry="symmetric")
    with open(tmp_path / "s.mtx", "rb") as src, gzip.open(tmp_path / "s.mtx.gz", "wb") as dst:
        dst.write(src.read())
    assert matrix_market_size(general) == (7, 5, A.nnz, "general")
    stored = scipy.sparse.tril(sym).nnz
    assert matrix_market_size(tmp_path / "s.mtx.gz") == (6, 6, stored, "symmetric")
    # A projection counts both triangles (an upper bound: the diagonal is counted twice).
    assert runner.matrix_sizes({"kind": "mtx", "path": str(tmp_path / "s.mtx.gz")}) == \
        (6, 6, 2 * stored)
    (tmp_path / "bad.mtx").write_text("hello\n")
    with pytest.raises(InputError, match="not a Matrix Market file"):
        matrix_market_size(tmp_path / "bad.mtx")
    with pytest.raises(InputError, match="no such file"):
        matrix_market_size(tmp_path / "none.mtx")


def test_paper_ratios_table(tmp_path):
    def rec(alg, strat, c, seconds):
        cfg = runner.config("weak-scaling-2", {"kind": "er", "m": 8, "n": 8, "d": 1}, 4, 256,
                            alg, strat, c)
        return {"key": runner.key(cfg), **cfg, "label": "ER", "predicted": True,
                "seconds": seconds}

    path = tmp_path / "w2.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (
        rec("15d-dense-shift", "fusion", 4, 2.0), rec("15d-dense-shift", "fusion", 8, 1.0),
        rec("15d-sparse-shift", "reuse", 8, 3.0), rec("15d-sparse-shift", "reuse", 16, 5.0))))
    table = paper_ratios.table([str(path)])
    assert "| 1.94x | 3.00x (predicted) | 8, 8 |" in table


def test_count_check_flags_a_difference(tmp_path, capsys):
    good = record("count-check", words_mean={"replication": 1.0, "propagation": 2.0,
                                             "reduction": 0.0},
                  model={"words": {"replication": 1.0, "propagation": 2.0, "reduction": 0.0}})
    bad = dict(good, c=2, words_mean={**good["words_mean"], "propagation": 3.0})
    path = tmp_path / "cc.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert count_check.check([str(path)]) == 0
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert count_check.check([str(path)]) == 1
    assert "propagation: counted 3, model 2" in capsys.readouterr().err


# ------------------------------------------------------------------------ measured records


@pytest.mark.skipif(not HAS_MPIEXEC, reason="needs the mpiexec installed next to this Python")
def test_measured_round_trip_and_resume(tmp_path, monkeypatch):
    """p = 1 and 2 through the venv's mpiexec: one record per configuration, the counted words
    equal to the model's exact words, then a resumed sweep measures only what is new."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    monkeypatch.setenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    path = str(tmp_path / "rt.jsonl")
    er = {"kind": "er", "m": 36, "n": 24, "d": 3}
    cfgs = [runner.config("t", er, 4, 1, "15d-dense-shift", "fusion", 1, calls=2, repeat=2),
            runner.config("t", er, 4, 2, "15d-sparse-shift", "reuse", 2, repeat=1)]
    assert runner.measure(cfgs, path, machine_file=MACHINE, bind="none") == 2
    recs = runner.read_records(path)
    assert [r["key"] for r in recs] == [runner.key(c) for c in cfgs]
    for rec in recs:
        assert rec["predicted"] is False and rec["experiment"] == "t"
        assert (rec["m"], rec["n"]) == (36, 24) and 0 < rec["nnz"] <= 36 * 3
        assert len(rec["times"]) == rec["repeat"] and rec["seconds"] == min(rec["times"])
        assert set(rec["phase_seconds"]) >= {"compute"}
        assert rec["machine"]["cores"] == os.cpu_count() and "MPICH" in rec["machine"]["mpi"]
        assert rec["machine"]["numba_threads"] == 1 and rec["machine"]["date"]
        for ph in costmodel.PHASES:
            assert rec["words_mean"][ph] == pytest.approx(rec["model"]["words"][ph])
    # The p = 2 sparse shift at c = 2 replicates B (n r / p words) and shifts nothing.
    assert recs[1]["words_mean"]["replication"] == pytest.approx(24 * 4 / 2)
    assert recs[0]["model"]["seconds"] > 0 and recs[0]["model"]["machine"] == MACHINE
    more = cfgs + [runner.config("t", er, 4, 2, "15d-dense-shift", "none", 1, repeat=1)]
    assert runner.measure(more, path, bind="none") == 1
    assert len(runner.read_records(path)) == 3
    assert runner.measure(more, path, bind="none") == 0


@pytest.mark.skipif(not (HAS_MPIEXEC and available("petsc4py")),
                    reason="needs petsc4py (pip install distmm[petsc]) and the venv's mpiexec")
def test_petsc_baseline_record(tmp_path, monkeypatch):
    """The PETSc baseline at p = 2 on a Matrix Market file: one record whose nonzero count is
    scipy's (duplicates summed), with no counted or modelled words."""
    import scipy.io
    import scipy.sparse

    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    monkeypatch.setenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    A = scipy.sparse.random(37, 29, density=0.2, random_state=3, format="coo")
    mtx = tmp_path / "a.mtx"
    scipy.io.mmwrite(str(mtx), A)
    cfg = runner.config("t", {"kind": "mtx", "path": str(mtx)}, 5, 2, "petsc", "matmatmult-x2",
                        1, calls=2, repeat=2)
    path = str(tmp_path / "petsc.jsonl")
    assert runner.measure([cfg], path, bind="none") == 1
    (rec,) = runner.read_records(path)
    assert (rec["m"], rec["n"], rec["nnz"]) == (37, 29, A.tocsr().nnz)
    assert len(rec["times"]) == 2 and rec["seconds"] > 0 and rec["model"] is None
    assert runner.project([cfg], str(tmp_path / "p.jsonl"), MACHINE) == 0  # no model of PETSc


def test_jobs_follow_rounds_and_libraries_in_turns(tmp_path, monkeypatch):
    """The baseline preset's configurations run as one job per (round, p, library), in the
    preset's order: distmm then PETSc in even rounds, PETSc then distmm in odd ones."""
    mtx = tmp_path / "a.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n")
    monkeypatch.setattr(strong_scaling, "BASELINE", ("a.mtx",))
    monkeypatch.setattr(strong_scaling, "require_extra", lambda *a, **k: None)
    args = argparse.Namespace(data_dir=str(tmp_path), max_p=None, rounds=2)
    cfgs = strong_scaling.baseline(args)
    # rounds x p x libraries x matrices (a.mtx and the Erdos-Renyi one) x r, all distinct
    assert len({runner.key(c) for c in cfgs}) == len(cfgs) == 2 * 2 * 2 * 2 * 3
    jobs = []

    def fake_run(cmd, env):
        with open(cmd[cmd.index("--worker") + 1]) as fh:
            batch = json.load(fh)
        job = {(c["round"], c["p"], c["algorithm"]) for c in batch}
        assert len(job) == 1 and len(batch) == 2 * 3
        jobs.append(job.pop())
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    assert runner.measure(cfgs, str(tmp_path / "r.jsonl"), bind="none") == len(cfgs)
    ours, petsc = "15d-dense-shift", "petsc"
    assert jobs == [(0, 1, ours), (0, 1, petsc), (0, 2, ours), (0, 2, petsc),
                    (1, 1, petsc), (1, 1, ours), (1, 2, petsc), (1, 2, ours)]


def test_baseline_needs_a_round(tmp_path, monkeypatch):
    monkeypatch.setattr(strong_scaling, "require_extra", lambda *a, **k: None)
    args = argparse.Namespace(data_dir=str(tmp_path), max_p=None, rounds=0)
    with pytest.raises(InputError, match="--rounds must be at least 1, got 0"):
        strong_scaling.baseline(args)


def test_baseline_table_compares_best_times_and_rounds():
    def rec(alg, rnd, seconds, r=16):
        return {"algorithm": alg, "round": rnd, "seconds": seconds, "label": "m", "p": 1,
                "r": r}

    records = [rec("15d-dense-shift", 0, 1.0), rec("petsc", 0, 5.0),
               rec("petsc", 1, 4.0), rec("15d-dense-shift", 1, 2.0),
               rec("15d-dense-shift", 0, 1.0, r=32), rec("petsc", 0, 2.0, r=32),
               rec("petsc", 0, None, r=64)]
    lines = strong_scaling.baseline_table(records).splitlines()
    assert lines[2] == "| m | 1 | 16 | 4.00x | 2.00-5.00x (2) |"
    assert lines[3] == "| m | 1 | 32 | 2.00x ** | 2.00-2.00x (1) |"
    assert len(lines) == 4  # no row without both libraries


def test_table_mode_prints_the_records_table_and_measures_nothing(tmp_path, monkeypatch,
                                                                   capsys):
    records = [{"algorithm": alg, "round": 0, "seconds": t, "label": "m", "p": 2, "r": 32}
               for alg, t in (("15d-dense-shift", 0.5), ("petsc", 2.0))]
    path = tmp_path / "baseline.jsonl"
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records))

    def no_jobs(*args, **kwargs):
        raise AssertionError("--table must not launch anything")

    monkeypatch.setattr(runner.subprocess, "run", no_jobs)
    assert strong_scaling.main(["--table", str(path)]) == 0
    assert capsys.readouterr().out == strong_scaling.baseline_table(records) + "\n"
    assert "| m | 2 | 32 | 4.00x |" in strong_scaling.baseline_table(records)
    # a mistyped file is an error, not an empty table
    assert strong_scaling.main(["--table", str(tmp_path / "missing.jsonl")]) == 2
    assert "--table: no such file" in capsys.readouterr().err


# ------------------------------------------------------------------------ plots, launcher


@pytest.mark.skipif(not available("matplotlib"), reason="needs matplotlib: pip install "
                                                         "distmm[plot]")
def test_plots_from_projected_records(tmp_path):
    paths = []
    for name, cfgs in (
            ("weak-scaling-1", weak_scaling.setup_configs(1, 256, 4, 16, [1, 2, 4],
                                                          "weak-scaling-1")),
            ("rphi-map", rphi_map.grid(512, [2, 8], [16, 64], 4)),
            ("strong-scaling", runner.sweep(
                "strong-scaling", [{"kind": "sizes", "name": "x", "m": 900, "n": 900,
                                    "nnz": 9000}], [16], [1, 4], calls=5))):
        path = str(tmp_path / f"{name}.jsonl")
        runner.project(cfgs, path, MACHINE)
        paths.append(path)
    out = plot.plot(paths, str(tmp_path / "fig"))
    names = sorted(os.path.basename(p) for p in out)
    assert names == ["rphi-map-projected.png", "strong-scaling-projected.png",
                     "weak-scaling-1-breakdown-projected.png", "weak-scaling-1-projected.png"]
    for p in out:
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_launcher_dry_run():
    launch = os.path.join(ROOT, "launch", "distmm-launch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NUMBA_NUM"))}
    out = subprocess.run([launch, "-n", "4", "--ranks-per-node", "2", "--threads", "3",
                          "--launcher", "mpiexec", "--mpi-opt", "-l", "--dry-run", "--", "info"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert "NUMBA_NUM_THREADS=3 OMP_NUM_THREADS=3" in out
    assert "mpiexec -n 4 -bind-to core:3 -l " in out and out.rstrip().endswith("distmm.cli info")
    script = subprocess.run([launch, "-n", "2", "--launcher", "mpiexec", "--dry-run",
                             "--script", "job.py", "--", "--x"], capture_output=True, text=True,
                            env=env, check=True).stdout
    # under mpi4py's runner, an exception on one rank aborts the job
    assert script.rstrip().endswith("-m mpi4py job.py --x")
    bad = subprocess.run([launch, "-n", "0", "--", "info"], capture_output=True, text=True,
                         env=env)
    assert bad.returncode == 2 and "-n must be a positive integer" in bad.stderr


# ------------------------------------------------------------------------ Figure 9: applications


def test_app_breakdown_bad_input(tmp_path, capsys):
    assert app_breakdown.main(["--preset", "huge", "--list"]) == 2
    assert "unknown preset 'huge': choose one of laptop, paper, data" in capsys.readouterr().err
    assert app_breakdown.main(["--project", MACHINE, "--preset", "huge"]) == 2
    assert "unknown preset 'huge'" in capsys.readouterr().err
    assert app_breakdown.main(["--preset", "data", "--data-dir", str(tmp_path), "--list"]) == 2
    assert f"matrix file {tmp_path}/movielens-100k-ratings.mtx.gz does not exist" in \
        capsys.readouterr().err
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(record("weak-scaling-1")) + "\n")
    assert app_breakdown.main(["--results", str(path), "--p", "1"]) == 2
    assert "holds results of experiment 'weak-scaling-1', not 'app-breakdown'" in \
        capsys.readouterr().err
    assert path.read_text().count("\n") == 1


def test_app_breakdown_presets_follow_the_paper():
    cfgs = app_breakdown.paper(None)
    als = [cfg for cfg in cfgs if cfg["workload"]["app"] == "als"]
    gat = [cfg for cfg in cfgs if cfg["workload"]["app"] == "gat"]
    # Figure 9: amazon-large's rows and nonzeros per row, 256 nodes, r = 128, 20 CG iterations.
    assert {(cfg["matrix"]["m"], cfg["matrix"]["d"], cfg["p"], cfg["r"]) for cfg in cfgs} == \
        {(14249639, 16, 256, 128)}
    assert {cfg["workload"]["cg_iters"] for cfg in als} == {10}
    assert {(cfg["algorithm"], cfg["strategy"]) for cfg in als} == set(costmodel.CONFIGS)
    assert max(cfg["c"] for cfg in cfgs) == 16
    for cfg in als:
        assert cfg["c"] in costmodel.valid_cs(cfg["algorithm"], cfg["p"], cfg["r"])
    # GAT: every family at every c its grid allows (a head narrower than a family's smallest
    # width is padded); unfused forward and training passes, fusion in the forward pass of
    # 15d-dense-shift only.
    for name in ALGORITHMS:
        for gat_pass in ("forward", "train"):
            got = {cfg["c"] for cfg in gat if cfg["algorithm"] == name
                   and cfg["workload"]["pass"] == gat_pass and cfg["strategy"] == "none"}
            assert got == set(costmodel.valid_cs(name, 256)) & set(range(1, 17)), name
    fused = {(cfg["algorithm"], cfg["workload"]["pass"]) for cfg in gat
             if cfg["strategy"] == "fusion"}
    assert fused == {("15d-dense-shift", "forward")}
    assert len({runner.key(cfg) for cfg in cfgs}) == len(cfgs)
    # A configuration without a workload keeps the key it had before workloads existed.
    plain = runner.config("t", {"kind": "er", "m": 4, "n": 4, "d": 1}, 2, 1, "15d-dense-shift",
                          "none", 1)
    assert json.loads(runner.key(plain)).keys() == set(runner.CONFIG_FIELDS)


def test_app_breakdown_projects_the_fusedmm_parts(tmp_path):
    """--project: one model record per configuration but the sparsity-aware family's (its
    words need S's pattern), holding the FusedMM parts only; an ALS epoch's are its kernel
    calls' alpha-beta and local-call seconds (checked against the FusedMM calls' own
    op_seconds), GAT training costs more than its forward pass; a rerun appends nothing."""
    from distmm.perf.planner import Machine

    path = str(tmp_path / "proj.jsonl")
    args = ["--preset", "paper", "--project", MACHINE, "--results", path, "--max-c", "4"]
    assert app_breakdown.main(args) == 0
    recs = runner.read_records(path)
    want = [cfg for cfg in app_breakdown.paper(None)
            if cfg["c"] <= 4 and cfg["algorithm"] != "15d-sparse-aware"]
    assert sorted(r["key"] for r in recs) == sorted(runner.key(cfg) for cfg in want)
    machine = Machine.load(MACHINE)
    for rec in recs:
        assert rec["predicted"] is True and set(rec["figure9"]) == {"fusedmm_comm",
                                                                     "fusedmm_compute"}
        assert sum(rec["figure9"].values()) == pytest.approx(rec["seconds"])
        if rec["workload"]["app"] == "als":
            m, n, nnz = rec["m"], rec["n"], rec["nnz"]
            k = rec["workload"]["cg_iters"]
            total = 0.0
            for op, strat, count in (("fusedmm_a", rec["strategy"], 1 + k),
                                     ("fusedmm_b", rec["strategy"], 1 + k),
                                     ("spmm_a", "none", 1), ("spmm_b", "none", 1),
                                     ("sddmm", "none", 1)):
                total += count * sum(app_breakdown.op_seconds(
                    machine, rec["algorithm"], strat, op, m, n, nnz, rec["r"], rec["p"],
                    rec["c"]))
            assert rec["seconds"] == pytest.approx(total)
    gat = {(r["algorithm"], r["c"], r["workload"]["pass"]): r["seconds"] for r in recs
           if r["workload"]["app"] == "gat" and r["strategy"] == "none"}
    for (alg, c, what), sec in gat.items():
        if what == "train":
            assert sec > gat[(alg, c, "forward")]
    assert app_breakdown.main(args) == 0
    assert len(runner.read_records(path)) == len(recs)


@pytest.mark.skipif(not HAS_MPIEXEC, reason="needs the mpiexec installed next to this Python")
def test_app_breakdown_round_trip_and_resume(tmp_path, monkeypatch):
    """ALS epochs and GAT passes at p = 1 and 2: the split (and Figure 9's four parts) adds up
    to the slowest rank's time, the counted words of the kernels (and ALS's row dot products,
    GAT's row-group all-gathers) equal the model's exact words, GAT runs on the column-split
    families too, and a resumed sweep measures only what is new."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    monkeypatch.setenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    path = str(tmp_path / "apps.jsonl")
    er = {"kind": "er", "m": 37, "n": 37, "d": 3}
    als = app_breakdown.als_configs(er, 4, [1, 2], 2, 1)
    gat = app_breakdown.gat_configs(er, 5, [1, 2], 2, 3, 1)
    pick = [("als", 1, "15d-dense-shift", "fusion", 1), ("als", 2, "25d-sparse-replicate",
                                                          "none", 2),
            ("als", 2, "15d-sparse-shift", "reuse", 1), ("forward", 1, "15d-dense-shift",
                                                         "fusion", 1),
            ("forward", 2, "15d-dense-shift", "none", 2), ("train", 2, "15d-dense-shift",
                                                           "none", 1),
            ("forward", 2, "25d-dense-replicate", "none", 2),
            ("train", 2, "15d-sparse-shift", "none", 1)]

    def chosen(cfg):
        what = cfg["workload"].get("pass", "als")
        return (what, cfg["p"], cfg["algorithm"], cfg["strategy"], cfg["c"]) in pick

    cfgs = [cfg for cfg in als + gat if chosen(cfg)]
    assert len(cfgs) == len(pick)
    assert runner.measure(cfgs, path, machine_file=MACHINE, bind="none") == len(pick)
    recs = runner.read_records(path)
    assert sorted(r["key"] for r in recs) == sorted(runner.key(c) for c in cfgs)
    for rec in recs:
        assert rec["experiment"] == "app-breakdown" and rec["predicted"] is False
        assert rec["machine"]["numba_threads"] == 1 and rec["machine"]["date"]
        assert set(rec["segments"]) == set(app_breakdown.SEGMENTS)
        assert sum(rec["segments"].values()) == pytest.approx(rec["seconds"], rel=1e-9)
        assert set(rec["figure9"]) == set(app_breakdown.FIGURE9)
        assert sum(rec["figure9"].values()) == pytest.approx(rec["seconds"], rel=1e-9)
        assert rec["seconds"] == min(rec["times"]) and len(rec["times"]) == rec["repeat"]
        for ph in ("replication", "propagation", "reduction", "compute"):
            assert rec["segments"][ph] <= rec["phase_seconds"].get(ph, 0.0) + 1e-12
        assert rec["segments"]["compute"] > 0 and rec["segments"]["kernel_other"] > 0
        for ph, words in rec["model"]["words"].items():
            assert rec["words_mean"].get(ph, 0.0) == pytest.approx(words), ph
        if rec["workload"]["app"] == "als":
            assert rec["cg_iterations"] == [2, 2]
            assert rec["model"]["kernel_calls"]["fusedmm_a"] == 3
            assert rec["model"]["fusedmm_seconds"] > 0
            assert rec["segments"]["app_local"] > 0  # CG vector updates
        elif rec["strategy"] == "none":
            assert rec["segments"]["app_comm"] > 0  # sddmm_add and the softmax's all-reduces
            assert rec["figure9"]["reductions"] > 0
            if rec["algorithm"] == "15d-sparse-shift":  # a row group of 2: all-gathers
                assert rec["model"]["words"]["gat_allgather"] > 0
                assert rec["segments"]["layout_comm"] > 0
    sparse = next(r for r in recs if r["algorithm"] == "25d-sparse-replicate")
    assert sparse["words_mean"]["row_dot"] > 0 and sparse["words_mean"]["replication"] > 0
    more = cfgs + [cfg for cfg in als if (cfg["p"], cfg["algorithm"], cfg["strategy"],
                                          cfg["c"]) == (2, "15d-dense-shift", "none", 1)]
    assert runner.measure(more, path, bind="none") == 1
    assert runner.measure(more, path, bind="none") == 0
    assert len(runner.read_records(path)) == len(pick) + 1
    if available("matplotlib"):
        (png,) = plot.plot([path], str(tmp_path / "fig"))
        assert os.path.basename(png) == "app-breakdown.png"
        with open(png, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_model_agreement_sets_each_points_winner_against_the_models_pick(tmp_path):
    """model_agreement: per experiment, the points (one matrix, r, p, dtype; optimal-c also
    per algorithm), how often the model's pick is the measured winner, the pick's measured
    seconds over the winner's, the repetition spread and the p = 1 spread; projected records,
    records not run and records without a model are left out."""
    import model_agreement

    def rec(exp, p, alg, c, seconds, model, times=None, **extra):
        return {"experiment": exp, "label": "ER", "r": 16, "p": p, "dtype": "float32",
                "algorithm": alg, "strategy": "none", "c": c, "seconds": seconds,
                "model": None if model is None else {"seconds": model},
                "times": times or [seconds], "predicted": False, **extra}

    records = [
        rec("weak-scaling-1", 1, "a", 1, 1.0, 5.0, [1.0, 1.2]),
        rec("weak-scaling-1", 1, "b", 1, 3.0, 1.0, [3.0, 3.3]),  # the pick, 3x the winner
        rec("weak-scaling-1", 2, "a", 1, 2.0, 1.0),  # pick = winner
        rec("weak-scaling-1", 2, "b", 1, 2.5, 2.0),
        rec("weak-scaling-1", 2, "c", 1, 0.5, None),  # PETSc-like: no model, left out
        rec("weak-scaling-1", 2, "d", 1, 0.1, 0.1, predicted=True),  # projected: left out
        rec("optimal-c", 4, "a", 1, 1.0, 2.0),
        rec("optimal-c", 4, "a", 2, 2.0, 1.0),  # pick c = 2: 2x
        rec("optimal-c", 4, "b", 1, 1.0, 1.0),  # another algorithm: its own point
    ]
    s = model_agreement.summary(records)
    w = s["weak-scaling-1"]
    assert (w["records"], w["points"], w["agree"]) == (4, 2, 1)
    assert w["pick_over_winner"] == (1.0, 3.0) and w["p1_spread"] == 3.0
    assert abs(w["repetition_spread"] - 1.05) < 1e-12  # median of 1.2, 1.1, 1, 1
    o = s["optimal-c"]
    assert (o["points"], o["agree"], o["pick_over_winner"]) == (2, 1, (1.0, 2.0))
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in records))
    text = model_agreement.table([str(path)])
    assert "| weak-scaling-1 | 4 | 2 | 1 of 2 | 1.00-3.00x | 1.05 | 3.00x |" in text
    assert "| optimal-c | 3 | 2 | 1 of 2 | 1.00-2.00x | 1.00 | - |" in text
