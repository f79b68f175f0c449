"""Pick the algorithm, FusedMM strategy and replication factor for a problem (paper V-E, VI-C).

Predicted time of one FusedMM on p ranks, alpha-beta-gamma model (section V):

    T = alpha * messages + beta * words + sum over the rank's local kernel calls of their cost

(with a beta per phase -- shift, all-gather, reduce-scatter -- when the machine file has them)

with messages and words per rank from Table III as distmm implements it
(:func:`distmm.costmodel.implemented`; ``model="paper"`` for the table as printed). The compute
term follows Table III's local dimensions: :func:`distmm.costmodel.local_calls` lists, per
(family, strategy, c), which kernels one rank calls, how often, on how many nonzeros and rows,
at what dense width (r, r/q, r/s or r/sqrt(pc)), and whether the block must first be rebuilt
from a packet or transposed. One call of kernel ``k`` costs

    per_call + rows * row_k(width) + nnz * nonzero_k(width)   (+ unpack / transpose costs)

where ``nonzero_k`` and ``row_k`` are seconds per nonzero and per walked row, measured by
``distmm calibrate`` at several widths and block sizes and interpolated at the call's width
and at the number of rows of the dense operand it gathers (:class:`KernelTable`). The flops are
the same for every family (4 nnz r / p); what differs is how many nonzeros are walked with how
few columns each (section V-B: splitting r "can significantly hurt local kernel throughput"),
and whether SDDMM and SpMM run as one fused kernel or two.

A machine file without the width tables (older ``distmm calibrate``, or hand-written) uses the
affine form of the same model: nonzero_k(w) = delta + 4 gamma w for the fused kernel and
delta + 2 gamma_unfused w for SDDMM and SpMM, with no row, call, unpack or transpose costs;
this is exactly the previous model, T = ... + gamma * 4 nnz r / p + delta * visits.
The paper assumes m ~ n; for rectangular S the communication terms use n := (m + n) / 2 and
phi = nnz / (n r).
"""

from __future__ import annotations

import bisect
import json
import math
import os
from dataclasses import asdict, dataclass, field

from distmm import costmodel
from distmm.errors import InputError, require


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
    """Seconds per nonzero and per walked row of one local kernel, measured at a few dense
    widths on square blocks of a few sizes.

    ``per_nonzero[i][j]`` and ``per_row[i][j]`` were measured on an ``sizes[i]`` x ``sizes[i]``
    block at width ``widths[j]``. A call is costed at its width and at the number of rows of
    the dense operand it gathers at random (what decides whether those rows stay in cache):
    linear in the width between measured widths (beyond the widest, along the last segment:
    the cost of a nonzero is affine in the width once the gathered rows leave the cache), and
    linear in log2(size) between measured sizes (held outside them)."""

    sizes: tuple[float, ...]
    widths: tuple[float, ...]
    per_nonzero: tuple[tuple[float, ...], ...]
    per_row: tuple[tuple[float, ...], ...]

    def _at(self, values: tuple[tuple[float, ...], ...], w: float, size: float) -> float:
        at_w = tuple(_interp(self.widths, row, w) for row in values)
        logs = tuple(math.log2(x) for x in self.sizes)
        return _interp(logs, at_w, math.log2(max(size, 1.0)), extrapolate=False)

    def nonzero(self, w: float, size: float) -> float:
        """Seconds per nonzero of one call at width ``w`` gathering from ``size`` rows."""
        return self._at(self.per_nonzero, w, size)

    def row(self, w: float, size: float) -> float:
        """Seconds per walked row (empty or not) of one call at width ``w``."""
        return self._at(self.per_row, w, size)

    @classmethod
    def from_dict(cls, data: dict, where: str) -> KernelTable:
        """Validate a table read from a machine file (raises InputError naming ``where``)."""
        ok = isinstance(data, dict) and all(isinstance(data.get(k), list) for k in (
            "sizes", "widths", "per_nonzero", "per_row"))
        require(ok, f"{where}: needs lists sizes, widths, per_nonzero and per_row")
        sizes, ws, nz, rw = (data[k] for k in ("sizes", "widths", "per_nonzero", "per_row"))

        def grid(x) -> bool:
            return (isinstance(x, list) and len(x) == len(sizes) and all(
                isinstance(row, list) and len(row) == len(ws) for row in x))

        require(sizes and ws and grid(nz) and grid(rw),
                f"{where}: per_nonzero and per_row must be len(sizes) lists of len(widths) "
                "numbers, equal lengths, non-empty")
        flat = [x for row in nz + rw for x in row]
        require(all(isinstance(x, (int, float)) and x >= 0 for x in flat)
                and all(isinstance(x, (int, float)) and x > 0 for x in ws + sizes),
                f"{where}: sizes and widths must be positive and costs non-negative numbers")
        require(all(a < b for a, b in zip(ws, ws[1:], strict=False))
                and all(a < b for a, b in zip(sizes, sizes[1:], strict=False)),
                f"{where}: sizes and widths must increase")
        return cls(tuple(map(float, sizes)), tuple(map(float, ws)),
                   tuple(tuple(map(float, row)) for row in nz),
                   tuple(tuple(map(float, row)) for row in rw))

    def as_dict(self) -> dict:
        return {"sizes": list(self.sizes), "widths": list(self.widths),
                "per_nonzero": [list(row) for row in self.per_nonzero],
                "per_row": [list(row) for row in self.per_row]}


