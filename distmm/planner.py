"""Pick the algorithm, FusedMM strategy and replication factor for a problem (paper V-E, VI-C).

Predicted time of one FusedMM on p ranks, alpha-beta-gamma model (section V):

    T = alpha * messages + beta * words + sum over the rank's local kernel calls of their cost

with messages and words per rank from Table III as distmm implements it
(:func:`distmm.costmodel.implemented`; ``model="paper"`` for the table as printed). The compute
term follows Table III's local dimensions: :func:`distmm.costmodel.local_calls` lists, per
(family, strategy, c), which kernels one rank calls, how often, on how many nonzeros and rows,
at what dense width (r, r/q, r/s or r/sqrt(pc)), and whether the block must first be rebuilt
from a packet or transposed. One call of kernel ``k`` costs

    per_call + rows * row_k(width) + nnz * nonzero_k(width)   (+ unpack / transpose costs)

where ``nonzero_k`` and ``row_k`` are seconds per nonzero and per block row, measured by
``distmm calibrate`` at several widths and interpolated (:class:`KernelTable`). The flops are
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


@dataclass(frozen=True)
class KernelTable:
    """Seconds per nonzero and per block row of one local kernel at a few dense widths.

    Between measured widths the costs are interpolated linearly in the width; beyond the widest
    they are extrapolated along the last segment (the cost of a nonzero is affine in the width
    once the gathered rows no longer fit in cache); below the narrowest they are held."""

    widths: tuple[float, ...]
    per_nonzero: tuple[float, ...]
    per_row: tuple[float, ...]

    def _at(self, values: tuple[float, ...], w: float) -> float:
        ws = self.widths
        if len(ws) == 1 or w <= ws[0]:
            return values[0]
        k = min(bisect.bisect_right(ws, w), len(ws) - 1)
        w0, w1, v0, v1 = ws[k - 1], ws[k], values[k - 1], values[k]
        return max(v0 + (v1 - v0) * (w - w0) / (w1 - w0), 0.0)

    def nonzero(self, w: float) -> float:
        """Seconds per nonzero walked by one call at width ``w``."""
        return self._at(self.per_nonzero, w)

    def row(self, w: float) -> float:
        """Seconds per block row (empty or not) of one call at width ``w``."""
        return self._at(self.per_row, w)

    @classmethod
    def from_dict(cls, data: dict, where: str) -> KernelTable:
        """Validate a table read from a machine file (raises InputError naming ``where``)."""
        ok = isinstance(data, dict) and all(isinstance(data.get(k), list) for k in (
            "widths", "per_nonzero", "per_row"))
        require(ok, f"{where}: needs lists widths, per_nonzero and per_row")
        ws, nz, rw = data["widths"], data["per_nonzero"], data["per_row"]
        require(len(ws) >= 1 and len(ws) == len(nz) == len(rw),
                f"{where}: widths, per_nonzero and per_row must be non-empty, of equal length")
        require(all(isinstance(x, (int, float)) and x >= 0 for x in nz + rw)
                and all(isinstance(x, (int, float)) and x > 0 for x in ws),
                f"{where}: widths must be positive and costs non-negative numbers")
        require(all(a < b for a, b in zip(ws, ws[1:], strict=False)),
                f"{where}: widths must increase")
        return cls(tuple(map(float, ws)), tuple(map(float, nz)), tuple(map(float, rw)))

    def as_dict(self) -> dict:
        return {"widths": list(self.widths), "per_nonzero": list(self.per_nonzero),
                "per_row": list(self.per_row)}


@dataclass(frozen=True)
class Machine:
    """Costs of one machine for :func:`predict`.

    alpha (s per message), beta (s per word); gamma (s per flop) and delta (s per nonzero a
    local kernel walks, beyond its flops) of the fused local kernel, and ``gamma_unfused`` of
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
    per_call: float = 0.0
    unpack_nonzero: float = 0.0
    unpack_row: float = 0.0
    transpose_nonzero: float = 0.0

    @property
    def gamma_separate(self) -> float:
        """Seconds per flop when SDDMM and SpMM run as two kernels (no local fusion)."""
        return self.gamma if self.gamma_unfused is None else self.gamma_unfused

    def nonzero_cost(self, kind: str, width: float) -> float:
        """Seconds per nonzero of one call of kernel ``kind`` at dense width ``width``."""
        table = self.kernels.get(kind)
        if table is not None:
            return table.nonzero(width)
        flops = 4.0 * self.gamma if kind == "fusedmm" else 2.0 * self.gamma_separate
        return self.delta + flops * width

    def row_cost(self, kind: str, width: float) -> float:
        """Seconds per block row of one call of kernel ``kind`` at width ``width``."""
        table = self.kernels.get(kind)
        return table.row(width) if table is not None else 0.0

    def call_seconds(self, call: costmodel.KernelCalls) -> float:
        """Predicted seconds of all ``call.count`` calls of one :class:`KernelCalls`."""
        one = (self.per_call + call.rows * self.row_cost(call.kind, call.width)
               + call.nnz * self.nonzero_cost(call.kind, call.width))
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
