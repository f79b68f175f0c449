"""The process settings that must come before numpy and MPI start: one call, opt-in.

Importing distmm changes nothing in the process: no environment variable is written, no child
is forked. Two settings pay off on a node that several ranks share, and both are read only
once, by libraries that load with numpy and mpi4py's ``MPI``:

* ``OPENBLAS_THREAD_TIMEOUT`` and ``OPENBLAS_NUM_THREADS`` (:mod:`distmm.runtime.blas_threads`):
  OpenBLAS's idle threads off the cores that distmm's kernels need;
* ``MPIR_CVAR_CH4_CMA_ENABLE`` (:mod:`distmm.runtime.intranode`): MPICH's single-copy path for the
  dense blocks that shift between the ranks of a node.

The ``distmm`` command calls :func:`prepare_process` before it loads numpy or MPI, and the
launchers (``launch/``) and batch templates (``slurm/``) export the variables before the
ranks start. A script of one's own does the same with::

    import distmm
    distmm.prepare_process()      # before numpy and mpi4py's MPI are imported
    from mpi4py import MPI

or exports the variables in its job script (docs/guide.md, "On a cluster"). A value already
in the environment is always kept. This module imports nothing beyond the standard library.
"""

from __future__ import annotations

from distmm.runtime import blas_threads, intranode

__all__ = ["prepare_process"]


def prepare_process() -> dict[str, str]:
    """Set the BLAS-thread and single-copy defaults in this process's environment where it has
    none, for the numpy and MPI that load after the call.

    Not collective: each rank calls it for itself, before ``import numpy`` and ``from mpi4py
    import MPI``. Called after them it still sets the variables (processes this one starts
    inherit them), and the answer says the libraries already loaded keep their own. It may
    fork one short-lived child, once, to test that the kernel lets same-user processes read
    each other's memory (:func:`distmm.runtime.intranode.cma_permitted`); where the process runs
    threads already the test is skipped and the single-copy switch is left unset.

    Returns
    -------
    dict[str, str]
        Variable name -> how it stands: ``"environment"`` (the user's value, kept),
        ``"distmm"`` (set here, in time), ``"distmm, after numpy"`` / ``"distmm, after MPI"``
        (set here, too late for this process's own libraries), ``"one rank on the node"``
        or ``"not set: <reason>"``. :mod:`distmm.runtime.info` (``distmm info``) reports the same.
    """
    return {blas_threads.VARIABLE: blas_threads.set_default(),
            blas_threads.COUNT_VARIABLE: blas_threads.set_count(),
            intranode.VARIABLE: intranode.set_default()}