@dataclass(frozen=True)
class Machine:
    """Costs of one machine for :func:`predict`.

    alpha (s per message), beta (s per word; ``beta_shift``, ``beta_replication`` and
    ``beta_reduction``, when all measured, replace it for the words of each phase); gamma
    (s per flop) and delta (s per nonzero a local kernel walks, beyond its flops) of the fused
    local kernel, and ``gamma_unfused`` of
    SDDMM followed by SpMM (None: same as ``gamma``) -- the affine kernel model, used for any
    kernel without a width table. ``kernels`` maps a kernel kind of
    :data:`distmm.costmodel.KERNEL_KINDS` to its measured :class:`KernelTable`; ``per_call``
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

    def nonzero_cost(self, kind: str, width: float, gathered: float) -> float:
        """Seconds per nonzero of one call of kernel ``kind`` at dense width ``width`` that
        gathers from a dense operand of ``gathered`` rows."""
        table = self.kernels.get(kind)
        if table is not None:
            return table.nonzero(width, gathered)
        flops = 4.0 * self.gamma if kind == "fusedmm" else 2.0 * self.gamma_separate
        return self.delta + flops * width

    def row_cost(self, kind: str, width: float, gathered: float) -> float:
        """Seconds per walked row of one call of kernel ``kind`` (0 without a table)."""
        table = self.kernels.get(kind)
        return table.row(width, gathered) if table is not None else 0.0

    def call_seconds(self, call: costmodel.KernelCalls) -> float:
        """Predicted seconds of all ``call.count`` calls of one :class:`KernelCalls`."""
        g = call.gathered_rows
        one = (self.per_call + call.walked_rows * self.row_cost(call.kind, call.width, g)
               + call.nnz * self.nonzero_cost(call.kind, call.width, g))
        if call.unpacked:
            one += call.nnz * self.unpack_nonzero + call.rows * self.unpack_row
        if call.transposed:
            one += call.nnz * self.transpose_nonzero
        return call.count * one

    @classmethod
    def load(cls, path: str | os.PathLike) -> Machine:
        """Read a file written by ``distmm calibrate`` (any version; not collective)."""
        try:
            with open(path) as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise InputError(f"{path}: no such machine file") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a machine file written by distmm calibrate ({exc})"
                             ) from None
        require(isinstance(data, dict), f"{path}: not a machine file written by distmm "
                                        "calibrate (not a JSON object)")
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


def predict(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int, c: int,
            machine: Machine, model: str = "implemented") -> dict:
    """Predicted seconds (and their parts) of one FusedMM. Not collective.

    ``model`` "implemented" counts what distmm sends (:func:`costmodel.implemented`);
    "paper" uses Table III as printed (:func:`costmodel.table3`). ``kernel_calls`` lists the
    local calls the compute term adds up (:func:`costmodel.local_calls`)."""
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
            "compute_s": compute, "time_s": comm + compute, "phi": phi}


def plan(m: int, n: int, nnz: int, r: int, p: int, machine: Machine | None = None,
         algorithms: tuple[str, ...] | None = None, model: str = "implemented") -> list[dict]:
    """Every valid (algorithm, strategy, c), fastest predicted first. Not collective.

    ``algorithms`` restricts the candidates (e.g. to the families this build implements)."""
    require(min(m, n, r, p) >= 1 and nnz >= 0,
            "plan needs m, n, r, p >= 1 and nnz >= 0")
    machine = machine or Machine()
    rows = []
    for algorithm, strategy in costmodel.CONFIGS:
        if algorithms is not None and algorithm not in algorithms:
            continue
        for c in costmodel.valid_cs(algorithm, p, r):
            rows.append(predict(algorithm, strategy, m, n, nnz, r, p, c, machine, model))
    require(rows, f"no algorithm fits p={p}, r={r}")
    # Ties (e.g. c = 1, where strategies coincide) go to the simpler configuration.
    return sorted(rows, key=lambda row: (row["time_s"], row["c"], row["algorithm"]))


def format_table(rows: list[dict], limit: int | None = None) -> str:
    """A fixed-width table of plan rows for the terminal."""
    head = f"{'rank':>4}  {'algorithm':<22}{'strategy':<9}{'c':>4}  {'time (s)':>11}  " \
           f"{'comm (s)':>11}  {'compute (s)':>11}  {'words/rank':>12}  {'msgs':>7}  " \
           f"{'calls':>5}  {'width':>6}"
    lines = [head]
    for i, row in enumerate(rows[:limit] if limit else rows, 1):
        width = min((call["width"] for call in row["kernel_calls"]), default=math.nan)
        lines.append(f"{i:>4}  {row['algorithm']:<22}{row['strategy']:<9}{row['c']:>4}  "
                     f"{row['time_s']:>11.4g}  {row['comm_s']:>11.4g}  "
                     f"{row['compute_s']:>11.4g}  {row['words']:>12.4g}  "
                     f"{row['messages']:>7.4g}  {row['calls']:>5}  {width:>6.4g}")
    return "\n".join(lines)
