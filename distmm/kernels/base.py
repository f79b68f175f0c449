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

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from distmm.core.sparse import CSRBlock
from distmm.kernels.checks import check_operands
from distmm.kernels.numba_util import (
    CompiledCall,
    compiled_thread_count,
    machine_code,
    thread_count,
)

OPERATIONS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b", "spgemm")


@dataclass(slots=True)
class OpStats:
    """Accumulated counters of one local operation on one rank."""

    calls: int = 0
    seconds: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    fallback_calls: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def add_extra(self, extra: dict[str, float]) -> None:
        """Add a call's model counters."""
        for k, v in extra.items():
            self.extra[k] = self.extra.get(k, 0.0) + v

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
               fallback: bool = False, extra: dict[str, float] | None = None) -> None:
        """Add one call of ``op`` (and the model counters ``extra`` it reported)."""
        s = self.ops[op]
        s.calls += 1
        s.seconds += seconds
        s.flops += flops
        s.bytes += nbytes
        s.fallback_calls += int(fallback)
        if extra:
            s.add_extra(extra)

    def reset(self) -> None:
        """Zero every counter. The counters are zeroed in place rather than dropped: a loop
        that resets before each call (``distmm run --repeat``, benchmarks) would otherwise
        build them again inside its next timed call."""
        for s in self.ops.values():
            s.calls = 0
            s.seconds = s.flops = s.bytes = 0.0
            s.fallback_calls = 0
            s.extra.clear()

    def as_dict(self) -> dict:
        """``{op: counters}`` of the operations called since the last reset."""
        return {op: s.as_dict() for op, s in sorted(self.ops.items()) if s.calls}


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


