"""Failures on single ranks (run on 3 ranks). Most bodies hold a collective, so a harness that
let the ranks run different phases would deadlock here instead of reporting."""

import pytest


def test_fails_on_rank1(comm):
    total = comm.allreduce(1)
    print(f"captured-output-of-rank-{comm.rank}")
    assert comm.rank != 1, f"failure-marker-rank{comm.rank}-of-{total}"


@pytest.fixture
def breaks_on_rank2(comm):
    if comm.rank == 2:
        raise RuntimeError(f"fixture-marker-rank{comm.rank}")
    yield


def test_setup_fails_on_rank2(breaks_on_rank2, comm):
    comm.Barrier()  # ranks 0 and 1 would hang here if they ran the body without rank 2


@pytest.fixture
def teardown_breaks_on_rank0(comm):
    yield
    if comm.rank == 0:
        raise RuntimeError(f"teardown-marker-rank{comm.rank}")


def test_teardown_fails_on_rank0(teardown_breaks_on_rank0, comm):
    comm.Barrier()


def test_skips_on_rank0_only(comm):
    if comm.rank == 0:
        pytest.skip("a rank-dependent skip")


@pytest.mark.xfail(reason="expected to fail on rank 1", strict=True)
def test_xfail_fails_on_rank1_only(comm):
    comm.Barrier()
    assert comm.rank != 1


def test_still_in_step_after_all_that(comm):
    assert comm.allreduce(1) == comm.size
