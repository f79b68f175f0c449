"""``distmm info``: what distmm runs on, so a user can tell at once whether it is the right MPI.

Prints distmm's version; the MPI library mpi4py is linked to (``MPI.Get_library_version()``),
the MPI standard version and the launcher's view (the world size: 1 under a foreign mpiexec);
mpi4py's version and build configuration; numba's threading layer and thread count; the versions
of numpy, scipy and h5py; and which optional extras are installed. Not collective: only rank 0
prints, every rank returns 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys

from distmm._version import __version__
from distmm.runtime.extras import EXTRAS, available

# distribution names of the optional packages, by import name
_DISTRIBUTIONS = {"torch_geometric": "torch-geometric"}
_REQUIRED = ("numpy", "scipy", "h5py", "llvmlite")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _threading_layer() -> tuple[str, bool]:
    """numba's threading layer and whether it is the one actually loaded (True) or only the
    one configured (False, when the pool could not be started without compiling)."""
    import numba

    try:  # private, but the cheapest way to start the pool without compiling a kernel
        from numba.np.ufunc.parallel import _launch_threads

        _launch_threads()
        return numba.threading_layer(), True
    except Exception:  # noqa: BLE001 - any failure: report the configured layer instead
        return str(numba.config.THREADING_LAYER), False


def collect() -> dict:
    """Everything ``distmm info`` reports, as a JSON-ready dict. Not collective.

    Returns
    -------
    dict
        Keys ``distmm``, ``python``, ``mpi`` (library, library_version, standard, vendor,
        world_size, processor), ``mpi4py`` (version, config), ``numba`` (version,
        threading_layer, threading_layer_loaded, num_threads, configured_threads),
        ``rank_threads`` (the numba threads :func:`distmm.distribute` gives each rank,
        :func:`distmm.kernels.threads.expected`), ``panel_budget`` (the reference kernels'
        default cache budget for a rank, with the ranks on the node counted as for the
        threads, :func:`distmm.kernels.reference.cache_share`), ``blas_threads`` (the
        ``OPENBLAS_THREAD_TIMEOUT`` and ``OPENBLAS_NUM_THREADS`` values in this process and who
        set them, see :mod:`distmm.runtime.blas_threads`), ``intranode`` (MPICH's CMA switch, its
        value, who set it and whether the MPI library is MPICH, see
        :mod:`distmm.runtime.intranode`), ``pairwise`` (``DISTMM_PAIRWISE_BYTES``: its value, the
        threshold in bytes and a problem with it, see :mod:`distmm.core.comm`), ``packages``
        (required package -> version)
        and ``extras`` (optional import name -> ``{"extra": name, "version": version or None}``).
    """
    import mpi4py
    import numba
    from mpi4py import MPI

    from distmm.core import comm
    from distmm.kernels import threads
    from distmm.kernels.reference import cache_share
    from distmm.runtime import blas_threads, intranode

    library = MPI.Get_library_version().strip()
    major, minor = MPI.Get_version()
    vendor, vendor_version = MPI.get_vendor()
    try:
        config = {k: str(v) for k, v in mpi4py.get_config().items()}
    except Exception:  # noqa: BLE001 - get_config is informational and may be absent
        config = {}
    layer, loaded = _threading_layer()
    extras = {}
    for module, extra in EXTRAS.items():
        # mpich (the wheel) has no importable module: its distribution metadata tells
        version = _version(_DISTRIBUTIONS.get(module, module))
        present = version is not None or available(module)
        extras[module] = {"extra": extra, "installed": present, "version": version}
    return {
        "distmm": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "mpi": {"library": " ".join(library.splitlines()[0].split()) if library else "",
                "library_version": library, "standard": f"{major}.{minor}",
                "vendor": f"{vendor} {'.'.join(map(str, vendor_version))}",
                "world_size": MPI.COMM_WORLD.Get_size(),
                "processor": MPI.Get_processor_name()},
        "mpi4py": {"version": mpi4py.__version__, "config": config},
        "numba": {"version": numba.__version__, "threading_layer": layer,
                  "threading_layer_loaded": loaded, "num_threads": numba.get_num_threads(),
                  "configured_threads": numba.config.NUMBA_NUM_THREADS},
        "rank_threads": (rank_threads := threads.expected()),
        "panel_budget": cache_share(rank_threads["ranks_on_node"]),
        "blas_threads": {"variable": blas_threads.VARIABLE,
                         "value": os.environ.get(blas_threads.VARIABLE),
                         "set_by": blas_threads.STATE,
                         "count_variable": blas_threads.COUNT_VARIABLE,
                         "count": os.environ.get(blas_threads.COUNT_VARIABLE),
                         "count_set_by": blas_threads.COUNT_STATE},
        "intranode": {"variable": intranode.VARIABLE,
                      "value": os.environ.get(intranode.VARIABLE),
                      "set_by": intranode.STATE, "mpich": "MPICH" in library},
        "pairwise": {"variable": comm.PAIRWISE_VARIABLE,
                     "value": os.environ.get(comm.PAIRWISE_VARIABLE),
                     "bytes": comm.PAIRWISE_BYTES, "problem": comm.pairwise_setting()[0]},
        "packages": {name: _version(name) for name in _REQUIRED},
        "extras": extras,
    }


def format_text(info: dict) -> str:
    """``collect()``'s dict as the aligned text ``distmm info`` prints."""
    mpi, nb = info["mpi"], info["numba"]
    rows = [
        ("distmm", info["distmm"]),
        ("python", info["python"]),
        ("MPI library", mpi["library"]),
        ("MPI standard", f"{mpi['standard']} (vendor {mpi['vendor']})"),
        ("MPI world size", f"{mpi['world_size']} on {mpi['processor']}"),
        ("mpi4py", info["mpi4py"]["version"]),
        *((f"mpi4py {k}", v) for k, v in sorted(info["mpi4py"]["config"].items())),
        ("numba", f"{nb['version']}, threading layer {nb['threading_layer']}"
                  f"{'' if nb['threading_layer_loaded'] else ' (configured)'}, "
                  f"{nb['num_threads']} threads"),
        ("kernel threads per rank", _threads_text(info["rank_threads"])),
        ("column-panel budget per rank", _budget_text(info["panel_budget"])),
        (info["blas_threads"]["variable"], _blas_text(info["blas_threads"])),
        (info["blas_threads"]["count_variable"], _blas_count_text(info["blas_threads"])),
        (info["intranode"]["variable"], _intranode_text(info["intranode"])),
        (info["pairwise"]["variable"], _pairwise_text(info["pairwise"])),
        *((name, version or "not installed") for name, version in info["packages"].items()),
    ]
    for module, e in info["extras"].items():
        state = (f"{e['version'] or 'installed'}" if e["installed"]
                 else f"not installed (pip install distmm[{e['extra']}])")
        rows.append((f"extra {module}", state))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


