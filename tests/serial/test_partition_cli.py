"""`distmm partition` and `distmm plan --sparse` in-process: files written and reused, one JSON
line per candidate with the fields users compare, and refusals with exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from distmm.algorithms.sparse_aware_15d import PARTITION_MIN_SAVING
from distmm.cli import main
from distmm.core.exchange import exchange_model
from distmm.core.partition import load_partition
from distmm.perf import costmodel
from distmm.perf.sparse_planner import order


def write_graph(path, k=12, seed=0):
    idx = np.arange(k * k).reshape(k, k)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel()]
    shuffle = np.random.default_rng(seed).permutation(k * k)
    S = sp.coo_matrix((np.ones(rows.size), (shuffle[rows], shuffle[cols])), shape=(k * k,) * 2)
    S = (S + S.T).tocoo()
    scipy.io.mmwrite(str(path), S)
    return S


def lines(capsys):
    return [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]


def test_plan_sparse_prints_every_family_with_exact_words(tmp_path, capsys):
    S = write_graph(tmp_path / "g.mtx")
    assert main(["plan", "--sparse", str(tmp_path / "g.mtx"), "-p", "8", "--r", "16"]) == 0
    rows = lines(capsys)
    names = {row["algorithm"] for row in rows}
    assert names == {"15d-dense-shift", "15d-sparse-shift", "25d-dense-replicate",
                     "25d-sparse-replicate", "15d-sparse-aware"}
    for row in rows:
        assert {"algorithm", "strategy", "c", "max_words", "memory_bytes"} <= set(row)
    # the sparse-aware rows: the busiest rank's words of the pattern model, independently
    # the default order: a KaHIP partition (its parts set the blocks) when installed, or the
    # natural blocks where, at that c, the partition does not save their busiest rank at
    # least PARTITION_MIN_SAVING of its words
    orders = [order(S.row, S.col, S.shape, 8, "auto")]
    if orders[0][3]["permute"] == "kahip":
        orders.append(order(S.row, S.col, S.shape, 8, "blocks"))
    for c in (1, 2, 4, 8):
        counted = []
        for row_inv, col_inv, offsets, info in orders:
            model = exchange_model(row_inv[S.row], col_inv[S.col], S.shape, 8, c,
                                   offsets=offsets)
            a, t = model.a_rows, model.super_rows
            counted.append((int((16 * (model.send_rows + (c - 1) * a + (t - a))).max()),
                            info["permute"]))
        best = counted[0]
        if len(counted) == 2 and counted[0][0] > (1 - PARTITION_MIN_SAVING) * counted[1][0]:
            best = counted[1]
        got = [row for row in rows if row["algorithm"] == "15d-sparse-aware" and row["c"] == c
               and row["strategy"] == "fusion"]
        assert (got[0]["max_words"], got[0]["permute"]) == best
    dense = [row for row in rows if row["algorithm"] == "15d-dense-shift" and row["c"] == 1
             and row["strategy"] == "fusion"][0]
    assert dense["max_words"] == costmodel.total(costmodel.exact(
        "15d-dense-shift", "fusedmm_a", 144, 144, 16, 8, 1, "fusion"))


@pytest.mark.parametrize("method", ["kahip", "kahypar"])
def test_partition_file_is_written_and_used_by_plan(tmp_path, capsys, method):
    pytest.importorskip(method)
    write_graph(tmp_path / "g.mtx")
    out = tmp_path / "g.part.h5"
    assert main(["partition", str(tmp_path / "g.mtx"), "-p", "4", "--out", str(out),
                 "--method", method]) == 0
    record = lines(capsys)[0]
    assert record["method"] == method and record["p"] == 4 and record["n"] == 144
    assert record["volume"] < record["natural_volume"]
    part = load_partition(out)
    assert part.p == 4 and part.n == 144
    assert main(["plan", "--sparse", str(tmp_path / "g.mtx"), "-p", "4", "--r", "8",
                 "--partition", str(out)]) == 0
    by_file = [r for r in lines(capsys) if r["algorithm"] == "15d-sparse-aware"]
    assert by_file and all(r["permute"] == "partition" for r in by_file)
    # the wrong p is refused
    assert main(["plan", "--sparse", str(tmp_path / "g.mtx"), "-p", "8", "--r", "8",
                 "--partition", str(out)]) == 2
    assert "parts" in capsys.readouterr().err


def test_plan_without_sizes_or_sparse_is_refused(capsys):
    assert main(["plan", "--r", "8", "-p", "4"]) == 2
    assert "--sparse" in capsys.readouterr().err


def test_rectangular_partition_file_is_written_and_used_by_plan(tmp_path, capsys):
    """A rectangular S: the file holds row and column parts, its volume (rows of B sent) is
    counted with the column owners, and plan --sparse --partition prices the family in it."""
    pytest.importorskip("kahip")
    rng = np.random.default_rng(0)
    m, n, p = 60, 90, 4
    group_r, group_c = rng.integers(0, p, m), rng.integers(0, p, n)
    rows = rng.integers(0, m, 400)
    cols = np.array([rng.choice(np.flatnonzero(group_c == group_r[i])) for i in rows])
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(m, n))
    scipy.io.mmwrite(str(tmp_path / "r.mtx"), S)
    out = tmp_path / "r.part.h5"
    assert main(["partition", str(tmp_path / "r.mtx"), "-p", str(p), "--out", str(out)]) == 0
    record = lines(capsys)[0]
    assert (record["n"], record["columns"]) == (m, n)
    assert record["volume"] < record["natural_volume"]
    part = load_partition(out)
    assert part.shape == (m, n) and part.col_parts.shape == (n,)
    assert main(["plan", "--sparse", str(tmp_path / "r.mtx"), "-p", str(p), "--r", "8",
                 "--partition", str(out)]) == 0
    aware = [r for r in lines(capsys) if r["algorithm"] == "15d-sparse-aware"]
    assert aware and all(r["permute"] == "partition" for r in aware)
    # a square S's order refuses it
    write_graph(tmp_path / "g.mtx")
    assert main(["plan", "--sparse", str(tmp_path / "g.mtx"), "-p", str(p), "--r", "8",
                 "--partition", str(out)]) == 2


def test_auto_leaves_out_a_partitioner_over_the_limit():
    """--algorithm auto's check before its planner partitions, from m, n, nnz and p alone:
    under the partitioner's peak the default order becomes the natural blocks (with a note),
    a partitioner named is refused with its share and the ways around it, and at or above the
    peak, without a limit, on one rank or for a saved partition nothing changes."""
    from distmm.core.partition import default_method, partition_peak_bytes
    from distmm.errors import InputError
    from distmm.perf.sparse_planner import partitioner_fit

    m = n = 400
    nnz, p = 3000, 8
    need = partition_peak_bytes(m, n, nnz, p)
    assert partitioner_fit("auto", m, n, nnz, p, need) == ("auto", None)
    assert partitioner_fit("auto", m, n, nnz, p, None) == ("auto", None)
    assert partitioner_fit("kahip", m, n, nnz, 1, 1000) == ("kahip", None)
    assert partitioner_fit("blocks", m, n, nnz, p, 1000) == ("blocks", None)
    if default_method((m, n), p) is not None:
        permute, note = partitioner_fit("auto", m, n, nnz, p, need - 1)
        assert permute == "blocks" and "natural blocks" in note and "rank 0 partitions" in note
    with pytest.raises(InputError, match=r"--partition S\.part\.h5.*--permute blocks"):
        partitioner_fit("kahip", m, n, nnz, p, need - 1)
