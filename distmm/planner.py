"""Pick the algorithm, FusedMM strategy and replication factor for a problem (paper V-E, VI-C).

Predicted time of one FusedMM on p ranks, alpha-beta-gamma model (section V):

    T = alpha * messages + beta * words + gamma * 4 nnz r / p + delta * visits

with messages and words per rank from Table III as distmm implements it
(:func:`distmm.costmodel.implemented`; ``model="paper"`` for the table as printed) and the
same flops for every algorithm (4 nnz r: SDDMM plus SpMM, split evenly); ``visits`` is the
number of nonzeros a rank's kernels walk (:func:`distmm.costmodel.nonzero_visits`), which grows
for the families that split r over more ranks, and ``delta`` its cost per nonzero beyond the
flops (index reads, row gathers). The paper assumes m ~ n; for rectangular S this model uses
n := (m + n) / 2 and phi = nnz / (n r).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from distmm import costmodel
from distmm.errors import InputError, require


@dataclass(frozen=True)
class Machine:
    """alpha (s per message), beta (s per word), gamma (s per local flop) and delta (s per
    nonzero a local kernel walks, beyond its flops) of a machine.

    ``gamma`` is measured on the fused local kernel and ``gamma_unfused`` on SDDMM followed by
    SpMM (the strategies without local fusion run those); None means the same as ``gamma``.
    The defaults are what `distmm calibrate` measured on the 2-core development machine
    (MPICH shared memory, reference numba kernels, float32, one thread per rank); calibrate
    your own cluster.
    """

    alpha: float = 3.1e-6
    beta: float = 4.5e-10
    gamma: float = 9.8e-11
    delta: float = 5.7e-9
    gamma_unfused: float | None = 1.46e-10
    source: str = "defaults"

    @property
    def gamma_separate(self) -> float:
        """Seconds per flop when SDDMM and SpMM run as two kernels (no local fusion)."""
        return self.gamma if self.gamma_unfused is None else self.gamma_unfused

    @classmethod
    def load(cls, path: str | os.PathLike) -> Machine:
        """Read a file written by ``distmm calibrate`` (not collective)."""
        try:
            with open(path) as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise InputError(f"{path}: no such machine file") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a machine file written by distmm calibrate ({exc})"
                             ) from None
        missing = [k for k in ("alpha", "beta", "gamma") if not isinstance(data.get(k),
                                                                             (int, float))]
        require(not missing, f"{path}: missing or non-numeric {', '.join(missing)}")
        require(all(data[k] >= 0 for k in ("alpha", "beta", "gamma")),
                f"{path}: alpha, beta and gamma must be non-negative")
        delta = data.get("delta", cls.delta)
        require(isinstance(delta, (int, float)) and delta >= 0,
                f"{path}: delta must be a non-negative number")
        unfused = data.get("gamma_unfused")
        require(unfused is None or (isinstance(unfused, (int, float)) and unfused >= 0),
                f"{path}: gamma_unfused must be a non-negative number")
        return cls(float(data["alpha"]), float(data["beta"]), float(data["gamma"]),
                   float(delta), None if unfused is None else float(unfused),
                   source=os.fspath(path))

    def as_dict(self) -> dict:
        return asdict(self)


def predict(algorithm: str, strategy: str, m: int, n: int, nnz: int, r: int, p: int, c: int,
            machine: Machine, model: str = "implemented") -> dict:
    """Predicted seconds (and their parts) of one FusedMM. Not collective.

    ``model`` "implemented" counts what distmm sends (:func:`costmodel.implemented`);
    "paper" uses Table III as printed (:func:`costmodel.table3`)."""
    n_eff = (m + n) / 2
    phi = nnz / (n_eff * r) if n_eff and r else 0.0
    formula = costmodel.implemented if model == "implemented" else costmodel.table3
    msgs, words = formula(algorithm, strategy, n_eff, r, p, c, phi)
    comm = machine.alpha * msgs + machine.beta * words
    visits = costmodel.nonzero_visits(algorithm, strategy, nnz, p, c)
    gamma = machine.gamma if strategy == "fusion" else machine.gamma_separate
    compute = gamma * 4.0 * nnz * r / p + machine.delta * visits
    return {"algorithm": algorithm, "strategy": strategy, "c": c, "messages": msgs,
            "words": words, "visits": visits, "comm_s": comm, "compute_s": compute,
            "time_s": comm + compute, "phi": phi}


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
           f"{'comm (s)':>11}  {'compute (s)':>11}  {'words/rank':>12}  {'msgs':>7}"
    lines = [head]
    for i, row in enumerate(rows[:limit] if limit else rows, 1):
        lines.append(f"{i:>4}  {row['algorithm']:<22}{row['strategy']:<9}{row['c']:>4}  "
                     f"{row['time_s']:>11.4g}  {row['comm_s']:>11.4g}  "
                     f"{row['compute_s']:>11.4g}  {row['words']:>12.4g}  {row['messages']:>7.4g}")
    return "\n".join(lines)
