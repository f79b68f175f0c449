"""Every family refuses what its grid, its width rule and its strategies exclude: the same
InputError on every rank, with the family's reason, before any data moves."""

from __future__ import annotations

import numpy as np
import pytest
from families import COMM, FAMILIES, P, build, scattered, width
from oracle import problem

import distmm
from distmm.core.coo import CooShare
from distmm.core.grid import ProcessGrid25D
from distmm.errors import InputError
from distmm.perf import costmodel

# The strategies the paper allows each family (section IV-B, V): local kernel fusion needs
# whole dense rows (1.5D dense shifting only); a family that replicates no dense matrix
# elides nothing.
PAPER_STRATEGIES = {"15d-dense-shift": ("none", "reuse", "fusion"),
                    "15d-sparse-shift": ("none", "reuse"),
                    "25d-dense-replicate": ("none", "reuse"),
                    "25d-sparse-replicate": ("none",),
                    # not in the paper: one exchange of B's rows serves both kernels
                    "15d-sparse-aware": ("none", "reuse", "fusion")}


def construct(name, share, c, r=None, **kw):
    """The family's class directly (distribute checks c | p itself, first)."""
    return distmm.ALGORITHMS[name](share, COMM, c=c, r=r, **kw)


@pytest.mark.parametrize("name", FAMILIES)
def test_bad_grid_parameters_raise_everywhere(name):
    cls = distmm.ALGORITHMS[name]
    S, _, _ = problem(10, 10, 2)
    share = CooShare.from_scipy(S, COMM, root=None)
    with pytest.raises(InputError, match="does not divide"):
        construct(name, share, P + 1, 4 * P)
    with pytest.raises(InputError, match="divisor"):
        build(name, S, P + 1, 4 * P)
    with pytest.raises(InputError, match="integer >= 1"):
        construct(name, share, 0, 4 * P)
    with pytest.raises(InputError, match="integer >= 1"):
        construct(name, share, 1.0, 4 * P)
    refused = [c for c in range(1, P + 1) if P % c == 0 and not cls.model.grid_allows(P, c)]
    if cls.grid_class is ProcessGrid25D:
        assert refused == [c for c in range(1, P + 1)
                           if P % c == 0 and round((P // c) ** 0.5) ** 2 != P // c]
    else:
        assert refused == []
    for c in refused:
        with pytest.raises(InputError, match="perfect square"):
            construct(name, share, c, 64)
    with pytest.raises(InputError, match="rank order"):
        construct(name, share, costmodel.valid_cs(name, P)[0], 4 * P, order="diagonal")


@pytest.mark.parametrize("name", FAMILIES)
def test_r_optional_but_refused_below_the_minimum(name):
    """r at construction is only a default width: optional, but refused when too small; per
    call, any r at or above the family's minimum works and a smaller one is refused."""
    S, A, _ = problem(12, 7, 2)
    for c in costmodel.valid_cs(name, P):
        low, _ = (obj := build(name, S, c, None)).r_rule()
        assert obj.r is None and low == distmm.ALGORITHMS[name].model.min_width(P, c)
        if obj.splits_r:
            with pytest.raises(InputError, match="r=..."):
                obj.dense("a")
        r = width(name, c, "odd")
        assert obj.scatter("a", np.ones((12, r)) if COMM.rank == 0 else None).r == r
        assert obj.scatter("b", np.ones((7, low)), root=None).r == low
        if low > 1:
            with pytest.raises(InputError, match=f"r >= {low}"):
                obj.scatter("b", np.ones((7, low - 1)), root=None)
            with pytest.raises(InputError, match="too small"):
                build(name, S, c, low - 1)
        with pytest.raises(InputError, match="rows, expected 7"):
            obj.scatter("b", A if COMM.rank == 0 else None)
        obj.close()
    with pytest.raises(InputError, match="integer"):
        build(name, S, 1, 2.5)


@pytest.mark.parametrize("name", FAMILIES)
def test_strategies_the_family_lacks_are_refused(name):
    cls = distmm.ALGORITHMS[name]
    assert cls.strategies == PAPER_STRATEGIES[name]
    c = costmodel.valid_cs(name, P)[0]
    r = width(name, c, "min")
    S, A, B = problem(10, 10, r)
    obj = build(name, S, c, r)
    A_loc, B_loc = scattered(obj, A, B)
    for strategy in [s for s in ("none", "reuse", "fusion") if s not in cls.strategies] + [
            "telepathy"]:
        for fn in (obj.fusedmm_a, obj.fusedmm_b):
            with pytest.raises(InputError, match="strategy .* supports only "
                                                 + ", ".join(cls.strategies)):
                fn(A_loc, B_loc, strategy)
    if "fusion" not in cls.strategies and obj.splits_r:
        with pytest.raises(InputError, match="fusion"):
            obj.fusedmm_a(A_loc, B_loc, "fusion")
    with pytest.raises(InputError, match="unknown op"):
        cls.model.exact_words("spgemm", 8, 8, 4, P, c)


def test_unknown_algorithm():
    S, _, _ = problem(10, 10, 2)
    with pytest.raises(InputError, match="unknown algorithm"):
        distmm.distribute(S, COMM, algorithm="3d-magic", root=None)


@pytest.mark.parametrize("name", FAMILIES)
def test_hand_made_share_is_checked_on_every_rank(name):
    last = COMM.size - 1
    c = costmodel.valid_cs(name, P)[0]
    rows = np.array([0, 1]) if COMM.rank != last else np.array([0, 7])
    share = CooShare((5, 5), rows, np.array([0, 1]), np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="outside its shape"):
        construct(name, share, c)
    share = CooShare((5, 5), np.array([0, 1]), np.array([0, 1]),
                     np.array([1.0, np.inf if COMM.rank == last else 2.0]))
    with pytest.raises(InputError, match="NaN or infinite"):
        construct(name, share, c)
