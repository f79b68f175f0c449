"""HDF5 input for S: ``distmm convert``, the parallel hyperslab reader and every bad file.

Collective tests (every rank runs each one). The oracle is scipy: scipy.io.mmread of the
Matrix Market file, and S @ B computed by scipy for the distributed round trip.
"""

from __future__ import annotations

import gzip
import json
import os
import re

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm import distribute
from distmm.api import as_coo_share
from distmm.cli import main
from distmm.errors import InputError
from distmm.io.hdf5 import h5_header, read_hdf5

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
M, N = 31, 13  # m != n, not multiples of any p tried


def _matrix(seed: int = 0) -> sp.coo_matrix:
    """A 31 x 13 matrix with empty rows (rows 0, 5 and 30) and one dense row."""
    rng = np.random.default_rng(seed)
    S = sp.random(M, N, density=0.2, format="lil", random_state=rng)
    S[5, :] = 0
    S[0, :] = 0
    S[30, :] = 0
    S[7, :] = rng.standard_normal(N)
    return S.tocoo()


def _on_root(fn) -> None:
    """Run ``fn`` on rank 0, then meet (the file is then visible to every rank)."""
    if COMM.rank == 0:
        fn()
    COMM.Barrier()


def _union(share) -> np.ndarray:
    parts = COMM.allgather((share.rows, share.cols, share.vals))
    rows, cols, vals = (np.concatenate([p[i] for p in parts]) for i in range(3))
    return sp.coo_matrix((vals, (rows, cols)), shape=share.shape).toarray()


@pytest.fixture(scope="module")
def files(shared_tmp):
    d = os.path.join(shared_tmp, "hdf5-input")
    S = _matrix()
    rng = np.random.default_rng(1)
    B = rng.standard_normal((N, 8))  # r >= p/c of every family at p <= 8

    def write():
        os.makedirs(d, exist_ok=True)
        scipy.io.mmwrite(os.path.join(d, "S.mtx"), S)
        with open(os.path.join(d, "S.mtx"), "rb") as src:
            raw = src.read()
        with open(os.path.join(d, "S.mtx.gz"), "wb") as dst:
            dst.write(gzip.compress(raw))
        # Symmetric with a duplicate entry: convert expands and sums.
        with open(os.path.join(d, "sym.mtx"), "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real symmetric\n% comment\n"
                     "5 5 4\n2 1 1.5\n\n3 3 2.0\n5 2 -1.0\n2 1 0.25\n")
        np.save(os.path.join(d, "B.npy"), B)
        np.save(os.path.join(d, "A.npy"), rng.standard_normal((M, 8)))

    _on_root(write)
    return {"dir": d, "S": S, "B": B}


def _p(files, name: str) -> str:
    return os.path.join(files["dir"], name)


def _convert(files, src: str, dst: str, capsys) -> dict | None:
    code = main(["convert", _p(files, src), _p(files, dst)])
    assert code == 0
    out = capsys.readouterr().out
    return json.loads(out) if COMM.rank == 0 else None


@pytest.mark.parametrize("src", ["S.mtx", "S.mtx.gz", "sym.mtx"])
def test_convert_round_trip_equals_scipy(files, src, capsys):
    dst = src.replace(".", "_") + ".h5"
    record = _convert(files, src, dst, capsys)
    ref = scipy.io.mmread(_p(files, src)).toarray()
    if record is not None:
        assert record["shape"] == list(ref.shape) and record["p"] == P
        assert record["nnz"] == np.count_nonzero(ref)
    m, n, nnz, layout = h5_header(_p(files, dst))
    assert (m, n, layout) == (*ref.shape, "csr")
    share = read_hdf5(_p(files, dst), COMM)
    np.testing.assert_array_equal(_union(share), ref)
    # No temporary file of the atomic write is left behind.
    assert not [f for f in os.listdir(files["dir"]) if ".distmm-tmp." in f]