# A process that never called distmm.prepare_process (a script of one's own that imports
# distmm): the variable, if any, is the environment's.
_NOT_CALLED = "distmm.prepare_process() was not called in this process; see docs/guide.md"


def _threads_text(t: dict) -> str:
    """The row of the numba threads each rank's kernels run on."""
    if t["set_by"] == "environment":
        return f"{t['threads']} (NUMBA_NUM_THREADS)"
    return (f"{t['threads']} (set by distmm.distribute: {t['cpus']} CPUs for this process, "
            f"{t['ranks_on_node']} rank(s) on the node)")


def _budget_text(c: dict) -> str:
    """The row of the reference kernels' default cache budget for one rank."""
    mib = f"{c['panel_bytes'] / 2**20:g} MiB"
    if c["cache_bytes"] <= 0:
        return f"{mib} (the last-level cache's size is unknown here)"
    shared = f" shared by {c['cache_cpus']} CPUs" if c["cache_cpus"] > 0 else ""
    return (f"{mib} (half of a {c['cache_bytes'] / 2**20:g} MiB last-level cache{shared}, "
            f"over {c['ranks_sharing']:g} rank(s) on it)")


def _blas_count_text(b: dict) -> str:
    """The ``OPENBLAS_NUM_THREADS`` row: OpenBLAS's thread count and who chose it."""
    why = {"environment": "from the environment", "not called": _NOT_CALLED,
           "one rank on the node": "OpenBLAS's own: one rank on this node",
           "distmm": "set by distmm: this rank's share of the node",
           "distmm, after numpy": "set by distmm after numpy had loaded OpenBLAS, which keeps "
                                  "its own count: export it in the job script (docs/guide.md)"}
    return f"{b['count'] or 'not set'} ({why.get(b['count_set_by'], b['count_set_by'])})"


def _blas_text(b: dict) -> str:
    """The ``OPENBLAS_THREAD_TIMEOUT`` row: its value and whether numpy's OpenBLAS uses it."""
    why = {"environment": "from the environment", "not called": _NOT_CALLED,
           "distmm": "set by distmm before numpy loaded OpenBLAS",
           "distmm, after numpy": "set by distmm after numpy had loaded OpenBLAS, which keeps "
                                  "spinning its threads: export it in the job script "
                                  "(docs/guide.md)"}
    return f"{b['value'] or 'not set'} ({why.get(b['set_by'], b['set_by'])})"


def _pairwise_text(c: dict) -> str:
    """The ``DISTMM_PAIRWISE_BYTES`` row: from which block size the fiber all-gathers and
    reduce-scatters are pairwise point-to-point exchanges instead of MPI's collectives."""
    if c["problem"]:
        return f"{c['value']!r}: refused by distmm.distribute ({c['problem']})"
    source = "not set: the default" if c["value"] is None else "from the environment"
    return (f"{c['bytes']} ({source}; fiber collectives of blocks from this many bytes on are "
            "pairwise messages, smaller ones MPI's)")


def _intranode_text(c: dict) -> str:
    """The ``MPIR_CVAR_CH4_CMA_ENABLE`` row: MPICH's single-copy path between the ranks of a
    node, and who chose it."""
    if not c["mpich"]:
        return f"{c['value'] or 'not set'} (MPICH's switch: this MPI library ignores it)"
    why = {"environment": "from the environment", "not called": _NOT_CALLED,
           "distmm": "set by distmm before MPI was initialised: single-copy messages "
                     "between the ranks of a node",
           "distmm, after MPI": "set by distmm after this process had initialised MPI, which "
                                "keeps its own setting: call distmm.prepare_process() before "
                                "mpi4py's MPI or export it in the job script (docs/guide.md)"}
    state = c["set_by"]
    if c["value"] is None and state.startswith("not set: "):
        return f"not set (distmm left it: {state.removeprefix('not set: ')})"
    return f"{c['value'] or 'not set'} ({why.get(state, state)})"


def add_parser(parser: argparse.ArgumentParser, sub) -> argparse.ArgumentParser:
    """Add ``--version`` to the top-level parser and the ``info`` command to ``sub``."""
    parser.add_argument("--version", action="version", version=f"distmm {__version__}")
    p = sub.add_parser("info", help="print distmm's version, the MPI library mpi4py uses, "
                                    "numba's threading layer and the optional extras present")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.set_defaults(func=cmd_info)
    return p


def cmd_info(args: argparse.Namespace) -> int:
    """Handle ``distmm info``: rank 0 prints; returns 0. Not collective."""
    from mpi4py import MPI

    info = collect()
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(json.dumps(info, sort_keys=True) if args.json else format_text(info), flush=True)
    return 0
