"""The alpha-beta communication model of paper section V, asked of every family alike.

Each family's class states its own formulas (see :mod:`distmm.algorithms`); this module asks
them by name through the registry, for the planner, calibration, experiments and tests:

* :func:`exact` gives the words and messages per rank that distmm's implementation sends,
  phase by phase, for any m, n, r, p, c (the family's ``exact_words``; exact when p divides m
  and n). The communication counters must equal them; tests hold the two together.
* :func:`table3` and :func:`table4_best_c` are the paper's closed forms (Tables III and IV,
  m = n), which the exact formulas reduce to when p divides n and c < p; :func:`implemented`
  is Table III with distmm's departures.

Difference from the paper's accounting, stated once: when c = p a layer holds a single rank, so
a "cyclic shift" is a local no-op that sends nothing. The paper's 1/c terms count those shifts;
the exact formulas do not.
"""

from __future__ import annotations

from distmm.algorithms import ALGORITHMS, family
from distmm.algorithms.model import KERNEL_KINDS, KernelCalls
from distmm.errors import require

PHASES = ("replication", "propagation", "reduction")
__all__ = ["CONFIGS", "KERNEL_KINDS", "PHASES", "KernelCalls", "best_c_dense_shift_15d", "exact",
           "implemented", "local_calls", "nonzero_visits", "table3", "table4_best_c", "total",
           "valid_cs"]


def exact(algorithm: str, op: str, m: int, n: int, r: int, p: int, c: int,
          strategy: str = "none", nnz: float | None = None) -> dict[str, dict[str, float]]:
    """Words and messages per rank, per phase, that ``algorithm`` sends for one ``op``
    (balanced blocks of S where S moves). Each family states its own formula in
    ``exact_words``; this looks it up in the registry."""
    return family(algorithm).model.exact_words(op, m, n, r, p, c, strategy, nnz=nnz)


def total(phases: dict[str, dict[str, float]], key: str = "words") -> float:
    """Sum of one counter over the phases of an ``*_exact`` result."""
    return sum(ph[key] for ph in phases.values())


# (algorithm, strategy) pairs the paper analyses and distmm implements (Table III, section V).
CONFIGS = tuple((name, strategy) for name, cls in ALGORITHMS.items()
                for strategy in cls.strategies)


def _configured(algorithm: str, strategy: str):
    require((algorithm, strategy) in CONFIGS, f"no model for {algorithm} / {strategy}")
    return ALGORITHMS[algorithm]


def table3(algorithm: str, strategy: str, n: int, r: int, p: int, c: float,
           phi: float = 0.0) -> tuple[float, float]:
    """Paper Table III: (messages, words) per rank of one FusedMM, m = n, phi = nnz / (n r).

    Each family states its row (``table3`` of its class). Rows the table omits are derived the
    way section V derives the others: "none" runs the two kernels back to back, so it pays the
    replication of the second kernel (an all-gather or a reduce-scatter of the same size) that
    the eliding strategy avoids. The sparse matrix costs 3 words per nonzero (COO) wherever it
    moves.
    """
    return _configured(algorithm, strategy).model.table3(strategy, n, r, p, c, phi)


def implemented(algorithm: str, strategy: str, n: int, r: int, p: int, c: float,
                phi: float = 0.0) -> tuple[float, float]:
    """(messages, words) per rank of one FusedMM as distmm implements it, m = n.

    Table III with distmm's documented departures: a layer of one rank (c = p, or s = 1 in
    2.5D) sends no shifts (each family's ``one_rank_layer_saving``); and a family's own
    ``departure`` (2.5D sparse replicating SDDMM reduces unscaled partial dot products and
    scales afterwards, section IV-A, saving the initial all-gather of S's values)."""
    cls = _configured(algorithm, strategy)
    msgs, words = cls.model.table3(strategy, n, r, p, c, phi)
    if p / c <= 1:  # one rank per layer: shifts are local copies
        saved_msgs, saved_words = cls.model.one_rank_layer_saving(strategy, n, r, p, c, phi)
        msgs, words = msgs - saved_msgs, words - saved_words
    saved_msgs, saved_words = cls.model.departure(strategy, n, r, p, c, phi)
    return msgs - saved_msgs, words - saved_words


