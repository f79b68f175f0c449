"""distmm: distributed-memory SDDMM, SpMM and FusedMM on 1.5D and 2.5D MPI grids.

Typical use, under ``mpiexec -n P``::

    import distmm                 # before mpi4py's MPI: see distmm.intranode
    from mpi4py import MPI
    with distmm.distribute("graph.mtx", MPI.COMM_WORLD, c=2) as S:  # place S once
        A = S.scatter("a", A_global)            # this rank's block of A: a DenseBlock
        B = S.dense("b", 16, fill=distmm.hashed_normal(seed=0))  # r is per call
        out = S.fusedmm_a(A, B, strategy="fusion")               # same distribution as A
        full = S.gather("a", out)                                # on rank 0, original order

See docs/api.md.
"""

# First, before anything imports numpy or mpi4py's MPI: OpenBLAS reads its thread timeout
# when it loads, MPICH its single-copy switch when MPI is initialised.
from distmm import blas_threads, intranode  # noqa: F401
from distmm.algorithms.base import DistributedMatrix
from distmm.api import ALGORITHMS, distribute
from distmm.core.coo import CooShare
from distmm.core.dense import DenseBlock, hashed_normal
from distmm.core.operations import OPS
from distmm.errors import DistmmError, InputError
from distmm.operator import Operator

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "OPS", "CooShare", "DenseBlock", "DistmmError", "DistributedMatrix",
           "InputError", "Operator", "distribute", "hashed_normal"]
