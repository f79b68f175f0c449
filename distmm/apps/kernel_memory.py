"""What an application's kernels hold, for the applications' memory models
(:mod:`distmm.apps.als_memory`, :mod:`distmm.apps.gat_memory`)."""

from __future__ import annotations

from distmm.core.memory import Memory


def kernels_held(kernels: list[Memory]) -> dict[str, int]:
    """The parts one object keeps after running each of the operations modelled in
    ``kernels`` (one :class:`Memory` per operation): per part, the largest, since a part of a
    name is one buffer of the object; the caller's dense blocks and outputs are left out (the
    application counts its own). Not collective."""
    parts: dict[str, int] = {}
    for mem in kernels:
        for name, size in mem.parts.items():
            if not name.startswith(("dense ", "output")):
                parts[name] = max(parts.get(name, 0), int(size))
    return parts
