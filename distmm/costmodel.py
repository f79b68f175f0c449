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
from dataclasses import asdict, dataclass

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


def exact(algorithm: str, op: str, m: int, n: int, r: int, p: int, c: int,
          strategy: str = "none", nnz: float | None = None) -> dict[str, dict[str, float]]:
    """Words and messages per rank, per phase, that ``algorithm`` sends for one ``op``
    (balanced blocks of S where S moves). Each family states its own formula in
    ``exact_words``; this looks it up by name."""
    from distmm.api import ALGORITHMS

    require(algorithm in ALGORITHMS, f"unknown algorithm {algorithm!r}")
    return ALGORITHMS[algorithm].exact_words(op, m, n, r, p, c, strategy, nnz=nnz)


def total(phases: dict[str, dict[str, float]], key: str = "words") -> float:
    """Sum of one counter over the phases of an ``*_exact`` result."""
    return sum(ph[key] for ph in phases.values())


# (algorithm, strategy) pairs the paper analyses and distmm implements (Table III, section V).
CONFIGS = (
    ("15d-dense-shift", "none"),
    ("15d-dense-shift", "reuse"),
    ("15d-dense-shift", "fusion"),
    ("15d-sparse-shift", "none"),
    ("15d-sparse-shift", "reuse"),
    ("25d-dense-replicate", "none"),
    ("25d-dense-replicate", "reuse"),
    ("25d-sparse-replicate", "none"),
)


def table3(algorithm: str, strategy: str, n: int, r: int, p: int, c: float,
           phi: float = 0.0) -> tuple[float, float]:
    """Paper Table III: (messages, words) per rank of one FusedMM, m = n, phi = nnz / (n r).

    Rows the table omits are derived the way section V derives the others: "none" runs the two
    kernels back to back, so it pays the replication of the second kernel (an all-gather or a
    reduce-scatter of the same size) that the eliding strategy avoids. The sparse matrix costs
    3 words per nonzero (COO) wherever it moves.
    """
    require((algorithm, strategy) in CONFIGS, f"no model for {algorithm} / {strategy}")
    nr = n * r
    if algorithm == "15d-dense-shift":
        if strategy == "none":
            return 2 * p / c + 2 * (c - 1), nr * (2 / c + 2 * (c - 1) / p)
        if strategy == "reuse":
            return 2 * p / c + (c - 1), nr * (2 / c + (c - 1) / p)
        return p / c + 2 * (c - 1), nr * (1 / c + 2 * (c - 1) / p)
    if algorithm == "15d-sparse-shift":
        repl = 2 if strategy == "none" else 1
        return 2 * p / c + repl * (c - 1), nr * (6 * phi / c + repl * (c - 1) / p)
    if algorithm == "25d-dense-replicate":
        repl = 2 if strategy == "none" else 1
        shifts = 4 * math.sqrt(p / c)
        return shifts + repl * (c - 1), nr * ((6 * phi + 2) / math.sqrt(p * c)
                                              + repl * (c - 1) / p)
    return (4 * math.sqrt(p / c) + 3 * (c - 1),
            nr / math.sqrt(p) * (4 / math.sqrt(c) + 3 * phi * (c - 1) / math.sqrt(p)))


