"""Explicit-feedback alternating least squares on distributed FusedMM (paper section VI-E).

Minimises sum over observed (i, j) of (R_ij - a_i . b_j)^2 + lambda (|A|_F^2 + |B|_F^2)
(``weighted=True``: each row's lambda is multiplied by its number of ratings, Zhou et al.
2008). A half-step solves every row's normal equations (B_i^T B_i + lambda_i I) a_i = B_i^T r_i
by conjugate gradients batched over all rows (Zhao and Canny, cited in VI-E): the operator
applied to the iterate X of all rows at once is ONE FusedMMA with S's pattern, rows of
(S * (X B^T)) B, plus lambda X; the right-hand side is one SpMMA with the ratings as S's values.
The B half-step mirrors it with FusedMMB / SpMMB. The per-row CG scalars are row-wise dot
products (:func:`distmm.ops.rowwise.row_dot`), summed over the ranks holding a row's column
pieces in the families that split A and B by columns. No Python loop runs over rows.

Distribution. The training ratings are placed once; S's values become the pattern (ones) and
the ratings stay beside them in value order, passed as ``values=`` to the SpMM of the
right-hand side, so nothing is redistributed between the two half-steps. Held-out ratings are
placed as a second object with the same family, c, shape and permutation seed, hence the same
dense layout, so the test RMSE is one SDDMM of the same factor blocks.

Determinism. The split hashes (user, item), and the initial factors hash (side, original row,
column) (:mod:`distmm.core.hashing`): neither depends on p, the family or c. CG starts from the
current factors (warm start), runs at most ``cg_iters`` iterations and stops early only when
every row everywhere has relative residual |r_i| / |b_i| <= ``cg_tol`` (one counted
all-reduce of the number of unconverged rows per iteration; skipped when cg_tol = 0). Rows that
converge earlier stop moving (their step is masked to zero); rows with no training rating are
never updated, so they keep their initial factors.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from mpi4py import MPI

from distmm import api
from distmm.algorithms.base import DistributedMatrix
from distmm.apps.als_io import check_writable, load_checkpoint, read_ratings, save_factors
from distmm.apps.als_memory import als_memory_problem
from distmm.core.coo import CooShare
from distmm.core.hashing import hash_uniform, mix64
from distmm.core.permute import permute_mode
from distmm.errors import agree, require
from distmm.kernels import NodeModel
from distmm.ops.rowwise import row_dot, row_dot_words
from distmm.runtime import signals

__all__ = ["ALSConfig", "ALSResult", "fit", "initial_factors", "predict", "split_ratings"]

_SPLIT_TAG, _INIT_TAG = 101, 103
COMM_PHASES = ("replication", "propagation", "reduction")


@dataclass(frozen=True)
class ALSConfig:
    """What defines an ALS run (all ranks pass the same). See :func:`fit` for each field."""

    rank: int = 32
    lam: float = 0.1
    epochs: int = 10
    cg_iters: int = 3
    cg_tol: float = 0.0
    weighted: bool = False
    test_fraction: float = 0.0
    seed: int = 0
    algorithm: str = "15d-dense-shift"
    c: int = 1
    strategy: str | None = None
    node_model: str = "reference"
    dtype: str = "float64"
    permute: bool | str = "auto"
    order: str = "fiber"
    overlap: bool = False

    def check(self) -> None:
        """Raise InputError (identically on every rank) for an out-of-range parameter."""
        require(isinstance(self.rank, (int, np.integer)) and self.rank >= 1,
                f"rank must be an integer >= 1, got {self.rank!r}")
        require(math.isfinite(self.lam) and self.lam >= 0, f"lambda must be >= 0, got "
                                                            f"{self.lam!r}")
        require(isinstance(self.epochs, (int, np.integer)) and self.epochs >= 1,
                f"epochs must be an integer >= 1, got {self.epochs!r}")
        require(isinstance(self.cg_iters, (int, np.integer)) and self.cg_iters >= 1,
                f"cg_iters must be an integer >= 1, got {self.cg_iters!r}")
        require(math.isfinite(self.cg_tol) and self.cg_tol >= 0,
                f"cg_tol must be >= 0, got {self.cg_tol!r}")
        require(0.0 <= self.test_fraction < 1.0,
                f"test_fraction must be in [0, 1), got {self.test_fraction!r}")
        require(isinstance(self.seed, (int, np.integer)) and self.seed >= 0,
                f"seed must be a non-negative integer, got {self.seed!r}")
        require(self.dtype in ("float32", "float64"),
                f"dtype must be float32 or float64, got {self.dtype!r}")
        require(self.algorithm == "auto" or self.algorithm in api.ALGORITHMS,
                f"unknown algorithm {self.algorithm!r}; choose auto or one of "
                f"{', '.join(api.ALGORITHMS)}")
        if self.algorithm != "auto" and self.strategy is not None:
            strategies = api.ALGORITHMS[self.algorithm].strategies
            require(self.strategy in strategies,
                    f"unknown strategy {self.strategy!r} for {self.algorithm}; choose one of "
                    f"{', '.join(strategies)}")

    def problem(self) -> dict:
        """The fields that define the optimisation problem (a checkpoint must match them)."""
        return {k: getattr(self, k) for k in ("rank", "lam", "weighted", "test_fraction",
                                              "seed")}


@dataclass
class ALSResult:
    """What :func:`fit` returns on every rank.

    ``A_loc`` and ``B_loc`` are this rank's factor blocks in ``obj``'s distribution (use
    ``obj.gather`` / :meth:`factors` for the global matrices in original order). ``history``
    holds one dict per epoch (identical on every rank). ``obj`` is the distributed training
    pattern, ``test_obj`` the held-out ratings (None without a test set); ``ratings`` the
    training ratings in ``obj``'s value order.
    """

    config: ALSConfig
    obj: DistributedMatrix
    A_loc: np.ndarray
    B_loc: np.ndarray
    ratings: np.ndarray
    test_obj: DistributedMatrix | None
    test_ratings: np.ndarray | None
    history: list[dict] = field(default_factory=list)
    fingerprint: dict = field(default_factory=dict)

    def factors(self, root: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
        """(A, B) in original user/item order on ``root``, None elsewhere. Collective."""
        A = self.obj.gather("a", self.A_loc, root=root)
        B = self.obj.gather("b", self.B_loc, root=root)
        return None if A is None else (A, B)

    def close(self) -> None:
        """Free the communicators the distributed objects created. Collective."""
        for obj in (self.test_obj, self.obj):
            if obj is not None:
                release(obj)


def release(obj: DistributedMatrix) -> None:
    """Free what ``obj`` created (:meth:`DistributedMatrix.close`). Collective."""
    obj.close()


def predict(A: np.ndarray, B: np.ndarray, users: np.ndarray, items: np.ndarray
            ) -> np.ndarray:
    """Predicted ratings a_u . b_i for each (user, item) pair, from global factors (original
    order, e.g. from :meth:`ALSResult.factors` or a factors file). Not collective."""
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    require(users.shape == items.shape, "users and items must have the same shape")
    require(users.size == 0 or (0 <= users.min() and users.max() < A.shape[0]),
            f"user ids must lie in [0, {A.shape[0]})")
    require(items.size == 0 or (0 <= items.min() and items.max() < B.shape[0]),
            f"item ids must lie in [0, {B.shape[0]})")
    return np.einsum("ij,ij->i", A[users], B[items])


# ----------------------------------------------------------------------------- data
def split_ratings(share: CooShare, test_fraction: float, seed: int
                  ) -> tuple[CooShare, CooShare]:
    """(train, test) parts of a COO share: entry (u, i) is held out when a hash of
    (seed, u, i) falls below ``test_fraction``. Not collective; the split does not depend on
    p or on which rank holds an entry."""
    held = hash_uniform(seed, _SPLIT_TAG, share.rows, share.cols) < test_fraction
    keep = ~held
    return (CooShare(share.shape, share.rows[keep], share.cols[keep], share.vals[keep]),
            CooShare(share.shape, share.rows[held], share.cols[held], share.vals[held]))


def initial_factors(rows: np.ndarray, cols: np.ndarray, side: str, seed: int, rank: int
                    ) -> np.ndarray:
    """Initial factor entries for original ``rows`` x columns ``cols`` of side "a" or "b".

    Not collective. Entry (i, k) is uniform in [0, 1) / sqrt(rank), hashed from (seed, side,
    i, k): the same at every p and in every family."""
    tag = _INIT_TAG + (0 if side == "a" else 1)
    return hash_uniform(seed, tag, np.asarray(rows)[:, None],
                        np.asarray(cols)[None, :]) / math.sqrt(rank)


def _init_block(obj: DistributedMatrix, side: str, seed: int, rank: int) -> np.ndarray:
    cols = np.arange(rank)[obj.dense_cols(side, obj.rank)]
    block = initial_factors(obj.local_rows(side), cols, side, seed, rank)
    return np.ascontiguousarray(block, dtype=obj.dtype)


def fingerprint(obj: DistributedMatrix, train: CooShare) -> dict:
    """A summary of the training ratings that does not depend on p, the family or the dtype:
    shape, entry count and a wrapping sum of a hash of every (user, item, float64 rating)
    entry of the COO shares (an order-free sum, so neither the split of entries over ranks
    nor their order matters). Collective: one counted all-reduce of two words."""
    bits = train.vals.view(np.uint64)
    h = mix64(mix64(mix64(train.rows.view(np.uint64)) ^ train.cols.view(np.uint64)) ^ bits)
    with np.errstate(over="ignore"):
        local = np.array([train.nnz, int(h.sum(dtype=np.uint64))], dtype=np.uint64)
    total = np.empty_like(local)
    obj.world.allreduce(local, total, phase="other")
    return {"m": obj.shape[0], "n": obj.shape[1], "nnz": int(total[0]), "hash": int(total[1])}


# ----------------------------------------------------------------------------- solver
class _Timer:
    """Seconds of FusedMM communication and compute, from the object's phase timers, and the
    words this rank sent inside FusedMM calls (all counted phases but "distribute")."""

    def __init__(self, obj: DistributedMatrix) -> None:
        self.obj = obj
        self.comm = 0.0
        self.compute = 0.0
        self.words = 0

    def fusedmm(self, call: Callable[[], np.ndarray]) -> np.ndarray:
        """``call()`` (a FusedMM), its seconds and words added to this timer's."""
        stats = self.obj.stats
        sec = stats.seconds
        c0 = sum(sec.get(ph, 0.0) for ph in COMM_PHASES)
        k0 = sec.get("compute", 0.0)
        w0 = stats.words()
        out = call()
        self.comm += sum(sec.get(ph, 0.0) for ph in COMM_PHASES) - c0
        self.compute += sec.get("compute", 0.0) - k0
        self.words += stats.words() - w0
        return out


