"""``distmm gat train`` / ``predict`` in-process on every rank: JSON lines, weights in GATConv's
layout, logits equal to the serial reference with the saved weights, bit-identical resume from a
checkpoint, training that lowers the loss on a learnable task, every family trained and predicting
like 1.5D dense shifting, features as given unless --normalize-features (which refuses rows it
would blow up), and bad input refused with status 2 and nothing written."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
from distmm.apps.gat_model import PARAMS, GATModel
from distmm.cli import main
from tests import gat_reference as ref

COMM = MPI.COMM_WORLD
N, FIN, CLASSES = 23, 6, 3


@pytest.fixture(scope="module")
def files(shared_tmp):
    d = str(shared_tmp / "gat-cli")
    rng = np.random.default_rng(0)
    A = sp.random(N, N, density=0.2, format="coo", random_state=rng)
    X = rng.random((N, FIN))
    X[X < 0.4] = 0.0
    y = np.argmax(X @ rng.standard_normal((FIN, CLASSES)), axis=1)   # learnable from X
    if COMM.rank == 0:
        os.makedirs(d, exist_ok=True)
        scipy.io.mmwrite(os.path.join(d, "A.mtx"), A)
        scipy.io.mmwrite(os.path.join(d, "At.mtx"), A.T)
        scipy.io.mmwrite(os.path.join(d, "X.mtx"), sp.coo_matrix(X))
        np.save(os.path.join(d, "X.npy"), X)
        with h5py.File(os.path.join(d, "X.h5"), "w") as fh:
            fh["features"] = X
        Xnan = X.copy()
        Xnan[4, 1] = np.nan
        np.save(os.path.join(d, "X_nan.npy"), Xnan)
        np.save(os.path.join(d, "X_short.npy"), X[:-1])
        Xs = X.copy()
        Xs[5] = [1.0, -1.0, 0.0, 0.0, 0.0, 0.0]          # sums to zero
        Xs[9] = [0.5, -2.0, 0.0, 0.0, 0.0, 0.0]          # sums to a negative number
        Xs[11] = [1.0, -1.0 + 1e-9, 0.0, 0.0, 0.0, 0.0]  # tiny sum against its size
        Xs[14] = 0.0                                     # no features: kept as zero
        np.save(os.path.join(d, "X_signed.npy"), Xs)
        np.savetxt(os.path.join(d, "y.txt"), y, fmt="%d")
        np.savetxt(os.path.join(d, "y_short.txt"), y[:-2], fmt="%d")
        scipy.io.mmwrite(os.path.join(d, "rect.mtx"), sp.random(N, N + 1, density=0.2,
                                                                 random_state=1))
        with open(os.path.join(d, "split.json"), "w") as fh:
            json.dump({"train": list(range(0, 12)), "val": list(range(12, 18)),
                       "test": list(range(18, N))}, fh)
    COMM.Barrier()
    return {"dir": d, "A": A, "X": X, "y": y}


def _train_args(d, out, *extra):
    return ["gat", "train", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.mtx", "--labels",
            f"{d}/y.txt", "--split", f"{d}/split.json", "--out", out, "--dtype", "float64",
            "--hidden", "3", "--heads", "2", "--epochs", "6", *extra]


def _reference_logits(files, weights: str, X: np.ndarray) -> np.ndarray:
    """The serial reference's logits with the saved ``weights`` on the fixture's graph (with
    self-loops) and features ``X``."""
    model = GATModel.load(weights, np.float64)
    layers = [dict(la.arrays(), heads=la.heads, concat=la.concat,
                   negative_slope=la.negative_slope) for la in model.layers]
    pat = files["A"].toarray() != 0
    np.fill_diagonal(pat, True)
    dst, src = np.nonzero(pat)
    return ref.model_forward(X, dst, src, layers)[0]


def _lines(capsys):
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_train_then_predict_matches_reference(files, capsys):
    d = files["dir"]
    out, logits = f"{d}/m1.h5", f"{d}/l1.h5"
    c = 2 if COMM.size % 2 == 0 else 1
    assert main(_train_args(d, out, "-c", str(c))) == 0
    lines = _lines(capsys)
    if COMM.rank == 0:
        epochs = [r for r in lines if r["event"] == "epoch"]
        assert [r["epoch"] for r in epochs] == list(range(1, 7))
        assert all(k in epochs[0] for k in ("train_loss", "train_acc", "val_acc",
                                            "seconds_comm", "seconds_softmax"))
        with h5py.File(out) as fh:
            g = fh["layer0"]
            assert g["weight"].shape == (6, FIN) and g["att_src"].shape == (2, 3)
            assert bool(g.attrs["concat"]) and int(g.attrs["heads"]) == 2
            assert not bool(fh["layer1"].attrs["concat"]) and fh["layer1/bias"].shape == (3,)
    COMM.Barrier()
    assert main(["gat", "predict", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.npy",
                 "--weights", out, "--out", logits, "--dtype", "float64", "--no-permute",
                 "--normalize-features"]) == 0
    if COMM.rank == 0:
        X = files["X"] / files["X"].sum(axis=1, keepdims=True).clip(min=1e-300)
        X[files["X"].sum(axis=1) == 0] = 0.0
        want = _reference_logits(files, out, X)
        with h5py.File(logits) as fh:
            np.testing.assert_allclose(fh["logits"][...], want, rtol=1e-10, atol=1e-12)
    COMM.Barrier()
    fused = f"{d}/l1f.h5"
    assert main(["gat", "predict", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.npy",
                 "--weights", out, "--out", fused, "--dtype", "float64", "-c", str(c),
                 "--fused", "--normalize-features"]) == 0
    if COMM.rank == 0:
        with h5py.File(fused) as fh:
            np.testing.assert_allclose(fh["logits"][...], want, rtol=1e-10, atol=1e-12)
    COMM.Barrier()
    # the transposed file read with --transpose is the same graph (features from HDF5 here)
    tr = f"{d}/l1t.h5"
    assert main(["gat", "predict", "--graph", f"{d}/At.mtx", "--transpose", "--features",
                 f"{d}/X.h5", "--weights", out, "--out", tr, "--dtype", "float64",
                 "--normalize-features"]) == 0
    if COMM.rank == 0:
        with h5py.File(tr) as fh:
            np.testing.assert_allclose(fh["logits"][...], want, rtol=1e-10, atol=1e-12)


def test_resume_is_bit_identical(files, capsys):
    d = files["dir"]
    straight, part, ck = f"{d}/s.h5", f"{d}/p.h5", f"{d}/ck.h5"
    assert main(_train_args(d, straight, "--patience", "2")) == 0
    first = _train_args(d, part, "--patience", "2", "--checkpoint", ck)
    first[first.index("--epochs") + 1] = "3"
    assert main(first) == 0
    assert main(_train_args(d, part, "--patience", "2", "--resume", ck)) == 0
    lines = _lines(capsys)
    if COMM.rank == 0:
        results = [r for r in lines if r["event"] == "result"]
        assert results[0]["best_epoch"] == results[2]["best_epoch"]
        with h5py.File(straight) as a, h5py.File(part) as b:
            for k in range(2):
                for name in PARAMS:
                    np.testing.assert_array_equal(a[f"layer{k}/{name}"][...],
                                                  b[f"layer{k}/{name}"][...])


@pytest.mark.parametrize("change,match", [
    ({"--labels": "y_short.txt"}, "labels"),
    ({"--features": "X_short.npy"}, "rows but the graph has"),
    ({"--features": "X_nan.npy"}, "NaN"),
    ({"--heads": "0"}, "heads"),
    ({"--graph": "rect.mtx"}, "square"),
    ({"--features": "X_signed.npy", "--normalize-features": None},
     "3 feature row(s) sum to zero, a negative number or less than 1e-06 times the sum of "
     "their absolute values, so scaling them to sum 1 would blow them up or flip their sign: "
     "node(s) 5, 9, 11;"),
    ({"--raw-features": None, "--normalize-features": None}, "contradict each other"),
])
def test_bad_input_refused_everywhere(files, capsys, change, match):
    d = files["dir"]
    out = f"{d}/bad.h5"
    args = _train_args(d, out)
    for k, v in change.items():
        i = args.index(k) if k in args else None
        value = v if k in ("--heads", "--algorithm") else f"{d}/{v}"
        if v is None:
            args.append(k)
        elif i is None:
            args += [k, value]
        else:
            args[i + 1] = value
    assert main(args) == 2
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert match in err
    assert not os.path.exists(out)


def test_predict_refuses_bad_weights(files, capsys):
    d = files["dir"]
    bad = f"{d}/w_bad.h5"
    if COMM.rank == 0:
        with h5py.File(bad, "w") as fh:
            g = fh.create_group("layer0")
            g["weight"] = np.zeros((4, FIN))
            g["att_src"] = np.zeros((2, 3))   # 2 heads x 3 does not match weight's 4 rows
            g["att_dst"] = np.zeros((2, 3))
            g["bias"] = np.zeros(6)
            for k, v in dict(heads=2, out_channels=3, concat=True, negative_slope=0.2,
                             add_self_loops=True).items():
                g.attrs[k] = v
        with h5py.File(f"{d}/w_empty.h5", "w"):
            pass
    COMM.Barrier()
    for weights, match in ((bad, "weight has shape"), (f"{d}/w_empty.h5", "no group")):
        out = f"{d}/never.h5"
        assert main(["gat", "predict", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.npy",
                     "--weights", weights, "--out", out]) == 2
        err = capsys.readouterr().err
        if COMM.rank == 0:
            assert match in err
        assert not os.path.exists(out)


def test_training_lowers_the_loss(files, capsys):
    d = files["dir"]
    args = _train_args(d, f"{d}/fit.h5", "--dropout", "0", "--attention-dropout", "0",
                       "--lr", "0.02", "--weight-decay", "0", "--patience", "100",
                       "--raw-features", "--hidden", "8")
    args[args.index("--epochs") + 1] = "40"
    assert main(args) == 0
    lines = _lines(capsys)
    if COMM.rank == 0:
        loss = [r["train_loss"] for r in lines if r["event"] == "epoch"]
        assert len(loss) == 40 and loss[-1] < 0.7 * loss[0], loss
        result = [r for r in lines if r["event"] == "result"][0]
        assert result["train_acc"] > 0.6


def _family_cases():
    """(family, c) pairs to run at this p: every family at its largest valid c, and the 2.5D
    families also at c = 1 where their grid allows it."""
    cases = []
    for name, cls in ALGORITHMS.items():
        cs = [c for c in range(1, COMM.size + 1)
              if COMM.size % c == 0 and cls.model.grid_allows(COMM.size, c)]
        cases += [(name, c) for c in sorted({cs[0], cs[-1]})] if cs else []
    return cases


@pytest.mark.parametrize("family,c", _family_cases())
def test_every_family_trains_and_predicts_like_dense_shift(files, capsys, family, c):
    """Training on each family gives the weights of the 1.5D dense-shifting run (dropout on,
    features read in parts from .mtx, as given), and its predictions on signed features
    taken as given (no normalisation: no error) equal the serial reference's."""
    d = files["dir"]
    base, mine = f"{d}/fam-base.h5", f"{d}/fam-{family}-{c}.h5"
    assert main(_train_args(d, base, "--epochs", "3")) == 0
    assert main(_train_args(d, mine, "--epochs", "3", "--algorithm", family,
                            "-c", str(c))) == 0
    if COMM.rank == 0:
        with h5py.File(base) as a, h5py.File(mine) as b:
            for k in range(2):
                for name in PARAMS:
                    np.testing.assert_allclose(b[f"layer{k}/{name}"][...],
                                               a[f"layer{k}/{name}"][...], rtol=1e-9,
                                               atol=1e-12, err_msg=f"layer{k}/{name}")
    COMM.Barrier()
    logits = f"{d}/fam-{family}-{c}-logits.h5"
    assert main(["gat", "predict", "--graph", f"{d}/A.mtx", "--features", f"{d}/X_signed.npy",
                 "--weights", mine, "--out", logits, "--dtype", "float64", "--algorithm",
                 family, "-c", str(c)]) == 0
    capsys.readouterr()
    if COMM.rank == 0:
        want = _reference_logits(files, mine, np.load(f"{d}/X_signed.npy"))
        with h5py.File(logits) as fh:
            np.testing.assert_allclose(fh["logits"][...], want, rtol=1e-10, atol=1e-12)


def test_raw_features_is_a_deprecated_no_op(files, capsys):
    d = files["dir"]
    plain, raw = f"{d}/plain.h5", f"{d}/raw.h5"
    assert main(_train_args(d, plain, "--epochs", "2")) == 0
    capsys.readouterr()
    assert main(_train_args(d, raw, "--epochs", "2", "--raw-features")) == 0
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert "--raw-features is deprecated and has no effect" in err
        with h5py.File(plain) as a, h5py.File(raw) as b:
            for name in PARAMS:
                np.testing.assert_array_equal(a[f"layer0/{name}"][...], b[f"layer0/{name}"][...])


def test_fused_predict_refused_off_dense_shift(files, capsys):
    d = files["dir"]
    out, weights = f"{d}/never-fused.h5", f"{d}/fused-w.h5"
    assert main(_train_args(d, weights, "--epochs", "1")) == 0
    assert main(["gat", "predict", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.npy",
                 "--weights", weights, "--out", out, "--algorithm", "15d-sparse-shift",
                 "--fused"]) == 2
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert "15d-dense-shift only" in err
    assert not os.path.exists(out)