def implemented(algorithm: str, strategy: str, n: int, r: int, p: int, c: float,
                phi: float = 0.0) -> tuple[float, float]:
    """(messages, words) per rank of one FusedMM as distmm implements it, m = n.

    Table III with distmm's two documented departures: a layer of one rank (c = p, or s = 1
    in 2.5D) sends no shifts; and 2.5D sparse replicating SDDMM reduces unscaled partial dot
    products and scales afterwards (section IV-A), which saves the initial all-gather of S's
    values: (c-1) nnz/p words and c-1 messages (see sparse_replicate_25d)."""
    msgs, words = table3(algorithm, strategy, n, r, p, c, phi)
    nr = n * r
    if p / c <= 1:  # one rank per layer: shifts are local copies
        if algorithm == "15d-dense-shift":
            words -= nr * (1 if strategy == "fusion" else 2) / c
            msgs -= p / c * (1 if strategy == "fusion" else 2)
        elif algorithm == "15d-sparse-shift":
            words -= nr * 6 * phi / c
            msgs -= 2 * p / c
        else:
            shift_words = (nr * (6 * phi + 2) / math.sqrt(p * c) if algorithm.startswith(
                "25d-dense") else nr * 4 / math.sqrt(p * c))
            words -= shift_words
            msgs -= 4 * math.sqrt(p / c)
    if algorithm == "25d-sparse-replicate":
        words -= (c - 1) * phi * nr / p
        msgs -= c - 1
    return msgs, words


def nonzero_visits(algorithm: str, strategy: str, nnz: float, p: int, c: float) -> float:
    """Nonzeros one rank's local kernels walk through in one FusedMM (both kernels).

    Table III's local-dimension columns in one number: the flops are 4 nnz r / p for every
    family, but a family that splits r over more ranks makes each of them walk more nonzeros
    with fewer columns each, and a nonzero costs index reads and row gathers however few
    columns it carries (section V-B: dividing the dense matrices by columns "can significantly
    hurt local kernel throughput"). The fused kernel walks S once for both kernels."""
    if algorithm == "15d-dense-shift":
        return (1 if strategy == "fusion" else 2) * nnz / p
    if algorithm == "15d-sparse-shift":
        return 2 * nnz / c
    if algorithm == "25d-dense-replicate":
        return 2 * nnz / math.sqrt(p * c)
    require(algorithm == "25d-sparse-replicate", f"no model for {algorithm}")
    return 2 * nnz * math.sqrt(c / p)


def table4_best_c(algorithm: str, strategy: str, p: int, phi: float = 0.0) -> float:
    """Paper Table IV: the real replication factor minimising Table III's words.

    For 1.5D sparse shifting without elision (not in the table) the same derivation gives
    sqrt(3 p phi)."""
    if algorithm == "15d-dense-shift":
        return {"none": math.sqrt(p), "reuse": math.sqrt(2 * p),
                "fusion": math.sqrt(p / 2)}[strategy]
    if algorithm == "15d-sparse-shift":
        return math.sqrt((6 if strategy == "reuse" else 3) * p * phi)
    if algorithm == "25d-dense-replicate":
        return (p * (1 + 3 * phi) ** 2 / (4 if strategy == "none" else 1)) ** (1 / 3)
    require(algorithm == "25d-sparse-replicate", f"no model for {algorithm}")
    # Section V-D's text, c = p^(1/3) (2 / (3 phi))^(2/3), which minimises Table III's words.
    # Table IV prints (p / (2 phi / 3)^2)^(1/3), with the fraction inverted: a typo.
    return p ** (1 / 3) * (2 / (3 * phi)) ** (2 / 3)


def valid_cs(algorithm: str, p: int, r: int | None = None) -> list[int]:
    """Replication factors the algorithm's grid allows on p ranks (and width r, if given).

    1.5D grids need c | p; 2.5D grids also need p/c to be a perfect square. Families that split
    r by columns need at least one column per rank of a layer (1.5D sparse: r >= p/c; 2.5D:
    r >= sqrt(p/c); 2.5D sparse replicating splits r over all p/sqrt(p/c) of a row's layers)."""
    out = []
    for c in range(1, p + 1):
        if p % c:
            continue
        q = p // c
        if algorithm.startswith("25d") and math.isqrt(q) ** 2 != q:
            continue
        if r is not None:
            need = {"15d-sparse-shift": q, "25d-dense-replicate": math.isqrt(q),
                    "25d-sparse-replicate": math.isqrt(q) * c}.get(algorithm, 1)
            if r < need:
                continue
        out.append(c)
    return out


