"""Ranks that make different calls on one distributed matrix never get a result.

The first call of each operation (and, under checks="always", every call) agrees across ranks
on the call itself: operation, FusedMM strategy, values= and out= given or not, and the dense
width. A mismatch raises the same InputError on every rank, naming what differs and the ranks,
before any block moves; the object then still serves correct calls. After the checks, each
call's point-to-point messages carry its own tag (calls.call_tag), so ranks in different calls
cannot pair up. Every family of the registry, at every c its grid allows.
"""

from __future__ import annotations

import numpy as np
import pytest
from families import FAMILY_C
from mpi4py import MPI
from oracle import check, problem

import distmm
from distmm.algorithms.calls import call_tag
from distmm.core.operations import OPS
from distmm.errors import InputError

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
many = pytest.mark.skipif(P < 2, reason="a mismatch between ranks needs two ranks")


def make(algorithm, c, checks="once"):
    S, _, _ = problem(23, 19, 1, seed=7)
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, root=None, dtype=np.float64,
                            checks=checks)
    r = obj.r_rule()[0] + 1
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((23, r)), rng.standard_normal((19, r))
    return obj, S, A, B, obj.scatter("a", A, root=None), obj.scatter("b", B, root=None)


def refused_alike(call, *words):
    """Run ``call``; it must raise one InputError, the same on every rank, naming ``words``."""
    try:
        call()
        text = None
    except InputError as err:
        text = str(err)
    every = COMM.allgather(text)
    assert None not in every, f"a rank got a result: {every}"
    assert len(set(every)) == 1, every
    for word in words:
        assert word in text, text
    return text


def still_correct(obj, S, A, B, A_loc, B_loc):
    check("spmm-a", obj.gather("a", obj.spmm_a(B_loc)), S, A, B, rtol=1e-10)
    check("sddmm", obj.gather_values(obj.sddmm(A_loc, B_loc)), S, A, B, rtol=1e-10)


@many
@pytest.mark.parametrize("checks", ["once", "always"])
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_different_operations_on_the_first_call(algorithm, c, checks):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, checks)
    text = refused_alike(lambda: obj.sddmm(A_loc, B_loc) if COMM.rank == 0
                         else obj.spmm_a(B_loc), "operation", "sddmm on rank 0", "spmm_a on rank")
    assert "different calls" in text
    still_correct(obj, S, A, B, A_loc, B_loc)


@many
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_different_strategies(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c)
    first, last = obj.strategies[0], obj.strategies[-1]
    if first == last:
        pytest.skip("the family has one FusedMM strategy")
    refused_alike(lambda: obj.fusedmm_a(A_loc, B_loc, strategy=first if COMM.rank == 0
                                        else last), "strategy", f"{first} on rank 0")
    # an unknown strategy on one rank only: refused everywhere too, not on that rank alone
    refused_alike(lambda: obj.fusedmm_b(A_loc, B_loc, strategy="bogus" if COMM.rank == 0
                                        else last), "strategy", "bogus on rank 0")
    check("fusedmm-a", obj.gather("a", obj.fusedmm_a(A_loc, B_loc, strategy=first)), S, A, B,
          rtol=1e-10)


@many
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_values_or_out_given_on_some_ranks(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c)
    refused_alike(lambda: obj.spmm_b(A_loc, values=obj.values.copy() if COMM.rank == 0
                                     else None), "values=", "given on rank 0")
    refused_alike(lambda: obj.sddmm(A_loc, B_loc, out=np.empty_like(obj.values)
                                    if COMM.rank == P - 1 else None),
                  "out=", f"given on rank {P - 1}")
    still_correct(obj, S, A, B, A_loc, B_loc)


@many
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_different_widths(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c)
    # One more column on the last rank. (In a family that splits r, r is the sum of the
    # shares; the shares of a larger r put the extra column on a lower rank, so this is
    # refused there too.)
    plain = np.asarray(B_loc)
    wider = (np.ascontiguousarray(np.hstack([plain, plain[:, :1]])) if COMM.rank == P - 1
             else plain)
    text = refused_alike(lambda: obj.spmm_a(wider))
    assert "disagree on r across ranks" in text and "rank" in text, text
    still_correct(obj, S, A, B, A_loc, B_loc)


@many
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_always_agrees_on_later_calls_too(algorithm, c):
    obj, S, A, B, A_loc, B_loc = make(algorithm, c, "always")
    still_correct(obj, S, A, B, A_loc, B_loc)
    obj.spmm_b(A_loc)
    obj.fusedmm_a(A_loc, B_loc)
    refused_alike(lambda: obj.spmm_a(B_loc) if COMM.rank == 0 else obj.spmm_b(A_loc),
                  "operation", "spmm_a on rank 0", "spmm_b on rank")
    refused_alike(lambda: obj.fusedmm_a(A_loc, B_loc) if COMM.rank == 0
                  else obj.fusedmm_b(A_loc, B_loc), "fusedmm_a on rank 0")
    still_correct(obj, S, A, B, A_loc, B_loc)


def test_each_call_has_its_own_tag():
    calls = [(op, None) for op in (*OPS, "gather")]
    calls += [(op, s) for op in ("fusedmm_a", "fusedmm_b") for s in ("none", "reuse", "fusion")]
    tags = [call_tag(op, s) for op, s in calls]
    assert len(set(tags)) == len(tags)
    assert max(tags) + 20 <= 32767  # MPI guarantees tags up to 32767
    assert min(tags) > 20  # never one of the untagged defaults (17-20)


@many
@pytest.mark.parametrize("algorithm,c", FAMILY_C)
def test_a_later_call_sends_under_its_own_tag(algorithm, c):
    """Under "once", after the checks a shift of one call carries that call's tag: a rank in
    another call (a different tag) cannot receive it. Probed by tracing the tags used."""
    obj, S, A, B, A_loc, B_loc = make(algorithm, c)
    obj.sddmm(A_loc, B_loc)
    assert obj.stats.call_tag == call_tag("sddmm")
    obj.spmm_a(B_loc)
    assert obj.stats.call_tag == call_tag("spmm_a")
    obj.fusedmm_b(A_loc, B_loc, strategy=obj.strategies[0])
    assert obj.stats.call_tag == call_tag("fusedmm_b", obj.strategies[0])
    still_correct(obj, S, A, B, A_loc, B_loc)