class SideCalls:
    """One side's half-step calls as call plans (``S.bind``) on buffers kept from epoch to
    epoch: the FusedMM of CG's search direction with the fixed factor, into ``Y``, and the
    right-hand side's SpMM with the ratings, into ``rhs``.

    Method calls without ``out=`` would each allocate their result and be checked and planned
    in full; bound on the same arrays every time, the calls from the third on replay their
    kept kernels and shifts where the family replays (plan.py), with the same results.
    ``P`` is CG's search direction (the FusedMM's operand on this side): :func:`half_step`
    works in it. Construction is not collective.

    Parameters
    ----------
    obj : DistributedMatrix
    side : {"a", "b"}
        The side whose factor block ``X`` the half-step updates.
    X, other : ndarray
        This side's factor block and the fixed factor's block (the very arrays every epoch
        updates in place).
    ratings : ndarray
        The training ratings in ``obj``'s value order.
    strategy : str
        The FusedMM strategy.
    """

    def __init__(self, obj: DistributedMatrix, side: str, X: np.ndarray, other: np.ndarray,
                 ratings: np.ndarray, strategy: str) -> None:
        self.P, self.Y, self.rhs = np.empty_like(X), np.empty_like(X), np.empty_like(X)
        if side == "a":
            self.fusedmm = obj.bind("fusedmm_a", self.P, other, out=self.Y, strategy=strategy)
            self.spmm = obj.bind("spmm_a", other, values=ratings, out=self.rhs)
        else:
            self.fusedmm = obj.bind("fusedmm_b", other, self.P, out=self.Y, strategy=strategy)
            self.spmm = obj.bind("spmm_b", other, values=ratings, out=self.rhs)


