"""Fails to import on rank 2 only (run together with case_collection_mismatch.py)."""

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == 2:
    raise ImportError(f"collection-error-marker-rank{MPI.COMM_WORLD.Get_rank()}")


def test_everywhere_but_rank2(comm):
    comm.Barrier()
