"""Rank 1 collects one test more than the others: the run must stop before any test."""

from mpi4py import MPI


def test_everywhere(comm):
    comm.Barrier()


if MPI.COMM_WORLD.Get_rank() == 1:

    def test_only_on_rank1(comm):
        comm.Barrier()