def _count_active(obj: DistributedMatrix, active: np.ndarray) -> int:
    """Unconverged rows over all ranks (collective; counted under "other"). A row held by a
    row group of g ranks counts g times, which does not matter for a test against zero."""
    local = np.array([int(active.sum())], dtype=np.int64)
    total = np.empty_like(local)
    obj.world.allreduce(local, total, phase="other")
    return int(total[0])


def half_step(obj: DistributedMatrix, side: str, X: np.ndarray, other: np.ndarray,
              ratings: np.ndarray, lam_rows: np.ndarray, has: np.ndarray, cfg: ALSConfig,
              strategy: str, timer: _Timer, calls: SideCalls | None = None) -> int:
    """Update the factor block ``X`` of ``side`` in place by batched CG; returns iterations.

    Collective over ``obj.comm``. ``other`` is the fixed factor's block, ``lam_rows`` the
    per-row lambda and ``has`` the mask of rows with at least one training rating (rows
    outside it never move). ``calls`` are the side's bound calls on these ``X``, ``other``,
    ``ratings`` and ``strategy``, kept by the caller from epoch to epoch (None: made here)."""
    if calls is None:
        calls = SideCalls(obj, side, X, other, ratings, strategy)
    # The arithmetic runs on plain views of the blocks (the same memory): elementwise
    # operations on typed blocks go through DenseBlock.__array_ufunc__, a Python layer per
    # operation that was a good part of a CG iteration on small factor blocks.
    X, P = np.asarray(X), np.asarray(calls.P)

    def apply(V: np.ndarray) -> np.ndarray:
        if V is not P:
            np.copyto(P, V)
        Y = np.asarray(timer.fusedmm(calls.fusedmm))
        Y += lam_rows[:, None] * P
        return Y

    rhs = np.asarray(calls.spmm())
    R = rhs - apply(X)
    R[~has] = 0
    np.copyto(P, R)
    tmp = np.empty_like(P)
    rr = row_dot(obj, side, R, R)
    limit = cfg.cg_tol ** 2 * row_dot(obj, side, rhs, rhs)
    done = 0
    for _ in range(cfg.cg_iters):
        active = has & (rr > limit)
        if cfg.cg_tol > 0 and _count_active(obj, active) == 0:
            break
        AP = apply(P)
        pap = row_dot(obj, side, P, AP)
        step = active & (pap > 0)
        alpha = np.where(step, rr / np.where(step, pap, 1), 0).astype(obj.dtype)[:, None]
        X += np.multiply(alpha, P, out=tmp)
        R -= np.multiply(alpha, AP, out=tmp)
        rr_new = row_dot(obj, side, R, R)
        beta = np.where(step, rr_new / np.where(step, rr, 1), 0).astype(obj.dtype)
        P *= beta[:, None]
        P += R
        rr = rr_new
        done += 1
    return done