def nonzero_visits(algorithm: str, strategy: str, nnz: float, p: int, c: float) -> float:
    """Nonzeros one rank's local kernels walk through in one FusedMM (both kernels).

    Table III's local-dimension columns in one number: the flops are 4 nnz r / p for every
    family, but a family that splits r over more ranks makes each of them walk more nonzeros
    with fewer columns each, and a nonzero costs index reads and row gathers however few
    columns it carries (section V-B: dividing the dense matrices by columns "can significantly
    hurt local kernel throughput"). The fused kernel walks S once for both kernels."""
    return family(algorithm).model.nonzero_visits(strategy, nnz, p, c)


def table4_best_c(algorithm: str, strategy: str, p: int, phi: float = 0.0) -> float:
    """Paper Table IV: the real replication factor minimising Table III's words (each
    family's ``table4_best_c``)."""
    return family(algorithm).model.table4_best_c(strategy, p, phi)


def valid_cs(algorithm: str, p: int, r: int | None = None) -> list[int]:
    """Replication factors the algorithm's grid allows on p ranks (and width r, if given).

    Each family states its rules (``grid_allows`` and ``min_width`` of its class): 1.5D grids
    need c | p, 2.5D grids also p/c a perfect square; families that split r by columns need at
    least one column per rank of a layer (1.5D sparse: r >= p/c; 2.5D dense: r >= sqrt(p/c);
    2.5D sparse replicating: r >= sqrt(pc))."""
    cls = family(algorithm)
    return [c for c in range(1, p + 1)
            if cls.model.grid_allows(p, c) and (r is None or r >= cls.model.min_width(p, c))]


def best_c_dense_shift_15d(n: int, r: int, p: int, strategy: str) -> int:
    """The divisor c of p that minimises the exact words of one FusedMM (m = n)."""
    divisors = [c for c in range(1, p + 1) if p % c == 0]
    return min(divisors, key=lambda c: (
        total(family("15d-dense-shift").model.exact_words("fusedmm_a", n, n, r, p, c,
                                                          strategy)), c))


# ---------------------------------------------------------------------------------------------
# Local kernel calls (Table III's local dimensions, as distmm's loops issue them)

def local_calls(algorithm: str, strategy: str, m: float, n: float, nnz: float, r: float,
                p: int, c: int) -> list[KernelCalls]:
    """The local kernel calls one rank makes in one FusedMMA (balanced blocks). Not collective.

    Table III's local dimensions, per family (q = p/c ranks per 1.5D layer, s = sqrt(p/c)):

    * 1.5D dense shifting (V-A): q steps per kernel, each on an (mc/p) x (n/p) block of
      nnz/(pq) nonzeros at full width r. "fusion": q fused calls; "none": q SDDMM + q SpMMA;
      "reuse": q SDDMM + q SpMMB on S^T's (nc/p) x (m/p) blocks (transposes cached).
    * 1.5D sparse shifting (V-B): q steps per kernel, each on a shifted m x (n/p) column block
      of S (nnz/p nonzeros) at width r/q, rebuilt from its COO packet every step (even when
      q = 1). "none": SDDMM + SpMMA; "reuse": SDDMM on S^T's n x (m/p) blocks, then SpMMA on
      their transposes as they travelled ((m/p) x n).
    * 2.5D dense replicating (V-C): s steps per kernel on (m/s) x (n/(sc)) blocks of nnz/p
      nonzeros at width r/s; every block but the home one is rebuilt from its packet.
      "none": SDDMM + SpMMA; "reuse": SDDMM + SpMMB on S^T's (n/s) x (m/(sc)) blocks, whose
      transposes must be built for every block that arrived (s - 1 of s).
    * 2.5D sparse replicating (V-D): s steps per kernel on the stationary (m/s) x (n/s) block
      of nnz c/p nonzeros at width r/sqrt(pc): SDDMM + SpMMA.

    In every family the calls' flops add up to 4 nnz r / p (two kernels of 2 nnz r / p, or
    one fused kernel of 4 nnz r / p); what differs is how many nonzeros are walked, at what
    width, in blocks of what shape, and how many calls (see :func:`nonzero_visits`, which
    these calls add up to).
    """
    cls = _configured(algorithm, strategy)
    require(p >= 1 and 1 <= c <= p and p % c == 0, f"c={c} must divide p={p}")
    require(cls.model.grid_allows(p, c), f"{algorithm} has no grid for p={p}, c={c}")
    return cls.model.local_calls(strategy, m, n, nnz, r, p, c)
