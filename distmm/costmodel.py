"""The alpha-beta communication model of paper section V, for what distmm implements.

Two kinds of formula live here:

* ``*_exact`` functions give the words and messages per rank that distmm's implementation sends,
  phase by phase, for any m, n, r, p, c (blocks of m/p and n/p rows; exact when p divides m
  and n). The communication counters must equal them; tests hold the two together.
* ``table3_*`` and ``table4_*`` are the paper's closed forms (Tables III and IV, m = n), which
  the exact formulas reduce to when p divides n and c < p.

Difference from the paper's accounting, stated once: when c = p a layer holds a single rank, so
a "cyclic shift" is a local no-op that sends nothing. The paper's 1/c terms count those shifts;
the exact formulas do not.
"""

from __future__ import annotations

import math

from distmm.errors import require

PHASES = ("replication", "propagation", "reduction")
DENSE_SHIFT_OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def dense_shift_15d_exact(op: str, m: int, n: int, r: int, p: int, c: int,
                          strategy: str = "none") -> dict[str, dict[str, float]]:
    """Words and messages sent per rank, per phase, by :class:`DenseShift15D` for one op.

    Assumes p divides m and n (otherwise these are averages). Returns
    ``{phase: {"words": w, "messages": k}}`` for replication, propagation and reduction.
    """
    require(op in DENSE_SHIFT_OPS, f"unknown op {op!r}")
    require(p % c == 0, f"c={c} does not divide p={p}")
    q = p // c
    if op == "fusedmm_b":
        # FusedMMB is FusedMMA on the transposed problem (section IV-B).
        return dense_shift_15d_exact("fusedmm_a", n, m, r, p, c, strategy)
    a_blk, b_blk = m * r / p, n * r / p
    shifts = q if q > 1 else 0
    repl = {"words": 0.0, "messages": 0}
    prop = {"words": 0.0, "messages": 0}
    red = {"words": 0.0, "messages": 0}

    def add(d: dict, words: float, msgs: int) -> None:
        d["words"] += words
        d["messages"] += msgs

    if op in ("sddmm", "spmm_b"):
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
    elif op == "spmm_a":
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "none":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, 2 * shifts * b_blk, 2 * shifts)
        add(red, (c - 1) * a_blk, c - 1)
    elif strategy == "reuse":
        add(repl, (c - 1) * b_blk, c - 1)
        add(prop, 2 * shifts * a_blk, 2 * shifts)
    elif strategy == "fusion":
        add(repl, (c - 1) * a_blk, c - 1)
        add(prop, shifts * b_blk, shifts)
        add(red, (c - 1) * a_blk, c - 1)
    else:
        require(False, f"unknown strategy {strategy!r}")
    return {"replication": repl, "propagation": prop, "reduction": red}


def total(phases: dict[str, dict[str, float]], key: str = "words") -> float:
    """Sum of one counter over the phases of an ``*_exact`` result."""
    return sum(ph[key] for ph in phases.values())


def table3_dense_shift_15d(n: int, r: int, p: int, c: int, strategy: str
                           ) -> tuple[float, float]:
    """Paper Table III (and section V-A for no elision): (messages, words) per rank of one
    FusedMM with the 1.5D dense shifting algorithm, m = n."""
    if strategy == "none":
        return 2 * p / c + 2 * (c - 1), n * r * (2 / c + 2 * (c - 1) / p)
    if strategy == "reuse":
        return 2 * p / c + (c - 1), n * r * (2 / c + (c - 1) / p)
    if strategy == "fusion":
        return p / c + 2 * (c - 1), n * r * (1 / c + 2 * (c - 1) / p)
    raise ValueError(f"unknown strategy {strategy!r}")


def table4_best_c_dense_shift_15d(p: int, strategy: str) -> float:
    """Paper Table IV: the real-valued replication factor minimising words (1.5D dense)."""
    return {"none": math.sqrt(p), "reuse": math.sqrt(2 * p),
            "fusion": math.sqrt(p / 2)}[strategy]


def best_c_dense_shift_15d(n: int, r: int, p: int, strategy: str) -> int:
    """The divisor c of p that minimises the exact words of one FusedMM (m = n)."""
    divisors = [c for c in range(1, p + 1) if p % c == 0]
    return min(divisors, key=lambda c: (
        total(dense_shift_15d_exact("fusedmm_a", n, n, r, p, c, strategy)), c))
