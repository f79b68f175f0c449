"""Counted communication equals the exact formulas and the paper's Table III, every family.

For every family of the registry, c and strategy: the words and messages each rank's counters
show after one call equal its family's ``exact_words`` for that rank (``expected_words``), on
every phase, sent and received, on an unbalanced random S; and on an S whose blocks all hold
the same nonzeros, the total per rank equals Table III's row as printed in the paper (written
out below, independently of distmm), less the departures each family documents.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from families import COMM, FAMILY_C, P, build, runs, scattered
from oracle import problem

import distmm
from distmm.algorithms.sparse_shift_15d import SparseShift15D
from distmm.perf import bench, costmodel

PHASES = ("replication", "propagation", "reduction")


def assert_counts(obj, exact, what="", received=True):
    """This rank's counters equal ``exact`` on every phase: words sent, messages sent and
    received, and words received too where every rank's share is the same (``received``).
    Over all ranks, every phase receives what it sends."""
    for phase in PHASES:
        want = exact[phase]
        kinds = ("words_sent", "words_received") if received else ("words_sent",)
        # a sparsity-aware exchange receives from other ranks than it sends to (its own test
        # checks what it receives: tests/mpi/test_sparse_aware.py)
        aware = getattr(type(obj), "needs_pattern", False)
        for kind in kinds + (("messages_sent",) if aware else ("messages_sent",
                                                              "messages_received")):
            key = "words" if kind.startswith("words") else "messages"
            assert obj.stats.words(phase, kind) == want[key], (what, phase, kind)
        sent, got = (COMM.allreduce(obj.stats.words(phase, kind))
                     for kind in ("words_sent", "words_received"))
        assert sent == got, (what, phase)


@pytest.mark.parametrize("name,c", FAMILY_C)
def test_counted_words_equal_exact_on_every_rank(name, c):
    """m != n, a random S (blocks of different nnz): each rank's own exact words."""
    m, n, r = 3 * P, 5 * P, 2 * P
    S, A, B = problem(m, n, r, density=0.3, seed=4)
    obj = build(name, S, c, r)
    A_loc, B_loc = scattered(obj, A, B)
    for op, strategy in runs(name):  # builds S^T where a strategy uses it
        bench.run_op(obj, op, A_loc, B_loc, strategy)
    for op, strategy in runs(name):
        exact = obj.stats.expected_words(op.replace("-", "_"), r, strategy or "none")
        obj.stats.reset()
        bench.run_op(obj, op, A_loc, B_loc, strategy)
        # the fiber's shares of an S block's values differ by one where c does not divide it
        assert_counts(obj, exact, (op, strategy), received=False)
        assert obj.stats.words("distribute") == 0


# Paper Table III, (messages, words) per rank of one FusedMM with m = n and phi = nnz/(nr), as
# printed; "none" rows the table omits add the second kernel's fiber collective (section V).
def _dense_shift(strategy, n, r, p, c, phi):
    nr = n * r
    if strategy == "none":
        return 2 * p / c + 2 * (c - 1), nr * (2 / c + 2 * (c - 1) / p)
    if strategy == "reuse":
        return 2 * p / c + (c - 1), nr * (2 / c + (c - 1) / p)
    return p / c + 2 * (c - 1), nr * (1 / c + 2 * (c - 1) / p)


def _sparse_shift(strategy, n, r, p, c, phi):
    k = 2 if strategy == "none" else 1
    return 2 * p / c + k * (c - 1), n * r * (6 * phi / c + k * (c - 1) / p)


def _dense_replicate(strategy, n, r, p, c, phi):
    msgs = 4 * math.sqrt(p / c) + (c - 1)
    words = n * r / math.sqrt(p * c) * (6 * phi + 2 + c ** 1.5 / math.sqrt(p)
                                        - math.sqrt(c) / math.sqrt(p))
    if strategy == "none":
        msgs, words = msgs + (c - 1), words + n * r * (c - 1) / p
    return msgs, words


def _sparse_replicate(strategy, n, r, p, c, phi):
    return (4 * math.sqrt(p / c) + 3 * (c - 1),
            n * r / math.sqrt(p) * (4 / math.sqrt(c) + 3 * phi * (c - 1) / math.sqrt(p)))


