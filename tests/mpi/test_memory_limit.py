"""--memory-limit: parsed on every rank, resolved collectively (cgroup or physical memory over
the ranks of a node), and a job whose modelled memory per rank exceeds it refused up front on
every rank with status 2, naming the c or p that would fit; the planner leaves such
candidates out."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from mpi4py import MPI

from distmm.cli import main
from distmm.core.memory import available_bytes, parse_memory_limit, physical_memory, ranks_per_node
from distmm.core.partition import default_method, partition_peak_bytes
from distmm.errors import InputError
from distmm.perf.planner import family_memory, memory_peak, plan

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
M, N, R = 61, 47, 8


@pytest.fixture(scope="module")
def files(shared_tmp):
    d = str(shared_tmp)
    if COMM.rank == 0:
        S = sp.random(M, N, density=0.2, format="coo", random_state=3)
        scipy.io.mmwrite(os.path.join(d, "mem_S.mtx"), S)
        rng = np.random.default_rng(1)
        np.save(os.path.join(d, "mem_A.npy"), rng.standard_normal((M, R)))
        np.save(os.path.join(d, "mem_B.npy"), rng.standard_normal((N, R)))
    COMM.Barrier()
    nnz = scipy.io.mminfo(os.path.join(d, "mem_S.mtx"))[2]
    return d, nnz


def _run(files, out: str, *extra: str) -> list[str]:
    d, _ = files
    return ["run", "fusedmm-a", "--sparse", os.path.join(d, "mem_S.mtx"), "--a",
            os.path.join(d, "mem_A.npy"), "--b", os.path.join(d, "mem_B.npy"), "--out",
            os.path.join(d, out), *extra]


def _refused(code: int, err: str, *patterns: str) -> None:
    assert code == 2
    if COMM.rank == 0:
        assert "distmm: error:" in err
        for pattern in patterns:
            assert pattern in err, err
    else:
        assert err == ""


@pytest.mark.parametrize("text,expected", [("123456", 123456), ("512M", 512 * 10**6),
                                           ("4GiB", 4 * 2**30), ("1.5k", 1500),
                                           ("2 MiB", 2 * 2**20), ("AUTO", None)])
def test_parse_memory_limit(text, expected):
    assert parse_memory_limit(text) == expected


@pytest.mark.parametrize("text", ["lots", "", "-5", "0", "12 parsecs", "1e400"])
def test_parse_memory_limit_refuses(text):
    with pytest.raises(InputError, match="--memory-limit"):
        parse_memory_limit(text)


def test_available_bytes_agrees_across_ranks():
    assert ranks_per_node(COMM) == P  # every rank of this test runs on this machine
    got = available_bytes(COMM)
    assert COMM.allgather(got) == [got] * P
    assert got is not None and 0 < got <= physical_memory() // P


def test_run_refuses_unparsable_limit(files, capsys):
    code = main(_run(files, "never1.h5", "--memory-limit", "lots"))
    _refused(code, capsys.readouterr().err, "--memory-limit 'lots' is not a size")
    assert not os.path.exists(os.path.join(files[0], "never1.h5"))


def test_run_refuses_limit_below_every_candidate(files, capsys):
    code = main(_run(files, "never2.h5", "--memory-limit", "1000"))
    _refused(code, capsys.readouterr().err, "more than the memory limit of 1000 B per rank",
             f"no c fits on {P} ranks")
    assert not os.path.exists(os.path.join(files[0], "never2.h5"))


@pytest.mark.skipif(P == 1, reason="needs a c > 1 that uses more memory than c = 1")
def test_run_names_the_c_that_fits(files, capsys):
    _, nnz = files
    small = memory_peak("15d-dense-shift", "fusion", M, N, nnz, R, P, 1)
    assert memory_peak("15d-dense-shift", "fusion", M, N, nnz, R, P, P) > small
    code = main(_run(files, "never3.h5", "-c", str(P), "--memory-limit", str(small)))
    _refused(code, capsys.readouterr().err, f"c = {P}) on {P} ranks", "use -c 1 (")


@pytest.mark.skipif(P == 1, reason="one rank partitions nothing")
@pytest.mark.skipif(default_method((M, N), 2) is None, reason="needs kahip (distmm[partition])")
def test_run_refuses_a_limit_below_rank_0s_partitioning(files, capsys):
    """The sparsity-aware family's default order partitions S on rank 0 at distribute: a
    limit that fits the run but not that is refused on every rank before any data is read,
    naming the partitioner's share and the ways around it; --permute blocks (or a saved
    partition) needs no partitioning and runs within the same limit."""
    _, nnz = files
    aware = "15d-sparse-aware"
    made = family_memory(aware, "fusion", M, N, nnz, R, P, 1, permute="auto")
    blocks = memory_peak(aware, "fusion", M, N, nnz, R, P, 1, permute="blocks")
    assert blocks < made.partitioner
    limit = str((blocks + made.partitioner) // 2)
    code = main(_run(files, "never_part.h5", "--algorithm", aware, "--memory-limit", limit))
    _refused(code, capsys.readouterr().err, "rank 0 partitions S at distribute",
             "--partition S.part.h5", "--permute blocks")
    assert not os.path.exists(os.path.join(files[0], "never_part.h5"))
    out = "fits_blocks.h5"
    assert main(_run(files, out, "--algorithm", aware, "--permute", "blocks",
                     "--memory-limit", limit)) == 0
    capsys.readouterr()
    COMM.Barrier()
    assert os.path.exists(os.path.join(files[0], out))


def _record(monkeypatch, module, name: str) -> list:
    """Record the calls of ``module.name`` (then call it)."""
    calls, real = [], getattr(module, name)

    def recorded(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return calls


@pytest.mark.skipif(P == 1, reason="one rank partitions nothing")
@pytest.mark.skipif(default_method((M, N), 2) is None, reason="needs kahip (distmm[partition])")
def test_auto_refuses_a_named_partitioner_over_the_limit_before_reading(files, monkeypatch,
                                                                      capsys):
    """--algorithm auto --permute kahip leaves only the sparsity-aware family, in rank 0's
    partition: where the partitioner exceeds the limit, every rank refuses (exit 2) from S's
    header, before S, A or B is read, naming its share and the ways around it."""
    import distmm.io.npy
    from distmm import api

    _, nnz = files
    need = partition_peak_bytes(M, N, nnz, P)
    reads = (_record(monkeypatch, api, "as_coo_share")
             + _record(monkeypatch, distmm.io.npy, "load_dense_npy"))
    code = main(_run(files, "never_auto.h5", "--algorithm", "auto", "--permute", "kahip",
                     "--memory-limit", str(need // 2)))
    _refused(code, capsys.readouterr().err, "rank 0 partitions S at distribute",
             "--partition S.part.h5", "--permute blocks")
    assert reads == []
    assert not os.path.exists(os.path.join(files[0], "never_auto.h5"))


@pytest.mark.skipif(P == 1, reason="one rank partitions nothing")
@pytest.mark.skipif(default_method((M, N), 2) is None, reason="needs kahip (distmm[partition])")
def test_auto_under_a_limit_the_partitioner_exceeds_runs_without_partitioning(
        files, monkeypatch, capsys):
    """A limit every candidate fits in natural blocks but rank 0's partitioner does not:
    --algorithm auto plans and runs without partitioning S (the plan line says so) and gives
    scipy's result; without the limit the same command partitions (the check can fail)."""
    import h5py

    from distmm.algorithms import sparse_aware_15d

    d, nnz = files
    need = partition_peak_bytes(M, N, nnz, P)
    limit = need // 2
    assert max(row["memory"] for row in plan(M, N, nnz, R, P)) < limit
    assert memory_peak("15d-sparse-aware", "fusion", M, N, nnz, R, P, 1,
                       permute="blocks") < limit
    for given, partitions in ((None, True), (limit, False)):
        calls = _record(monkeypatch, sparse_aware_15d, "partition")
        out = f"auto_{given}.h5"
        extra = ("--memory-limit", str(given)) if given else ()
        assert main(_run(files, out, "--algorithm", "auto", "--dtype", "float64",
                         *extra)) == 0
        lines = capsys.readouterr().out.splitlines()
        # rank 0 partitions (in the planner) where the limit allows it, nowhere else
        assert bool(COMM.allreduce(len(calls))) is partitions
        monkeypatch.undo()
        COMM.Barrier()
        if COMM.rank == 0:
            planned = [json.loads(x) for x in lines if '"plan"' in x][0]
            assert ("left_out" in planned) is not partitions
            if not partitions:
                assert "without its default partition" in planned["left_out"]
                assert planned.get("permute", "blocks") == "blocks"
            S = sp.csr_matrix(scipy.io.mmread(os.path.join(d, "mem_S.mtx")))
            A, B = np.load(os.path.join(d, "mem_A.npy")), np.load(os.path.join(d, "mem_B.npy"))
            with h5py.File(os.path.join(d, out)) as f:
                got = f[list(f.keys())[0]][...]
            np.testing.assert_allclose(got, S.multiply(A @ B.T) @ B, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("limit", ["auto", "none", "1G"])
def test_run_within_the_limit_writes(files, limit, capsys):
    out = f"fits_{limit}.h5"
    assert main(_run(files, out, "--memory-limit", limit)) == 0
    capsys.readouterr()
    COMM.Barrier()
    assert os.path.exists(os.path.join(files[0], out))


def test_bench_refuses_too_small_limit(capsys):
    code = main(["bench", "--n", "500", "--r", "8", "--repeat", "1", "--memory-limit", "10k"])
    _refused(code, capsys.readouterr().err, "more than the memory limit")


def test_plan_column_and_limit(capsys):
    args = ["plan", "--m", "5000", "--nnz", "40000", "--r", "32", "-p", "4"]
    assert main(args) == 0
    table = capsys.readouterr().out
    if COMM.rank == 0:
        assert "memory/rank" in table and "MiB" in table
    rows = plan(5000, 5000, 40000, 32, 4)
    cut = sorted(row["memory"] for row in rows)[len(rows) // 2]
    assert main(args + ["--json", "--memory-limit", str(cut)]) == 0
    printed = capsys.readouterr().out
    if COMM.rank == 0:
        kept = [json.loads(line) for line in printed.splitlines()]
        assert kept and all(row["memory"] <= cut for row in kept)
        assert len(kept) == sum(row["memory"] <= cut for row in rows) < len(rows)
    assert main(args + ["--memory-limit", "300k"]) == 2
    _refused(2, capsys.readouterr().err, "the candidate that needs least",
             "no c fits on 4 ranks; the smallest rank count that fits is p =")
    # Every rank holds the permutations whole (16 (m + n) bytes): no p gets below them.
    assert main(args + ["--memory-limit", "100k"]) == 2
    _refused(2, capsys.readouterr().err, "nor on up to 256 ranks")
    assert main(args + ["--memory-limit", "twelve"]) == 2
    _refused(2, capsys.readouterr().err, "is not a size")
