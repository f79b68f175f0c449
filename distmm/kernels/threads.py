"""How many numba threads each rank's kernels run on: its share of the node's cores.

numba gives a process as many threads as the CPUs it may run on (its affinity mask). Where the
launcher does not bind the ranks (MPICH's ``mpiexec`` by default) or binds each to a whole
socket (Open MPI beyond two ranks), that is every core of the node or socket for every rank:
launched the usual MPI way, one rank per core (``mpirun -n 64`` on a 64-core node), the ranks
run 64 threads each on 64 cores, every parallel kernel waits for its threads to get a core,
and a call of tens of microseconds takes milliseconds (docs/performance.md, "Threads per
rank"). :func:`settle`, which every distributed object's constructor (so
:func:`distmm.distribute`) and ``distmm calibrate`` call, therefore gives each rank its share of
the node::

    threads = max(1, min(CPUs this rank may run on, CPUs of the node // ranks on the node))

(:func:`distmm.runtime.cores.node_share`). The ranks on the node are those of the communicator that
share its memory (MPI's ``COMM_TYPE_SHARED`` split), or the launcher's count of the whole job's
ranks on the node where it says more (:func:`distmm.runtime.cores.launcher_local_size`): a
communicator that holds only some of them does not see the others. Nothing changes where the
user chose: ``NUMBA_NUM_THREADS`` in the environment, or a program that called
``numba.set_num_threads`` with another count before. numba's thread count belongs to the
calling thread; :func:`settle` sets the caller's, the thread that then calls the kernels.
"""

from __future__ import annotations

import os

import numba
from mpi4py import MPI

from distmm.core.memory import ranks_per_node
from distmm.runtime.cores import cpus, launcher_local_size, node_cpus, node_share

__all__ = ["STATE", "expected", "settle"]

#: How the last :func:`settle` left this rank's thread count: ``{"threads": n, "set_by":
#: "environment" | "program" | "distmm", "ranks_on_node": k, "cpus": c}``; empty before the
#: first call.
STATE: dict = {}


def _pool_started() -> bool:
    """Whether numba's threading layer has started its threads (True where unknown)."""
    from numba.np.ufunc import parallel

    return getattr(parallel, "_is_initialized", True)


def _size_pool(n: int) -> None:
    """Make numba's thread pool start with n threads, if it has not started yet (the next
    :func:`numba.set_num_threads` starts it): as if ``NUMBA_NUM_THREADS=n`` had been set.

    A pool of the node's every CPU whose extra threads only idle is not harmless: with GNU
    OpenMP's threading layer and ``OMP_NUM_THREADS=1`` (a common setting for PyTorch jobs)
    they kept PyTorch's own work off the cores, and a PyTorch GAT epoch on 2 ranks took over
    ten times as long (docs/performance.md, "Threads per rank"). Threads that call kernels
    later also start from n. Relies on numba's module globals; where they differ, the pool
    keeps numba's size and only :func:`numba.set_num_threads` applies."""
    from numba.np.ufunc import parallel

    if _pool_started() or not isinstance(getattr(parallel, "NUM_THREADS", None), int):
        return
    if n < numba.config.NUMBA_NUM_THREADS:
        numba.config.NUMBA_NUM_THREADS = n
        parallel.NUM_THREADS = n


def settle(comm: MPI.Comm) -> dict:
    """Give this rank its share of its node's cores as numba threads, unless the user chose.

    Collective over ``comm`` (ranks of ``comm`` on one node are counted with MPI's shared-memory
    split, whether or not the count is then used, so that every rank makes the same MPI calls).

    Returns
    -------
    dict
        :data:`STATE`: ``threads`` (the count now in force), ``set_by`` (``"environment"``:
        ``NUMBA_NUM_THREADS`` is set and kept; ``"program"``: the calling program set another
        count with ``numba.set_num_threads``, kept; ``"distmm"``: set here), ``ranks_on_node``
        and ``cpus`` (this rank's affinity).
    """
    ranks = max(ranks_per_node(comm), launcher_local_size())
    mine = cpus()
    if "NUMBA_NUM_THREADS" in os.environ:
        set_by, current = "environment", numba.get_num_threads()
    elif _pool_started() and (current := numba.get_num_threads()) not in (
            numba.config.NUMBA_NUM_THREADS, STATE.get("threads")):
        set_by = "program"
    else:
        set_by = "distmm"
        # never above the pool: an earlier settle may have started it smaller (a
        # communicator that counts fewer ranks on the node than the first one did)
        current = min(node_share(ranks, mine, node_cpus()), numba.config.NUMBA_NUM_THREADS)
        _size_pool(current)
        numba.set_num_threads(current)
    STATE.clear()
    STATE.update(threads=current, set_by=set_by, ranks_on_node=ranks, cpus=mine)
    return STATE


def expected() -> dict:
    """What :func:`settle` would choose for this process, without MPI: the ranks on the node
    from the launcher's variables only (1 where there are none). Not collective (``distmm
    info``'s row; the count in force is :data:`STATE` once ``distribute`` has run).

    Returns
    -------
    dict
        ``threads``, ``set_by`` (``"environment"`` or ``"distmm"``), ``ranks_on_node``,
        ``cpus``.
    """
    ranks, mine = max(1, launcher_local_size()), cpus()
    if "NUMBA_NUM_THREADS" in os.environ:
        return {"threads": numba.config.NUMBA_NUM_THREADS, "set_by": "environment",
                "ranks_on_node": ranks, "cpus": mine}
    return {"threads": node_share(ranks, mine, node_cpus()), "set_by": "distmm",
            "ranks_on_node": ranks, "cpus": mine}
