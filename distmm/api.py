"""The entry point applications use: distribute S once, then call the kernels many times."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
from distmm.algorithms.base import DistributedMatrix
from distmm.core.coo import CooShare
from distmm.core.memory import physical_memory, release_freed_memory
from distmm.core.permute import permute_mode
from distmm.core.relay_rule import relay_name, relay_rule
from distmm.errors import Checks, InputError, agree, as_int, require
from distmm.kernels import NodeModel


def as_coo_share(S, comm: MPI.Comm, root: int | None = 0,
                 check_finite: bool = True) -> CooShare:
    """Turn what the caller has into this rank's COO share of S.

    Collective over ``comm`` (except for a :class:`CooShare`, which is returned as it is).

    Parameters
    ----------
    S : str, os.PathLike, CooShare, scipy sparse matrix or None
        A Matrix Market file (``.mtx`` or ``.mtx.gz``) or an HDF5 file (``.h5`` or ``.hdf5``,
        layout in :mod:`distmm.io.hdf5`); every rank reads its own part. Or a
        :class:`CooShare` (each rank's own entries, e.g. from :mod:`distmm.io.generate`), or a
        scipy sparse matrix held by ``root`` (the other ranks pass None) or by every rank
        (``root=None``).
    comm : MPI.Comm
        The communicator whose ranks share S.
    root : int or None
        The rank holding a scipy matrix, or None when every rank holds it.
    check_finite : bool
        Refuse NaN or infinite values of an HDF5 file (default True; a Matrix Market file's
        are always refused).

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
        from distmm.io.hdf5 import read_sparse

        return read_sparse(S, comm, check_finite=check_finite)
    if S is None or sp.issparse(S):
        return CooShare.from_scipy(S, comm, root=root)
    require(False, f"cannot distribute an object of type {type(S).__name__}; pass a path, a "
                   "CooShare or a scipy sparse matrix")
    raise AssertionError  # unreachable


def size_problem(what: str, m: int, n: int, nnz: int, p: int, r: int | None = None,
                 dtype=np.float32) -> str | None:
    """Why S (m x n, ``nnz`` entries; ``what`` names it) cannot be distributed here, or None.

    Not collective. A lower bound on each rank's memory: the row and column permutations and
    their inverses (every rank holds them whole: 16 (m + n) bytes), its share of the entries
    (24 bytes each: row, column, value) and, given r, its blocks of A and B. A size beyond
    this machine's memory (a header that claims 1e11 rows, say) is refused with a message
    instead of failing in an allocation.
    """
    itemsize = np.dtype(dtype).itemsize
    need = 16 * (m + n) + 24 * (-(-nnz // p))
    if r:
        need += itemsize * r * (-(-(m + n) // p))
    memory = physical_memory()
    if memory is None or need <= memory:
        return None
    return (f"{what} is {m} x {n} with {nnz} entries: distributing it needs at least "
            f"{need / 2**30:.3g} GiB per rank, more than this machine's "
            f"{memory / 2**30:.3g} GiB of memory")


def _settings(S, comm: MPI.Comm, algorithm, c, r, node_model, dtype, permute, seed, order,
              root, check_finite, overlap, checks="once", relay=None) -> dict:
    """This rank's view of distribute()'s arguments, checked and normalised (not collective).

    Raises InputError for a value that is wrong on this rank. The returned dict holds plain,
    printable values (compared across ranks by :func:`distmm.errors.agree`) and, under keys
    starting with "_", the normalised objects the constructor is given.
    """
    from distmm.io.hdf5 import sparse_header  # h5py: imported only by those who read files
    from distmm.kernels import NODE_MODELS, make_node_model

    p = comm.Get_size()
    require(isinstance(algorithm, str) and algorithm in ALGORITHMS,
            f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    cls = ALGORITHMS[algorithm]
    c = as_int(c, "the replication factor c")
    require(c >= 1 and p % c == 0,
            f"replication factor c={c} must be a positive divisor of p={p}")
    if r is not None:
        r = as_int(r, "the dense width r")
        require(r >= 1, f"the dense width r must be at least 1 (r >= 1), got {r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InputError(f"dtype must be float32 or float64, got {dtype!r}") from None
    require(dtype in (np.dtype(np.float32), np.dtype(np.float64)),
            f"dtype must be float32 or float64, got {dtype}")
    require(not overlap or getattr(cls, "supports_overlap", False),
            f"{algorithm} does not support --overlap")
    require(relay is None or "relay" in vars(cls),
            f"relay= (--relay) applies only to the 15d-sparse-aware family's exchange, "
            f"not to {algorithm}")
    from distmm.algorithms.calls import CHECKS

    require(checks in CHECKS, f"checks must be one of {', '.join(CHECKS)}, got {checks!r}")
    seed = as_int(seed, "seed")
    if root is not None:
        root = as_int(root, "root")
        require(0 <= root < p, f"root must be None or a rank in 0..{p - 1}, got {root}")
    if isinstance(node_model, str):
        require(node_model in NODE_MODELS, f"unknown node model {node_model!r}; choose one "
                                           f"of {', '.join(NODE_MODELS)}")
        node_model = make_node_model(node_model)
    require(isinstance(node_model, NodeModel),
            f"node_model must be a name or a NodeModel, got {type(node_model).__name__}")
    settings = {"algorithm": algorithm, "c": c, "r": r, "dtype": str(dtype),
                "node_model": f"{node_model.name} {node_model.options()}",
                "permute": ("shared" if isinstance(permute, DistributedMatrix)
                            else permute_mode(permute)), "seed": seed, "order": order, "root": root,
                "check_finite": bool(check_finite), "overlap": bool(overlap),
                "checks": checks, "_dtype": dtype, "_kernel": node_model}
    if relay is not None:
        settings["relay"], settings["_relay"] = relay_name(relay), relay_rule(relay)
    # What S is, and its shape wherever this rank can know it without communicating.
    if isinstance(S, CooShare):
        settings["S given as"], settings["shape of S"] = "a CooShare", S.shape
    elif isinstance(S, (str, os.PathLike)):
        m, n, nnz = sparse_header(S)
        settings["S given as"], settings["shape of S"] = "a path", (m, n)
        problem = size_problem(os.fspath(S), m, n, nnz, p, r, dtype)
        if problem is not None:
            raise InputError(problem)
    elif S is None or sp.issparse(S):
        holds = root is None or comm.Get_rank() == root
        require(S is not None or not holds,
                "S is None on a rank that must provide the sparse matrix "
                + ("(root=None: every rank passes the whole matrix)" if root is None
                   else f"(root={root})"))
        settings["S given as"] = ("a scipy matrix" if root is None
                                  else f"a scipy matrix held by root {root}")
        if root is None:
            settings["shape of S"] = tuple(int(x) for x in S.shape)
    else:
        raise InputError(f"cannot distribute an object of type {type(S).__name__}; pass a "
                         "path, a CooShare or a scipy sparse matrix")
    return settings


def _value_overflow(share: CooShare, dtype: np.dtype) -> str | None:
    """Why S's values cannot be stored in ``dtype`` (finite values beyond float32), or None."""
    if dtype != np.float32 or share.nnz == 0:
        return None
    finite = share.vals[np.isfinite(share.vals)]
    largest = float(np.abs(finite).max()) if finite.size else 0.0
    if largest <= float(np.finfo(np.float32).max):
        return None
    return (f"the sparse matrix has finite values too large for float32 (largest magnitude "
            f"{largest:.3g}; float32 holds at most {float(np.finfo(np.float32).max):.3g}): "
            "converting them would give infinities; use float64 (--dtype float64)")


def distribute(S, comm: MPI.Comm = MPI.COMM_WORLD, algorithm: str = "15d-dense-shift",
               c: int = 1, r: int | None = None, node_model: str | NodeModel = "reference",
               dtype=np.float32, permute: bool | str | DistributedMatrix = "auto",
               seed: int = 0, order: str = "fiber",
               root: int | None = 0, check_finite: bool = True,
               overlap: bool = False, checks: str = "once", relay=None) -> DistributedMatrix:
    """Place the sparse matrix S on a process grid for repeated SDDMM / SpMM / FusedMM calls.

    Collective over ``comm``: every rank calls it with the same parameters. Placing S also
    gives the calling thread of each rank its share of the node's cores as numba threads,
    unless the user chose (:func:`distmm.kernels.threads.settle`, run by every family's
    constructor).

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
        Only a default width for ``S.dense(side)`` and ``S.dense_cols(side, rank)`` called
        without an r: the dense width is chosen per call (read from the blocks), and each
        family refuses an r below its minimum (``S.r_rule()``: r >= p/c, sqrt(p/c) or
        sqrt(pc) for the families that split A and B by columns).
    node_model : str or NodeModel
        The local kernel: a name from :data:`distmm.kernels.NODE_MODELS` or an instance from
        :func:`distmm.kernels.make_node_model`.
    dtype : numpy dtype
        ``float32`` (default) or ``float64``: the type of S's values and the dense blocks.
    permute : {"auto", "blocks", "random", "none"}, bool or DistributedMatrix
        Load balance (seeded by ``seed``): ``"auto"`` (default: none on one rank, else
        ``"blocks"``), ``"blocks"`` (rows go to blocks at random in runs of consecutive ids
        and keep their natural order inside each block, which keeps a real graph's locality),
        ``"random"`` (the paper's uniformly random permutation) or ``"none"``; ``True`` and
        ``False`` mean ``"auto"`` and ``"none"``. Scatter, gather and the results stay in the
        original order either way. Another distributed object of the same shape on the same
        ranks shares its layout: its permutations are used, so that blocks of one are blocks
        of the other (a held-out test set beside its training set).
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
    checks : {"once", "always", "off"}
        "once" (default): full validation and cross-rank agreement on the first call of each
        kind, cheap local checks after; "always"; or "off" (see
        :mod:`distmm.algorithms.calls` for what each gives up).
    relay : {"auto", "on", "off"}, bool, RelayRule or None
        The ``15d-sparse-aware`` family's relay tree (docs/algorithms/15d-sparse-aware.md):
        rows that many ranks of a layer need reach some of them through others. ``"auto"``
        (its default; also ``True`` and None) keeps a layer's tree where it lowers the
        busiest rank's rows sent by 25% or more, or, given a
        :class:`distmm.core.relay_rule.RelayRule` with calibrated alpha and beta and a width
        (``relay_rule("auto", Machine.load(path), r)``), where the modelled time says it
        pays; ``"on"`` wherever it lowers them at all; ``"off"`` (``False``) never.
        InputError for any other family.

    Returns
    -------
    DistributedMatrix
        The object bound to S, the grid, c, the node model and the dtype. Its methods
        (``sddmm``, ``spmm_a``, ``spmm_b``, ``fusedmm_a``, ``fusedmm_b``, ``set_values``,
        ``scatter``, ``gather``, ``report``, ...) are collective and take and return dense
        blocks in its own distribution. It owns sub-communicators: ``S.close()`` or
        ``with distribute(...) as S:`` frees them.

    Raises
    ------
    InputError
        The same error on every rank, before any data moves, for every parameter error (an
        unknown family, c not dividing p, r too small, overlap unsupported) and for a bad
        file or non-finite values.

    Notes
    -----
    Agreement at construction: before any data moves, every rank checks its own arguments
    (and, for a path, the file's header and size) and one collective compares the outcome and
    the settings (algorithm, c, r, dtype, node model, permutation, seed, order, root, what S is
    and its shape) across ranks. A problem on any rank, or a setting that differs between
    ranks, raises the same :class:`distmm.errors.InputError` on every rank, naming the ranks.
    Integers may be Python or numpy integers.

    Examples
    --------
    Under ``mpiexec -n 4``::

        op = distmm.distribute("graph.mtx", MPI.COMM_WORLD, c=2)
        A = op.scatter("a", A_global)          # A_global on rank 0, None elsewhere
        out = op.fusedmm_a(A, op.scatter("b", B_global))
        full = op.gather("a", out)             # m x r on rank 0, original order
    """
    agreement = Checks(comm)
    settings: dict = {}
    with agreement.guard():
        settings = _settings(S, comm, algorithm, c, r, node_model, dtype, permute, seed,
                             order, root, check_finite, overlap, checks, relay)
    agreement.agree(same={k: v for k, v in settings.items() if not k.startswith("_")})
    c, r, dtype, kernel = settings["c"], settings["r"], settings["_dtype"], settings["_kernel"]
    share = as_coo_share(S, comm, root=settings["root"], check_finite=check_finite)
    if check_finite:  # the values' check, like the algorithms' own finiteness checks
        agree(comm, _value_overflow(share, dtype))
    cls = ALGORITHMS[algorithm]
    extra = {"overlap": True} if overlap else {}
    if relay is not None:
        extra["relay"] = settings["_relay"]
    obj = cls(share, comm, c=c, r=r, node_model=kernel, dtype=dtype, permute=permute,
              seed=settings["seed"], order=order, check_finite=check_finite,
              checks=settings["checks"], **extra)
    release_freed_memory()  # placing S's temporaries would otherwise stay resident
    return obj
