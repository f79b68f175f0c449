"""Rank 2 raises while ranks 0 and 1 wait in a collective: the job must abort, not hang."""


def test_rank2_raises_before_allreduce(comm):
    if comm.rank == 2:
        raise RuntimeError(f"raised-before-collective-marker-rank{comm.rank}")
    comm.allreduce(comm.rank)


def test_never_reached(comm):
    comm.Barrier()
