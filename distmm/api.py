"""The entry point applications use: distribute S once, then call the kernels many times."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.algorithms.base import DistributedAlgorithm
from distmm.algorithms.dense_replicate_25d import DenseReplicate25D
from distmm.algorithms.dense_shift_15d import DenseShift15D
from distmm.algorithms.sparse_replicate_25d import SparseReplicate25D
from distmm.algorithms.sparse_shift_15d import SparseShift15D
from distmm.coo import CooShare
from distmm.errors import require
from distmm.kernels import NodeModel

ALGORITHMS: dict[str, type[DistributedAlgorithm]] = {
    DenseShift15D.name: DenseShift15D,
    SparseShift15D.name: SparseShift15D,
    DenseReplicate25D.name: DenseReplicate25D,
    SparseReplicate25D.name: SparseReplicate25D,
}
OPS = ("sddmm", "spmm-a", "spmm-b", "fusedmm-a", "fusedmm-b")


def as_coo_share(S, comm: MPI.Comm, root: int | None = 0) -> CooShare:
    """Turn what the caller has into this rank's COO share (collective).

    ``S`` may be a path to a Matrix Market file (``.mtx`` or ``.mtx.gz``; every rank reads its
    own part), a :class:`CooShare` (each rank's own entries, e.g. from a generator), or a scipy
    sparse matrix held by ``root`` (the other ranks pass None) or by every rank (``root=None``).
    """
    if isinstance(S, CooShare):
        return S
    if isinstance(S, (str, os.PathLike)):
        from distmm.io import read_matrix_market

        return read_matrix_market(S, comm)
    if S is None or sp.issparse(S):
        return CooShare.from_scipy(S, comm, root=root)
    require(False, f"cannot distribute an object of type {type(S).__name__}; pass a path, a "
                   "CooShare or a scipy sparse matrix")
    raise AssertionError  # unreachable


def distribute(S, comm: MPI.Comm = MPI.COMM_WORLD, algorithm: str = "15d-dense-shift",
               c: int = 1, r: int | None = None, node_model: str | NodeModel = "reference",
               dtype=np.float32, permute: bool = True, seed: int = 0, order: str = "fiber",
               root: int | None = 0, check_finite: bool = True,
               overlap: bool = False, checks: str = "once") -> DistributedAlgorithm:
    """Place the sparse matrix S on a process grid for repeated SDDMM / SpMM / FusedMM calls.

    Collective over ``comm``. ``algorithm`` picks the family (see :data:`ALGORITHMS`), ``c``
    the replication factor, ``node_model`` the local kernel, ``dtype`` float32 or float64.
    The dense width r is chosen per call (read from the blocks): ``r`` here is only a default
    width for ``S.dense(side)`` and ``S.dense_cols(side, rank)`` without an r; when given it
    must satisfy the family's minimum (``S.r_rule()``). ``checks`` is "once" (default: full
    validation and cross-rank agreement on the first call of each kind, cheap local checks
    after), "always" or "off" (see :mod:`distmm.algorithms.calls` for what each gives up).
    The returned object owns sub-communicators: ``S.close()`` or ``with distribute(...) as
    S:`` frees them.
    ``permute`` applies a random symmetric row/column permutation (seeded by ``seed``) for load
    balance; results gathered with the object's helpers are always in the original order.
    Every parameter error raises the same :class:`distmm.errors.InputError` on every rank
    before any data moves. ``overlap`` overlaps each propagation shift with the local kernel
    (non-blocking send/receive into a second buffer) in the families that support it.
    """
    require(algorithm in ALGORITHMS,
            f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[algorithm]
    # Check the grid parameters before touching the file, so every rank fails fast and alike.
    require(isinstance(c, int) and c >= 1 and comm.Get_size() % c == 0,
            f"replication factor c={c!r} must be a positive divisor of p={comm.Get_size()}")
    require(not overlap or getattr(cls, "supports_overlap", False),
            f"{algorithm} does not support --overlap")
    share = as_coo_share(S, comm, root=root)
    extra = {"overlap": True} if overlap else {}
    return cls(share, comm, c=c, r=r, node_model=node_model, dtype=dtype, permute=permute,
               seed=seed, order=order, check_finite=check_finite, checks=checks, **extra)


def run_op(obj: DistributedAlgorithm, op: str, A_loc: np.ndarray | None,
           B_loc: np.ndarray | None, strategy: str | None = None) -> np.ndarray:
    """Run one named operation (CLI spelling, e.g. ``"fusedmm-a"``) on distributed blocks.

    Collective. ``strategy`` (FusedMM only) defaults to the family's most communication-eliding
    one. Returns the SDDMM values (value order) or this rank's dense output block.
    """
    require(op in OPS, f"unknown operation {op!r}; choose one of {', '.join(OPS)}")
    if strategy is None or strategy == "-":
        strategy = obj.strategies[-1]
    if op == "sddmm":
        return obj.sddmm(A_loc, B_loc)
    if op == "spmm-a":
        return obj.spmm_a(B_loc)
    if op == "spmm-b":
        return obj.spmm_b(A_loc)
    if op == "fusedmm-a":
        return obj.fusedmm_a(A_loc, B_loc, strategy=strategy)
    return obj.fusedmm_b(A_loc, B_loc, strategy=strategy)


def op_inputs(op: str) -> tuple[bool, bool]:
    """Whether an operation reads A and whether it reads B."""
    return op != "spmm-a", op != "spmm-b"


def op_output_side(op: str) -> str | None:
    """The side of a dense result ("a" or "b"), or None for SDDMM's sparse result."""
    return {"sddmm": None, "spmm-a": "a", "spmm-b": "b", "fusedmm-a": "a",
            "fusedmm-b": "b"}[op]


def op_flops(op: str, nnz: int, r: int) -> float:
    """Useful flops of one operation: 2 nnz r for SDDMM or SpMM, twice that for FusedMM."""
    return (4.0 if op.startswith("fusedmm") else 2.0) * nnz * r
