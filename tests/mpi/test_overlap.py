"""Overlapping shifts with local kernels changes nothing but time, in every family."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import grid_cs
from mpi4py import MPI

import distmm
from distmm.core.operations import CLI_OPS
from distmm.perf import bench

COMM = MPI.COMM_WORLD
P = COMM.Get_size()


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_overlap_same_results_and_words(algorithm):
    cls = distmm.ALGORITHMS[algorithm]
    assert cls.supports_overlap
    r = 9
    rng = np.random.default_rng(13)
    S = sp.random(35, 26, density=0.2, random_state=rng, format="coo")
    A, B = rng.standard_normal((35, r)), rng.standard_normal((26, r))
    for c in grid_cs(algorithm, r):
        plain = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                  root=None)
        over = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=r, dtype=np.float64,
                                 root=None, overlap=True)
        A_loc, B_loc = plain.scatter("a", A, root=None), plain.scatter("b", B, root=None)
        for op in CLI_OPS:  # the command line's spellings
            for strategy in (cls.strategies if op.startswith("fused") else ("-",)):
                outs, words = [], []
                for obj in (plain, over):
                    bench.run_op(obj, op, A_loc, B_loc, strategy)  # builds S^T if needed
                    obj.stats.reset()
                    outs.append(bench.run_op(obj, op, A_loc, B_loc, strategy))
                    words.append({ph: obj.stats.words(ph) for ph in
                                  ("replication", "propagation", "reduction")})
                np.testing.assert_array_equal(outs[0], outs[1], err_msg=f"{op} {strategy} {c}")
                assert words[0] == words[1]
