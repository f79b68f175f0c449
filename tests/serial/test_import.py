"""Importing distmm loads code and nothing else: no child process, no environment variable
written, and ``import distmm`` alone loads neither numpy nor mpi4py's MPI, so that
:func:`distmm.prepare_process` can still come before them.

The oracle is a fresh Python process that records every fork (``os.register_at_fork``) and
compares its environment before and after importing every module of the package.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

from launch_env import mpi_env

import distmm

# Modules whose own optional dependency (torch; numba.cuda's driver) may be missing here: an
# ImportError of theirs is reported, not failed; any other exception fails.
PROBE = r"""
import importlib, json, os, pkgutil, sys
forks = []
os.register_at_fork(before=lambda: forks.append(1))
before = dict(os.environ)
import distmm
light = sorted(m for m in ("numpy", "scipy", "numba", "mpi4py.MPI") if m in sys.modules)
# torch's compiler writes its own cache variable as it loads (distmm.torch keeps its calls out
# of compiled graphs through it): what torch itself sets is not distmm's doing
mid = dict(os.environ)
try:
    import torch._dynamo  # noqa: F401
except ImportError:
    pass
third = {k for k in set(mid) | set(os.environ) if mid.get(k) != os.environ.get(k)}
skipped = {}
for info in pkgutil.walk_packages(distmm.__path__, "distmm."):
    if info.name == "distmm.__main__":
        continue  # the command's entry runs the command
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        skipped[info.name] = str(exc)
changed = sorted(k for k in set(before) | set(os.environ)
                 if before.get(k) != os.environ.get(k) and k not in third)
print(json.dumps({"light": light, "forks": len(forks), "changed": changed,
                  "skipped": skipped, "exports": sorted(distmm.__all__)}))
"""


def _probe() -> dict:
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=300, env=mpi_env())
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_importing_every_module_forks_nothing_and_writes_no_environment():
    got = _probe()
    assert got["light"] == []  # import distmm: no numpy, no MPI yet
    assert got["forks"] == 0
    assert got["changed"] == []
    for name, why in got["skipped"].items():  # only optional dependencies may be missing
        assert name.endswith("_cuda") or name == "distmm.torch", (name, why)


def test_the_exports_load_on_first_use():
    names = set(distmm.__all__)
    assert {"distribute", "InputError", "prepare_process", "ALGORITHMS"} <= names
    for name in names:
        assert getattr(distmm, name) is not None
    assert distmm.InputError is __import__("distmm.errors").errors.InputError
    assert distmm.__version__
    assert {m.name for m in pkgutil.iter_modules(distmm.__path__)} >= {"kernels", "runtime"}
    assert distmm.kernels.NODE_MODELS  # a submodule by attribute, as before


def test_the_top_of_the_package_holds_only_its_entry():
    """Every module lives in the subpackage of its layer (docs/developer.md, "Layout"); the
    top keeps the entry, errors and the version. ``from distmm import als`` (docs/als.md) is
    the application's module, reached from the entry."""
    top = {m.name for m in pkgutil.iter_modules(distmm.__path__) if not m.ispkg}
    assert top == {"__main__", "_version", "api", "errors"}
    from distmm import als
    from distmm.apps import als as apps_als

    assert als is apps_als and distmm.als is apps_als
    assert "als" in dir(distmm)