@pytest.mark.parametrize("algorithm,c", [("15d-dense-shift", 1), ("15d-sparse-shift", 2),
                                         ("25d-dense-replicate", 1)])
def test_distribute_from_h5_equals_scipy(files, algorithm, c, capsys):
    if P % c or (algorithm.startswith("25d") and int(round((P // c) ** 0.5)) ** 2 != P // c):
        pytest.skip(f"{algorithm} with c={c} does not fit p={P}")
    _convert(files, "S.mtx.gz", "S_dist.h5", capsys)
    S = files["S"].tocsr()
    with distribute(_p(files, "S_dist.h5"), COMM, algorithm=algorithm, c=c,
                    dtype=np.float64) as obj:
        B_loc = obj.scatter("b", files["B"], root=None)
        out = obj.gather("a", obj.spmm_a(B_loc))
    if COMM.rank == 0:
        np.testing.assert_allclose(out, S @ files["B"], rtol=1e-12, atol=1e-12)


def test_coo_layout_with_shape_dataset(files):
    S = files["S"]
    path = _p(files, "coo.h5")

    def write():
        with h5py.File(path, "w") as fh:
            fh["row"] = S.row.astype(np.int32)
            fh["col"] = S.col.astype(np.uint16)
            fh["val"] = S.data.astype(np.float32)
            fh["shape"] = np.array([M, N])

    _on_root(write)
    assert h5_header(path) == (M, N, S.nnz, "coo")
    share = as_coo_share(path, COMM)
    lo, hi = COMM.rank * S.nnz // P, (COMM.rank + 1) * S.nnz // P
    assert share.nnz == hi - lo  # an equal slice of the entries
    np.testing.assert_allclose(_union(share), S.astype(np.float32).toarray())


def test_each_rank_reads_only_its_hyperslab(files, capsys, monkeypatch):
    _convert(files, "S.mtx", "spy.h5", capsys)
    reads: list[tuple[str, object]] = []
    original = h5py.Dataset.__getitem__

    def spy(self, key, *args, **kwargs):
        reads.append((self.name, key))
        return original(self, key, *args, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    share = read_hdf5(_p(files, "spy.h5"), COMM)
    monkeypatch.undo()
    nnz = files["S"].nnz
    slices = {name: [k for n, k in reads if n == name and isinstance(k, slice)]
              for name in ("/indptr", "/indices", "/data")}
    # One slice read of each dataset, and only single elements besides (the bisection).
    assert all(len(v) == 1 for v in slices.values()), reads
    assert all(isinstance(k, (int, np.integer)) for n, k in reads if not isinstance(k, slice))
    assert len(reads) - 3 <= 2 * int(np.ceil(np.log2(M + 1)))
    ind, dat = slices["/indices"][0], slices["/data"][0]
    assert (ind.start, ind.stop) == (dat.start, dat.stop)
    assert ind.stop - ind.start == share.nnz
    rows = slices["/indptr"][0]  # rows lo..hi-1 need indptr[lo..hi]
    assert share.nnz == 0 or rows.start <= share.rows.min() <= share.rows.max() < rows.stop - 1
    # Together the ranks read each entry once, and no rank read everything (p > 1).
    spans = COMM.allgather((ind.start, ind.stop))
    assert sum(b - a for a, b in spans) == nnz
    assert [a for a, _ in spans[1:]] == [b for _, b in spans[:-1]]
    if P > 1:
        assert all(b - a < nnz for a, b in spans)
    # Balanced by nonzeros: a rank holds at most its fair share plus one row.
    longest = int(np.diff(files["S"].tocsr().indptr).max())
    assert share.nnz <= -(-nnz // P) + longest


def _csr_sets(S: sp.coo_matrix) -> dict:
    csr = S.tocsr()
    return {"indptr": csr.indptr.astype(np.int64), "indices": csr.indices.astype(np.int64),
            "data": csr.data.astype(np.float64)}


def _coo_sets(S: sp.coo_matrix) -> dict:
    return {"row": S.row.astype(np.int64), "col": S.col.astype(np.int64),
            "val": S.data.astype(np.float64)}


def _with(sets: dict, **changes) -> dict:
    out = dict(sets)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value(out[key]) if callable(value) else value
    return out


def _set(arr, index, value):
    arr = arr.copy()
    arr[index] = value
    return arr


_S = _matrix()
_CSR, _COO = _csr_sets(_S), _coo_sets(_S)
_PTR = _CSR["indptr"]
# (name, datasets or raw bytes, shape attribute, expected message)
BAD = [
    ("text", b"%%MatrixMarket matrix coordinate real general\n1 1 0\n", None,
     "not an HDF5 file"),
    ("empty", b"", None, "not an HDF5 file"),
    ("no_data", _with(_CSR, data=None), (M, N), "missing dataset /data"),
    ("no_layout", {"x": np.zeros(3)}, (M, N), "neither of the CSR"),
    ("both_layouts", {**_CSR, **_COO}, (M, N), "both of the CSR"),
    ("no_shape", _CSR, None, "no 'shape'"),
    ("bad_shape", _CSR, (M, N, 1), "'shape' must be two non-negative integers"),
    ("float_shape", _CSR, (float(M), float(N)), "'shape' must be two"),
    ("float_indices", _with(_CSR, indices=lambda a: a.astype(np.float64)), (M, N),
     "/indices has type float64; an integer type expected"),
    ("string_data", _with(_CSR, data=np.array([b"x"] * _S.nnz)), (M, N),
     "/data has type .*real"),
    ("complex_val", _with(_COO, val=lambda a: a.astype(np.complex128)), (M, N),
     "/val has type complex128"),
    ("2d_row", _with(_COO, row=lambda a: a.reshape(1, -1)), (M, N), "/row must be 1-D"),
    ("indptr_length", _with(_CSR, indptr=lambda a: a[:-1]), (M, N),
     f"/indptr has {M} entries but the shape says {M} rows"),
    ("data_length", _with(_CSR, data=lambda a: a[:-1]), (M, N), "same length"),
    ("coo_length", _with(_COO, col=lambda a: a[:-2]), (M, N), "same length"),
    ("indptr_start", _with(_CSR, indptr=lambda a: _set(a, 0, 1)), (M, N),
     r"/indptr\[0\] = 1, must be 0"),
    ("indptr_end", _with(_CSR, indptr=lambda a: _set(a, -1, a[-1] - 1)), (M, N),
     "must equal the number of entries|not non-decreasing"),
    ("indptr_down", _with(_CSR, indptr=lambda a: _set(a, 12, a[-1] + 5)), (M, N),
     "/indptr is not non-decreasing|outside 0"),
    ("indptr_negative", _with(_CSR, indptr=lambda a: _set(a, 1, -3)), (M, N),
     "not non-decreasing|outside 0"),
    ("column_high", _with(_CSR, indices=lambda a: _set(a, _S.nnz // 2, N)), (M, N),
     rf"/indices\[{_S.nnz // 2}\] = {N} is out of range \(0..{N - 1}\)"),
    ("column_negative", _with(_CSR, indices=lambda a: _set(a, -1, -1)), (M, N),
     r"/indices\[\d+\] = -1 is out of range"),
    ("row_high", _with(_COO, row=lambda a: _set(a, 3, M)), (M, N),
     rf"/row\[3\] = {M} is out of range"),
    ("col_high", _with(_COO, col=lambda a: _set(a, -1, N + 7)), (M, N), "/col.*out of range"),
    ("nan_data", _with(_CSR, data=lambda a: _set(a, 4, np.nan)), (M, N),
     r"/data\[4\] = nan is not finite"),
    ("inf_val", _with(_COO, val=lambda a: _set(a, -1, -np.inf)), (M, N),
     r"/val\[\d+\] = -inf is not finite"),
]


def _write_bad(path: str, content, shape) -> None:
    if isinstance(content, bytes):
        with open(path, "wb") as fh:
            fh.write(content)
        return
    with h5py.File(path, "w") as fh:
        for key, value in content.items():
            fh[key] = value
        if shape is not None:
            fh.attrs["shape"] = np.asarray(shape)


@pytest.mark.parametrize("name,content,shape,message", BAD, ids=[b[0] for b in BAD])
def test_bad_file_fails_on_every_rank(files, name, content, shape, message, capsys):
    path = _p(files, f"bad_{name}.h5")
    _on_root(lambda: _write_bad(path, content, shape))
    with pytest.raises(InputError) as exc:
        distribute(path, COMM, dtype=np.float64)
    text = str(exc.value)
    assert path in text and re.search(message, text), text
    # Every rank raised the same error (the agreement is one collective).
    assert len(set(COMM.allgather(text))) == 1
    # The command line: status 2, one message from rank 0, no output file.
    out = _p(files, f"never_{name}.h5")
    code = main(["run", "spmm-a", "--sparse", path, "--b", _p(files, "B.npy"), "--out", out])
    err = capsys.readouterr().err
    assert code == 2
    if COMM.rank == 0:
        assert err.startswith("distmm: error:") and path in err and re.search(message, err)
    else:
        assert err == ""
    COMM.Barrier()
    assert not os.path.exists(out)


def test_non_finite_values_pass_with_check_finite_off(files):
    path = _p(files, "nan_ok.h5")
    sets = _with(_COO, val=lambda a: _set(a, 2, np.nan))
    _on_root(lambda: _write_bad(path, sets, (M, N)))
    share = as_coo_share(path, COMM, check_finite=False)
    vals = np.concatenate(COMM.allgather(share.vals))
    assert np.isnan(vals[2]) and np.isfinite(np.delete(vals, 2)).all()


def test_missing_file_and_convert_errors(files, capsys):
    missing = _p(files, "nowhere.h5")
    with pytest.raises(InputError, match=f"{re.escape(missing)}: no such file"):
        read_hdf5(missing, COMM)
    cases = [(["convert", _p(files, "S.mtx"), _p(files, "out.npy")], "must be named .h5"),
             (["convert", missing, _p(files, "x.h5")],
              "convert reads Matrix Market"),
             (["convert", _p(files, "nothere.mtx"), _p(files, "x.h5")], "no such file"),
             (["convert", _p(files, "S.mtx"), _p(files, "no/dir/x.h5")], "does not exist"),
             (["convert", _p(files, "S.mtx"), files["dir"]], "must be named")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        if COMM.rank == 0:
            assert message in err, (argv, err)
    COMM.Barrier()
    assert not os.path.exists(_p(files, "x.h5"))


def test_convert_keeps_old_output_on_bad_input(files, capsys):
    """A data error found after the checks (a bad line) leaves an existing output intact."""
    good, bad = _p(files, "keep.h5"), _p(files, "badline.mtx")

    def write():
        with open(bad, "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n4 4 2\n1 1 1\n9 1 1\n")
        with open(good, "w") as fh:
            fh.write("old")

    _on_root(write)
    assert main(["convert", bad, good]) == 2
    err = capsys.readouterr().err
    if COMM.rank == 0:
        assert "out of range" in err
    with open(good) as fh:
        assert fh.read() == "old"


def test_run_cli_with_h5_sparse(files, capsys):
    _convert(files, "S.mtx", "S_cli.h5", capsys)
    out = _p(files, "cli_out.h5")
    code = main(["run", "spmm-a", "--sparse", _p(files, "S_cli.h5"), "--b",
                 _p(files, "B.npy"), "--out", out, "--dtype", "float64"])
    assert code == 0
    capsys.readouterr()
    if COMM.rank == 0:
        with h5py.File(out, "r") as fh:
            np.testing.assert_allclose(fh["result"][()], files["S"].tocsr() @ files["B"],
                                       rtol=1e-12, atol=1e-12)