def epoch_row_dot_words(obj: DistributedMatrix, iterations: tuple[int, int]) -> int:
    """Words this rank sends in phase "row_dot" during one epoch whose half-steps ran
    ``iterations`` = (A's, B's) CG iterations: each half-step takes two row dot products
    before its loop (|r|^2 and |b|^2) and two per iteration (p.Ap and the new |r|^2). Not
    collective."""
    return sum((2 + 2 * it) * row_dot_words(obj, side, obj.rank)
               for side, it in zip("ab", iterations, strict=True))


def _rmse(obj: DistributedMatrix, predict: Callable[[], np.ndarray], ratings: np.ndarray
          ) -> float:
    """Root mean squared error at the object's nonzeros of the predictions ``predict()``
    (collective: ``predict``, a bound SDDMM of the factors, and a counted all-reduce of two
    words)."""
    pred = predict()
    err = pred.astype(np.float64) - ratings
    local = np.array([float(err @ err), float(err.size)])
    total = np.empty_like(local)
    obj.world.allreduce(local, total, phase="other")
    return math.sqrt(total[0] / total[1]) if total[1] else float("nan")


def auto_choice(m: int, n: int, nnz: int, rank: int, p: int, overlap: bool = False,
                machine=None) -> tuple[str, str, int]:
    """(algorithm, strategy, c) that ``algorithm="auto"`` runs: the planner's pick for ALS's
    FusedMM shape (m x n, ``nnz`` training ratings, r = ``rank``) on ``p`` ranks, among the
    families that can overlap when ``overlap`` is asked. Not collective (the same on every
    rank for the same arguments); ``distmm als`` calls it from the headers to check the
    chosen family's memory before any rating is read."""
    from distmm.perf.planner import Machine, auto_candidates, plan

    best = plan(m, n, nnz, rank, p, machine or Machine(), algorithms=auto_candidates(overlap))[0]
    return best["algorithm"], best["strategy"], best["c"]


