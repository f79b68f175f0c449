"""The per-rank memory model: what one rank holds, by part, and how much memory it may use.

Each algorithm family states its own model as a static method of its class,
``memory_bytes(op, strategy, m, n, nnz, r, p, c, dtype, overlap, local)`` (one signature for
every family, iterated through :data:`distmm.algorithms.ALGORITHMS`); this module holds only the
pieces those models are made of, the :class:`Memory` record they return, the measurement of
what an object really holds (:func:`held_bytes`), and the memory a rank may use
(:func:`available_bytes`, :func:`parse_memory_limit`). docs/memory.md describes the model.

The model has three numbers per rank (bytes):

* ``held``: arrays alive after one call of the operation: S's blocks in each stored
  orientation (indptr, indices, values; a cached transpose where the call builds one), the
  permutations, the scratch buffers the object keeps for the next call (replication, shift,
  reduction), and the dense blocks the caller holds (inputs and the output);
* ``call``: the peak of the temporaries a call creates on top of ``held`` (the SDDMM result
  that FusedMM feeds to its SpMM, kernel scratch, blocks rebuilt from packets);
* ``distribute``: the peak while S is placed (the caller's COO share, its routed copies and the
  sorting temporaries of :meth:`distmm.core.sparse.CSRBlock.from_coo`);
* ``partitioner``: rank 0 only, where S is ordered by a graph partition made at distribute (the
  sparsity-aware family's default): the pattern gathered there and the partitioner's own
  memory (:func:`distmm.core.partition.partition_peak_bytes`).

The peak of a rank is ``max(distribute, held + call, build)``, and rank 0's also at least
``partitioner``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass

import numpy as np
from mpi4py import MPI

from distmm.core import comm
from distmm.core.aligned import padding
from distmm.core.operations import OPS  # noqa: F401  (re-exported: the methods' names)
from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE
from distmm.errors import InputError

_PTR = np.dtype(INDPTR_DTYPE).itemsize
_IDX = np.dtype(INDEX_DTYPE).itemsize
# Bytes per entry of a CooShare (int64 row, int64 column, float64 value).
COO_ENTRY = 24
# Bytes per nonzero alive at the peak of CSRBlock.from_coo, beyond its inputs: the sort order
# and run starts, the sorted rows and columns, the summed values, the unique rows and columns
# (int64 each), and the finished int32 indices.
FROM_COO_SCRATCH = 8 * 7 + _IDX


@dataclass(frozen=True)
class Memory:
    """Bytes one rank holds, by part (see the module docstring). Not collective.

    ``parts`` are alive after a call (``held`` is their sum), ``call`` the temporaries of a
    call beyond them, by name, ``distribute`` the peak while S is placed and ``build`` the
    peak of building S^T in the first call that needs it (0 if none does); ``partitioner``
    rank 0's peak while it partitions S at distribute (0 where nothing is partitioned; the
    other ranks wait meanwhile)."""

    parts: dict[str, int]
    call: dict[str, int] = field(default_factory=dict)
    distribute: int = 0
    build: int = 0
    partitioner: int = 0

    @property
    def held(self) -> int:
        return int(sum(self.parts.values()))

    @property
    def peak(self) -> int:
        """The fullest rank's modelled peak: max(distribute, held + call, build, partitioner)
        (the last on rank 0 only: :meth:`rank_peak`)."""
        return int(max(self.rank_peak(1), self.partitioner))

    def rank_peak(self, rank: int) -> int:
        """The modelled peak of world rank ``rank``: max(distribute, held + call, build), and
        on rank 0 at least ``partitioner``."""
        peak = max(self.distribute, self.held + sum(self.call.values()), self.build)
        return int(max(peak, self.partitioner) if rank == 0 else peak)

    def as_dict(self) -> dict:
        return {"peak": self.peak, "held": self.held, "distribute": self.distribute,
                "build": self.build, "partitioner": self.partitioner,
                "parts": dict(self.parts), "call": dict(self.call)}


# ----------------------------------------------------------------- pieces of the models
def csr_bytes(rows: int, nnz: int, itemsize: int, nblocks: int = 1) -> int:
    """Bytes of ``nblocks`` CSR blocks of ``rows`` rows each (indptr) holding ``nnz`` nonzeros
    in total (int32 indices and values of ``itemsize`` bytes), as :class:`CSRBlock` stores
    them."""
    return int(nblocks * (rows + 1) * _PTR + nnz * (_IDX + itemsize))


def transpose_bytes(cols: int, nnz: int, nblocks: int = 1) -> int:
    """Bytes of the cached transposed structure of blocks with ``cols`` columns in total
    (:meth:`CSRBlock.transpose`: indptr, int32 indices, int64 value permutation)."""
    return int((cols + nblocks) * _PTR + nnz * (_IDX + 8))


def perm_bytes(m: int, n: int) -> int:
    """The row and column permutations and their inverses (int64; one pair when m == n)."""
    return int(16 * (m + (n if m != n else 0)))


def unpack_bytes(rows: int, nnz: int, word: int) -> int:
    """Temporaries of rebuilding a CSR block from a COO packet: its indptr and, when the wire
    word is wider than an index (float64 runs), the indices cast to int32."""
    return int((rows + 1) * _PTR + (nnz * _IDX if word > _IDX else 0))


def place_bytes(share: int, received: int, max_block: int, itemsize: int,
                kept: float = 2 * COO_ENTRY) -> int:
    """Peak bytes while a rank places S (:meth:`DistributedMatrix._place`).

    ``share``: entries this rank sends (the caller's COO share, or S's stored nonzeros when
    S^T is built from them), ``kept`` bytes each alive throughout (default: the caller's
    share, 24 bytes, and its permuted rows, columns and owners, 24 more); ``received``:
    entries this rank receives; ``max_block``: the most entries of one of its blocks. On top
    of that, the larger of the routing step (the send order and one routed array, 16 bytes a
    sent entry, and the received rows, columns and values, 24 bytes) and the build step (the
    received entries, their block, local row and column and sort order, 56 bytes, one
    block's :meth:`CSRBlock.from_coo` inputs and scratch, and the blocks built so far)."""
    route = 16 * share + 24 * received
    build = 56 * received + (24 + FROM_COO_SCRATCH) * max_block + (_IDX + itemsize) * received
    return int(kept * share + max(route, build))


def build_transpose_bytes(parts: Mapping[str, int], nnz_a: int, nnz_b: int, max_block: int,
                          itemsize: int) -> int:
    """Peak bytes of building S^T from S's stored nonzeros in the first call that needs it:
    what is alive then (the permutations, S, the caller's dense inputs, from ``parts``) and
    :func:`place_bytes` with S's coordinates and owners (24 bytes a nonzero) as the entries
    kept throughout."""
    alive = sum(v for key, v in parts.items()
                if key in ("permutations", "bookkeeping", "S a", "dense A", "dense B"))
    return int(alive + place_bytes(nnz_a, nnz_b, max_block, itemsize, kept=24))


def mpi_reduce_scatter_bytes(nbytes: int, c: int) -> int:
    """Scratch MPI allocates inside a reduce-scatter of ``nbytes`` over ``c`` ranks: MPICH's
    algorithms for commutative sums receive the partner's (c-1)/c of the buffer into a
    temporary. None when c = 1, where distmm skips the collective, and none for blocks of
    :data:`distmm.core.comm.PAIRWISE_BYTES` or more (about ``nbytes / c`` each), which
    distmm exchanges pairwise, summing in its own buffers."""
    if c == 1 or comm.pairwise_block(-(-nbytes // c)):
        return 0
    return int(nbytes * (c - 1) // c)


def modes(op: str, strategy: str) -> list[tuple[str, str]]:
    """The (orientation, mode) pairs one call runs, for the families that store S and S^T.

    Modes: "sddmm", "spmm_x" (output on the replicated X side), "spmm_y" (output on the
    propagated Y side), "fused_x" (local kernel fusion). Orientation "a" is S (X = A), "b" is
    S^T (X = B). FusedMMB is FusedMMA on S^T (section IV-B)."""
    if op == "sddmm":
        return [("a", "sddmm")]
    if op in ("spmm_a", "spmm_b"):
        return [("a", "spmm_x" if op == "spmm_a" else "spmm_y")]
    same, other = ("a", "b") if op == "fusedmm_a" else ("b", "a")
    if strategy == "fusion":
        return [(same, "fused_x")]
    if strategy == "none":
        return [(same, "sddmm"), (same, "spmm_x")]
    return [(other, "sddmm"), (other, "spmm_y")]


def op_sides(op: str) -> tuple[tuple[str, ...], str | None]:
    """(dense inputs, output side) of an operation; output None: values of S (SDDMM)."""
    return {"sddmm": (("a", "b"), None), "spmm_a": (("b",), "a"), "spmm_b": (("a",), "b"),
            "fusedmm_a": (("a", "b"), "a"), "fusedmm_b": (("a", "b"), "b")}[op]


def operand_bytes(op: str, rows_a: int, rows_b: int, width: int, nnz: int,
                  itemsize: int) -> dict[str, int]:
    """The dense blocks the caller holds for one call: its inputs (A: ``rows_a`` x ``width``,
    B: ``rows_b`` x ``width``) and its output (a dense block, or ``nnz`` values for SDDMM)."""
    ins, out = op_sides(op)
    rows = {"a": rows_a, "b": rows_b}
    parts = {f"dense {side.upper()}": int(rows[side] * width * itemsize) for side in ins}
    parts["output"] = int((nnz if out is None else rows[out] * width) * itemsize)
    return parts


def two_orientation_memory(parts: dict[str, int], call: dict[str, int], k: Mapping[str, int],
                           used: list[tuple[str, str]], op: str, width: int, itemsize: int,
                           placed_block: int, built_block: int) -> Memory:
    """The end of a two-orientation family's model: add the caller's dense blocks to the held
    ``parts``, the first-use build of S^T when a mode ``used`` runs on it, and the placement
    peak; ``k`` holds the sizes (``rows_a``, ``rows_b``, ``nnz_a``, ``nnz_b``, ``share``), and
    ``placed_block`` / ``built_block`` are the most entries of one block of S and of S^T."""
    parts.update(operand_bytes(op, k["rows_a"], k["rows_b"], width, k["nnz_a"], itemsize))
    build = (build_transpose_bytes(parts, k["nnz_a"], k["nnz_b"], built_block, itemsize)
             if any(o == "b" for o, _ in used) else 0)
    return Memory(parts, call, place_bytes(k["share"], k["nnz_a"], placed_block, itemsize)
                  + parts["permutations"], build)


def ceil_div(a: float, b: float) -> int:
    return int(-(-int(math.ceil(a)) // int(b)))


def merged(defaults: Mapping[str, int], local: Mapping[str, int] | None) -> dict[str, int]:
    """``defaults`` with the entries of ``local`` (a rank's own counts) in their place."""
    out = dict(defaults)
    if local:
        out.update({k: int(v) for k, v in local.items()})
    return out


# ----------------------------------------------------------------- what an object holds
def held_bytes(*roots) -> int:
    """Bytes of the distinct array buffers reachable from ``roots``. Not collective.

    Follows dicts, lists, tuples, distmm's dataclasses and (for a distributed object) its
    ``__dict__``; not communicators, node models or counters. An array counts its whole base
    buffer once, however many views of it are reachable, less the at most 64 bytes that only
    align an aligned array (:func:`distmm.core.aligned.padding`)."""
    seen: set[int] = set()
    buffers: dict[int, int] = {}

    def visit(x) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, np.ndarray):
            base = x
            while isinstance(base.base, np.ndarray):
                base = base.base
            buffers[id(base)] = base.nbytes - padding(base)
        elif isinstance(x, Mapping):
            for v in x.values():
                visit(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)
        elif is_dataclass(x) and not isinstance(x, type):
            for f in fields(x):
                visit(getattr(x, f.name))
        elif type(x).__module__.startswith("distmm.algorithms"):
            for k, v in vars(x).items():
                if k not in ("kernel", "stats", "comm", "grid"):
                    visit(v)

    for root in roots:
        visit(root)
    return int(sum(buffers.values()))


# ----------------------------------------------------------------- memory available to a rank
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_memory_limit(text: str) -> int | None:
    """``--memory-limit``: a byte count (``123456``, ``512M``, ``4GiB``, ``1.5G``) or
    ``"auto"`` (None: ask :func:`available_bytes`). Raises InputError otherwise. Not
    collective."""
    if text.strip().lower() == "auto":
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]i?)?[bB]?\s*", text)
    if match is None:
        raise InputError(f"--memory-limit {text!r} is not a size: give bytes (e.g. 4000000000, "
                         "512M, 4GiB) or auto")
    value = float(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if not (math.isfinite(value) and value >= 1):
        raise InputError(f"--memory-limit {text!r} must be at least one byte")
    return int(value)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_limit() -> int | None:
    """This process's cgroup memory limit in bytes (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``), or None where there is none. Not collective."""
    paths = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.strip().split(":", 2)
                if controllers == "":
                    paths.insert(0, f"/sys/fs/cgroup{path}/memory.max")
                elif "memory" in controllers.split(","):
                    paths.insert(0, f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    physical = physical_memory()
    for path in paths:
        value = _read_int(path)  # "max" (no limit) is not a number
        # v1 writes a huge number for "no limit".
        if value is not None and (physical is None or value < physical):
            return value
    return None


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the OS does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def ranks_per_node(comm: MPI.Comm) -> int:
    """Ranks of ``comm`` that share this rank's node (MPI's COMM_TYPE_SHARED split).

    Collective over ``comm``; the split communicator is freed."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, comm.Get_rank())
    try:
        return node.Get_size()
    finally:
        node.Free()


def available_bytes(comm: MPI.Comm) -> int | None:
    """The memory one rank of ``comm`` may use: the cgroup limit, else physical memory,
    divided by the ranks on this node; the smallest over all ranks, so every rank gets the
    same number. None where no rank can tell. Collective over ``comm``."""
    per_node = ranks_per_node(comm)
    local = cgroup_limit() or physical_memory()
    unknown = np.iinfo(np.int64).max
    found = comm.allreduce(unknown if local is None else local // per_node, op=MPI.MIN)
    return None if found == unknown else int(found)


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss() -> int | None:
    """This process's resident set now, in bytes (Linux /proc/self/status VmRSS), or None."""
    return _status_kib("VmRSS")


def baseline_rss() -> int | None:
    """This process's resident set with nothing left to free: after a cycle collection (an
    object in reference cycles is freed whenever the collector runs, perhaps inside what is
    measured next, below this baseline) and :func:`release_freed_memory`. Not collective."""
    import gc

    gc.collect()
    release_freed_memory()
    return current_rss()


def peak_rss() -> int:
    """This process's peak resident set in bytes: VmHWM where Linux has it (reset by
    :func:`reset_peak_rss`), else getrusage's ru_maxrss (the process's whole life)."""
    peak = _status_kib("VmHWM")
    if peak is not None:
        return peak
    import resource
    import sys

    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def reset_peak_rss() -> bool:
    """Start the peak resident set afresh from the current one (Linux: write 5 to
    /proc/self/clear_refs); whether that worked. Not collective."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def release_freed_memory() -> None:
    """Return the heap memory freed since the last call to the OS (glibc's ``malloc_trim``;
    nothing elsewhere). Not collective.

    Placing S frees tens of bytes per nonzero of temporaries in arrays of a few MB, which
    glibc (its mmap threshold rises to the size of the largest freed block) serves from the
    heap and keeps resident after they are freed; without this, a rank's resident set after
    :func:`distmm.distribute` stays at the placement's peak."""
    libc = _libc()
    if libc:
        libc.malloc_trim(0)


def _libc():
    """glibc through ctypes, loaded once; False where it cannot be loaded."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


_LIBC = None
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def map_large_allocations(threshold: int = 128 << 10) -> bool:
    """Make glibc serve every allocation of ``threshold`` bytes or more with its own mapping,
    returned to the OS when it is freed (``mallopt`` of M_MMAP_THRESHOLD and
    M_TRIM_THRESHOLD); whether that worked (False off glibc). Not collective; for the rest of
    the process.

    For measuring, not for speed. By default glibc raises its mmap threshold to the size of
    the largest block freed so far, so which arrays of a few MB come from the heap (and stay
    resident after they are freed, in the gaps the next arrays may or may not fit) depends on
    what the process did before: a rank's peak resident set then lies anywhere from the live
    arrays to well above them. With a fixed threshold the peak follows the live arrays, which
    is what the model counts. Every later large allocation pays a mapping and its page
    faults."""
    libc = _libc()
    if not libc:
        return False
    try:
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, int(threshold))
              and libc.mallopt(_M_TRIM_THRESHOLD, int(threshold)))
    except AttributeError:
        return False
    return bool(ok)


def format_bytes(nbytes: float) -> str:
    """``nbytes`` for people: ``1.5 GiB``, ``320 MiB``, ``12 KiB``, ``512 B``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{int(nbytes)} B"


__all__ = ["Memory", "available_bytes", "baseline_rss", "csr_bytes", "current_rss", "format_bytes",
           "held_bytes", "map_large_allocations", "parse_memory_limit", "peak_rss",
           "place_bytes", "release_freed_memory", "reset_peak_rss", "transpose_bytes"]
