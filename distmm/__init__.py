"""distmm: distributed-memory SDDMM, SpMM and FusedMM on 1.5D and 2.5D MPI grids.

Typical use, under ``mpiexec -n P``::

    from mpi4py import MPI
    import distmm
    S = distmm.distribute("graph.mtx", MPI.COMM_WORLD, c=2)   # place S once
    A = S.scatter("a", A_global)                             # this rank's block of A
    B = S.scatter("b", B_global)
    out = S.fusedmm_a(A, B, strategy="fusion")               # same distribution as A
    full = S.gather("a", out)                                # on rank 0, original order
"""

from distmm.api import ALGORITHMS, OPS, distribute
from distmm.coo import CooShare
from distmm.errors import DistmmError, InputError

__version__ = "0.1.0"

__all__ = ["ALGORITHMS", "OPS", "CooShare", "DistmmError", "InputError", "distribute"]
