"""``simulate(X, Y, config) -> (C, report)``: the SpArch simulator as a Python function."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock
from distmm.sim.sparch.config import SpArchConfig
from distmm.sim.sparch.model import run_model
from distmm.sim.sparch.numeric import spgemm

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def as_block(M, name: str) -> CSRBlock:
    """A CSRBlock from a CSRBlock or any scipy sparse matrix (float32/float64 kept, other
    dtypes become float64). Raises ValueError for anything else."""
    if isinstance(M, CSRBlock):
        return M
    if sp.issparse(M):
        dtype = M.dtype if M.dtype in _FLOATS else np.dtype(np.float64)
        return CSRBlock.from_scipy(M, dtype=dtype)
    raise ValueError(f"{name} must be a scipy sparse matrix or a CSRBlock, got "
                     f"{type(M).__name__}")


def make_config(config: SpArchConfig | dict | None = None, **overrides) -> SpArchConfig:
    """A validated config from a SpArchConfig, a dict of fields or None (Table I), with
    ``overrides`` applied."""
    if config is None:
        cfg = SpArchConfig()
    elif isinstance(config, SpArchConfig):
        cfg = config
    else:
        cfg = SpArchConfig.from_dict(config)
    return SpArchConfig.from_dict({**cfg.as_dict(), **overrides}) if overrides else cfg


def simulate(X, Y=None, config: SpArchConfig | dict | None = None, **overrides
             ) -> tuple[CSRBlock, dict]:
    """C = X @ Y on one modelled SpArch chip; Y defaults to X (A times A).

    X (m x k) and Y (k x n) are scipy sparse matrices or CSRBlocks of one float dtype. Returns
    the exact product C as a CSRBlock (sorted indices, summed in float64, structural zeros kept)
    and the model's report (dict: ``counters``, ``derived``, ``rounds``, ``config``,
    ``simulator_seconds``). ``config`` and keyword ``overrides`` set :class:`SpArchConfig`
    fields. Not collective."""
    cfg = make_config(config, **overrides)
    Xb = as_block(X, "X")
    Yb = Xb if Y is None else as_block(Y, "Y")
    if Xb.shape[1] != Yb.shape[0]:
        raise ValueError(f"X is {Xb.shape[0]} x {Xb.shape[1]} but Y has {Yb.shape[0]} rows")
    if Xb.dtype != Yb.dtype:
        raise ValueError(f"X is {Xb.dtype} but Y is {Yb.dtype}")
    t0 = time.perf_counter()
    C = product(Xb, Yb)
    t1 = time.perf_counter()
    report = run_model(Xb.indptr, Xb.indices, Yb.indptr, Yb.indices,
                       (Xb.shape[0], Xb.shape[1], Yb.shape[1]), cfg)
    t2 = time.perf_counter()
    report["simulator_seconds"] = {"numeric": t1 - t0, "model": t2 - t1, "total": t2 - t0}
    return C, report


def product(X: CSRBlock, Y: CSRBlock) -> CSRBlock:
    """The exact C = X @ Y as a CSRBlock (see :mod:`distmm.sim.sparch.numeric`)."""
    c_ptr, c_idx, c_val = spgemm(X.indptr, X.indices, X.data, Y.indptr, Y.indices, Y.data,
                                 Y.shape[1], X.dtype)
    return CSRBlock((X.shape[0], Y.shape[1]), c_ptr.astype(INDPTR_DTYPE),
                    c_idx.astype(INDEX_DTYPE), c_val)