def best_c_dense_shift_15d(n: int, r: int, p: int, strategy: str) -> int:
    """The divisor c of p that minimises the exact words of one FusedMM (m = n)."""
    divisors = [c for c in range(1, p + 1) if p % c == 0]
    return min(divisors, key=lambda c: (
        total(dense_shift_15d_exact("fusedmm_a", n, n, r, p, c, strategy)), c))


# ---------------------------------------------------------------------------------------------
# Local kernel calls (Table III's local dimensions, as distmm's loops issue them)

KERNEL_KINDS = ("fusedmm", "sddmm", "spmm_a", "spmm_b")


@dataclass(frozen=True)
class KernelCalls:
    """``count`` calls of one node-model kernel, all alike, made by one rank in one FusedMMA.

    ``kind`` is one of :data:`KERNEL_KINDS` ("fusedmm" is ``fusedmm_a``); each call walks
    ``nnz`` nonzeros of a ``rows`` x ``cols`` block with dense operands of ``width`` columns.
    ``unpacked`` says the block arrived as a COO packet and is rebuilt (bincount of its rows)
    before the call; ``transposed`` says the call builds the block's transpose (``spmm_b`` on a
    block that arrived this step, so no cached transpose exists)."""

    kind: str
    count: int
    nnz: float
    rows: float
    cols: float
    width: float
    unpacked: bool = False
    transposed: bool = False

    @property
    def walked_rows(self) -> float:
        """Rows the kernel's parallel loop walks: the block's, or its transpose's (spmm_b)."""
        return self.cols if self.kind == "spmm_b" else self.rows

    @property
    def gathered_rows(self) -> float:
        """Rows of the dense operand gathered at random through the column indices."""
        return self.rows if self.kind == "spmm_b" else self.cols

    def as_dict(self) -> dict:
        return asdict(self)


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
    require((algorithm, strategy) in CONFIGS, f"no model for {algorithm} / {strategy}")
    require(p >= 1 and 1 <= c <= p and p % c == 0, f"c={c} must divide p={p}")
    q = p // c
    if algorithm == "15d-dense-shift":
        z = nnz / (p * q)
        if strategy == "fusion":
            return [KernelCalls("fusedmm", q, z, m * c / p, n / p, r)]
        if strategy == "none":
            return [KernelCalls(kind, q, z, m * c / p, n / p, r) for kind in ("sddmm", "spmm_a")]
        return [KernelCalls(kind, q, z, n * c / p, m / p, r) for kind in ("sddmm", "spmm_b")]
    if algorithm == "15d-sparse-shift":
        z, w = nnz / p, r / q
        if strategy == "none":
            return [KernelCalls(kind, q, z, m, n / p, w, unpacked=True)
                    for kind in ("sddmm", "spmm_a")]
        return [KernelCalls("sddmm", q, z, n, m / p, w, unpacked=True),
                KernelCalls("spmm_a", q, z, m / p, n, w, unpacked=True)]
    s = math.isqrt(q)
    require(s * s == q, f"p/c = {q} is not a perfect square")
    if algorithm == "25d-dense-replicate":
        z, w = nnz / p, r / s
        rows, cols = (m / s, n / (s * c)) if strategy == "none" else (n / s, m / (s * c))
        out = []
        for kind in ("sddmm", "spmm_a" if strategy == "none" else "spmm_b"):
            out.append(KernelCalls(kind, 1, z, rows, cols, w))
            if s > 1:  # the other s - 1 blocks arrive as packets
                out.append(KernelCalls(kind, s - 1, z, rows, cols, w, unpacked=True,
                                       transposed=kind == "spmm_b"))
        return out
    require(algorithm == "25d-sparse-replicate", f"no model for {algorithm}")
    z, w = nnz * c / p, r / (s * c)
    return [KernelCalls(kind, s, z, m / s, n / s, w) for kind in ("sddmm", "spmm_a")]
