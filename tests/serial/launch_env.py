"""The environment of the mpiexec jobs that serial tests launch."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def mpi_env(**overrides: str) -> dict[str, str]:
    """This process's environment for an oversubscribed ``mpiexec`` job of this checkout: the
    shared numba cache, one thread per rank, MPICH's yielding wait, and the checkout first on
    the import path (so helper drivers import the code under test); then ``overrides``."""
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    env.update(MPIR_CVAR_ENABLE_HEAVY_YIELD="1", NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(overrides)
    return env
