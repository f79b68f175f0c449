"""The dense blocks distmm allocates start on a 64-byte cache line (distmm/core/aligned.py):
``S.dense`` and ``S.scatter`` blocks, every operation's result where no ``out=`` is given,
and the scratch buffers the families gather rows from (shift buffers, replicated
superblocks). Arrays the caller passes are used as they are."""

from __future__ import annotations

import numpy as np
import pytest
from families import FAMILY_C, build, width
from mpi4py import MPI
from oracle import problem

from distmm.core.aligned import is_aligned

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("name,c", FAMILY_C)
def test_blocks_results_and_buffers_are_aligned(name, c):
    r = width(name, c, "awkward")
    S, A, B = problem(23, 29, r, seed=5)
    obj = build(name, S, c, r, root=None, dtype=np.float32)
    try:
        blocks = [obj.dense("a", r), obj.dense("b", r, fill=1.0),
                  obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)]
        A_loc, B_loc = blocks[2], blocks[3]
        blocks += [obj.spmm_a(B_loc), obj.spmm_b(A_loc)]
        for s in obj.strategies:
            blocks += [obj.fusedmm_a(A_loc, B_loc, s), obj.fusedmm_b(A_loc, B_loc, s)]
        bad = [k for k, X in enumerate(blocks) if not is_aligned(X)]
        assert not bad, f"blocks {bad} are not aligned"
        # every scratch buffer that holds dense rows (float, 2-D) is aligned
        rows = [buf for buf in obj._kernels.scratch.values()
                if isinstance(buf, np.ndarray) and buf.ndim == 2]
        assert all(is_aligned(buf) for buf in rows)
    finally:
        obj.close()
