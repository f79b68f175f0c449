"""Assembling a distributed matrix: what :class:`~distmm.algorithms.base.DistributedMatrix`'s
constructor does before the family places S.

:func:`assemble` checks the construction arguments on every rank alike, makes the matrix's
parts (the operation front-ends and their checks, the prepared kernel calls, the named values,
the edge primitives' state, the stats and the counting communicators, the placement), settles
the node model and each rank's numba threads, agrees on the rank's share of S, chooses or
shares the load-balancing permutations and builds the process grid with its
sub-communicators. The family's ``_setup`` then places S on that grid.
"""

from __future__ import annotations

import weakref

import numpy as np
from mpi4py import MPI

from distmm.algorithms.calls import CHECKS
from distmm.algorithms.operations import Operations
from distmm.algorithms.placement import Placement, check_share
from distmm.algorithms.prepared import PreparedCalls
from distmm.algorithms.stats import MatrixStats
from distmm.algorithms.values import NamedValues
from distmm.core.comm import CountingComm, pairwise_setting
from distmm.core.coo import CooShare
from distmm.core.grid import ProcessGrid25D
from distmm.core.permute import applied_mode, inverse_permutation
from distmm.errors import require
from distmm.kernels import NodeModel, make_node_model, threads
from distmm.ops.state import EdgeState

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def assemble(S, source: CooShare, comm: MPI.Comm, c, r, node_model: str | NodeModel,
             dtype, permute, seed: int, order: str, check_finite: bool, overlap: bool,
             checks: str, layout_of=None) -> None:
    """Set up the distributed matrix ``S`` (a family's instance, before its ``_setup``) from
    its constructor's arguments (described at
    :class:`~distmm.algorithms.base.DistributedMatrix`). Collective over ``comm``: every
    argument is checked the same way on every rank before any message, and a share of S
    one rank finds wrong is agreed over all of them. ``layout_of``: the distributed matrix
    given as ``permute``, whose permutations S shares (None: ``permute`` is a mode)."""
    S._check_arguments(comm.Get_size(), c, order, source.shape)
    S.c = int(c)
    S.overlap = bool(overlap)
    dtype = np.dtype(dtype)
    require(dtype in FLOAT_DTYPES, f"dtype must be float32 or float64, got {dtype}")
    require(checks in CHECKS,
            f"checks must be one of {', '.join(map(repr, CHECKS))}, got {checks!r}")
    S.comm = comm
    S.p = comm.Get_size()
    S.rank = comm.Get_rank()
    S.dtype = dtype
    S.shape = (int(source.shape[0]), int(source.shape[1]))
    S.check_finite = check_finite
    S.checks = checks
    # the operation front-ends (operations.py), which own the per-call checks and what
    # they remember (calls.py); the plans, the layout checks and the families read those
    # as _calls
    S._ops = Operations(S)
    S._calls = S._ops.checks
    # Rank-independent (the family sets its grid sizes first), so before any message.
    S.r = None if r is None else S._check_r(r)
    # Each rank's share of its node's cores as numba threads, before any kernel runs
    # (collective; distmm/kernels/threads.py).
    threads.settle(comm)
    S._closed = False
    # the scratch buffers and prepared kernel calls kept between calls (prepared.py),
    # and the node model's plan state they were prepared under (calls.py)
    S._kernels = PreparedCalls(S)
    S._plan_state = None
    S._kind: str | None = None
    # set only during a plan's full call (plan.py, trace.py)
    S._tracer = None
    # whether the call under way repeats the last call's operands or is a plan's
    # (calls.py, _begin; prepared.py)
    S._repeat = False
    # the plans made on this matrix, whose kept steps the events that may make them stale
    # drop (plan.py; PreparedCalls.forget)
    S._plans: weakref.WeakSet = weakref.WeakSet()
    S._col_cache: dict[int, np.ndarray] = {}
    # named vectors of edge values beside S's own (values.py)
    S._named = NamedValues(dtype)
    S._rows_cache: dict[str, int] = {}
    # what the edge primitives keep between calls, their communicators included
    # (distmm/ops/state.py; freed by close)
    S._edges = EdgeState()
    S.stats = MatrixStats(S)
    S.world = CountingComm(comm, S.stats)
    S.placement = Placement(comm, S.world, S.stats, dtype, S.shape)
    # A name makes a fresh model with default options; an instance (configured by the
    # caller, e.g. from --node-config) is used as it is.
    S.kernel = (node_model if isinstance(node_model, NodeModel)
                else make_node_model(node_model))
    S.node_model = S.kernel.name
    m, n = S.shape
    # before the weights index by it; the pairwise-exchange threshold decides, on every
    # rank alike, how the fiber collectives move (distmm.core.comm)
    pairwise_problem, pairwise = pairwise_setting()
    S._agree(check_share(source, check_finite) or pairwise_problem, same=pairwise)
    if layout_of is not None:  # share another object's layout
        require(layout_of.shape == S.shape and layout_of.p == S.p,
                f"permute=<object>: the object's S is {layout_of.shape[0]} x "
                f"{layout_of.shape[1]} on {layout_of.p} ranks, this S is {m} x {n} on "
                f"{S.p}; a layout can only be shared by matrices of one shape")
        S.permute = layout_of.permute
        S.row_perm, S.col_perm = layout_of.row_perm, layout_of.col_perm
    else:
        S.permute = permute
        S.row_perm, S.col_perm = S._balance_permutations(
            source, applied_mode(permute, S.p), seed)
    S.row_inv = inverse_permutation(S.row_perm)
    S.col_inv = (S.row_inv if S.col_perm is S.row_perm
                 else inverse_permutation(S.col_perm))
    S.grid = S.grid_class.create(comm, S.c, order)
    S.fiber = CountingComm(S.grid.fiber_comm, S.stats)
    S.layer = CountingComm(S.grid.layer_comm, S.stats)
    if isinstance(S.grid, ProcessGrid25D):  # s x s layers: Cannon shifts along rows, columns
        S.s = S.grid.s
        S.row = CountingComm(S.grid.row_comm, S.stats)
        S.col = CountingComm(S.grid.col_comm, S.stats)
    else:  # layers of q ranks
        S.q = S.grid.q


__all__ = ["FLOAT_DTYPES", "assemble"]
