"""A run that passes on every rank: exit 0 and one report."""

import pytest


def test_allreduce(comm):
    assert comm.allreduce(comm.rank) == comm.size * (comm.size - 1) // 2


def test_skipped_on_every_rank(comm):
    if comm.size > 1:
        pytest.skip("skips for the same reason on every rank")


@pytest.mark.xfail(reason="fails on every rank", strict=True)
def test_xfail_on_every_rank(comm):
    comm.Barrier()
    raise ValueError("expected")


def test_shared_and_private_dirs(comm, shared_tmp, tmp_path):
    assert len(set(comm.allgather(str(shared_tmp)))) == 1
    assert len(set(comm.allgather(str(tmp_path)))) == comm.size
