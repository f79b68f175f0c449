"""The node-model interface: what one rank's local kernel must provide.

Every distributed algorithm calls these methods on local blocks and never branches on which model
it holds (ARCHITECTURE.md, "NodeModel"). All operations *accumulate* into ``out`` by default:
the distributed loops add one block's contribution per propagation step. With
``accumulate=False`` an operation *writes* ``out`` instead (``out = ...``; for SDDMM every stored
value, for the others every row of ``out``, including rows with no nonzeros, which become zero),
so the first step of a loop needs no zero-filled output. A model lists the operations that
write natively in ``overwrites``; for the others the interface zero-fills ``out`` and
accumulates, so every model supports both modes. Values are passed apart
from the block's structure because SDDMM output is fed straight into SpMM and applications
replace values between calls.

Shapes, for a block ``S`` of shape (m_loc, n_loc) and a dense width r:
    sddmm(S, vals, A, B, out):     A (m_loc, r), B (n_loc, r), out (nnz,)
        out[k] += vals[k] * dot(A[row_k], B[col_k])
    spmm_a(S, vals, B, out):       B (n_loc, r), out (m_loc, r)     out += S(vals) @ B
    spmm_b(S, vals, A, out):       A (m_loc, r), out (n_loc, r)     out += S(vals)^T @ A
    fusedmm_a(S, vals, A, B, out): out (m_loc, r)
        out += (S(vals) * (A B^T)) @ B, the SDDMM never materialised
    fusedmm_b(S, vals, A, B, out): out (n_loc, r)
        out += (S(vals) * (A B^T))^T @ A
    spgemm(X, Y) -> C:             X (m, k), Y (k, n) CSR blocks; returns C = X @ Y as a new
        CSRBlock with sorted column indices (values are X.data and Y.data); not accumulating
Dense arrays are C-contiguous and of the block's dtype (float32 or float64); the public
methods check this once (:mod:`distmm.kernels.checks`) before any model runs, so a model's
``_op`` may assume valid operands. None of the methods communicate: they are called by one
rank on its own data.

Model counters: an implementation may call :meth:`NodeModel.count` while it runs (probes per
insertion, modelled cycles, DRAM bytes, ...); the counters are added to that operation's
:class:`OpStats` ``extra`` and reach the run report beside the measured time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from distmm.core.sparse import CSRBlock
from distmm.kernels.checks import check_operands

OPERATIONS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b", "spgemm")


@dataclass
class OpStats:
    """Accumulated counters of one local operation on one rank."""

    calls: int = 0
    seconds: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    fallback_calls: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {
            "calls": self.calls,
            "seconds": self.seconds,
            "flops": self.flops,
            "bytes": self.bytes,
            "fallback_calls": self.fallback_calls,
        }
        d.update(self.extra)
        return d


@dataclass
class KernelStats:
    """Per-operation statistics of one node model on one rank; merged into the run report."""

    ops: dict[str, OpStats] = field(default_factory=lambda: defaultdict(OpStats))

    def record(self, op: str, seconds: float, flops: float, nbytes: float,
               fallback: bool = False, **extra: float) -> None:
        s = self.ops[op]
        s.calls += 1
        s.seconds += seconds
        s.flops += flops
        s.bytes += nbytes
        s.fallback_calls += int(fallback)
        for k, v in extra.items():
            s.extra[k] = s.extra.get(k, 0.0) + v

    def reset(self) -> None:
        self.ops.clear()

    def as_dict(self) -> dict:
        return {op: s.as_dict() for op, s in sorted(self.ops.items())}


def spmm_flops(nnz: int, r: int) -> float:
    """Flops of one SpMM (or one SDDMM): a multiply and an add per nonzero per column."""
    return 2.0 * nnz * r


def spgemm_flops(X: CSRBlock, Y: CSRBlock) -> float:
    """Flops of C = X @ Y: a multiply and an add for every pair (X[i,k], Y[k,j])."""
    if X.nnz == 0:
        return 0.0
    row_len = np.diff(Y.indptr)
    return 2.0 * float(row_len[X.indices].sum())


def spgemm_bytes(X: CSRBlock, Y: CSRBlock, C: CSRBlock) -> float:
    """Compulsory traffic of one SpGEMM: X and Y read once, C written once (structure+values)."""
    def size(M: CSRBlock) -> int:
        return M.indptr.nbytes + M.indices.nbytes + M.data.nbytes
    return float(size(X) + size(Y) + size(C))


def kernel_bytes(S: CSRBlock, r: int, rows_read: int, rows_written: int,
                 values_written: int = 0, accumulate: bool = True) -> float:
    """Compulsory memory traffic of one local kernel call, by the kernel's own accounting.

    The sparse structure and values are read once; ``rows_read`` dense rows of width r are read
    and ``rows_written`` dense rows are read and written (accumulate semantics; only written
    when ``accumulate`` is false); ``values_written`` scalars (SDDMM's nnz outputs) likewise.
    """
    item = S.data.dtype.itemsize
    sparse = S.indptr.nbytes + S.indices.nbytes + S.nnz * item
    touch = 2 if accumulate else 1
    return float(sparse + item * r * (rows_read + touch * rows_written)
                 + touch * item * values_written)


class NodeModel:
    """A rank's local kernel. Subclasses implement the ``_op`` methods they support natively.

    ``native`` names the operations the model implements itself; everything else is delegated
    to the fallback model (the reference model) and counted as a fallback in :attr:`stats`, so
    nobody is misled about what ran. Callers use only the public methods below.
    """

    name: str = "abstract"
    native: frozenset[str] = frozenset()
    # operations whose ``_op`` takes ``accumulate=False`` and then writes ``out`` itself
    overwrites: frozenset[str] = frozenset()

    def __init__(self, fallback: NodeModel | None = None) -> None:
        self.stats = KernelStats()
        self._fallback = fallback
        self._pending: dict[str, float] = {}

    def count(self, **counters: float) -> None:
        """Add model counters to the operation now running (called by implementations)."""
        for k, v in counters.items():
            self._pending[k] = self._pending.get(k, 0.0) + float(v)

    def options(self) -> dict:
        """The model's configuration as a JSON-ready dict (recorded in run reports)."""
        return {}

    # public entry points: timing, accounting and fallback live here, once
    def sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
              out: np.ndarray, accumulate: bool = True) -> None:
        """out[k] += vals[k] * <A[row_k], B[col_k]> for every stored nonzero k of S
        (``out[k] = ...`` when ``accumulate`` is false)."""
        check_operands("sddmm", S, vals, A, B, out)
        self._run("sddmm", S, A.shape[1], S.shape[0] + S.shape[1], 0,
                  (S, vals, A, B, out), accumulate, values_written=S.nnz)

    def spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray,
               accumulate: bool = True) -> None:
        """out += S(vals) @ B (``out = ...`` when ``accumulate`` is false); out has S.shape[0]
        rows."""
        check_operands("spmm_a", S, vals, B, None, out)
        self._run("spmm_a", S, B.shape[1], S.shape[1], S.shape[0], (S, vals, B, out),
                  accumulate)

    def spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray,
               accumulate: bool = True) -> None:
        """out += S(vals)^T @ A (``out = ...`` when ``accumulate`` is false); out has
        S.shape[1] rows."""
        check_operands("spmm_b", S, vals, A, None, out)
        self._run("spmm_b", S, A.shape[1], S.shape[0], S.shape[1], (S, vals, A, out),
                  accumulate)

    def fusedmm_a(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                  out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T)) @ B without materialising the SDDMM result
        (``out = ...`` when ``accumulate`` is false)."""
        check_operands("fusedmm_a", S, vals, A, B, out)
        self._run("fusedmm_a", S, A.shape[1], S.shape[0] + S.shape[1], S.shape[0],
                  (S, vals, A, B, out), accumulate, flop_factor=2.0)

    def fusedmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                  out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T))^T @ A without materialising the SDDMM result
        (``out = ...`` when ``accumulate`` is false)."""
        check_operands("fusedmm_b", S, vals, A, B, out)
        self._run("fusedmm_b", S, A.shape[1], S.shape[0] + S.shape[1], S.shape[1],
                  (S, vals, A, B, out), accumulate, flop_factor=2.0)

    def spgemm(self, X: CSRBlock, Y: CSRBlock) -> CSRBlock:
        """C = X @ Y for two CSR blocks of one dtype; C has sorted column indices.

        X's column count must equal Y's row count. Not collective."""
        if X.shape[1] != Y.shape[0]:
            raise ValueError(f"spgemm: X is {X.shape[0]} x {X.shape[1]} but Y has "
                             f"{Y.shape[0]} rows")
        if X.dtype != Y.dtype:
            raise ValueError(f"spgemm: X is {X.dtype} but Y is {Y.dtype}")
        flops = spgemm_flops(X, Y)
        C, impl, fallback, dt = self._call("spgemm", (X, Y))
        self._record(impl, "spgemm", dt, flops, spgemm_bytes(X, Y, C), fallback)
        return C

    def _call(self, op: str, args: tuple, accumulate: bool = True):
        fallback = op not in self.native
        impl = self._fallback if fallback else self
        if fallback and impl is None:
            raise NotImplementedError(f"node model {self.name!r} has no {op} and no fallback")
        impl._pending = {}
        fn = getattr(impl, "_" + op)
        t0 = time.perf_counter()
        if accumulate:
            result = fn(*args)
        elif op in impl.overwrites:
            result = fn(*args, accumulate=False)
        else:  # the model only accumulates: start it from zero (``out`` is the last operand)
            args[-1][...] = 0
            result = fn(*args)
        return result, impl, fallback, time.perf_counter() - t0

    def _record(self, impl: NodeModel, op: str, dt: float, flops: float, nbytes: float,
                fallback: bool) -> None:
        extra, impl._pending = impl._pending, {}
        self.stats.record(op, dt, flops, nbytes, fallback=fallback, **extra)

    def _run(self, op: str, S: CSRBlock, r: int, rows_read: int, rows_written: int,
             args: tuple, accumulate: bool = True, flop_factor: float = 1.0,
             values_written: int = 0) -> None:
        _, impl, fallback, dt = self._call(op, args, bool(accumulate))
        self._record(impl, op, dt, flop_factor * spmm_flops(S.nnz, r),
                     kernel_bytes(S, r, rows_read, rows_written, values_written, accumulate),
                     fallback)

    # implementations, overridden by subclasses for what they support natively
    def _sddmm(self, S, vals, A, B, out) -> None:
        raise NotImplementedError

    def _spmm_a(self, S, vals, B, out) -> None:
        raise NotImplementedError

    def _spmm_b(self, S, vals, A, out) -> None:
        raise NotImplementedError

    def _fusedmm_a(self, S, vals, A, B, out) -> None:
        raise NotImplementedError

    def _fusedmm_b(self, S, vals, A, B, out) -> None:
        raise NotImplementedError

    def _spgemm(self, X, Y) -> CSRBlock:
        raise NotImplementedError
