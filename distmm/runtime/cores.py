"""The cores one rank may use: its CPU affinity, its node's ranks, and its share of the node.

The one formula that distmm gives each rank's thread pools (numba's, in
:mod:`distmm.kernels.threads`; OpenBLAS's, in :mod:`distmm.runtime.blas_threads`)::

    share = max(1, min(CPUs this rank may run on, CPUs of the node // ranks on the node))

The first term follows a launcher's binding (``srun --cpus-per-task``, ``mpiexec -bind-to``);
the second divides an unbound node (MPICH's ``mpiexec``) among its ranks. Imports nothing of
distmm and nothing that loads numpy: :mod:`distmm.runtime.blas_threads` uses it before numpy loads.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_SIZE_VARIABLES", "cpus", "launcher_local_size", "node_cpus", "node_share"]

#: Launchers' counts of the job's ranks on this node (MPICH's Hydra, Open MPI).
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def launcher_local_size() -> int:
    """The largest count of the job's ranks on this node that a launcher's variable gives
    (0: none says). Not collective."""
    sizes = [os.environ.get(v, "") for v in LOCAL_SIZE_VARIABLES]
    return max((int(x) for x in sizes if x.isdigit()), default=0)


def cpus() -> int:
    """The CPUs this process may run on (its affinity; all of them where that is unknown).
    Not collective."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def node_cpus() -> int:
    """The CPUs of this node, whatever this process's affinity (its own CPUs where the count
    is unknown). Not collective."""
    return os.cpu_count() or cpus()


def node_share(ranks_on_node: int, cpus: int, node_cpus: int) -> int:
    """One rank's threads: ``max(1, min(cpus, node_cpus // ranks_on_node))``. Not collective.

    Parameters
    ----------
    ranks_on_node : int
        Ranks of the job on this rank's node (values below 1 count as 1).
    cpus : int
        CPUs this rank may run on (its affinity mask).
    node_cpus : int
        CPUs of the node.
    """
    return max(1, min(cpus, node_cpus // max(1, ranks_on_node)))
