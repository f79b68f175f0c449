"""Vectors of edge values kept under names beside S's own (``S.set_named_values``).

A :class:`NamedValues` is the part of a distributed matrix that holds them: each name maps to
its vector in value order (orientation "a") and to the copies a family made of it in its other
stored orientations (S^T's order), so that alternating between named vectors moves nothing
after the first use. The matrix checks the vectors (collectively) before they get here and
drops its prepared calls when they change.
"""

from __future__ import annotations

import numpy as np

from distmm.errors import require


class NamedValues:
    """Named vectors of S's edge values, per stored orientation. Not collective."""

    def __init__(self, dtype) -> None:
        self.dtype = np.dtype(dtype)
        # name -> {orientation: the vector in that orientation's value order}
        self._vectors: dict[str, dict[str, np.ndarray]] = {}

    def set(self, name: str, values: np.ndarray) -> None:
        """Keep a copy of ``values`` (value order) as ``name``, replacing any vector and
        moved copies of that name."""
        require(isinstance(name, str) and name != "",
                f"a value vector's name must be a non-empty string, got {name!r}")
        self._vectors[name] = {"a": np.array(values, dtype=self.dtype, copy=True)}

    def copies(self, name: str) -> dict[str, np.ndarray]:
        """Orientation -> vector of ``name`` (a family adds its moved copies here);
        InputError naming the registered vectors for an unknown name."""
        copies = self._vectors.get(name)
        require(copies is not None,
                f"no value vector named {name!r}; registered: "
                f"{', '.join(sorted(self._vectors)) or 'none'} (see set_named_values)")
        return copies

    def get(self, name: str) -> np.ndarray:
        """The vector registered as ``name``, in value order."""
        return self.copies(name)["a"]

    def drop(self, name: str) -> None:
        """Forget ``name`` and its moved copies (nothing if it is not registered)."""
        self._vectors.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._vectors


__all__ = ["NamedValues"]