def _choose_auto(share: CooShare, comm: MPI.Comm, cfg: ALSConfig, nnz: int, nnz_test: int,
                 machine=None, memory_limit: int | None = None) -> tuple[ALSConfig, object]:
    """Ask the planner once for ALS's FusedMM shape (m x n, the ``nnz`` training ratings of
    every rank's ``share``, ``nnz_test`` held out, r = rank),
    with the ratings' pattern: every family, the sparsity-aware one priced in the order a
    run gives the ratings (:func:`distmm.perf.sparse_planner.plan_distributed`), among those
    whose FusedMM fits ``memory_limit``; then the pick's ALS memory is checked against it.
    Collective (every rank gets the same pick, and a problem is the same InputError on every
    rank). Returns (cfg with the pick, the order to distribute the ratings in: the partition
    the planner made, ``"blocks"``, or None for ``cfg.permute``)."""
    from distmm.perf.planner import auto_candidates
    from distmm.perf.sparse_planner import plan_distributed

    permute = cfg.permute  # a name, or a partition (distmm.core.partition), as it is
    if isinstance(permute, (bool, np.bool_)):
        permute = permute_mode(permute)
    rows, order = plan_distributed(share, comm, cfg.rank, machine, auto_candidates(cfg.overlap),
                                   dtype=np.dtype(cfg.dtype), overlap=cfg.overlap,
                                   memory_limit=memory_limit, permute=permute, seed=cfg.seed)
    best = rows[0]
    cfg = replace(cfg, algorithm=best["algorithm"], strategy=best["strategy"], c=best["c"])
    m, n = share.shape
    # the order the run places S in: a partition made (rank 0's peak is behind it) or given
    placed = permute if order is None else order
    agree(comm, als_memory_problem(memory_limit, cfg.algorithm, cfg.strategy, m, n, nnz,
                                   nnz_test, cfg.rank, comm.Get_size(), cfg.c, cfg.dtype,
                                   cfg.overlap, placed))
    return cfg, order


def distribute_ratings(share: CooShare, comm: MPI.Comm, cfg: ALSConfig,
                       node_model: str | NodeModel | None = None,
                       layout: DistributedMatrix | None = None, order=None
                       ) -> tuple[DistributedMatrix, np.ndarray]:
    """Place ratings on cfg's grid; returns (object with pattern values, ratings in value
    order). Collective. ``node_model`` (default: cfg's name) may be a configured instance;
    ``layout`` (the training object, for a test set) makes the new object share its
    permutations, so that factor blocks of one are factor blocks of the other; ``order``
    (the planner's partition or ``"blocks"`` for ``algorithm="auto"``) replaces
    ``cfg.permute``."""
    permute = layout if layout is not None else cfg.permute if order is None else order
    obj = api.distribute(share, comm, algorithm=cfg.algorithm, c=cfg.c, r=cfg.rank,
                         node_model=node_model or cfg.node_model, dtype=np.dtype(cfg.dtype),
                         permute=permute, seed=cfg.seed,
                         order=cfg.order,
                         overlap=cfg.overlap)
    ratings = obj.values.copy()
    obj.set_values(np.ones_like(obj.values))
    return obj, ratings


