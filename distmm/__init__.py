"""distmm: distributed-memory SDDMM, SpMM and FusedMM on 1.5D and 2.5D MPI grids.

Typical use, under ``mpiexec -n P``::

    import distmm
    distmm.prepare_process()      # optional, before mpi4py's MPI: see distmm.runtime.process
    from mpi4py import MPI
    with distmm.distribute("graph.mtx", MPI.COMM_WORLD, c=2) as S:  # place S once
        A = S.scatter("a", A_global)            # this rank's block of A: a DenseBlock
        B = S.dense("b", 16, fill=distmm.hashed_normal(seed=0))  # r is per call
        out = S.fusedmm_a(A, B, strategy="fusion")               # same distribution as A
        full = S.gather("a", out)                                # on rank 0, original order

See docs/api.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Importing distmm loads no numpy, no MPI and changes nothing in the process, so that
# prepare_process (standard library only) can still run before numpy and MPI load. The names
# below are loaded on first use (PEP 562); each lives in the module named beside it.
from distmm._version import __version__  # noqa: F401 - distmm.__version__
from distmm.runtime.process import prepare_process

_EXPORTS = {
    "ALGORITHMS": "distmm.api",
    "OPS": "distmm.core.operations",
    "DistributedMatrix": "distmm.algorithms.base",
    "distribute": "distmm.api",
    "CooShare": "distmm.core.coo",
    "DenseBlock": "distmm.core.dense",
    "hashed_normal": "distmm.core.dense",
    "DistmmError": "distmm.errors",
    "InputError": "distmm.errors",
    "Operator": "distmm.algorithms.operator",
}
# Modules reachable from the package under a short name: ``from distmm import als`` (docs/als.md)
# is the ALS application, distmm.apps.als.
_MODULES = {"als": "distmm.apps.als"}

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads them
    from distmm.algorithms.base import DistributedMatrix
    from distmm.algorithms.operator import Operator
    from distmm.api import ALGORITHMS, distribute
    from distmm.core.coo import CooShare
    from distmm.core.dense import DenseBlock, hashed_normal
    from distmm.core.operations import OPS
    from distmm.errors import DistmmError, InputError


__all__ = ["ALGORITHMS", "OPS", "CooShare", "DenseBlock", "DistmmError", "DistributedMatrix",
           "InputError", "Operator", "distribute", "hashed_normal", "prepare_process"]


def __getattr__(name: str):
    """An exported name from its module, or a submodule (``distmm.kernels``), on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_MODULES))
