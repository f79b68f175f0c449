"""`distmm simulate sparch` in-process: report JSON written atomically, bad input exits 2."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from distmm.cli import main


@pytest.fixture
def mtx(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(30, 20, density=0.2, random_state=rng, format="coo")
    Y = sp.random(20, 15, density=0.2, random_state=rng, format="coo")
    A = sp.random(25, 25, density=0.15, random_state=rng, format="coo")
    for name, M in (("X", X), ("Y", Y), ("A", A)):
        scipy.io.mmwrite(str(tmp_path / f"{name}.mtx"), M)
    return tmp_path, X, Y, A


def _run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr()


def test_simulate_a_times_a(mtx, capsys):
    d, _, _, A = mtx
    rep = d / "r.json"
    code, out = _run(["simulate", "sparch", "--x", str(d / "A.mtx"), "--report", str(rep)],
                     capsys)
    assert code == 0
    line = json.loads(out.out.strip())
    report = json.loads(rep.read_text())
    assert report["c_nnz"] == (A.tocsr() @ A.tocsr()).nnz
    assert report["counters"]["model_seconds"] == pytest.approx(line["model_seconds"])
    assert report["config"]["scheduler"] == "huffman" and report["config"]["condense"]
    assert [p for p in os.listdir(d) if ".tmp-" in p] == []


def test_simulate_flags_and_config(mtx, capsys):
    d, X, Y, _ = mtx
    cfg = d / "cfg.json"
    cfg.write_text(json.dumps({"prefetch_lines": 4, "merge_tree_layers": 2}))
    rep = d / "r.json"
    code, _ = _run(["simulate", "sparch", "--x", str(d / "X.mtx"), "--y", str(d / "Y.mtx"),
                    "--no-condense", "--scheduler", "sequential", "--prefetch", "lru",
                    "--no-pipeline", "--config", str(cfg), "--report", str(rep)], capsys)
    assert code == 0
    report = json.loads(rep.read_text())
    c = report["config"]
    assert (c["condense"], c["scheduler"], c["prefetch"], c["pipeline"]) == (
        False, "sequential", "lru", False)
    assert c["prefetch_lines"] == 4 and c["merge_tree_layers"] == 2
    assert report["counters"]["partial_matrices"] == np.unique(X.col).size
    assert report["counters"]["multiplications"] == np.diff(Y.tocsr().indptr)[X.col].sum()


@pytest.mark.parametrize("extra,message", [
    (["--y", "X.mtx"], "X's columns must equal Y's rows"),
    (["--x", "missing.mtx"], "missing.mtx"),
    (["--config", "bad.json"], "not a JSON file"),
    (["--config", "list.json"], "JSON object"),
    (["--config", "unknown.json"], "unknown SpArch option"),
    (["--config", "negative.json"], "prefetch_lines must be a non-negative integer"),
    (["--report", "nodir/r.json"], "does not exist"),
])
def test_simulate_bad_input_exits_2(mtx, capsys, extra, message):
    d, _, _, _ = mtx
    (d / "bad.json").write_text("{not json")
    (d / "list.json").write_text("[1, 2]")
    (d / "unknown.json").write_text('{"merge_ways": 8}')
    (d / "negative.json").write_text('{"prefetch_lines": -3}')
    args = {"--x": "X.mtx", "--report": "r.json"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        args[flag] = value
    argv = ["simulate", "sparch"]
    for flag, value in args.items():
        argv += [flag, str(d / value)]
    code, out = _run(argv, capsys)
    assert code == 2
    assert message in out.err
    assert not (d / "r.json").exists()


def test_simulate_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "sparch", "--x", "a.mtx", "--report", "r.json", "--prefetch", "mru"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