def fit(ratings, comm: MPI.Comm = MPI.COMM_WORLD, rank: int = 32, lam: float = 0.1,
        epochs: int = 10, cg_iters: int = 3, cg_tol: float = 0.0, weighted: bool = False,
        test_fraction: float = 0.0, seed: int = 0, algorithm: str = "15d-dense-shift",
        c: int = 1, strategy: str | None = None, node_model: str | NodeModel = "reference",
        dtype: str = "float64", permute: bool | str = "auto", order: str = "fiber",
        overlap: bool = False,
        test=None, machine=None, callback: Callable[[dict, ALSResult], None] | None = None,
        checkpoint: str | None = None, checkpoint_every: int = 0, resume: bool = False,
        memory_limit: int | None = None) -> ALSResult:
    """Fit user factors A (m x rank) and item factors B (n x rank) to observed ratings.

    Parameters
    ----------
    ratings : path, CooShare or scipy sparse matrix
        The ratings (users x items): a Matrix Market or HDF5 path (read in parallel, see
        :func:`distmm.apps.als_io.read_ratings`), this rank's COO share, or a scipy matrix
        held by rank 0. Duplicated coordinates are summed.
    comm : MPI communicator; every rank calls ``fit`` with the same arguments (collective).
    rank, lam, epochs : the factor width r >= 1, lambda >= 0 and the number of epochs
        (one A half-step then one B half-step each) >= 1.
    cg_iters, cg_tol : CG iterations per half-step, and the relative residual below which a
        row stops (0: always run cg_iters).
    weighted : lambda_i = lam * (ratings of row i) instead of lam.
    test_fraction, seed : held-out fraction (hash split) and the seed of the split, the
        initial factors and the permutation.
    test : optional held-out ratings given separately (same forms as ``ratings``); then
        ``test_fraction`` must be 0.
    algorithm, c, strategy, node_model, dtype, permute, order, overlap : as in
        :func:`distmm.distribute`; ``algorithm="auto"`` asks the planner once, with the
        ratings' pattern, for the FusedMM shape ALS uses, among every family, the
        sparsity-aware one included (``machine``: a :class:`distmm.perf.planner.Machine`).
    memory_limit : bytes per rank the auto pick must fit (ALS's memory model); a pick that
        does not is refused on every rank before any factor is made.
    callback : called on every rank after each epoch with (record, result).
    checkpoint, checkpoint_every : write the factors and the run's state to ``checkpoint``
        (HDF5, atomically, see :mod:`distmm.apps.als_io`) after every ``checkpoint_every``-th
        epoch (0: never) and after the last.
    resume : start from ``checkpoint`` (which must exist and belong to this problem; it may
        come from another p, family or c) instead of the initial factors.

    Returns
    -------
    ALSResult : this rank's factor blocks and the per-epoch history (train/test RMSE,
        seconds split into FusedMM communication, FusedMM compute and the rest).
    """
    cfg = ALSConfig(rank=rank, lam=float(lam), epochs=epochs, cg_iters=cg_iters,
                    cg_tol=float(cg_tol), weighted=bool(weighted),
                    test_fraction=float(test_fraction), seed=seed, algorithm=algorithm, c=c,
                    strategy=strategy, node_model=getattr(node_model, "name", node_model),
                    dtype=str(np.dtype(dtype)), permute=permute, order=order,
                    overlap=bool(overlap))
    cfg.check()
    require(isinstance(checkpoint_every, (int, np.integer)) and checkpoint_every >= 0,
            f"checkpoint_every must be an integer >= 0, got {checkpoint_every!r}")
    require(checkpoint is not None or not (resume or checkpoint_every),
            "resume and checkpoint_every need a checkpoint path")
    paths = [x for x in (ratings, test) if isinstance(x, (str, os.PathLike))]
    check_writable(checkpoint, "checkpoint", comm, paths)
    require(test is None or cfg.test_fraction == 0,
            "give either a separate test set or test_fraction, not both")
    share = read_ratings_any(ratings, comm)
    total = int(comm.allreduce(share.nnz))
    require(total > 0, f"the ratings matrix {share.shape[0]} x {share.shape[1]} is empty")
    train, held = split_ratings(share, cfg.test_fraction, cfg.seed)
    if test is not None:
        held = read_ratings_any(test, comm)
        require(held.shape == share.shape, f"the test ratings are {held.shape[0]} x "
                                           f"{held.shape[1]}, the training ratings "
                                           f"{share.shape[0]} x {share.shape[1]}")
    nnz_train, nnz_held = int(comm.allreduce(train.nnz)), int(comm.allreduce(held.nnz))
    require(nnz_train > 0, "no training rating is left after the split")
    order = None
    if cfg.algorithm == "auto":
        cfg, order = _choose_auto(train, comm, cfg, nnz_train, nnz_held, machine, memory_limit)
    require(cfg.c >= 1 and comm.Get_size() % cfg.c == 0,
            f"replication factor c={cfg.c} must be a positive divisor of p={comm.Get_size()}")
    if cfg.strategy is None:
        cfg = replace(cfg, strategy=api.ALGORITHMS[cfg.algorithm].strategies[-1])
    obj, train_vals = distribute_ratings(train, comm, cfg, node_model, order=order)
    test_obj = test_vals = None
    if nnz_held > 0:
        test_obj, test_vals = distribute_ratings(held, comm, cfg, node_model, layout=obj)
    result = ALSResult(cfg, obj, np.empty((0, 0)), np.empty((0, 0)), train_vals, test_obj,
                       test_vals)
    result.fingerprint = fingerprint(obj, train)
    start = load_checkpoint(checkpoint, result) if resume else None

    def after_epoch(record: dict, res: ALSResult) -> None:
        epoch = record["epoch"]
        saved = bool(checkpoint and checkpoint_every and (epoch % checkpoint_every == 0
                                                          or epoch == cfg.epochs))
        if saved:
            save_factors(checkpoint, res, epoch)
        if callback is not None:
            callback(record, res)
        if epoch < cfg.epochs:
            _safe_point(res, checkpoint, f"after epoch {epoch} of {cfg.epochs}", saved)

    _safe_point(result, None, "before its first epoch", False)
    _run(result, start, after_epoch)
    return result


