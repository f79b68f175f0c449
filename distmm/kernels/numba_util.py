"""Small numba helpers shared by the CPU node models: software prefetch intrinsics, the
fast-math flag set, a parallel gather, the products of a row of an SpGEMM, and unsigned
indexing for the hot loops.

Unsigned indices: numba gives every array access with a signed index that LLVM cannot prove
non-negative a negative-index wraparound (``idx < 0 ? idx + len : idx``), and in sparse
kernels that is nearly every access: the loop counters start from indptr entries loaded from
memory, and column indices are loaded too. It costs 3 to 6 instructions and a register per
access, and in the big loop nests the registers spill. Unsigned indices have no wraparound,
so the hot loops run over :func:`row_range` and read column indices through
:func:`unsigned_view` (measured on hash-spgemm's dense-accumulator kernels, numba's cached
code, 1 thread: symbolic phase 0.48-0.75x the time, numeric 0.57-0.94x). Mixing uint64 with
signed integers in arithmetic gives float64 in numba, so only uint32 values (which promote to
int64) and loop counters used purely as indices are made unsigned."""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import njit, prange, typeof, types
from numba.core import cgutils
from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

__all__ = ["FASTMATH", "STREAM_STORES", "TYPED_FLAGS", "CompiledCall", "gather", "machine_code",
           "popcount", "prefetch_row", "prefetch_span", "prepared_layout",
           "row_products", "row_range", "slp_vectorized", "stack_array", "store_fence",
           "stream_store", "thread_count", "compiled_thread_count", "unsigned_view"]

# reassociation (vectorised reductions) and contraction (FMA); no nnan/ninf, so NaN/inf propagate
FASTMATH = {"reassoc", "contract", "nsz", "arcp"}

# llvm.prefetch is overloaded on the pointer type: "p0" with opaque pointers (LLVM >= 17, the only
# kind there), "p0i8" with the typed i8* pointers of older LLVMs
_PREFETCH_NAME = "llvm.prefetch.p0" if llvm_version_info[0] >= 17 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch_row(typingctx, arr, idx):
    """Prefetch (into all cache levels) every cache line of row ``idx`` of a 2-D array.

    Lowers to ``llvm.prefetch``: a hint that never faults and changes no result. The gathered
    dense rows of SpMM/SDDMM/FusedMM are random, so the hardware prefetchers cannot guess them;
    asking for the row a few nonzeros ahead hides most of the memory latency.
    """
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        shape = cgutils.unpack_tuple(builder, ary.shape)
        strides = cgutils.unpack_tuple(builder, ary.strides)
        item = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(aryty.dtype)))
        row = context.cast(builder, args[1], idxty, types.intp)
        base = builder.add(builder.ptrtoint(ary.data, intp), builder.mul(row, strides[0]))
        last = builder.sub(builder.mul(shape[1], item), ir.Constant(intp, 1))
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH_NAME)
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0),
                                     builder.add(last, ir.Constant(intp, 64)),
                                     ir.Constant(intp, 64)) as (off, _):
            # clamp to the row's last byte, so a row not aligned to 64 bytes is fully covered
            off = builder.select(builder.icmp_signed("<", off, last), off, last)
            ptr = builder.inttoptr(builder.add(base, off), i8p)
            builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@intrinsic
def prefetch_span(typingctx, arr, start, stop):
    """Prefetch the cache lines of ``arr[start:stop]`` (1-D), at most 4 lines; a hint only.

    The swizzled order jumps between rows, so the hardware prefetchers lose the stream of
    ``indices`` and ``vals``; asking for the next row's first lines while this row computes
    hides that latency (the long rows' remaining lines are streamed by the hardware)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(start, types.Integer)
            and isinstance(stop, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty, sty, ety = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        item = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(aryty.dtype)))
        lo = context.cast(builder, args[1], sty, types.intp)
        hi = context.cast(builder, args[2], ety, types.intp)
        base = builder.ptrtoint(ary.data, intp)
        first = builder.add(base, builder.mul(lo, item))
        nbytes = builder.mul(builder.sub(hi, lo), item)
        cap = ir.Constant(intp, 4 * 64)
        nbytes = builder.select(builder.icmp_signed("<", nbytes, cap), nbytes, cap)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH_NAME)
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), nbytes,
                                     ir.Constant(intp, 64)) as (off, _):
            ptr = builder.inttoptr(builder.add(first, off), i8p)
            builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, start, stop), codegen


@intrinsic
def popcount(typingctx, x):
    """The number of set bits of a uint64 (``llvm.ctpop``: one instruction where the CPU has
    it); numba exposes trailing_zeros but no population count."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 64 and not x.signed):
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(x), codegen


# Non-temporal stores are emitted on x86-64 only, where the fence that orders them is known
# (sfence); elsewhere stream_store is a plain store and store_fence does nothing.
STREAM_STORES = platform.machine().lower() in ("x86_64", "amd64")


