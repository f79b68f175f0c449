"""Smallest real MPI tests: they keep tests/mpi non-empty and check the harness fixtures."""

import numpy as np
from mpi4py import MPI


def test_allreduce_of_ranks(comm):
    send = np.array([comm.Get_rank()], dtype=np.int64)
    recv = np.zeros(1, dtype=np.int64)
    comm.Allreduce(send, recv, op=MPI.SUM)
    p = comm.Get_size()
    assert recv[0] == p * (p - 1) // 2


def test_shared_tmp_is_one_directory(comm, shared_tmp):
    if comm.Get_rank() == 0:
        (shared_tmp / "hello.txt").write_text("from rank 0")
    comm.Barrier()
    assert (shared_tmp / "hello.txt").read_text() == "from rank 0"
    assert len(set(comm.allgather(str(shared_tmp)))) == 1


def test_tmp_path_is_private_to_each_rank(comm, tmp_path):
    assert len(set(comm.allgather(str(tmp_path)))) == comm.Get_size()