def _safe_point(result: ALSResult, checkpoint: str | None, where: str, saved: bool) -> None:
    """Stop every rank here if any rank got SIGTERM or SIGINT (:mod:`distmm.runtime.signals`), after
    writing ``checkpoint`` unless this epoch's is already written. Collective."""
    signum = signals.agreed(result.obj.comm)
    if not signum:
        return
    if checkpoint and not saved:
        save_factors(checkpoint, result, len(result.history))
    done = (f"checkpoint {checkpoint} written (continue with --resume)" if checkpoint
            else "no checkpoint was asked for, so nothing was written")
    raise signals.Stopped(signum, f"stopped by {signals.name(signum)} {where}; {done}")


def read_ratings_any(ratings, comm: MPI.Comm) -> CooShare:
    """A COO share from a path (.mtx[.gz] or .h5), a CooShare or a scipy matrix on rank 0.
    Collective."""
    if isinstance(ratings, (str, os.PathLike)):
        return read_ratings(ratings, comm)
    return api.as_coo_share(ratings, comm)


def _setup(result: ALSResult, start) -> int:
    """Initial (or resumed) factor blocks; returns the number of epochs already done."""
    obj, cfg = result.obj, result.config
    if start is None:
        result.A_loc = _init_block(obj, "a", cfg.seed, cfg.rank)
        result.B_loc = _init_block(obj, "b", cfg.seed, cfg.rank)
        return 0
    done, A, B, history = start
    result.A_loc = obj.scatter("a", A)
    result.B_loc = obj.scatter("b", B)
    result.history = list(history)
    return int(done)


