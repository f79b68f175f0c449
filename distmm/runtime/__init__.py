"""The process and the job around the kernels, apart from the kernels themselves.

Settings that must come before numpy and MPI start (:mod:`~distmm.runtime.process`, with
:mod:`~distmm.runtime.blas_threads`, :mod:`~distmm.runtime.cores` and
:mod:`~distmm.runtime.intranode`), stopping a job cleanly (:mod:`~distmm.runtime.signals`),
aborting a hung one (:mod:`~distmm.runtime.watchdog`), and the ``distmm info`` report of what
distmm runs on (:mod:`~distmm.runtime.info`).

This package imports nothing itself: :func:`distmm.prepare_process` loads
:mod:`~distmm.runtime.process` through it before numpy and mpi4py are imported.
"""