# (Table III's row, the row's shifts: sent only when a layer has more than one rank, and what
# the family documents it does not send beyond that).
PAPER = {
    "15d-dense-shift": (_dense_shift,
                        lambda st, n, r, p, c, phi: ((1 if st == "fusion" else 2) * p / c,
                                                     (1 if st == "fusion" else 2) * n * r / c),
                        # a pass over an input Y does not send Algorithm 1's last shift,
                        # which would return a block its owner never gave away
                        lambda st, n, r, p, c, phi: ((0, 0) if p == c else
                                                     (2, 2 * n * r / p) if st == "none" else
                                                     (1, n * r / p))),
    "15d-sparse-shift": (_sparse_shift,
                         lambda st, n, r, p, c, phi: (2 * p / c, 6 * phi * n * r / c), None),
    "25d-dense-replicate": (_dense_replicate,
                            lambda st, n, r, p, c, phi: (4 * math.sqrt(p / c),
                                                         n * r * (6 * phi + 2)
                                                         / math.sqrt(p * c)), None),
    # Section IV-A's post-multiplication saves the initial all-gather of S's values.
    "25d-sparse-replicate": (_sparse_replicate,
                             lambda st, n, r, p, c, phi: (4 * math.sqrt(p / c),
                                                          4 * n * r / math.sqrt(p * c)),
                             lambda st, n, r, p, c, phi: (c - 1, (c - 1) * phi * n * r / p)),
}


def balanced(t: int = 6, seed: int = 2):
    """n = p t and an S made of p x p copies of one t x t pattern: with permute=False every
    block of every family's layout (all cut n into blocks of whole copies) holds the same
    nonzeros, a multiple of c, so the balanced formulas hold exactly."""
    rng = np.random.default_rng(seed)
    pattern = sp.random(t, t, density=0.3, random_state=rng, format="csr")
    pattern.data[:] = rng.uniform(0.5, 1.5, pattern.nnz)
    return sp.kron(sp.csr_matrix(np.ones((P, P))), pattern, format="coo"), P * t


# The families the paper's Table III covers (a sparsity-aware family's words depend on S's
# pattern: tests/mpi/test_sparse_aware.py holds them to its model).
@pytest.mark.parametrize("name,c", [(name, c) for name, c in FAMILY_C if name in PAPER])
def test_fusedmm_words_equal_table3(name, c):
    S, n = balanced()
    r, nnz = 2 * P, S.nnz
    phi = nnz / (n * r)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    obj = build(name, S, c, r, permute=False)
    A_loc, B_loc = scattered(obj, A, B)
    row, shifts, departure = PAPER[name]
    for strategy in distmm.ALGORITHMS[name].strategies:
        msgs, words = row(strategy, n, r, P, c, phi)
        assert costmodel.table3(name, strategy, n, r, P, c, phi) == pytest.approx(
            (msgs, words), rel=1e-12)
        if P // c == 1:  # one rank per layer: the shifts are local copies that send nothing
            saved = shifts(strategy, n, r, P, c, phi)
            msgs, words = msgs - saved[0], words - saved[1]
        if departure is not None:
            saved = departure(strategy, n, r, P, c, phi)
            msgs, words = msgs - saved[0], words - saved[1]
        assert costmodel.implemented(name, strategy, n, r, P, c, phi) == pytest.approx(
            (msgs, words), rel=1e-12, abs=1e-9)
        for op in ("fusedmm_a", "fusedmm_b"):
            getattr(obj, op)(A_loc, B_loc, strategy)  # builds S^T where the strategy uses it
            exact = obj.stats.expected_words(op, r, strategy)
            # balanced blocks: this rank's counts are the formula's averages
            assert exact == costmodel.exact(name, op, n, n, r, P, c, strategy, nnz=nnz)
            obj.stats.reset()
            getattr(obj, op)(A_loc, B_loc, strategy)
            assert_counts(obj, exact, (op, strategy))
            counted = sum(obj.stats.words(ph) for ph in PHASES)
            counted_msgs = sum(obj.stats.words(ph, "messages_sent") for ph in PHASES)
            assert counted == pytest.approx(words, rel=1e-12, abs=1e-9), (op, strategy)
            assert counted_msgs == pytest.approx(msgs, rel=1e-12, abs=1e-9), (op, strategy)


def test_sparse_shift_table4_best_c():
    # Table IV: c = sqrt(6 p phi) minimises nr(6 phi / c + (c - 1) / p); with p = 64 and
    # phi = 1/6 that is c = 8, a divisor of p, so the exact model must pick it too.
    p, n, r = 64, 6400, 64
    nnz = n * r / 6
    assert SparseShift15D.model.table4_best_c("reuse", p, nnz / (n * r)) == pytest.approx(8.0)
    assert SparseShift15D.model.best_c(n, n, r, p, nnz) == 8
    # A very sparse S makes replication worthless: c = 1 (Table IV's c < 1 case).
    assert SparseShift15D.model.best_c(n, n, r, p, 10) == 1
    assert COMM.size == P