@intrinsic
def stream_store(typingctx, arr, idx, val):
    """``arr[idx] = val`` (1-D, no wraparound) as a non-temporal store: the line is written
    without being read into the cache first (MOVNTI on x86-64). For output that is written
    once and not read back soon: on this machine a loop that only writes out the 56.5 million
    products of genes-pubmed[30000:40000] A^T ran 2.8x faster (1 thread). Call
    :func:`store_fence` before anything else reads what was stored."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty, idxty, valty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False)
        st = builder.store(context.cast(builder, args[2], valty, aryty.dtype), ptr)
        if STREAM_STORES:
            st.set_metadata("nontemporal",
                            builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@intrinsic
def store_fence(typingctx):
    """Make the calling thread's non-temporal stores visible before its later stores (SFENCE
    on x86-64, where such stores are weakly ordered; nothing elsewhere)."""

    def codegen(context, builder, signature, args):
        if STREAM_STORES:
            fn = cgutils.get_or_insert_function(builder.module,
                                                ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse.sfence")
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


def slp_vectorized(dispatcher):
    """Make every compilation of the njit function ``dispatcher`` run LLVM's SLP vectoriser.

    numba leaves the SLP (straight-line) vectoriser off by default and only runs the loop
    vectoriser. A loop with a small constant trip count is fully unrolled before the loop
    vectoriser sees it, so without SLP the unrolled code stays scalar: a kernel specialised for
    a constant dense width needs SLP to turn its unrolled row updates into SIMD instructions.
    numba reads the setting whenever it builds a pass pipeline, so it is switched on for this
    function's compilations only (under numba's compiler lock, so no other compilation sees it);
    nothing else, including other kernels and what numba loads from its disk cache, changes.
    Returns ``dispatcher``.
    """
    compile_ = dispatcher.compile

    def compile(sig):
        with global_compiler_lock:
            saved = numba_config.SLP_VECTORIZE
            numba_config.SLP_VECTORIZE = 1
            try:
                return compile_(sig)
            finally:
                numba_config.SLP_VECTORIZE = saved

    dispatcher.compile = compile
    return dispatcher


@intrinsic
def stack_array(typingctx, width, dtype):
    """A 1-D C-contiguous array of ``width`` (a compile-time constant, >= 0) items of ``dtype`` on
    the calling function's stack; its contents start undefined and it dies with the call.

    A heap array from ``np.empty`` may, as far as LLVM knows, overlap any other array, so a
    loop that reads the dense rows and writes the array can only be vectorised behind run-time
    overlap checks, and not at all once a constant-trip loop is fully unrolled. A stack slot
    overlaps nothing, and with constant indices LLVM keeps it in vector registers.
    """
    if not isinstance(width, types.IntegerLiteral) or width.literal_value < 0:
        return None
    if isinstance(dtype, types.DType):
        item = dtype.dtype
    elif isinstance(dtype, types.NumberClass):
        item = dtype.instance_type
    else:
        return None
    arrty = types.Array(item, 1, "C")
    n = width.literal_value

    def codegen(context, builder, signature, args):
        lty = context.get_data_type(item)
        intp = context.get_value_type(types.intp)
        itemsize = context.get_abi_sizeof(lty)
        data = cgutils.alloca_once(builder, ir.ArrayType(lty, max(n, 1)))
        ary = context.make_array(arrty)(context, builder)
        context.populate_array(ary, data=builder.bitcast(data, lty.as_pointer()),
                               shape=[ir.Constant(intp, n)],
                               strides=[ir.Constant(intp, itemsize)],
                               itemsize=ir.Constant(intp, itemsize), meminfo=None)
        return ary._getvalue()

    return arrty(width, dtype), codegen


@njit(parallel=True, cache=True, nogil=True)
def gather(vals, perm, out):
    """out[t] = vals[perm[t]]: the values of the transposed block, gathered in parallel."""
    for t in prange(perm.shape[0]):
        out[t] = vals[perm[t]]


@njit(cache=True, nogil=True, inline="always")
def row_products(xp, xi, yp, i):
    """The intermediate products of row i of X @ Y (CSR row pointers xp, yp and X's column
    indices xi): the lengths of the rows of Y that row i's entries select. Not collective."""
    s = 0
    for a in range(xp[i], xp[i + 1]):
        k = xi[a]
        s += yp[k + 1] - yp[k]
    return s


@njit(cache=True, nogil=True, inline="always")
def row_range(indptr, k):
    """``range(indptr[k], indptr[k + 1])`` (the entries of CSR row k) with unsigned bounds, so
    that the arrays indexed by its counter skip numba's negative-index wraparound (module
    docstring). Use the counter only as an index: arithmetic on it with signed integers would
    be float64."""
    return range(np.uint64(indptr[k]), np.uint64(indptr[k + 1]))


