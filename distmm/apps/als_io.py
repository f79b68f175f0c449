"""ALS files: ratings in (Matrix Market or HDF5), factors and checkpoints out (HDF5).

Ratings. A Matrix Market coordinate file (user, item, rating; 1-based) goes through
:func:`~distmm.io.matrix_market.read_matrix_market` and its errors. An HDF5 ratings file holds
three 1-D datasets of equal length, ``row`` and ``col`` (0-based integer ids) and ``rating``
(real), and a file attribute ``shape`` = (users, items); rank k of p reads entries
[k N / p, (k+1) N / p).

Factors and checkpoints share one format (so a factors file can also seed a resumed run): the
datasets ``A`` (m x r) and ``B`` (n x r) in ORIGINAL user and item order, so a file written at
one rank count, family or c loads at any other, and the file attributes ``format``
("distmm-als"), ``version``, ``epoch`` (epochs done), ``problem`` (JSON: what defines the
problem -- the training data's fingerprint, rank, lambda, weighting, split -- which a resumed
run must match), ``config`` (JSON: the full configuration), ``history`` (JSON: the per-epoch
records) and ``rng`` (JSON: the random-number state; ALS draws only counter-based hashes of
(seed, ids), so the seed is the whole state). Files are written by rank 0 under a temporary
name and renamed into place (:func:`~distmm.io.outputs.write_h5_atomic`): a crash leaves the
old file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict

import h5py
import numpy as np
from mpi4py import MPI

from distmm.core.coo import CooShare
from distmm.errors import InputError, agree
from distmm.io.matrix_market import mtx_header, read_matrix_market
from distmm.io.outputs import check_output, os_error_reason, write_h5_atomic

FORMAT, VERSION = "distmm-als", 1
H5_SUFFIXES = (".h5", ".hdf5")

__all__ = ["FORMAT", "VERSION", "check_writable", "load_checkpoint", "read_ratings",
           "save_factors"]


def read_ratings(path: str | os.PathLike[str], comm: MPI.Comm) -> CooShare:
    """This rank's share of a ratings file (.mtx, .mtx.gz, .h5 or .hdf5). Collective; every
    problem raises the same InputError on every rank before anything else happens."""
    path = os.fspath(path)
    if not path.lower().endswith(H5_SUFFIXES):
        return read_matrix_market(path, comm)
    share, msg = None, None
    try:
        share, msg = _read_h5_share(path, comm.Get_rank(), comm.Get_size())
    except (OSError, KeyError, TypeError, ValueError) as exc:
        msg = f"{path}: not a readable HDF5 ratings file ({exc})"
    agree(comm, msg)
    return share


def ratings_header(path: str | os.PathLike[str]) -> tuple[int, int, int]:
    """(users, items, entries) of a ratings file from its header only (a Matrix Market size
    line; an HDF5 file's shape attribute and rating dataset's length). Not collective; a
    missing or malformed file raises InputError (:func:`read_ratings` reports it in full)."""
    path = os.fspath(path)
    if not path.lower().endswith(H5_SUFFIXES):
        return mtx_header(path)
    try:
        with h5py.File(path, "r") as fh:
            shape = np.asarray(fh.attrs["shape"])
            return int(shape[0]), int(shape[1]), int(fh["rating"].shape[0])
    except (OSError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"{path}: not a readable HDF5 ratings file ({exc})") from None


def _read_h5_share(path: str, rank: int, p: int) -> tuple[CooShare | None, str | None]:
    if not os.path.exists(path):
        return None, f"{path}: no such file"
    with h5py.File(path, "r") as fh:
        missing = [k for k in ("row", "col", "rating") if k not in fh]
        if missing or "shape" not in fh.attrs:
            return None, (f"{path}: an HDF5 ratings file needs datasets row, col, rating and "
                          f"a shape attribute (missing: {', '.join(missing) or 'shape'})")
        shape = np.asarray(fh.attrs["shape"])
        dsets = [fh[k] for k in ("row", "col", "rating")]
        if shape.shape != (2,) or shape.dtype.kind not in "iu" or shape.min() < 0:
            return None, f"{path}: the shape attribute must be two non-negative integers"
        if any(d.ndim != 1 or d.shape != dsets[0].shape for d in dsets):
            return None, f"{path}: row, col and rating must be 1-D datasets of equal length"
        kinds = [d.dtype.kind for d in dsets]
        if kinds[0] not in "iu" or kinds[1] not in "iu" or kinds[2] not in "iuf":
            return None, (f"{path}: row and col must hold integers and rating numbers (got "
                          f"{', '.join(str(d.dtype) for d in dsets)})")
        n = dsets[0].shape[0]
        lo, hi = rank * n // p, (rank + 1) * n // p
        rows, cols, vals = (d[lo:hi] for d in dsets)
    m, k = int(shape[0]), int(shape[1])
    if rows.size and (rows.min() < 0 or rows.max() >= m or cols.min() < 0 or cols.max() >= k):
        bad = int(np.flatnonzero((rows < 0) | (rows >= m) | (cols < 0) | (cols >= k))[0])
        return None, (f"{path}: entry {lo + bad} has (row, col) = ({rows[bad]}, {cols[bad]}) "
                      f"outside the shape {m} x {k}")
    vals = vals.astype(np.float64)
    if not np.isfinite(vals).all():
        bad = int(np.flatnonzero(~np.isfinite(vals))[0])
        return None, f"{path}: entry {lo + bad} has a NaN or infinite rating"
    return CooShare((m, k), rows, cols, vals), None


def check_writable(path: str | None, what: str, comm: MPI.Comm,
                   inputs: Sequence[str | os.PathLike[str] | None] = ()) -> None:
    """Agree that ``path`` can be written (checked on rank 0, the writer, by
    :func:`distmm.io.outputs.check_output`: its directory exists and is writable and it is none of
    ``inputs``), so a run fails before its work rather than at its first write. Collective."""
    agree(comm, check_output(path, what, inputs) if comm.Get_rank() == 0 else None)


def save_factors(path: str, result, epoch: int) -> None:
    """Write the factors (original order) and the run's state to ``path`` atomically.

    Collective: the factors are gathered to rank 0, which writes; a write error raises the
    same InputError on every rank and leaves any previous file in place."""
    factors = result.factors(root=0)
    msg = None
    if factors is not None:
        cfg = result.config
        attrs = {"format": FORMAT, "version": VERSION, "epoch": int(epoch),
                 "problem": problem_of(result), "config": asdict(cfg),
                 "history": result.history,
                 "rng": {"kind": "splitmix64 counter hash of (seed, tag, ids)",
                         "seed": cfg.seed}}
        try:
            write_h5_atomic(path, {"A": factors[0], "B": factors[1]}, attrs)
        except OSError as exc:
            msg = (f"{path}: cannot write the file ({os_error_reason(exc)}); nothing was "
                   "written and an existing file is unchanged")
    agree(result.obj.comm, msg)


def problem_of(result) -> dict:
    """What a checkpoint must match to be resumed: data fingerprint and problem fields."""
    return {**result.fingerprint, **result.config.problem()}


def load_checkpoint(path: str, result) -> tuple[int, np.ndarray | None, np.ndarray | None,
                                                 list[dict]]:
    """Read a checkpoint for ``result``'s problem: (epochs done, A, B, history), A and B on
    rank 0 only (None elsewhere). Collective. A missing, corrupt or foreign file (another
    data set, rank, lambda, weighting or split) raises the same InputError on every rank."""
    comm = result.obj.comm
    out, msg = (0, None, None, []), None
    if comm.Get_rank() == 0:
        try:
            out, msg = _read_checkpoint(path, problem_of(result))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            msg = f"checkpoint {path}: corrupt or not an ALS checkpoint ({exc})"
    agree(comm, msg)
    done, A, B, history = out
    head = comm.bcast((done, history) if comm.Get_rank() == 0 else None, root=0)
    return head[0], A, B, head[1]


def _read_checkpoint(path: str, expect: dict):
    if not os.path.exists(path):
        return None, f"checkpoint {path}: no such file"
    with h5py.File(path, "r") as fh:
        if fh.attrs.get("format") != FORMAT or "A" not in fh or "B" not in fh:
            return None, f"checkpoint {path}: not a {FORMAT} checkpoint"
        version = int(fh.attrs.get("version", -1))
        if version != VERSION:
            return None, f"checkpoint {path}: version {version}, this build reads {VERSION}"
        problem = json.loads(fh.attrs["problem"])
        diff = sorted(k for k in expect if problem.get(k) != expect[k])
        if diff:
            pairs = ", ".join(f"{k}: {problem.get(k)!r} in the file, {expect[k]!r} here"
                              for k in diff)
            return None, f"checkpoint {path} belongs to another problem ({pairs})"
        A, B = np.asarray(fh["A"]), np.asarray(fh["B"])
        epoch = int(fh.attrs["epoch"])
        history = json.loads(fh.attrs["history"])
    r = expect["rank"]
    if A.shape != (expect["m"], r) or B.shape != (expect["n"], r):
        return None, (f"checkpoint {path}: factors are {A.shape} and {B.shape}, expected "
                      f"({expect['m']}, {r}) and ({expect['n']}, {r})")
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        return None, f"checkpoint {path}: factors contain NaN or infinite values"
    if epoch < 0 or len(history) != epoch:
        return None, f"checkpoint {path}: epoch {epoch} does not match its history"
    return (epoch, A, B, history), None
