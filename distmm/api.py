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
    """Turn what the caller has into this rank's COO share of S.

    Collective over ``comm`` (except for a :class:`CooShare`, which is returned as it is).

    Parameters
    ----------
    S : str, os.PathLike, CooShare, scipy sparse matrix or None
        A Matrix Market file (``.mtx`` or ``.mtx.gz``; every rank reads its own part), a
        :class:`CooShare` (each rank's own entries, e.g. from :mod:`distmm.generate`), or a
        scipy sparse matrix held by ``root`` (the other ranks pass None) or by every rank
        (``root=None``).
    comm : MPI.Comm
        The communicator whose ranks share S.
    root : int or None
        The rank holding a scipy matrix, or None when every rank holds it.

    Returns
    -------
    CooShare
        This rank's entries of S (global coordinates, duplicates not yet summed).

    Raises
    ------
    InputError
        On every rank, for an unreadable or malformed file or an unsupported type.
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
               dtype=np.float32, permute: bool | str = "auto", seed: int = 0,
               order: str = "fiber",
               root: int | None = 0, check_finite: bool = True,
               overlap: bool = False) -> DistributedAlgorithm:
    """Place the sparse matrix S on a process grid for repeated SDDMM / SpMM / FusedMM calls.

    Collective over ``comm``: every rank calls it with the same parameters.

    Parameters
    ----------
    S : str, os.PathLike, CooShare, scipy sparse matrix or None
        The m x n sparse matrix: see :func:`as_coo_share`. Duplicate entries are summed.
    comm : MPI.Comm
        The ranks to distribute over (p = ``comm.Get_size()``).
    algorithm : str
        The family, a key of :data:`ALGORITHMS`: ``"15d-dense-shift"`` (default),
        ``"15d-sparse-shift"``, ``"25d-dense-replicate"`` or ``"25d-sparse-replicate"``.
    c : int
        Replication factor, a positive divisor of p (2.5D families: p/c a perfect square).
    r : int, optional
        Dense width of A and B. Required by the families that split A and B by columns
        (r >= p/c, sqrt(p/c) or sqrt(pc)); ignored by 1.5D dense shifting.
    node_model : str or NodeModel
        The local kernel: a name from :data:`distmm.kernels.NODE_MODELS` or an instance from
        :func:`distmm.kernels.make_node_model`.
    dtype : numpy dtype
        ``float32`` (default) or ``float64``: the type of S's values and the dense blocks.
    permute : {"auto", "blocks", "random", "none"} or bool
        Load balance (seeded by ``seed``): ``"auto"`` (default: none on one rank, else
        ``"blocks"``), ``"blocks"`` (rows go to blocks at random in runs of consecutive ids
        and keep their natural order inside each block, which keeps a real graph's locality),
        ``"random"`` (the paper's uniformly random permutation) or ``"none"``; ``True`` and
        ``False`` mean ``"auto"`` and ``"none"``. Scatter, gather and the results stay in the
        original order either way.
    seed : int
        Seed of the permutation.
    order : {"fiber", "layer"}
        Whether consecutive world ranks share a fiber or a layer.
    root : int or None
        The rank holding a scipy matrix S, or None when every rank holds it.
    check_finite : bool
        Refuse NaN or infinite values in S, in the dense blocks passed to the kernels and in
        ``set_values`` (default True).
    overlap : bool
        Overlap each propagation shift with the local kernel (non-blocking send/receive into
        a second buffer), in the families that support it.

    Returns
    -------
    DistributedAlgorithm
        The object bound to S, the grid, c, the node model and the dtype. Its methods
        (``sddmm``, ``spmm_a``, ``spmm_b``, ``fusedmm_a``, ``fusedmm_b``, ``set_values``,
        ``scatter``, ``gather``, ``report``, ...) are collective and take and return dense
        blocks in its own distribution.

    Raises
    ------
    InputError
        The same error on every rank, before any data moves, for every parameter error (an
        unknown family, c not dividing p, r too small, overlap unsupported) and for a bad
        file or non-finite values.

    Examples
    --------
    Under ``mpiexec -n 4``::

        op = distmm.distribute("graph.mtx", MPI.COMM_WORLD, c=2)
        A = op.scatter("a", A_global)          # A_global on rank 0, None elsewhere
        out = op.fusedmm_a(A, op.scatter("b", B_global))
        full = op.gather("a", out)             # m x r on rank 0, original order
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
               seed=seed, order=order, check_finite=check_finite, **extra)


def run_op(obj: DistributedAlgorithm, op: str, A_loc: np.ndarray | None,
           B_loc: np.ndarray | None, strategy: str | None = None) -> np.ndarray:
    """Run one named operation (CLI spelling, e.g. ``"fusedmm-a"``) on distributed blocks.

    Collective over the object's communicator.

    Parameters
    ----------
    obj : DistributedAlgorithm
        S distributed by :func:`distribute`.
    op : str
        One of :data:`OPS`.
    A_loc, B_loc : numpy.ndarray or None
        This rank's blocks of A and B in ``obj``'s distribution (None where ``op`` does not
        read it, see :func:`op_inputs`).
    strategy : str, optional
        FusedMM only; default (None or ``"-"``): the family's most communication-eliding one.

    Returns
    -------
    numpy.ndarray
        The SDDMM values in this rank's value order, or this rank's dense output block.

    Raises
    ------
    InputError
        For an unknown operation or strategy, or blocks of the wrong shape (on every rank).
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
    """Whether an operation reads A and whether it reads B. Not collective.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.

    Returns
    -------
    tuple of bool
        ``(reads_a, reads_b)``: ``spmm-a`` reads only B, ``spmm-b`` only A, the rest both.
    """
    return op != "spmm-a", op != "spmm-b"


def op_output_side(op: str) -> str | None:
    """The side of an operation's dense result. Not collective.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.

    Returns
    -------
    str or None
        ``"a"`` (m x r: ``spmm-a``, ``fusedmm-a``), ``"b"`` (n x r: ``spmm-b``,
        ``fusedmm-b``), or None for SDDMM, whose result is values of S.
    """
    return {"sddmm": None, "spmm-a": "a", "spmm-b": "b", "fusedmm-a": "a",
            "fusedmm-b": "b"}[op]


def op_flops(op: str, nnz: int, r: int) -> float:
    """Useful flops of one operation. Not collective.

    Parameters
    ----------
    op : str
        One of :data:`OPS`.
    nnz : int
        Nonzeros of S.
    r : int
        Dense width.

    Returns
    -------
    float
        2 nnz r for SDDMM or SpMM, 4 nnz r for FusedMM.
    """
    return (4.0 if op.startswith("fusedmm") else 2.0) * nnz * r
