"""Optional dependencies: which extra provides each, and one clear error when one is missing.

distmm's core needs only mpi4py, numpy, scipy, numba and h5py. Packages that only some users
need are extras of the distribution (setup.cfg, ``[options.extras_require]``); code that needs
one calls :func:`require_extra` at the point of use, so a user without it gets an
:class:`~distmm.errors.InputError` that names the ``pip install`` command instead of an
``ImportError`` from deep inside a command.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from distmm.errors import InputError

# import name -> the extra of distmm that installs it (pip install distmm[EXTRA])
EXTRAS: dict[str, str] = {
    "mpich": "mpich",
    "torch": "torch",
    "matplotlib": "plot",
    "petsc4py": "petsc",
    "torch_geometric": "pyg",
    "hypothesis": "fuzz",
}


def require_extra(module: str, extra: str | None = None, what: str = "this") -> ModuleType:
    """Import and return an optional module, or raise an InputError saying how to install it.

    Parameters
    ----------
    module : str
        Import name of the optional package, e.g. ``"torch"`` or ``"matplotlib.pyplot"``.
    extra : str, optional
        The distmm extra that installs it; default: looked up in :data:`EXTRAS` by the
        top-level package name.
    what : str
        What needs the package, for the message (e.g. ``"distmm bench --baseline torch"``).

    Returns
    -------
    module
        The imported module.

    Raises
    ------
    InputError
        ``"<what> needs the optional package <top>: pip install distmm[<extra>]"`` when the
        import fails. Not collective: call it where every rank takes the same branch, so that
        every rank raises the same error.
    """
    top = module.split(".")[0]
    extra = extra or EXTRAS.get(top, top)
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(f"{what} needs the optional package {top}: "
                         f"pip install distmm[{extra}]") from None


def available(module: str) -> bool:
    """Whether ``module`` could be imported, without importing it. Not collective."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
