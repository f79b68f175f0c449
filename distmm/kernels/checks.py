"""Validation of local kernel operands, shared by every node model.

The public methods of :class:`distmm.kernels.base.NodeModel` run these checks once, before
dispatching to a model (or to its fallback), so every model gets the same precise
:class:`ValueError` for a wrong dtype, shape, width or layout, and nothing is cast silently.
Not collective.
"""

from __future__ import annotations

import numpy as np

from distmm.core.sparse import CSRBlock

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_dense(name: str, arr: np.ndarray, rows: int, dtype: np.dtype,
                 r: int | None) -> int:
    """Check one dense operand; return its width r."""
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{name} must be a numpy array, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise ValueError(f"{name} has dtype {arr.dtype}, expected {dtype} (the dtype of vals; "
                         "nothing is cast implicitly)")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
    if arr.shape[0] != rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows, expected {rows} (shape {arr.shape})")
    if r is not None and arr.shape[1] != r:
        raise ValueError(f"{name} has width {arr.shape[1]}, expected {r} like the other "
                         "dense operands")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return int(arr.shape[1])


def check_vals(S: CSRBlock, vals: np.ndarray) -> np.dtype:
    """Check the values array against the block; return the common dtype."""
    if not isinstance(vals, np.ndarray):
        raise ValueError(f"vals must be a numpy array, got {type(vals).__name__}")
    dtype = vals.dtype
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"vals has dtype {dtype}; only float32 and float64 are supported")
    if dtype != S.data.dtype:
        raise ValueError(f"vals has dtype {dtype} but the block's dtype is {S.data.dtype}")
    if vals.ndim != 1 or vals.shape[0] != S.nnz:
        raise ValueError(f"vals must have shape ({S.nnz},) (the block's nnz), got {vals.shape}")
    if not vals.flags.c_contiguous:
        raise ValueError("vals must be contiguous")
    return dtype


def check_out_vector(S: CSRBlock, out: np.ndarray, dtype: np.dtype) -> None:
    """Check an SDDMM output: one writeable value per stored nonzero of S."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ValueError(f"out has dtype {out.dtype}, expected {dtype} (the dtype of vals)")
    if out.ndim != 1 or out.shape[0] != S.nnz:
        raise ValueError(f"out must have shape ({S.nnz},) (the block's nnz), got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be contiguous")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")


def check_out_dense(out: np.ndarray, rows: int, dtype: np.dtype, r: int) -> None:
    """Check a dense output: rows x r, writeable, C-contiguous, of the operands' dtype."""
    check_dense("out", out, rows, dtype, r)
    if not out.flags.writeable:
        raise ValueError("out must be writeable")


def check_operands(op: str, S: CSRBlock, vals: np.ndarray, X: np.ndarray,
                   Y: np.ndarray | None, out: np.ndarray) -> None:
    """Check the operands of one local operation (shapes in :mod:`distmm.kernels.base`).

    ``X`` and ``Y`` are the dense operands in call order: (A, B) for sddmm and fusedmm_*,
    (B,) for spmm_a and (A,) for spmm_b."""
    m, n = S.shape
    dtype = check_vals(S, vals)
    if op == "spmm_a":
        check_out_dense(out, m, dtype, check_dense("B", X, n, dtype, None))
    elif op == "spmm_b":
        check_out_dense(out, n, dtype, check_dense("A", X, m, dtype, None))
    else:
        r = check_dense("A", X, m, dtype, None)
        check_dense("B", Y, n, dtype, r)
        if op == "sddmm":
            check_out_vector(S, out, dtype)
        else:
            check_out_dense(out, m if op == "fusedmm_a" else n, dtype, r)
