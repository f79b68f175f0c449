"""GNN inference on the simulated Dynaspase: the four models against a float64 numpy reference,
weight pruning, per-kernel reports, and the ``distmm simulate dynaspase`` handler."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from distmm.cli import dynaspase as dynaspase_cli
from distmm.errors import InputError
from distmm.sim.dynaspase import DynaspaseConfig
from distmm.sim.dynaspase_gnn import MODELS, init_weights, prune, reference_forward, run_gnn


def _graph(n=41, f=23, seed=0):
    """A small symmetric graph with isolated vertices and a hub, and sparse 0/1 features."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=0.08, random_state=rng, format="lil")
    A[5, :] = 1.0  # a hub (one dense row)
    A[:, 9] = 0.0
    A[9, :] = 0.0  # an isolated vertex (empty row and column)
    A = sp.csr_matrix(A)
    A = ((A + A.T) > 0).astype(np.float64)
    A.setdiag(0)
    A.eliminate_zeros()
    X = sp.random(n, f, density=0.1, random_state=rng, format="csr")
    X.data[:] = 1.0
    return A, X


KERNELS = {"gcn": 4, "sage": 6, "gin": 6, "sgc": 3}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("strategy,sparsity", [("dynamic", 0.0), ("dynamic", 0.7),
                                               ("s1", 0.5), ("s2", 0.9)])
def test_models_match_numpy_reference(model, strategy, sparsity):
    A, X = _graph()
    W = init_weights(model, X.shape[1], 5, 3, sparsity, seed=2)
    cfg = DynaspaseConfig(strategy=strategy, n_max=8)
    run = run_gnn(A, X, model, W, cfg)
    ref = reference_forward(A, X, model, W)
    assert run.output.shape == (41, 3) and run.output.dtype == np.float32
    np.testing.assert_allclose(run.output, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    assert len(run.kernels) == KERNELS[model]
    assert run.cycles == sum(k["cycles"] for k in run.kernels) > 0
    assert sum(run.layer_seconds().values()) == pytest.approx(run.seconds)
    assert {k["kind"] for k in run.kernels} == {"aggregate", "update"}


def test_float64_models_are_exact():
    A, X = _graph(seed=3)
    for model in MODELS:
        W = init_weights(model, X.shape[1], 4, 2, 0.5, seed=1, dtype=np.float64)
        run = run_gnn(A, X, model, W, DynaspaseConfig(n_max=6))
        np.testing.assert_allclose(run.output, reference_forward(A, X, model, W),
                                   rtol=1e-12, atol=1e-12)


def test_prune_exact_count_and_magnitude():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((13, 7))
    for s in (0.0, 0.5, 0.7, 0.9, 1.0):
        P = prune(W, s)
        assert np.count_nonzero(P == 0) == int(np.floor(s * W.size))
        kept = np.abs(W[P != 0])
        dropped = np.abs(W[P == 0])
        if kept.size and dropped.size:
            assert dropped.max() <= kept.min()
        np.testing.assert_array_equal(P[P != 0], W[P != 0])
    with pytest.raises(ValueError):
        prune(W, 1.5)


def test_pruning_lowers_dynamic_latency_not_s1():
    A, X = _graph(n=64, f=48, seed=4)
    fast = {"ddr_gbps": 1e9, "n_max": 8}  # compute-bound, where pruning shows
    lat = {}
    for s in ("dynamic", "s1"):
        for sp_ in (0.0, 0.9):
            W = init_weights("gcn", 48, 16, 4, sp_, seed=0)
            lat[s, sp_] = run_gnn(A, X, "gcn", W, DynaspaseConfig(strategy=s, **fast)).cycles
    assert lat["dynamic", 0.9] < lat["dynamic", 0.0]
    assert lat["s1", 0.9] == lat["s1", 0.0]  # GEMM ignores the weights' zeros
    assert lat["dynamic", 0.9] < lat["s1", 0.9]


def test_bad_gnn_input():
    A, X = _graph()
    W = init_weights("gcn", X.shape[1], 4, 2)
    with pytest.raises(ValueError, match="unknown GNN model"):
        run_gnn(A, X, "gat", W)
    with pytest.raises(ValueError, match="rows"):
        run_gnn(A, X[:10], "gcn", W)
    with pytest.raises(ValueError, match="missing"):
        run_gnn(A, X, "sage", W)


def _cli_args(argv):
    parser = argparse.ArgumentParser()
    dynaspase_cli.add_parser(parser.add_subparsers(dest="simulator"))
    return parser.parse_args(["dynaspase", *argv])


def test_cli_handler(tmp_path, capsys):
    A, X = _graph()
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    scipy.io.mmwrite(tmp_path / "X.mtx", X)
    (tmp_path / "cfg.json").write_text(json.dumps({"n_max": 8, "n_cc": 3}))
    args = _cli_args(["--graph", str(tmp_path / "A.mtx"), "--features",
                      str(tmp_path / "X.mtx"), "--model", "gin", "--hidden", "6",
                      "--classes", "3", "--prune", "0.5", "--config",
                      str(tmp_path / "cfg.json"), "--report", str(tmp_path / "r.json")])
    assert args.simulate_func is dynaspase_cli.run
    assert dynaspase_cli.run(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x.get("strategy") for x in lines[:3]] == ["dynamic", "s1", "s2"]
    assert lines[3]["event"] == "speedup"
    assert all(x["max_rel_error"] < 1e-5 for x in lines[:3])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["config"]["n_cc"] == 3
    assert report["speedups"]["so_s1"] == pytest.approx(
        report["runs"][1]["seconds"] / report["runs"][0]["seconds"])
    assert len(report["runs"][0]["kernels"]) == 6
    assert all(len(k["core_busy"]) == 3 for k in report["runs"][0]["kernels"])


def test_cli_bad_input(tmp_path):
    A, X = _graph()
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    scipy.io.mmwrite(tmp_path / "X.mtx", X[:30])
    (tmp_path / "bad.json").write_text(json.dumps({"p_sys": -1}))
    base = ["--graph", str(tmp_path / "A.mtx"), "--model", "gcn"]
    cases = [(["--features", str(tmp_path / "nope.mtx")], "no such file"),
             (["--features", str(tmp_path / "X.mtx")], "rows"),
             (["--features", str(tmp_path / "A.mtx"), "--prune", "1.0"], "prune"),
             (["--features", str(tmp_path / "A.mtx"), "--config", str(tmp_path / "bad.json")],
              "p_sys"),
             (["--features", str(tmp_path / "A.mtx"), "--hidden", "0"], "hidden")]
    for extra, msg in cases:
        with pytest.raises(InputError, match=msg):
            dynaspase_cli.run(_cli_args(base + extra))


def test_wired_into_distmm_simulate(tmp_path, capsys):
    from distmm.cli import main

    A, X = _graph()
    scipy.io.mmwrite(tmp_path / "A.mtx", A)
    scipy.io.mmwrite(tmp_path / "X.mtx", X)
    argv = ["simulate", "dynaspase", "--graph", str(tmp_path / "A.mtx"), "--features",
            str(tmp_path / "X.mtx"), "--model", "sgc", "--strategy", "dynamic",
            "--hidden", "4", "--classes", "3"]
    assert main(argv) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[0])
    assert line["strategy"] == "dynamic" and line["max_rel_error"] < 1e-5
    assert main(argv[:-4] + ["--hidden", "0"]) == 2
    assert "--hidden must be at least 1" in capsys.readouterr().err