# (dense rows read, dense rows written) of each operation on an m x n block
_ROWS = {
    "sddmm": lambda m, n: (m + n, 0),
    "spmm_a": lambda m, n: (n, m),
    "spmm_b": lambda m, n: (m, n),
    "fusedmm_a": lambda m, n: (m + n, m),
    "fusedmm_b": lambda m, n: (m + n, n),
}
# FusedMM does an SDDMM's and an SpMM's flops
_FLOP_FACTOR = {"fusedmm_a": 2.0, "fusedmm_b": 2.0}


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
        if type(self).plan_state is NodeModel.plan_state:
            self.plan_state = self._first_plan_state

    def _first_plan_state(self) -> int:
        """The first :meth:`plan_state` call: from then on the same thread count is read by
        compiled code (a replayed call reads it every time). Not at construction: the
        threading layer must not start before the rank's thread share is settled."""
        self.plan_state = compiled_thread_count()
        return self.plan_state()

    def count(self, **counters: float) -> None:
        """Add model counters to the operation now running (called by implementations)."""
        for k, v in counters.items():
            self._pending[k] = self._pending.get(k, 0.0) + float(v)

    def options(self) -> dict:
        """The model's configuration as a JSON-ready dict (recorded in run reports)."""
        return {}

    # What the calls of :meth:`prepare` depend on besides their operands, read on every
    # distributed call: a call prepared under another state must be prepared again. Here the
    # numba thread count (the CPU kernels cut their rows into one chunk per thread), as the
    # function itself (a method wrapping it would cost a frame per call; __init__ puts the
    # compiled getter in its place); models that plan on more override it with a method.
    # Not collective.
    plan_state = staticmethod(thread_count)

    # public entry points: timing, accounting and fallback live here, once
    def prepare(self, op: str, S: CSRBlock, vals: np.ndarray, X: np.ndarray,
                Y: np.ndarray | None, out: np.ndarray,
                accumulate: bool = True) -> Callable[..., float]:
        """Check, account and plan one local operation once; return a call that runs it.

        Parameters
        ----------
        op : str
            One of ``sddmm``, ``spmm_a``, ``spmm_b``, ``fusedmm_a``, ``fusedmm_b`` (the
            multi-head SDDMM, the same in every model, is
            :func:`distmm.kernels.multivalue.prepare_sddmm_multi`).
        S, vals, X, Y, out
            The operands as the public methods take them: ``X`` and ``Y`` are the dense
            operands in call order ((A, B) for sddmm and fusedmm_*, (B, None) for spmm_a,
            (A, None) for spmm_b).
        accumulate : bool
            Whether the call adds to ``out`` (else writes it).

        Returns
        -------
        callable
            ``run(vals, *dense, out) -> seconds``, the operands in the public method's order
            without S (``run(vals, B, out)`` for spmm_a, ``run(vals, A, B, out)`` for sddmm).
            Each call runs the kernel on S, records it in :attr:`stats` exactly as the public
            method does (calls, seconds, flops, bytes, fallback, model counters) and returns
            the kernel's seconds. It may be called again and again, but only with operands of
            the shapes, dtypes and layout it was prepared with (the same arrays, or arrays of
            the same data type, shape, C layout, alignment and writeability: the compiled
            code of the first call's types is called directly from the second call on,
            :func:`~distmm.kernels.numba_util.machine_code`): nothing is checked again, and the plan
            (kernel, chunks per thread, panels) is that of the prepared operands and of the
            numba thread count at preparation.
        """
        check_operands(op, S, vals, X, Y, out)
        r = X.shape[1]
        m, n = S.shape
        rows_read, rows_written = _ROWS[op](m, n)
        flops = _FLOP_FACTOR.get(op, 1.0) * spmm_flops(S.nnz, r)
        nbytes = kernel_bytes(S, r, rows_read, rows_written,
                              S.nnz if op == "sddmm" else 0, accumulate)
        impl, fallback = self._implementer(op)
        kernel = impl._bind(op, S, r, bool(accumulate))
        head = tail = ()
        if isinstance(kernel, CompiledCall):
            dispatcher, head, tail = kernel

            def first_call(*args) -> None:
                # through the dispatcher (it compiles or loads the code), then straight to
                # the code of these arguments' types: the later calls pass arguments of the
                # very same types, as the docstring requires (numba_util.machine_code)
                nonlocal kernel
                dispatcher(*args)
                kernel = machine_code(dispatcher, args) or dispatcher

            kernel = first_call
        clock = time.perf_counter
        # The operation's counters, added to here as :meth:`KernelStats.record` does (written
        # out: a replayed call is mostly this wrapper). The object lives as long as the
        # stats: a reset zeroes it in place.
        counters = self.stats.ops[op]

        def run(*operands) -> float:
            if impl._pending:
                impl._pending = {}
            t0 = clock()
            kernel(*head, *operands, *tail)
            dt = clock() - t0
            counters.calls += 1
            counters.seconds += dt
            counters.flops += flops
            counters.bytes += nbytes
            if fallback:
                counters.fallback_calls += 1
            extra = impl._pending
            if extra:
                impl._pending = {}
                counters.add_extra(extra)
            return dt

        return run

    def _implementer(self, op: str) -> tuple[NodeModel, bool]:
        """(the model that runs ``op``, whether that is the fallback)."""
        fallback = op not in self.native
        impl = self._fallback if fallback else self
        if fallback and impl is None:
            raise NotImplementedError(f"node model {self.name!r} has no {op} and no fallback")
        return impl, fallback

    def _bind(self, op: str, S: CSRBlock, r: int, accumulate: bool) -> Callable[..., None]:
        """The model's own kernel for ``op`` on block S at width r, as ``fn(vals, *dense,
        out)`` (no checks, no accounting): a callable, or a
        :class:`~distmm.kernels.numba_util.CompiledCall` of an njit kernel, whose prepared
        calls then run its compiled code directly. Models that plan per block override this; the
        default calls the ``_op`` method, zero-filling ``out`` first where a model that only
        accumulates is asked to write."""
        fn = getattr(self, "_" + op)
        if accumulate:
            return functools.partial(fn, S)
        if op in self.overwrites:
            return functools.partial(fn, S, accumulate=False)

        def write(*operands) -> None:
            operands[-1][...] = 0  # ``out`` is the last operand
            fn(S, *operands)

        return write

    def sddmm(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
              out: np.ndarray, accumulate: bool = True) -> None:
        """out[k] += vals[k] * <A[row_k], B[col_k]> for every stored nonzero k of S
        (``out[k] = ...`` when ``accumulate`` is false)."""
        self.prepare("sddmm", S, vals, A, B, out, accumulate)(vals, A, B, out)

    def spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray,
               accumulate: bool = True) -> None:
        """out += S(vals) @ B (``out = ...`` when ``accumulate`` is false); out has S.shape[0]
        rows."""
        self.prepare("spmm_a", S, vals, B, None, out, accumulate)(vals, B, out)

    def spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray,
               accumulate: bool = True) -> None:
        """out += S(vals)^T @ A (``out = ...`` when ``accumulate`` is false); out has
        S.shape[1] rows."""
        self.prepare("spmm_b", S, vals, A, None, out, accumulate)(vals, A, out)

    def fusedmm_a(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                  out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T)) @ B without materialising the SDDMM result
        (``out = ...`` when ``accumulate`` is false)."""
        self.prepare("fusedmm_a", S, vals, A, B, out, accumulate)(vals, A, B, out)

    def fusedmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, B: np.ndarray,
                  out: np.ndarray, accumulate: bool = True) -> None:
        """out += (S(vals) * (A B^T))^T @ A without materialising the SDDMM result
        (``out = ...`` when ``accumulate`` is false)."""
        self.prepare("fusedmm_b", S, vals, A, B, out, accumulate)(vals, A, B, out)

    def spgemm(self, X: CSRBlock, Y: CSRBlock) -> CSRBlock:
        """C = X @ Y for two CSR blocks of one dtype; C has sorted column indices.

        X's column count must equal Y's row count. Not collective."""
        if X.shape[1] != Y.shape[0]:
            raise ValueError(f"spgemm: X is {X.shape[0]} x {X.shape[1]} but Y has "
                             f"{Y.shape[0]} rows")
        if X.dtype != Y.dtype:
            raise ValueError(f"spgemm: X is {X.dtype} but Y is {Y.dtype}")
        impl, fallback = self._implementer("spgemm")
        flops = spgemm_flops(X, Y)
        impl._pending = {}
        t0 = time.perf_counter()
        C = impl._spgemm(X, Y)
        dt = time.perf_counter() - t0
        extra, impl._pending = impl._pending, {}
        self.stats.record("spgemm", dt, flops, spgemm_bytes(X, Y, C), fallback, extra)
        return C

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