def unsigned_view(indices: np.ndarray) -> np.ndarray:
    """Non-negative column indices as uint32: a view of int32 indices (CSRBlock's, no copy),
    a converted copy of any other integer type. Values read from it index arrays without
    numba's wraparound, and promote to int64 in arithmetic with signed integers (module
    docstring). Not collective."""
    if indices.dtype == np.int32:
        return indices.view(np.uint32)
    return np.ascontiguousarray(indices, dtype=np.uint32)


_thread_count_raw = None


try:  # numba's intrinsic call of the threading layer's getter, by symbol (cacheable)
    from numba.np.ufunc.parallel import _iget_num_threads
except ImportError:  # numba's internals differ: thread_count below serves
    _iget_num_threads = None


@njit(cache=True)
def _thread_count_nopython() -> int:
    return _iget_num_threads()


def compiled_thread_count():
    """A compiled function returning ``numba.get_num_threads()`` of the calling thread: a
    tenth of a microsecond per call where :func:`thread_count` takes a third (the threading
    layer's getter through ctypes). Launches the threading layer first (a compiled call
    reads the getter the launch registers). Not collective."""
    thread_count()  # launches the threading layer
    if _iget_num_threads is None:
        return thread_count
    _thread_count_nopython()  # compiled, or loaded from the cache, now
    return machine_code(_thread_count_nopython, ()) or _thread_count_nopython


#: The bits of numpy's ``ndarray.flags.num`` that are part of an array's numba type besides its
#: dtype, dimensions and layout: aligned (NPY_ARRAY_ALIGNED) and writeable
#: (NPY_ARRAY_WRITEABLE).
TYPED_FLAGS = 0x0100 | 0x0400


def prepared_layout(x: np.ndarray) -> tuple:
    """(shape, strides, dtype, :data:`TYPED_FLAGS` bits) of an array: arrays with equal
    tuples pass the same operand checks, take the same kernel plan and the same compiled code
    (:func:`machine_code`), so a prepared kernel call made for one serves the others. Not
    collective."""
    return x.shape, x.strides, x.dtype, x.flags.num & TYPED_FLAGS


class CompiledCall(NamedTuple):
    """A kernel bound to fixed arguments (what a node model's ``_bind`` may return):
    ``call(*operands)`` is ``dispatcher(*head, *operands, *tail)`` for the njit function
    ``dispatcher``, and a prepared call (:meth:`~distmm.kernels.base.NodeModel.prepare`)
    calls its compiled code directly (:func:`machine_code`)."""

    dispatcher: Any
    head: tuple
    tail: tuple

    def __call__(self, *operands) -> None:
        self.dispatcher(*self.head, *operands, *self.tail)


def machine_code(dispatcher, args: tuple) -> Callable[..., Any] | None:
    """The compiled entry point of the njit function ``dispatcher`` for exactly the numba
    types of ``args``, or None where it has no such overload (the dispatcher converted the
    arguments to another overload's types, say). Not collective.

    Calling it skips what the dispatcher does on every call before the machine code runs:
    typing each argument and looking up the overload, about a third of a microsecond for
    the reference kernels' nine arguments (docs/performance.md). The arguments are still
    converted, but not checked: the caller must pass only arguments of those very types
    (dtype, dimensions, layout, and the :data:`TYPED_FLAGS`), as a prepared kernel call
    (:meth:`~distmm.kernels.base.NodeModel.prepare`) is only ever called."""
    overloads = getattr(dispatcher, "overloads", None)  # none under NUMBA_DISABLE_JIT=1
    if overloads is None:
        return None
    try:
        sig = tuple(map(_numba_type, args))
    except (TypeError, ValueError):
        return None
    return getattr(overloads.get(sig), "entry_point", None)


# numba type of a plain ndarray by everything numba's typeof reads of it (dtype, dimensions,
# layout, writeable, aligned); typeof itself builds the type anew, which made it most of a
# kernel's first call (NodeModel.prepare on every new block and width)
_ARRAY_TYPES: dict[tuple, Any] = {}


def _numba_type(x: Any) -> Any:
    """``numba.typeof(x)``, from a memo for plain ndarrays. Not collective."""
    if type(x) is np.ndarray:
        flags = x.flags
        key = (x.dtype, x.ndim, flags.c_contiguous, flags.f_contiguous, flags.num & TYPED_FLAGS)
        found = _ARRAY_TYPES.get(key)
        if found is None:
            found = _ARRAY_TYPES[key] = typeof(x)
        return found
    return typeof(x)


def thread_count() -> int:
    """``numba.get_num_threads()`` of the calling thread, cheaply (read on every distributed
    call to see whether prepared kernel plans are still valid).

    ``numba.get_num_threads`` takes the threading layer's launch locks on every call; once the
    layer is up, its thread-count getter is called directly (falling back to the public call
    if numba's internals differ)."""
    global _thread_count_raw
    if _thread_count_raw is None:
        import numba
        from numba.np.ufunc import parallel

        numba.get_num_threads()  # launches the threading layer
        _thread_count_raw = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
    n = _thread_count_raw()
    if n <= 0:
        import numba

        return numba.get_num_threads()  # raises numba's own error
    return n
