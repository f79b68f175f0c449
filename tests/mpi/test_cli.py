"""The distmm command in-process on every rank: files in, HDF5 out, and every bad input
refused on every rank with status 2 and no output file left behind."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.cli import main

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


@pytest.fixture(scope="module")
def files():
    """S (.mtx and .mtx.gz), A, B written by rank 0 into a directory every rank sees."""
    import gzip
    import tempfile

    d = tempfile.mkdtemp(prefix="distmm-cli-") if COMM.rank == 0 else None
    d = COMM.bcast(d)
    m, n, r = 29, 17, 3
    rng = np.random.default_rng(0)
    S = sp.random(m, n, density=0.25, format="coo", random_state=rng)
    A = rng.standard_normal((m, r))
    B = rng.standard_normal((n, r))
    if COMM.rank == 0:
        scipy.io.mmwrite(os.path.join(d, "S.mtx"), S)
        with open(os.path.join(d, "S.mtx"), "rb") as src, \
                gzip.open(os.path.join(d, "S.mtx.gz"), "wb") as dst:
            dst.write(src.read())
        np.save(os.path.join(d, "A.npy"), A)
        np.save(os.path.join(d, "B.npy"), B)
        np.save(os.path.join(d, "A_short.npy"), A[:-1])
        np.save(os.path.join(d, "B_r2.npy"), B[:, :2])
        bad = A.copy()
        bad[3, 1] = np.nan
        np.save(os.path.join(d, "A_nan.npy"), bad)
        with open(os.path.join(d, "bad_header.mtx"), "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n29 17\n1 1 1.0\n")
        with open(os.path.join(d, "out_of_range.mtx"), "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n29 17 2\n1 1 1.0\n30 1 2\n")
        with open(os.path.join(d, "short.mtx"), "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n29 17 3\n1 1 1.0\n2 2 1\n")
    COMM.Barrier()
    yield {"dir": d, "S": S, "A": A, "B": B}
    COMM.Barrier()
    if COMM.rank == 0:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


def path(files, name):
    return os.path.join(files["dir"], name)


@pytest.mark.parametrize("op", ["sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b"])
@pytest.mark.parametrize("sparse", ["S.mtx", "S.mtx.gz"])
def test_run_writes_result(files, op, sparse, capsys):
    out = path(files, f"out-{op}-{sparse}.h5")
    c = 1 if P == 1 else (2 if P % 2 == 0 else P)
    code = main(["run", op, "--sparse", path(files, sparse), "--a", path(files, "A.npy"),
                 "--b", path(files, "B.npy"), "--out", out, "-c", str(c), "--strategy", "reuse",
                 "--dtype", "float64"])
    assert code == 0
    printed = capsys.readouterr().out
    if COMM.rank == 0:
        rec = json.loads(printed.strip().splitlines()[-1])
        assert rec["op"] == op and rec["p"] == P and rec["c"] == c
        assert set(rec["phases"]) >= {"compute"}
        assert rec["kernels"] and all(k["calls"] >= 1 and k["fallback_calls"] == 0
                                      for k in rec["kernels"].values())
        S = sp.csr_matrix(files["S"])
        A, B = files["A"], files["B"]
        with h5py.File(out, "r") as h5:
            assert json.loads(h5.attrs["config"])["algorithm"] == "15d-dense-shift"
            if op == "sddmm":
                coo = S.tocoo()
                order = np.lexsort((coo.col, coo.row))
                np.testing.assert_array_equal(h5["row"][()], coo.row[order])
                np.testing.assert_array_equal(h5["col"][()], coo.col[order])
                ref = coo.data * np.einsum("ij,ij->i", A[coo.row], B[coo.col])
                np.testing.assert_allclose(h5["val"][()], ref[order], rtol=1e-10)
            else:
                R = S.multiply(A @ B.T).tocsr()
                ref = {"spmm-a": S @ B, "spmm-b": S.T @ A, "fusedmm-a": R @ B,
                       "fusedmm-b": R.T @ A}[op]
                np.testing.assert_allclose(h5["result"][()], ref, rtol=1e-10, atol=1e-12)
    else:
        assert printed == ""


BAD = [
    (["--sparse", "missing.mtx"], "no such file|not found|does not exist"),
    (["--sparse", "bad_header.mtx"], "size line|header"),
    (["--sparse", "out_of_range.mtx"], "out of range"),
    (["--sparse", "short.mtx"], "entries|count"),
    (["--a", "A_short.npy"], "rows"),
    (["--b", "B_r2.npy"], "columns"),
    (["--a", "A_nan.npy"], "NaN|non-finite"),
    (["-c", str(P + 1)], "divisor"),
    (["--algorithm", "4d-imaginary"], "unknown algorithm"),
    (["--strategy", "psychic"], "unknown strategy"),
]


@pytest.mark.parametrize("change,message", BAD)
def test_bad_input_fails_on_every_rank(files, change, message, capsys):
    args = {"--sparse": "S.mtx", "--a": "A.npy", "--b": "B.npy"}
    opts = []
    it = iter(change)
    for key in it:
        val = next(it)
        if key in args:
            args[key] = val
        else:
            opts += [key, val]
    out = path(files, "never.h5")
    argv = ["run", "fusedmm-a", "--out", out] + opts
    for key, val in args.items():
        argv += [key, path(files, val)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    if COMM.rank == 0:
        assert "distmm: error:" in err
        import re

        assert re.search(message, err), err
    else:
        assert err == ""
    COMM.Barrier()
    assert not os.path.exists(out)
    assert not [f for f in os.listdir(files["dir"]) if f.startswith("never.h5")]


def test_unknown_op_and_missing_input(files, capsys):
    assert main(["run", "spgemm-z", "--sparse", path(files, "S.mtx"), "--out",
                 path(files, "x.h5")]) == 2
    assert main(["run", "sddmm", "--sparse", path(files, "S.mtx"), "--a",
                 path(files, "A.npy"), "--out", path(files, "x.h5")]) == 2
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert "unknown operation" in err and "needs --b" in err


def test_usage_error_exits_2_everywhere(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert ("usage" in err) == (COMM.rank == 0)


def test_bench_prints_json_lines(capsys, shared_tmp):
    c = P if P <= 2 else 2 if P % 2 == 0 else 1
    logs = os.path.join(shared_tmp, "logs")
    code = main(["bench", "--n", "200", "--nnz-per-row", "4", "--r", "8", "--repeat", "1",
                 "--ops", "fusedmm-a,sddmm", "-c", str(c), "--log-dir", logs])
    assert code == 0
    with open(os.path.join(logs, f"rank-{COMM.rank}.jsonl")) as fh:
        mine = [json.loads(line) for line in fh]
    assert [x["strategy"] for x in mine] == ["none", "reuse", "fusion", "-"]
    assert all(x["rank"] == COMM.rank and "compute" in x["comm"] for x in mine)
    out = capsys.readouterr().out
    if COMM.rank == 0:
        recs = [json.loads(line) for line in out.strip().splitlines()]
        assert [r["strategy"] for r in recs] == ["none", "reuse", "fusion", "-"]
        assert all(r["gflops"] > 0 and r["nnz"] > 0 for r in recs)
        assert all("propagation" in r["phases"] or P // c == 1 for r in recs)
