"""ALS's memory model (distmm.apps.als_memory) against the operating system, and its use by
``distmm als --memory-limit``.

The measured peak resident set of a rank running ALS (Linux VmHWM above its baseline after a
warm-up) stays within 1.3x of the model, for every family at its deepest c and at c = 1, with
a held-out test set; sizes where the modelled bytes (tens to hundreds of MB a rank) dominate
the interpreter's and MPI's noise. And a --rank that does not fit ends on every rank with one
line naming the --rank that does, before a rating is read.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi4py import MPI

import distmm
from distmm.apps.als import auto_choice, fit
from distmm.apps.als_memory import als_memory, als_memory_problem
from distmm.cli import main
from distmm.core.memory import (
    baseline_rss,
    map_large_allocations,
    peak_rss,
    reset_peak_rss,
)
from distmm.io.generate import erdos_renyi
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
TOLERANCE = 1.3
RANK = 96


def _cases():
    out = []
    for algorithm in distmm.ALGORITHMS:
        cs = costmodel.valid_cs(algorithm, P, RANK)
        out += [(algorithm, c) for c in sorted({cs[0], cs[-1]})]
    return out


@pytest.mark.skipif(P not in (1, 2, 4), reason="measured at p = 1, 2 and 4")
@pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux's /proc/self/clear_refs")
@pytest.mark.parametrize("algorithm,c", _cases())
def test_als_peak_rss_within_model(algorithm, c):
    n, fraction = 12000 * P, 0.1
    map_large_allocations()  # the peak then follows the live arrays, not glibc's history
    fit(erdos_renyi(64, 48, 3, 1, COMM), COMM, rank=RANK, epochs=1, cg_iters=1,
        algorithm=algorithm, c=c).close()  # compiled kernels and MPI's buffers: not counted
    base = baseline_rss()  # the warm-up's objects freed
    share = erdos_renyi(n, n, 8, 5, COMM)
    nnz = int(COMM.allreduce(share.nnz))
    reset_peak_rss()
    # natural-order blocks (the model then counts no partitioning on rank 0): on a random
    # graph a partition saves nothing but time
    result = fit(share, COMM, rank=RANK, epochs=1, cg_iters=2, algorithm=algorithm, c=c,
                 test_fraction=fraction, permute="blocks")
    del share
    peak = peak_rss() - base
    held = int(COMM.allreduce(0 if result.test_obj is None else result.test_obj.values.size))
    # this rank's sizes: the pattern-free bound counts every row of the other blocks as
    # received, which the sparsity-aware family receives only where S has entries
    model = als_memory(algorithm, result.config.strategy, n, n, nnz - held, held, RANK, P, c,
                       local=result.obj.memory_counts(RANK), permute="blocks")
    result.close()
    ratios = COMM.allgather(peak / model.peak)
    assert all(1 / TOLERANCE <= x <= TOLERANCE for x in ratios), (
        f"{algorithm} c={c}: measured/model per rank {[round(x, 2) for x in ratios]}; "
        f"model {model.as_dict()}")


def test_the_named_rank_fits_and_one_more_does_not():
    limit = 64 << 20
    msg = als_memory_problem(limit, "15d-dense-shift", "fusion", 5000, 7000, 90000, 10000,
                             4096, P, 1)
    fits = int(msg.split("; --rank ")[1].split(" fits")[0])
    peak = [als_memory("15d-dense-shift", "fusion", 5000, 7000, 90000, 10000, r, P, 1).peak
            for r in (fits, fits + 1)]
    assert peak[0] <= limit < peak[1]
    assert als_memory_problem(limit, "15d-dense-shift", "fusion", 5000, 7000, 90000, 10000,
                              fits, P, 1) is None


@pytest.mark.parametrize("limit", ["auto", "50M"])
@pytest.mark.parametrize("algorithm", ["15d-dense-shift", "auto"])
def test_a_huge_rank_is_refused_in_one_line_before_reading(shared_tmp, capsys, limit,
                                                           algorithm):
    """The ratings' data lines are garbage: reading them would fail differently, so the
    refusal must come from the header alone. Under --algorithm auto the limit applies to the
    family the planner picks for these sizes, which the message names."""
    path = os.path.join(shared_tmp, "ratings-bad-data.mtx")
    if COMM.rank == 0:
        with open(path, "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n900 1700 3\n"
                     "this is not a rating\n")
    COMM.Barrier()
    out = os.path.join(shared_tmp, "never-als.h5")
    rank = 10**9 if limit == "auto" else 20000
    code = main(["als", "--ratings", path, "--rank", str(rank), "--out", out,
                 "--memory-limit", limit, "--algorithm", algorithm])
    err = capsys.readouterr().err
    assert code == 2
    if COMM.rank == 0:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("distmm: error: ALS with --rank "), err
        chosen = (auto_choice(900, 1700, 3, rank, P) if algorithm == "auto"
                  else (algorithm, "fusion", 1))
        assert f"({chosen[0]}, strategy {chosen[1]}, c = {chosen[2]})" in err, err
        assert "more than the memory limit" in err and "fits (docs/memory.md)" in err, err
        assert "Traceback" not in err and "line 3" not in err
    else:
        assert err == ""
    COMM.Barrier()
    assert not os.path.exists(out)


def _small_ratings(path: str, seed: int) -> str:
    """Rank 0 writes 200 ratings of 30 users and 40 items to ``path``; every rank returns it."""
    if COMM.rank == 0:
        rng = np.random.default_rng(seed)
        rows, cols = rng.integers(1, 31, 200), rng.integers(1, 41, 200)
        with open(path, "w") as fh:
            fh.write("%%MatrixMarket matrix coordinate real general\n30 40 200\n")
            fh.writelines(f"{u} {i} {1 + (u * i) % 5}\n" for u, i in zip(rows, cols, strict=True))
    COMM.Barrier()
    return path


def test_a_fitting_rank_runs(shared_tmp, capsys):
    path = _small_ratings(os.path.join(shared_tmp, "ratings-small.mtx"), 0)
    assert main(["als", "--ratings", path, "--rank", "4", "--epochs", "1",
                 "--memory-limit", "1G"]) == 0
    capsys.readouterr()


def test_auto_runs_the_family_it_checked(shared_tmp, capsys):
    """--algorithm auto under a limit runs the planner's pick with the ratings' pattern
    (every family, the sparsity-aware one included, among those that fit), as the final
    record says, and that pick's ALS memory fits the limit."""
    import json

    from distmm.apps.als_io import read_ratings
    from distmm.perf.sparse_planner import plan_distributed

    path = _small_ratings(os.path.join(shared_tmp, "ratings-auto.mtx"), 1)
    assert main(["als", "--ratings", path, "--rank", "8", "--epochs", "1", "--algorithm",
                 "auto", "--memory-limit", "1G"]) == 0
    out = capsys.readouterr().out
    share = read_ratings(path, COMM)
    rows, order = plan_distributed(share, COMM, 8, None, tuple(distmm.ALGORITHMS),
                                   memory_limit=2**30, dtype=np.dtype("float64"))
    nnz = int(COMM.allreduce(share.nnz))
    if COMM.rank == 0:
        done = [json.loads(line) for line in out.splitlines() if '"als-done"' in line][0]
        pick = (rows[0]["algorithm"], rows[0]["strategy"], rows[0]["c"])
        assert (done["algorithm"], done["strategy"], done["c"]) == pick
        assert als_memory_problem(2**30, *pick[:2], 30, 40, nnz, 0, 8, P, pick[2],
                                  permute=order or "auto") is None
