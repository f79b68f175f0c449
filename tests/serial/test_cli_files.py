"""The input/output layer of the ``distmm`` command (distmm.cli.files) on one process.

Every option of every command that names a file is declared to the layer (so a new command
cannot skip its checks); inputs that are FIFOs, devices or directories and outputs that are
inputs, devices, FIFOs or directories are refused before any work; the serial commands exit 2
with one line on a full file system and leave the old output as it was; a Matrix Market
comment line longer than the header limit is skipped, not taken for the size line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import subprocess

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from distmm.cli import build_parser, main
from distmm.cli.files import declared, input_problem, output_problem
from distmm.io.matrix_market import mtx_header, read_csr_block

FILE_WORDS = ("file", ".mtx", ".npy", ".h5", "JSON object", "directory", "DIR")


def _leaf_parsers(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from _leaf_parsers(sub, (*path, name))


def test_every_file_option_is_declared():
    """An option (or positional) whose help or metavar speaks of a file must be declared with
    distmm.cli.files, else main would run the command without checking it."""
    missing = []
    for path, parser in _leaf_parsers(build_parser()):
        names = {spec.dest for spec in parser.get_default("declared_files") or ()}
        for action in parser._actions:
            if action.nargs == 0 or action.dest in ("help", "version"):
                continue
            text = f"{action.help or ''} {action.metavar or ''}"
            if any(word in text for word in FILE_WORDS) and action.dest not in names:
                missing.append(f"distmm {' '.join(path)} {action.option_strings or action.dest}")
    assert not missing, "file options not declared in distmm.cli.files: " + ", ".join(missing)
    # and the layer sees them on the parsed arguments
    args = build_parser().parse_args(["convert", "a.mtx", "b.h5"])
    assert [(s.label, s.role) for s in declared(args)] == [("IN", "input"), ("OUT", "output")]


def test_input_kinds(tmp_path):
    regular = tmp_path / "r.mtx"
    regular.write_text("x")
    os.mkfifo(tmp_path / "fifo")
    assert input_problem(str(regular), "--x") is None
    assert "no such file" in input_problem(str(tmp_path / "nope"), "--x")
    assert "is a directory, not a regular file" in input_problem(str(tmp_path), "--x")
    assert "is a FIFO (named pipe), not a regular file" in input_problem(
        str(tmp_path / "fifo"), "--x")
    assert "is a character device" in input_problem("/dev/null", "--x")


def test_output_kinds(tmp_path):
    src = tmp_path / "in.mtx"
    src.write_text("x")
    link = tmp_path / "link.h5"
    link.symlink_to(src)
    os.mkfifo(tmp_path / "fifo")
    assert output_problem(str(tmp_path / "new.h5"), "--out", [str(src)]) is None
    assert "is the input file" in output_problem(str(link), "--out", [str(src)])
    assert "is a FIFO" in output_problem(str(tmp_path / "fifo"), "--out", [])
    assert "is a character device" in output_problem("/dev/null", "--out", [])
    assert "is a directory" in output_problem(str(tmp_path), "--out", [])
    dev_link = tmp_path / "null.h5"
    dev_link.symlink_to("/dev/null")
    assert "is a character device" in output_problem(str(dev_link), "--out", [])


@pytest.fixture
def graph(tmp_path):
    rng = np.random.default_rng(1)
    A = sp.random(12, 12, density=0.3, random_state=rng, format="coo")
    X = sp.random(12, 4, density=0.5, random_state=rng, format="coo")
    scipy.io.mmwrite(str(tmp_path / "A.mtx"), A)
    scipy.io.mmwrite(str(tmp_path / "X.mtx"), X)
    return tmp_path


def _dyn(d, *extra):
    return ["simulate", "dynaspase", "--graph", str(d / "A.mtx"), "--features",
            str(d / "X.mtx"), "--model", "gcn", "--hidden", "3", "--classes", "2",
            "--strategy", "s1", *extra]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_dynaspase_report_may_not_be_an_input(graph, capsys):
    before = (graph / "X.mtx").read_bytes()
    assert main(_dyn(graph, "--report", str(graph / "X.mtx"))) == 2
    line = _one_line(capsys)
    assert f"--report {graph / 'X.mtx'}: is the input file" in line, line
    assert (graph / "X.mtx").read_bytes() == before


def test_dynaspase_report_is_a_directory(graph, capsys):
    (graph / "rep").mkdir()
    assert main(_dyn(graph, "--report", str(graph / "rep"))) == 2
    line = _one_line(capsys)
    assert line == f"distmm: error: --report {graph / 'rep'}: is a directory; give the name " \
                   "of a file to write"
    assert sorted(p.name for p in graph.iterdir()) == ["A.mtx", "X.mtx", "rep"]


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs holding an old output, then filled up (skipped where mounting fails)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        (mnt / "old").write_text("old output\n")
        with contextlib.suppress(OSError), open(mnt / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 4096)
                fh.flush()
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("command", ["spgemm", "sparch", "dynaspase"])
def test_full_disk_serial_commands(graph, full_disk, capsys, command):
    old = full_disk / "old"
    argv = {"spgemm": ["spgemm", "--x", str(graph / "A.mtx"), "--y", str(graph / "A.mtx"),
                       "--out", str(old)],
            "sparch": ["simulate", "sparch", "--x", str(graph / "A.mtx"), "--report",
                       str(old)],
            "dynaspase": _dyn(graph, "--report", str(old))}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write the file (No space left on device)" in err[0], err
    assert str(old) in err[0]
    assert old.read_text() == "old output\n"
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler", "old"]


def test_matrix_market_long_comment_line(tmp_path):
    path = tmp_path / "long.mtx"
    limit = 1 << 20
    with open(path, "w") as fh:
        fh.write("%%MatrixMarket matrix coordinate real general\n")
        fh.write("%" + "c" * (3 * limit) + "\n% short\n%" + "d" * (limit - 1) + "\n")
        fh.write("3 4 2\n1 1 1.5\n3 4 -2\n")
    assert mtx_header(str(path)) == (3, 4, 2)
    np.testing.assert_array_equal(read_csr_block(str(path)).to_scipy().toarray(),
                                  [[1.5, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, -2]])
    bad = tmp_path / "bad.mtx"
    with open(bad, "w") as fh:
        fh.write("%%MatrixMarket matrix coordinate real general\n% c\n")
        fh.write("3 4 2" + " " * (2 * limit) + "7\n1 1 1\n")
    from distmm.errors import InputError

    with pytest.raises(InputError, match=r"line 3: the size line is longer than"):
        mtx_header(str(bad))


def test_json_report_of_calibrate_is_atomic(tmp_path):
    from distmm.perf.calibrate import save

    save(str(tmp_path / "m.json"), {"alpha": 1.0})
    assert json.loads((tmp_path / "m.json").read_text()) == {"alpha": 1.0}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    assert stat.S_ISREG(os.stat(tmp_path / "m.json").st_mode)
