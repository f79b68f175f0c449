"""Keep the BLAS library's idle threads off the cores that distmm's kernels need.

numpy's wheels link OpenBLAS, whose worker threads keep spinning for about 2**28 clock ticks
after every multithreaded BLAS call unless ``OPENBLAS_THREAD_TIMEOUT`` says otherwise. A
training loop alternates dense algebra (GAT's ``X @ W``, ALS's small solves and updates) with
distmm's numba-parallel kernels, so each kernel starts while a spinning BLAS thread holds a
core, and numba's worker thread waits for the scheduler to hand it one. Where the ranks'
threads fill the cores, a kernel of tens of microseconds then takes milliseconds
(docs/performance.md, "BLAS threads").

OpenBLAS reads the variable once, when it is loaded, so this module sets a default as distmm
is imported, before distmm imports numpy: ``OPENBLAS_THREAD_TIMEOUT=4``, the shortest spin
OpenBLAS accepts (its threads then sleep right after a call and are woken for the next). A
value already in the environment is left alone. Where numpy was imported before distmm, its
OpenBLAS has read the environment already: the default then only reaches libraries loaded
later (scipy's own OpenBLAS) and child processes, and :data:`STATE` says so; export the
variable in the job script instead (docs/guide.md).

OpenBLAS also starts one thread per CPU it may run on, in every rank. Where the launcher says
that several ranks share this node (:func:`distmm.cores.launcher_local_size`: MPICH's and Open
MPI's ``mpiexec``) and the user set no count (``OPENBLAS_NUM_THREADS``, or
``OMP_NUM_THREADS``, which OpenBLAS reads too), this module sets ``OPENBLAS_NUM_THREADS`` to
the rank's share of the node (:func:`distmm.cores.node_share`), so that the ranks' dense
algebra does not run ranks x CPUs threads; :data:`COUNT_STATE` says how it stands.
"""

from __future__ import annotations

import os
import sys

from distmm.cores import cpus, launcher_local_size, node_cpus, node_share

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
    if VARIABLE in os.environ:
        return "environment"
    os.environ[VARIABLE] = THREAD_TIMEOUT
    return "distmm, after numpy" if "numpy" in sys.modules else "distmm"


#: How the variable stood when distmm was imported (:func:`set_default`'s answer).
STATE = set_default()


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
    if COUNT_VARIABLE in os.environ or "OMP_NUM_THREADS" in os.environ:
        return "environment"
    ranks = launcher_local_size()
    if ranks <= 1:
        return "one rank on the node"
    os.environ[COUNT_VARIABLE] = str(node_share(ranks, cpus(), node_cpus()))
    return "distmm, after numpy" if "numpy" in sys.modules else "distmm"


#: How ``OPENBLAS_NUM_THREADS`` stood when distmm was imported (:func:`set_count`'s answer).
COUNT_STATE = set_count()
