"""Pick the algorithm, FusedMM strategy and replication factor for a problem (paper V-E, VI-C).

Predicted time of one FusedMM on p ranks, alpha-beta-gamma model (section V):

    T = alpha * messages + beta * words + sum over the rank's local kernel calls of their cost

(with a beta per phase -- shift, all-gather, reduce-scatter -- when the machine file has them)

with messages and words per rank from Table III as distmm implements it
(:func:`distmm.perf.costmodel.implemented`; ``model="paper"`` for the table as printed). The compute
term follows Table III's local dimensions: :func:`distmm.perf.costmodel.local_calls` lists, per
(family, strategy, c), which kernels one rank calls, how often, on how many nonzeros and rows,
at what dense width (r, r/q, r/s or r/sqrt(pc)), and whether the block must first be rebuilt
from a packet or transposed. One call of kernel ``k`` costs

    per_call + nnz * nonzero_k(width, gathered rows, nonzeros per row)  (+ unpack / transpose)

where ``nonzero_k`` is seconds per nonzero, measured by ``distmm calibrate`` at several
widths, block sizes and densities and interpolated at the call's width, the number of rows of
the dense operand it gathers at random, and its nonzeros per row (:class:`KernelTable`).
The flops are the same for every family (4 nnz r / p); what differs is how many nonzeros are
walked with how few columns each (section V-B: splitting r "can significantly hurt local
kernel throughput"), in blocks of what shape, and whether SDDMM and SpMM run as one fused
kernel or two.

A machine file without the width tables (older ``distmm calibrate``, or hand-written) uses the
affine form of the same model: nonzero_k(w) = delta + 4 gamma w for the fused kernel and
delta + 2 gamma_unfused w for SDDMM and SpMM, with no call, unpack or transpose costs;
this is exactly the previous model, T = ... + gamma * 4 nnz r / p + delta * visits.
The paper assumes m ~ n; for rectangular S the communication terms use n := (m + n) / 2 and
phi = nnz / (n r).
"""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from distmm.algorithms import ALGORITHMS
from distmm.core.memory import Memory, format_bytes
from distmm.core.partition import partitioner_counts
from distmm.errors import require
from distmm.io.outputs import read_json_object
from distmm.perf import costmodel


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float,
            extrapolate: bool = True) -> float:
    """Piecewise-linear y(x) through the points; held below the first; beyond the last,
    extrapolated along the last segment (clamped at zero) or held."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    if not extrapolate and x >= xs[-1]:
        return ys[-1]
    k = min(bisect.bisect_right(xs, x), len(xs) - 1)
    x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
    return max(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 0.0)


@dataclass(frozen=True)
class KernelTable:
    """Seconds per nonzero of one local kernel, measured on blocks of a few sizes and densities
    at a few dense widths.

    ``per_nonzero[i][k][j]`` is the time of one call divided by its nonzeros, on a block that
    gathers from a dense operand of ``sizes[i]`` rows, holds ``densities[k]`` nonzeros per
    walked row, at width ``widths[j]``. The cost of a row (reading or updating its dense row)
    is shared by its nonzeros, so it is part of the cost per nonzero at each density rather
    than a separate term. A call is costed at its width, the rows of the dense operand it
    gathers at random (whether they stay in cache) and its nonzeros per row: linear in the
    width between measured widths (beyond the widest, along the last segment: the cost of a
    nonzero is affine in the width once the gathered rows leave the cache), linear in
    log2(size) and in log2(density) between measured ones (held outside them)."""

    sizes: tuple[float, ...]
    densities: tuple[float, ...]
    widths: tuple[float, ...]
    per_nonzero: tuple[tuple[tuple[float, ...], ...], ...]

    def nonzero(self, w: float, size: float, density: float) -> float:
        """Seconds per nonzero of one call at width ``w``, gathering from ``size`` rows, with
        ``density`` nonzeros per walked row."""
        logs = tuple(math.log2(x) for x in self.sizes)
        logd = tuple(math.log2(x) for x in self.densities)
        ls, ld = math.log2(max(size, 1.0)), math.log2(max(density, 1e-9))
        at_size = []
        for plane in self.per_nonzero:
            at_w = tuple(_interp(self.widths, row, w) for row in plane)
            at_size.append(_interp(logd, at_w, ld, extrapolate=False))
        return _interp(logs, tuple(at_size), ls, extrapolate=False)

    @classmethod
    def from_dict(cls, data: dict, where: str) -> KernelTable:
        """Validate a table read from a machine file (raises InputError naming ``where``)."""
        keys = ("sizes", "densities", "widths", "per_nonzero")
        require(isinstance(data, dict) and all(isinstance(data.get(k), list) for k in keys),
                f"{where}: needs lists {', '.join(keys)}")
        sizes, dens, ws, nz = (data[k] for k in keys)
        shape_ok = bool(sizes and dens and ws) and len(nz) == len(sizes) and all(
            isinstance(plane, list) and len(plane) == len(dens) and all(
                isinstance(row, list) and len(row) == len(ws) for row in plane)
            for plane in nz)
        require(shape_ok, f"{where}: per_nonzero must be len(sizes) x len(densities) x "
                          "len(widths) numbers, all non-empty")
        flat = [x for plane in nz for row in plane for x in row]
        require(all(isinstance(x, (int, float)) and x >= 0 for x in flat)
                and all(isinstance(x, (int, float)) and x > 0 for x in ws + sizes + dens),
                f"{where}: sizes, densities and widths must be positive and costs "
                "non-negative numbers")
        require(all(all(a < b for a, b in zip(v, v[1:], strict=False))
                    for v in (sizes, dens, ws)),
                f"{where}: sizes, densities and widths must increase")
        return cls(tuple(map(float, sizes)), tuple(map(float, dens)), tuple(map(float, ws)),
                   tuple(tuple(tuple(map(float, row)) for row in plane) for plane in nz))

    def as_dict(self) -> dict:
        return {"sizes": list(self.sizes), "densities": list(self.densities),
                "widths": list(self.widths),
                "per_nonzero": [[list(row) for row in plane] for plane in self.per_nonzero]}


@dataclass(frozen=True)
class Machine:
    """Costs of one machine for :func:`predict`.

    alpha (s per message), beta (s per word; ``beta_shift``, ``beta_replication`` and
    ``beta_reduction``, when all measured, replace it for the words of each phase); gamma
    (s per flop) and delta (s per nonzero a local kernel walks, beyond its flops) of the fused
    local kernel, and ``gamma_unfused`` of
    SDDMM followed by SpMM (None: same as ``gamma``) -- the affine kernel model, used for any
    kernel without a width table. ``kernels`` maps a kernel kind of
    :data:`distmm.perf.costmodel.KERNEL_KINDS` to its measured :class:`KernelTable`; ``per_call``
    is the fixed cost of one kernel call; ``unpack_nonzero``/``unpack_row`` the cost of
    rebuilding a block from a received COO packet, per nonzero and per row;
    ``transpose_nonzero`` the cost of building a fresh block's transpose, per nonzero.

    The defaults are the affine model that `distmm calibrate` measured on the 2-core
    development machine (MPICH shared memory, reference numba kernels, float32, one thread per
    rank); calibrate your own machine.
    """

    alpha: float = 3.1e-6
    beta: float = 4.5e-10
    gamma: float = 9.8e-11
    delta: float = 5.7e-9
    gamma_unfused: float | None = 1.46e-10
    source: str = "defaults"
    kernels: dict = field(default_factory=dict, compare=False)
    beta_shift: float | None = None
    beta_replication: float | None = None
    beta_reduction: float | None = None
    per_call: float = 0.0
    unpack_nonzero: float = 0.0
    unpack_row: float = 0.0
    transpose_nonzero: float = 0.0

    @property
    def has_bulk_betas(self) -> bool:
        """Whether the per-phase betas (shift, all-gather, reduce-scatter) were measured."""
        return None not in (self.beta_shift, self.beta_replication, self.beta_reduction)

    @property
    def gamma_separate(self) -> float:
        """Seconds per flop when SDDMM and SpMM run as two kernels (no local fusion)."""
        return self.gamma if self.gamma_unfused is None else self.gamma_unfused

    def nonzero_cost(self, kind: str, width: float, gathered: float, density: float) -> float:
        """Seconds per nonzero of one call of kernel ``kind`` at dense width ``width`` that
        gathers from a dense operand of ``gathered`` rows, ``density`` nonzeros per row."""
        table = self.kernels.get(kind)
        if table is not None:
            return table.nonzero(width, gathered, density)
        flops = 4.0 * self.gamma if kind == "fusedmm" else 2.0 * self.gamma_separate
        return self.delta + flops * width

    def call_seconds(self, call: costmodel.KernelCalls) -> float:
        """Predicted seconds of all ``call.count`` calls of one :class:`KernelCalls`."""
        density = call.nnz / max(call.walked_rows, 1.0)
        one = self.per_call + call.nnz * self.nonzero_cost(call.kind, call.width,
                                                           call.gathered_rows, density)
        if call.unpacked:
            one += call.nnz * self.unpack_nonzero + call.rows * self.unpack_row
        if call.transposed:
            one += call.nnz * self.transpose_nonzero
        return call.count * one

    @classmethod
    def load(cls, path: str | os.PathLike) -> Machine:
        """Read a file written by ``distmm calibrate`` (any version; not collective)."""
        data = read_json_object(path, "machine file (from distmm calibrate)")
        missing = [k for k in ("alpha", "beta", "gamma") if not isinstance(data.get(k),
                                                                             (int, float))]
        require(not missing, f"{path}: missing or non-numeric {', '.join(missing)}")
        require(all(data[k] >= 0 for k in ("alpha", "beta", "gamma")),
                f"{path}: alpha, beta and gamma must be non-negative")
        extra = {}
        for key in ("delta", "per_call", "unpack_nonzero", "unpack_row", "transpose_nonzero"):
            value = data.get(key, getattr(cls, key))
            require(isinstance(value, (int, float)) and value >= 0,
                    f"{path}: {key} must be a non-negative number")
            extra[key] = float(value)
        for key in ("beta_shift", "beta_replication", "beta_reduction"):
            value = data.get(key)
            require(value is None or (isinstance(value, (int, float)) and value >= 0),
                    f"{path}: {key} must be a non-negative number")
            extra[key] = None if value is None else float(value)
        unfused = data.get("gamma_unfused")
        require(unfused is None or (isinstance(unfused, (int, float)) and unfused >= 0),
                f"{path}: gamma_unfused must be a non-negative number")
        tables = data.get("kernels") or {}
        require(isinstance(tables, dict), f"{path}: kernels must be an object")
        unknown = sorted(set(tables) - set(costmodel.KERNEL_KINDS))
        require(not unknown, f"{path}: unknown kernel kinds {unknown}; known: "
                             f"{', '.join(costmodel.KERNEL_KINDS)}")
        kernels = {k: KernelTable.from_dict(v, f"{path}: kernels.{k}") for k, v in tables.items()}
        return cls(float(data["alpha"]), float(data["beta"]), float(data["gamma"]),
                   gamma_unfused=None if unfused is None else float(unfused),
                   source=os.fspath(path), kernels=kernels, **extra)

    def as_dict(self) -> dict:
        """JSON-ready fields (the format :meth:`load` reads)."""
        out = asdict(self)
        out["kernels"] = {k: t.as_dict() for k, t in self.kernels.items()}
        return out


def family_memory(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int,
                  c: int, dtype=np.float32, overlap: bool = False, op: str = "fusedmm_a",
                  permute="auto") -> Memory:
    """The family's :class:`~distmm.core.memory.Memory` for one ``op`` on the fullest rank
    (its ``memory_bytes``, see :mod:`distmm.core.memory`), with rank 0's partitioner counted
    only where distribute will partition S with ``permute`` (its argument: not for a saved
    partition nor ``"blocks"``; :func:`distmm.core.partition.partitioner_at_distribute`).
    Not collective."""
    cls = ALGORITHMS[algorithm]
    return cls.model.memory_bytes(op, strategy, m, n, nnz, r, p, c, dtype, overlap,
                                  partitioner_counts(cls, permute, m, n, nnz, p))


def memory_peak(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int,
                c: int, dtype=np.float32, overlap: bool = False, op: str = "fusedmm_a",
                permute="auto") -> int:
    """The modelled peak bytes of the fullest rank for one ``op`` (:func:`family_memory`).
    Not collective."""
    return family_memory(algorithm, strategy, m, n, nnz, r, p, c, dtype, overlap, op,
                         permute).peak


def partitioner_problem(memory: Memory, limit: int, p: int, saved: bool = True) -> str | None:
    """Why rank 0's partitioning at distribute (``memory.partitioner``) does not fit
    ``limit`` bytes, and the ways around it (``saved``: the command takes ``--partition
    FILE``); None when it fits. Not collective."""
    return partitioner_message(memory.partitioner, limit, p, saved)


def partitioner_message(need: int, limit: int, p: int, saved: bool = True) -> str | None:
    """:func:`partitioner_problem` from rank 0's partitioner bytes ``need``
    (:func:`distmm.core.partition.partition_peak_bytes`). Not collective."""
    if need <= limit:
        return None
    around = (f"partition once elsewhere and pass the file (`distmm partition S.mtx -p {p} "
              f"--out S.part.h5`, then --partition S.part.h5), or order by blocks "
              f"(--permute blocks)" if saved else "order by blocks (--permute blocks)")
    return (f"rank 0 partitions S at distribute (the 15d-sparse-aware family's default order) "
            f"and needs about {format_bytes(need)} for it (the gathered pattern "
            f"and the partitioner's own memory), more than the memory limit of "
            f"{format_bytes(limit)} per rank; {around} (docs/memory.md)")


def memory_problem(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int,
                   c: int, limit: int | None, dtype=np.float32, overlap: bool = False,
                   op: str = "fusedmm_a", permute="auto") -> str | None:
    """Why ``algorithm``/``strategy`` with replication ``c`` on p ranks cannot fit ``limit``
    bytes per rank, naming the c (same p) or the smallest larger p that would, or, where rank
    0's partitioning of S at distribute is what does not fit, its share and the ways around
    it (:func:`partitioner_problem`); None when it fits or there is no limit. Not
    collective."""
    if limit is None:
        return None
    memory = family_memory(algorithm, strategy, m, n, nnz, r, p, c, dtype, overlap, op,
                           permute)
    problem = partitioner_problem(memory, limit, p)
    if problem is not None:
        return problem
    need = memory.peak
    if need <= limit:
        return None

    def fitting(q: int) -> list[tuple[int, int]]:
        return [(d, memory_peak(algorithm, strategy, m, n, nnz, r, q, d, dtype, overlap, op,
                                permute))
                for d in costmodel.valid_cs(algorithm, q, r)]

    same = [(d, b) for d, b in fitting(p) if b <= limit]
    if same:
        hint = "use " + " or ".join(f"-c {d} ({format_bytes(b)})" for d, b in same[:3])
    else:
        hint = f"no c fits on {p} ranks"
        for q in range(p + 1, 64 * p + 1):
            fit = [(d, b) for d, b in fitting(q) if b <= limit]
            if fit:
                d, b = min(fit, key=lambda t: t[1])
                hint += f"; the smallest rank count that fits is p = {q} with -c {d} " \
                        f"({format_bytes(b)} per rank)"
                break
        else:
            hint += f" nor on up to {64 * p} ranks"
    return (f"{op.replace('_', '-')} with {algorithm} (strategy {strategy}, c = {c}) on {p} "
            f"ranks needs about {format_bytes(need)} per rank (S {m} x {n} with {nnz} "
            f"nonzeros, r = {r}, {np.dtype(dtype)}), more than the memory limit of "
            f"{format_bytes(limit)} per rank; {hint} (docs/memory.md)")


def predict(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int, c: int,
            machine: Machine, model: str = "implemented", dtype=np.float32,
            overlap: bool = False) -> dict:
    """Predicted seconds (and their parts) of one FusedMM, and its memory. Not collective.

    ``model`` "implemented" counts what distmm sends (:func:`costmodel.implemented`);
    "paper" uses Table III as printed (:func:`costmodel.table3`). ``kernel_calls`` lists the
    local calls the compute term adds up (:func:`costmodel.local_calls`); ``memory`` is the
    modelled peak bytes of the fullest rank (:func:`memory_peak`)."""
    n_eff = (m + n) / 2
    phi = nnz / (n_eff * r) if n_eff and r else 0.0
    formula = costmodel.implemented if model == "implemented" else costmodel.table3
    msgs, words = formula(algorithm, strategy, n_eff, r, p, c, phi)
    comm = machine.alpha * msgs + machine.beta * words
    if model == "implemented" and machine.has_bulk_betas:
        # Words per phase as distmm sends them, each at the measured cost of its transfer.
        phases = costmodel.exact(algorithm, "fusedmm_a", m, n, r, p, c, strategy, nnz=nnz)
        comm = machine.alpha * msgs + sum(
            phases[ph]["words"] * beta for ph, beta in (
                ("propagation", machine.beta_shift), ("replication", machine.beta_replication),
                ("reduction", machine.beta_reduction)))
    calls = costmodel.local_calls(algorithm, strategy, m, n, nnz, r, p, c)
    compute = sum(machine.call_seconds(call) for call in calls)
    visits = sum(call.count * call.nnz for call in calls)
    return {"algorithm": algorithm, "strategy": strategy, "c": c, "messages": msgs,
            "words": words, "visits": visits, "calls": sum(call.count for call in calls),
            "kernel_calls": [call.as_dict() for call in calls], "comm_s": comm,
            "compute_s": compute, "time_s": comm + compute, "phi": phi,
            "memory": memory_peak(algorithm, strategy, m, n, nnz, r, p, c, dtype, overlap)}


def auto_candidates(overlap: bool = False) -> tuple[str, ...]:
    """The families ``--algorithm auto`` chooses among: every registered one, or with
    ``overlap`` those that can overlap. Not collective."""
    return tuple(name for name, cls in ALGORITHMS.items()
                 if not overlap or getattr(cls, "supports_overlap", False))


def plan(m: int, n: int, nnz: int, r: int, p: int, machine: Machine | None = None,
         algorithms: tuple[str, ...] | None = None, model: str = "implemented",
         dtype=np.float32, overlap: bool = False, memory_limit: int | None = None
         ) -> list[dict]:
    """Every valid (algorithm, strategy, c), fastest predicted first. Not collective.

    ``algorithms`` restricts the candidates (e.g. to the families this build implements).
    With ``memory_limit`` (bytes per rank), candidates whose modelled peak exceeds it are
    left out; when none is left, InputError names the candidate that needs least."""
    require(min(m, n, r, p) >= 1 and nnz >= 0,
            "plan needs m, n, r, p >= 1 and nnz >= 0")
    machine = machine or Machine()
    rows = []
    for algorithm, strategy in costmodel.CONFIGS:
        if algorithms is not None and algorithm not in algorithms:
            continue
        if getattr(ALGORITHMS[algorithm], "needs_pattern", False):
            continue  # its words depend on S's pattern: distmm.perf.sparse_planner ranks it
        for c in costmodel.valid_cs(algorithm, p, r):
            rows.append(predict(algorithm, strategy, m, n, nnz, r, p, c, machine, model,
                                dtype, overlap))
    require(rows, f"no algorithm fits p={p}, r={r}")
    if memory_limit is not None:
        fit = [row for row in rows if row["memory"] <= memory_limit]
        if not fit:
            least = min(rows, key=lambda row: row["memory"])
            require(False, memory_problem(least["algorithm"], least["strategy"], m, n, nnz,
                                          r, p, least["c"], memory_limit, dtype, overlap)
                    .replace(" on ", " (the candidate that needs least) on ", 1))
        rows = fit
    # Ties (e.g. c = 1, where strategies coincide) go to the simpler configuration.
    return sorted(rows, key=lambda row: (row["time_s"], row["c"], row["algorithm"]))


def format_table(rows: list[dict], limit: int | None = None) -> str:
    """A fixed-width table of plan rows for the terminal."""
    head = f"{'rank':>4}  {'algorithm':<22}{'strategy':<9}{'c':>4}  {'time (s)':>11}  " \
           f"{'comm (s)':>11}  {'compute (s)':>11}  {'words/rank':>12}  {'msgs':>7}  " \
           f"{'calls':>5}  {'width':>6}  {'memory/rank':>11}"
    lines = [head]
    for i, row in enumerate(rows[:limit] if limit else rows, 1):
        width = min((call["width"] for call in row["kernel_calls"]), default=math.nan)
        lines.append(f"{i:>4}  {row['algorithm']:<22}{row['strategy']:<9}{row['c']:>4}  "
                     f"{row['time_s']:>11.4g}  {row['comm_s']:>11.4g}  "
                     f"{row['compute_s']:>11.4g}  {row['words']:>12.4g}  "
                     f"{row['messages']:>7.4g}  {row['calls']:>5}  {width:>6.4g}  "
                     f"{format_bytes(row['memory']):>11}")
    return "\n".join(lines)
