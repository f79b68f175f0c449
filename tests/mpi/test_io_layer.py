"""Every command's files go through one layer (distmm.cli.files), in-process on every rank.

Per-rank files as an MPMD launch gives them: every rank runs the same command line in its own
working directory, where the last rank's copy of a file is missing, shorter or different. Then
outputs that are devices, FIFOs or inputs, inputs that are FIFOs, a full file system (a 64 KiB
tmpfs, skipped where mounting is not permitted), an unwritable --log-dir, a file name that is
not UTF-8, and corrupt or mismatched GAT checkpoints. Each case ends every rank with status 2,
one line on rank 0 and nothing half-written, never a hang.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import stat
import subprocess

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.cli import main

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
LAST = P - 1
N, FIN, CLASSES = 19, 5, 3


@contextlib.contextmanager
def _cwd(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@pytest.fixture(scope="module")
def base(shared_tmp):
    """Common files (rank 0 writes them) and a trained model with a checkpoint."""
    d = str(shared_tmp / "io-layer")
    rng = np.random.default_rng(3)
    A = sp.random(N, N, density=0.25, format="coo", random_state=rng)
    X = rng.random((N, FIN))
    y = np.arange(N) % CLASSES
    S = sp.random(11, 7, density=0.4, format="coo", random_state=rng)
    if COMM.rank == 0:
        os.makedirs(d, exist_ok=True)
        scipy.io.mmwrite(os.path.join(d, "A.mtx"), A)
        np.save(os.path.join(d, "X.npy"), X)
        np.savetxt(os.path.join(d, "y.txt"), y, fmt="%d")
        with open(os.path.join(d, "split.json"), "w") as fh:
            json.dump({"train": list(range(9)), "val": list(range(9, 14)),
                       "test": list(range(14, N))}, fh)
        scipy.io.mmwrite(os.path.join(d, "S.mtx"), S)
        np.save(os.path.join(d, "B.npy"), rng.standard_normal((7, 2)))
        with open(os.path.join(d, "R.mtx"), "w") as fh:   # ratings for als
            fh.write("%%MatrixMarket matrix coordinate real general\n6 5 9\n")
            for i, j in [(1, 1), (1, 2), (2, 3), (3, 1), (4, 4), (5, 5), (6, 2), (2, 5), (3, 3)]:
                fh.write(f"{i} {j} {1 + (i * j) % 5}\n")
    COMM.Barrier()
    ck = os.path.join(d, "ck.h5")
    assert main(_train(d, os.path.join(d, "w.h5"), "--checkpoint", ck)) == 0
    return d


def _train(d, out, *extra):
    return ["gat", "train", "--graph", f"{d}/A.mtx", "--features", f"{d}/X.npy", "--labels",
            f"{d}/y.txt", "--split", f"{d}/split.json", "--out", out, "--hidden", "2",
            "--heads", "2", "--epochs", "2", "--dtype", "float64", *extra]


@pytest.fixture
def rank_dirs(base, tmp_path_factory):
    """A directory per rank (same relative name list), holding copies of the base files."""
    root = COMM.bcast(str(tmp_path_factory.mktemp("mpmd")) if COMM.rank == 0 else None)
    mine = os.path.join(root, f"rank{COMM.rank}")
    os.makedirs(mine)
    for name in ("A.mtx", "X.npy", "y.txt", "split.json", "w.h5", "ck.h5"):
        shutil.copy(os.path.join(base, name), mine)
    COMM.Barrier()
    yield mine
    COMM.Barrier()


def _last_rank_edit(mine, edit):
    if COMM.rank == LAST:
        edit(mine)
    COMM.Barrier()


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    if COMM.rank == 0:
        lines = [ln for ln in err.splitlines() if ln.startswith("distmm: ")]
        assert len(lines) == 1, err
        return lines[0]
    return ""


REL_TRAIN = ["gat", "train", "--graph", "A.mtx", "--features", "X.npy", "--labels", "y.txt",
             "--split", "split.json", "--out", "out.h5", "--hidden", "2", "--heads", "2",
             "--epochs", "1", "--dtype", "float64"]
REL_PREDICT = ["gat", "predict", "--graph", "A.mtx", "--features", "X.npy", "--weights",
               "w.h5", "--out", "logits.h5", "--dtype", "float64"]


@pytest.mark.parametrize("argv,missing", [
    (REL_TRAIN, "y.txt"), (REL_TRAIN, "split.json"), (REL_TRAIN + ["--resume", "ck.h5"], "ck.h5"),
    (REL_PREDICT, "w.h5"), (REL_PREDICT, "X.npy")])
def test_gat_file_missing_on_last_rank(rank_dirs, capsys, argv, missing):
    _last_rank_edit(rank_dirs, lambda d: os.unlink(os.path.join(d, missing)))
    with _cwd(rank_dirs):
        assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert f"{missing}: no such file" in line
        if P > 1:
            assert f"reported by rank {LAST}" in line
    assert not glob.glob(os.path.join(rank_dirs, "out.h5*"))
    assert not glob.glob(os.path.join(rank_dirs, "logits.h5*"))


def test_gat_out_directory_missing_on_rank_0(rank_dirs, capsys):
    argv = list(REL_TRAIN)
    argv[argv.index("out.h5")] = "sub/out.h5"
    if COMM.rank != 0:
        os.makedirs(os.path.join(rank_dirs, "sub"))
    COMM.Barrier()
    with _cwd(rank_dirs):
        assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert "--out sub/out.h5: directory" in line and "does not exist" in line


def test_gat_shorter_labels_on_last_rank(rank_dirs, capsys):
    def shorten(d):
        y = np.loadtxt(os.path.join(d, "y.txt"), dtype=int)
        np.savetxt(os.path.join(d, "y.txt"), y[:-2], fmt="%d")

    _last_rank_edit(rank_dirs, shorten)
    with _cwd(rank_dirs):
        assert main(REL_TRAIN) == 2
    line = _one_error(capsys)
    if COMM.rank == 0 and P == 1:
        assert f"--labels has {N - 2} labels but the graph has {N} nodes" in line
    elif COMM.rank == 0:  # the file's size differs between ranks: refused by the file check
        assert "--labels y.txt: header (" in line and f"on rank {P - 1})" in line, line
    assert not os.path.exists(os.path.join(rank_dirs, "out.h5"))


@pytest.mark.skipif(P == 1, reason="needs two ranks to differ")
def test_gat_labels_differ_on_last_rank(rank_dirs, capsys):
    def swap(d):
        y = np.loadtxt(os.path.join(d, "y.txt"), dtype=int)
        np.savetxt(os.path.join(d, "y.txt"), y[::-1], fmt="%d")

    _last_rank_edit(rank_dirs, swap)
    with _cwd(rank_dirs):
        assert main(REL_TRAIN) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert "different settings" in line and "--labels (content)" in line


# ------------------------------------------------------------------ outputs that are no files
def _special(kind: str, path: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


def _can_mknod(d: str) -> bool:
    ok = True
    if COMM.rank == 0:
        try:
            _special("device", os.path.join(d, "probe"))
            os.unlink(os.path.join(d, "probe"))
        except OSError:
            ok = False
    return COMM.bcast(ok)


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("command", ["run", "als", "gat"])
def test_output_device_or_fifo_refused(base, shared_tmp, capsys, kind, command):
    d = str(shared_tmp / f"special-{kind}-{command}")
    if COMM.rank == 0:
        os.makedirs(d)
    COMM.Barrier()
    if kind == "device" and not _can_mknod(d):
        pytest.skip("mknod is not permitted here")
    target = os.path.join(d, "out.h5")
    if COMM.rank == 0:
        _special(kind, target)
    COMM.Barrier()
    argv = {"run": ["run", "spmm-a", "--sparse", f"{base}/S.mtx", "--b", f"{base}/B.npy",
                    "--out", target],
            "als": ["als", "--ratings", f"{base}/R.mtx", "--rank", "2", "--epochs", "1",
                    "--out", target],
            "gat": _train(base, target)}[command]
    assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        want = "FIFO" if kind == "fifo" else "character device"
        assert f"--out {target}: is a {want}" in line, line
        mode = os.lstat(target).st_mode
        assert (stat.S_ISFIFO if kind == "fifo" else stat.S_ISCHR)(mode)


def test_input_fifo_refused_without_blocking(base, shared_tmp, capsys):
    fifo = str(shared_tmp / "S-fifo.mtx")
    if COMM.rank == 0:
        os.mkfifo(fifo)
    COMM.Barrier()
    assert main(["run", "spmm-a", "--sparse", fifo, "--b", f"{base}/B.npy", "--out",
                 str(shared_tmp / "never.h5")]) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert f"--sparse {fifo}: is a FIFO (named pipe), not a regular file" in line


def test_unwritable_log_dir_refused_before_work(base, shared_tmp, capsys):
    blocker = str(shared_tmp / "a-file")
    if COMM.rank == 0:
        with open(blocker, "w") as fh:
            fh.write("x")
    COMM.Barrier()
    out = str(shared_tmp / "log-never.h5")
    assert main(["run", "spmm-a", "--sparse", f"{base}/S.mtx", "--b", f"{base}/B.npy",
                 "--out", out, "--log-dir", blocker + "/logs"]) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert f"--log-dir {blocker}/logs: cannot write there" in line
    assert not os.path.exists(out)


# ------------------------------------------------------------------ a full file system
@pytest.fixture
def full_disk(shared_tmp):
    """A 64 KiB tmpfs (rank 0 mounts it), filled up after an old output was put there."""
    mnt = str(shared_tmp / f"tmpfs-{os.getpid() if COMM.rank == 0 else 0}")
    mnt = COMM.bcast(mnt)
    ok = True
    if COMM.rank == 0:
        os.makedirs(mnt, exist_ok=True)
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt],
                            capture_output=True).returncode == 0
        if ok:
            for name in ("old.h5", "old.json"):
                with open(os.path.join(mnt, name), "w") as fh:
                    fh.write("old output\n")
            with contextlib.suppress(OSError), open(os.path.join(mnt, "filler"), "wb") as fh:
                while True:
                    fh.write(b"\0" * 4096)
                    fh.flush()
    if not COMM.bcast(ok):
        pytest.skip("mounting a tmpfs is not permitted here")
    yield mnt
    COMM.Barrier()
    if COMM.rank == 0:
        subprocess.run(["umount", mnt], check=False)


def _assert_untouched(mnt, name):
    if COMM.rank == 0:
        with open(os.path.join(mnt, name)) as fh:
            assert fh.read() == "old output\n"
        assert sorted(os.listdir(mnt)) == ["filler", "old.h5", "old.json"]


@pytest.mark.parametrize("command", ["gat-train", "gat-predict", "calibrate", "run", "als"])
def test_full_disk_exits_2_old_output_kept(base, full_disk, capsys, command):
    old = os.path.join(full_disk, "old.json" if command == "calibrate" else "old.h5")
    argv = {"gat-train": _train(base, old),
            "gat-predict": ["gat", "predict", "--graph", f"{base}/A.mtx", "--features",
                            f"{base}/X.npy", "--weights", f"{base}/w.h5", "--out", old,
                            "--dtype", "float64"],
            "calibrate": ["calibrate", "--out", old, "--quick"],
            "run": ["run", "spmm-a", "--sparse", f"{base}/S.mtx", "--b", f"{base}/B.npy",
                    "--out", old],
            "als": ["als", "--ratings", f"{base}/R.mtx", "--rank", "2", "--epochs", "1",
                    "--out", old]}[command]
    if command == "calibrate" and P < 2:
        pytest.skip("calibrate needs two ranks")
    assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert f"{old}: cannot write the file (No space left on device)" in line, line
    _assert_untouched(full_disk, os.path.basename(old))


def test_full_disk_gat_checkpoint(base, full_disk, capsys):
    old = os.path.join(full_disk, "old.h5")
    assert main(_train(base, os.path.join(base, "w-ok.h5"), "--checkpoint", old)) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert f"--checkpoint {old}: cannot write the file (No space left on device)" in line
    _assert_untouched(full_disk, "old.h5")


# ------------------------------------------------------------------ GAT checkpoints
def _corrupt(src, dst, how):
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as fh:
        if how == "json":
            fh.attrs["layers"] = "[{not json"
        elif how == "epoch":
            fh.attrs["epoch"] = -3
        elif how == "shape":
            w = fh["model/layer1/weight"][...]
            del fh["model/layer1/weight"]
            fh["model/layer1/weight"] = w[:, :-1]
        elif how == "moment":
            m = fh["adam_m/layer0/bias"][...]
            del fh["adam_m/layer0/bias"]
            fh["adam_m/layer0/bias"] = np.concatenate([m, m])


@pytest.mark.parametrize("how,match", [("json", "not a valid GAT checkpoint"),
                                       ("epoch", "negative counters"),
                                       ("shape", "layer1"),
                                       ("moment", "adam_m/layer0/bias")])
def test_corrupt_gat_checkpoint_one_line(base, shared_tmp, capsys, how, match):
    bad = str(shared_tmp / f"ck-{how}.h5")
    if COMM.rank == 0:
        _corrupt(f"{base}/ck.h5", bad, how)
    COMM.Barrier()
    out = str(shared_tmp / f"never-{how}.h5")
    assert main(_train(base, out, "--resume", bad)) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert match in line and "Traceback" not in capsys.readouterr().err
    assert not os.path.exists(out)


@pytest.mark.parametrize("option,value,named", [
    ("--hidden", "3", "--hidden 3 (checkpoint: 2)"),
    ("--heads", "1", "--heads 1 (checkpoint: 2)"),
    ("--layers", "3", "--layers 3 (checkpoint: 2)"),
    ("--no-self-loops", None, "--no-self-loops True (checkpoint: False)"),
    ("--negative-slope", "0.1", "--negative-slope 0.1 (checkpoint: 0.2)")])
def test_resume_with_other_model_options_refused(base, shared_tmp, capsys, option, value,
                                                 named):
    out = str(shared_tmp / "never-resume.h5")
    extra = [option] if value is None else [option, value]
    argv = _train(base, out, "--resume", f"{base}/ck.h5")
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += extra
    assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert "built with other options" in line and named in line, line
    assert not os.path.exists(out)


@pytest.mark.parametrize("dtype", ["S8", "complex128"])
def test_gat_features_must_be_real_numbers(base, shared_tmp, capsys, dtype):
    feats = str(shared_tmp / f"X-{dtype}.h5")
    if COMM.rank == 0:
        X = np.load(f"{base}/X.npy")
        with h5py.File(feats, "w") as fh:
            fh["features"] = X.astype(dtype) if dtype != "S8" else X.astype(str).astype("S8")
    COMM.Barrier()
    argv = _train(base, str(shared_tmp / "never-feat.h5"))
    argv[argv.index("--features") + 1] = feats
    assert main(argv) == 2
    line = _one_error(capsys)
    if COMM.rank == 0:
        assert "real numbers are expected" in line


# ------------------------------------------------------------------ names that are not UTF-8
def test_non_utf8_sparse_name_stored_safely(base, shared_tmp, capsys):
    name = os.fsdecode(os.fsencode(str(shared_tmp)) + b"/S-\xff.mtx")
    out = str(shared_tmp / "utf8.h5")
    if COMM.rank == 0:
        shutil.copy(f"{base}/S.mtx", name)
    COMM.Barrier()
    assert main(["run", "spmm-a", "--sparse", name, "--b", f"{base}/B.npy",
                 "--out", out]) == 0
    conv = str(shared_tmp / "utf8-conv.h5")
    assert main(["convert", name, conv]) == 0
    capsys.readouterr()
    if COMM.rank == 0:
        with h5py.File(out) as fh:
            assert fh.attrs["sparse"].endswith("S-\\xff.mtx")
        with h5py.File(conv) as fh:
            assert fh.attrs["source"].endswith("S-\\xff.mtx")
