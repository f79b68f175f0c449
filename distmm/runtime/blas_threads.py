"""Keep the BLAS library's idle threads off the cores that distmm's kernels need.

numpy's wheels link OpenBLAS, whose worker threads keep spinning for about 2**28 clock ticks
after every multithreaded BLAS call unless ``OPENBLAS_THREAD_TIMEOUT`` says otherwise. A
training loop alternates dense algebra (GAT's ``X @ W``, ALS's small solves and updates) with
distmm's numba-parallel kernels, so each kernel starts while a spinning BLAS thread holds a
core, and numba's worker thread waits for the scheduler to hand it one. Where the ranks'
threads fill the cores, a kernel of tens of microseconds then takes milliseconds
(docs/performance.md, "BLAS threads").

OpenBLAS reads the variable once, when it is loaded, so :func:`set_default` must run before
numpy is imported; importing distmm runs nothing. :func:`distmm.prepare_process` calls it (the
``distmm`` command does so before it loads numpy, and the launchers and batch templates export
the variables before the ranks start). It sets ``OPENBLAS_THREAD_TIMEOUT=4``, the shortest spin
OpenBLAS accepts (its threads then sleep right after a call and are woken for the next). A
value already in the environment is left alone. Where numpy was imported before the call, its
OpenBLAS has read the environment already: the default then only reaches libraries loaded
later (scipy's own OpenBLAS) and child processes, and :data:`STATE` says so; export the
variable in the job script instead (docs/guide.md).

OpenBLAS also starts one thread per CPU it may run on, in every rank. Where the launcher says
that several ranks share this node
(:func:`distmm.runtime.cores.launcher_local_size`: MPICH's and Open
MPI's ``mpiexec``) and the user set no count (``OPENBLAS_NUM_THREADS``, or
``OMP_NUM_THREADS``, which OpenBLAS reads too), :func:`set_count` sets ``OPENBLAS_NUM_THREADS`` to
the rank's share of the node (:func:`distmm.runtime.cores.node_share`), so that the ranks' dense
algebra does not run ranks x CPUs threads; :data:`COUNT_STATE` says how it stands.
"""

from __future__ import annotations

import os
import sys

from distmm.runtime.cores import cpus, launcher_local_size, node_cpus, node_share

__all__ = ["COUNT_STATE", "COUNT_VARIABLE", "STATE", "THREAD_TIMEOUT", "VARIABLE",
           "set_count", "set_default"]

#: The environment variable OpenBLAS reads.
VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
#: The value distmm sets where the environment has none (OpenBLAS's minimum).
THREAD_TIMEOUT = "4"
#: The environment variable of OpenBLAS's thread count (OMP_NUM_THREADS is its fallback).
COUNT_VARIABLE = "OPENBLAS_NUM_THREADS"


def set_default() -> str:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` unless the environment has it; say how it stands.

    Not collective (each process sets its own environment).

    Returns
    -------
    str
        ``"environment"`` (the user's value, kept), ``"distmm"`` (set here, before numpy
        was imported: numpy's OpenBLAS uses it) or ``"distmm, after numpy"`` (set here, but
        numpy's OpenBLAS was loaded before and keeps its own default).
    """
    global STATE
    if VARIABLE in os.environ:
        STATE = "environment"
    else:
        os.environ[VARIABLE] = THREAD_TIMEOUT
        STATE = "distmm, after numpy" if "numpy" in sys.modules else "distmm"
    return STATE


#: How the variable stood after this process's last :func:`set_default` (``"not called"``
#: where it never ran: the value, if any, is the environment's).
STATE = "not called"


def set_count() -> str:
    """Set ``OPENBLAS_NUM_THREADS`` to this rank's share of its node where the launcher says
    that several ranks share it and the user set no count; say how it stands.

    Not collective (each process sets its own environment, from its launcher's variables).

    Returns
    -------
    str
        ``"environment"`` (``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS`` is set: kept),
        ``"one rank on the node"`` (no launcher counts more: OpenBLAS keeps its own count),
        ``"distmm"`` (set here, before numpy was imported) or ``"distmm, after numpy"``
        (set here, but numpy's OpenBLAS was loaded before and keeps its own count).
    """
    global COUNT_STATE
    ranks = launcher_local_size()
    if COUNT_VARIABLE in os.environ or "OMP_NUM_THREADS" in os.environ:
        COUNT_STATE = "environment"
    elif ranks <= 1:
        COUNT_STATE = "one rank on the node"
    else:
        os.environ[COUNT_VARIABLE] = str(node_share(ranks, cpus(), node_cpus()))
        COUNT_STATE = "distmm, after numpy" if "numpy" in sys.modules else "distmm"
    return COUNT_STATE


#: How ``OPENBLAS_NUM_THREADS`` stood after this process's last :func:`set_count`
#: (``"not called"`` where it never ran).
COUNT_STATE = "not called"
