"""``distmm spgemm`` in-process: Matrix Market in, C in HDF5 out, a JSON line with the model's
counters; bad input refused with status 2, a clear message and no output file."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from distmm.cli import main


@pytest.fixture
def mats(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(23, 17, density=0.2, random_state=rng, format="coo")
    Y = sp.random(17, 11, density=0.3, random_state=rng, format="coo")
    scipy.io.mmwrite(tmp_path / "X.mtx", X)
    scipy.io.mmwrite(tmp_path / "Y.mtx", Y)
    scipy.io.mmwrite(tmp_path / "Z.mtx", sp.random(5, 4, density=0.5, random_state=rng))
    (tmp_path / "bad.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                      "3 3 2\n1 1 1.0\n4 1 2\n")
    (tmp_path / "cfg.json").write_text(json.dumps({"num_ratio": 3.0, "sym_ratio": 1.0,
                                                           "dense_max_bytes": 0}))
    (tmp_path / "badcfg.json").write_text(json.dumps({"num_ratio": 0.1}))
    return tmp_path, X.tocsr(), Y.tocsr()


@pytest.mark.parametrize("model,config", [("hash-spgemm", None), ("hash-spgemm", "cfg.json"),
                                          ("reference", None)])
def test_spgemm_command(mats, capsys, model, config):
    d, X, Y = mats
    argv = ["spgemm", "--x", str(d / "X.mtx"), "--y", str(d / "Y.mtx"),
            "--out", str(d / "C.h5"), "--node-model", model, "--repeat", "2"]
    if config:
        argv += ["--node-config", str(d / config)]
    assert main(argv) == 0
    lines = [json.loads(s) for s in capsys.readouterr().out.splitlines()]
    assert [rec["repeat"] for rec in lines] == [0, 1]
    ref = (X @ Y).tocsr()
    ref.sort_indices()
    rec = lines[-1]
    assert rec["event"] == "spgemm" and rec["nnz_c"] == ref.nnz and rec["shape"] == [23, 11]
    assert rec["flops"] == 2 * np.diff(Y.indptr)[X.indices].sum() and rec["seconds"] > 0
    if model == "hash-spgemm" and config:
        # the config turns the dense accumulator off: every product goes into a hash table
        assert rec["counters"]["num_insertions"] * 2 == rec["flops"]
        assert rec["counters"]["num_dense_rows"] == 0
        assert rec["options"]["num_ranges"][0] == 10
    elif model == "hash-spgemm":
        # 11 columns fit the default dense budget: every row goes through the dense accumulator
        assert rec["counters"]["num_dense_rows"] == 23
        assert rec["counters"]["num_insertions"] == 0
    with h5py.File(d / "C.h5") as f:
        np.testing.assert_array_equal(f["shape"][()], [23, 11])
        np.testing.assert_array_equal(f["indptr"][()], ref.indptr)
        np.testing.assert_array_equal(f["indices"][()], ref.indices)
        np.testing.assert_allclose(f["data"][()], ref.data, rtol=1e-12)
        assert f.attrs["node_model"] == model


@pytest.mark.parametrize("args,msg", [
    (["--x", "X.mtx", "--y", "Z.mtx"], "X's columns must equal Y's rows"),
    (["--x", "bad.mtx", "--y", "Y.mtx"], "line 4"),
    (["--x", "missing.mtx", "--y", "Y.mtx"], "no such file"),
    (["--x", "X.mtx", "--y", "Y.mtx", "--node-config", "badcfg.json"], "num_ratio"),
    (["--x", "X.mtx", "--y", "Y.mtx", "--repeat", "0"], "--repeat"),
])
def test_spgemm_command_refuses_bad_input(mats, capsys, args, msg):
    d, _, _ = mats
    argv = ["spgemm", "--out", str(d / "C.h5")] + [
        str(d / a) if a.endswith((".mtx", ".json")) else a for a in args]
    assert main(argv) == 2
    assert msg in capsys.readouterr().err
    assert not (d / "C.h5").exists()


def test_spgemm_command_refuses_missing_output_dir(mats, capsys):
    d, _, _ = mats
    assert main(["spgemm", "--x", str(d / "X.mtx"), "--y", str(d / "Y.mtx"),
                 "--out", str(d / "nope" / "C.h5")]) == 2
    assert "does not exist" in capsys.readouterr().err