def _row_counts(obj: DistributedMatrix, side: str, rank: int) -> np.ndarray:
    """Training ratings of each local row of ``side`` (one SpMM of a ones block with S's
    pattern; every rank holds at least one column, so column 0 is there)."""
    ncols = len(range(rank)[obj.dense_cols("b" if side == "a" else "a", obj.rank)])
    rows_other = obj.dense_rows("b" if side == "a" else "a", obj.rank).size
    ones = np.ones((rows_other, ncols), dtype=obj.dtype)
    out = obj.spmm_a(ones) if side == "a" else obj.spmm_b(ones)
    nrows = obj.dense_rows(side, obj.rank).size
    return out[:, 0].astype(np.float64) if out.shape[1] else np.zeros(nrows)


def _run(result: ALSResult, start, callback: Callable[[dict, ALSResult], None]) -> None:
    obj, cfg = result.obj, result.config
    done = _setup(result, start)
    counts = {s: _row_counts(obj, s, cfg.rank) for s in "ab"}
    has = {s: counts[s] > 0 for s in "ab"}
    lam = {s: (cfg.lam * (counts[s] if cfg.weighted else np.ones_like(counts[s])))
           .astype(obj.dtype) for s in "ab"}
    calls = {"a": SideCalls(obj, "a", result.A_loc, result.B_loc, result.ratings,
                            cfg.strategy),
             "b": SideCalls(obj, "b", result.B_loc, result.A_loc, result.ratings,
                            cfg.strategy)}
    # the factors at every nonzero: S's pattern with values 1, one SDDMM per rating set
    ones = np.ones_like(obj.values)
    train_pred = obj.bind("sddmm", result.A_loc, result.B_loc, values=ones,
                          out=np.empty_like(ones))
    test_pred = None
    if result.test_obj is not None:
        test_ones = np.ones_like(result.test_obj.values)
        test_pred = result.test_obj.bind("sddmm", result.A_loc, result.B_loc, values=test_ones,
                                         out=np.empty_like(test_ones))
    for epoch in range(done + 1, cfg.epochs + 1):
        timer = _Timer(obj)
        words0 = obj.stats.words()
        obj.comm.Barrier()
        t0 = time.perf_counter()
        it_a = half_step(obj, "a", result.A_loc, result.B_loc, result.ratings, lam["a"],
                         has["a"], cfg, cfg.strategy, timer, calls["a"])
        it_b = half_step(obj, "b", result.B_loc, result.A_loc, result.ratings, lam["b"],
                         has["b"], cfg, cfg.strategy, timer, calls["b"])
        seconds = time.perf_counter() - t0
        words = obj.stats.words() - words0
        t1 = time.perf_counter()
        train = _rmse(obj, train_pred, result.ratings)
        test = (None if test_pred is None else
                _rmse(result.test_obj, test_pred, result.test_ratings))
        eval_seconds = time.perf_counter() - t1
        # Sums over ranks (one counted all-reduce of six words): times become means.
        local = np.array([seconds, timer.comm, timer.compute, eval_seconds, timer.words,
                          words], dtype=np.float64)
        total = np.empty_like(local)
        obj.world.allreduce(local, total, phase="other")
        mean = total / obj.p
        record = {"epoch": epoch, "train_rmse": train, "test_rmse": test,
                  "seconds": float(mean[0]), "fusedmm_comm_seconds": float(mean[1]),
                  "fusedmm_compute_seconds": float(mean[2]),
                  "other_seconds": float(mean[0] - mean[1] - mean[2]),
                  "eval_seconds": float(mean[3]), "cg_iterations": [it_a, it_b],
                  "fusedmm_words": int(total[4]), "other_words": int(total[5] - total[4])}
        result.history.append(record)
        callback(record, result)

