"""The base of the families that store S in two orientations: S itself ("a") and S^T ("b").

1.5D dense and sparse shifting and 2.5D dense replicating keep S as orientation "a" and build
S^T, as orientation "b", on first use; a FusedMM strategy picks the orientation it runs on
(paper section IV-B). This module holds what those families share: building "b", moving S's
values and named vectors into its order, and the fiber collectives of their loops (replicate
the X operand, reduce-scatter X-side outputs; paper section IV-A).
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms.base import DistributedMatrix
from distmm.algorithms.placement import Orientation
from distmm.core.aligned import aligned_empty
from distmm.core.memory import release_freed_memory


class TwoOrientationAlgorithm(DistributedMatrix):
    """A family that stores S as orientation "a" (S) and, built on first use, "b" (S^T).

    Subclasses fill ``self._o["a"]`` at construction, define ``_owner(name, rows, cols)``
    (the rank storing each entry of S in an orientation) and ``_build_b(rows, cols, vals)``
    (place S^T's entries, given in S's frame, as ``self._o["b"]``). S's values live in
    orientation "a"; after :meth:`set_values` they reach "b" with one all-to-all of the values.
    """

    _plan = None
    _b_stale = False

    def _build_b(self, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
        raise NotImplementedError

    @staticmethod
    def _frames(name: str) -> tuple[str, str]:
        """(X side, Y side) of an orientation: X is replicated along the fiber, Y is not."""
        return ("a", "b") if name == "a" else ("b", "a")

    # The fiber collectives of the loop (paper section IV-A): every family with two
    # orientations replicates the X operand along the fiber and reduces X-side outputs there.
    def _fiber_rows(self, name: str) -> np.ndarray:
        """Rows of the X-side block of each rank of this rank's fiber, in fiber order, in
        orientation ``name``: the pieces that make up the X superblock. Not collective."""
        raise NotImplementedError

    def _replicate(self, name: str, X_loc: np.ndarray) -> np.ndarray:
        """All-gather this fiber's X blocks into the X superblock T (phase "replication";
        collective over the fiber). In a fiber of one rank the block is the superblock and is
        returned as it is. T is kept on the object and overwritten by the next call."""
        if self.c == 1:
            return X_loc
        rows, w = self._fiber_rows(name), X_loc.shape[1]
        T = self._kernels.buffer(("T", name), (int(rows.sum()), w))
        self.fiber.allgatherv(X_loc, T, rows * w)
        return T

    def _reduce(self, name: str, T: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Reduce-scatter the X superblock T back to the fiber's blocks (phase "reduction";
        collective over the fiber): this rank's block, written into ``out`` when given."""
        rows, w = self._fiber_rows(name), T.shape[1]
        if out is None:
            out = aligned_empty((int(rows[self.fiber.rank]), w), self.dtype)
        self.fiber.reduce_scatter(T, out, rows * w)
        return out

    def _orientation(self, name: str) -> Orientation:
        """The stored orientation, building "b" (S^T) from "a" on first use (collective)."""
        if name not in self._o:
            a = self._o["a"]
            rows, cols = a.coordinates()
            self._build_b(rows, cols, a.values)
            del rows, cols
            release_freed_memory()  # the temporaries of placing S^T
            self._b_stale = False
        elif name == "b" and self._b_stale:
            self.placement.move_values(self._b_plan(), self._o["a"].values, self._o["b"].values)
            self._b_stale = False
        return self._o[name]

    def _b_plan(self):
        """How values move from orientation "a"'s order to "b"'s (built once; collective
        only in that orientation "b" must exist)."""
        if self._plan is None:
            if "b" not in self._o:
                self._orientation("b")
            self._plan = self.placement.value_plan(
                self._o["a"], self._o["b"], lambda i, j: self._owner("a", i, j),
                lambda i, j: self._owner("b", i, j))
        return self._plan

    def _values_for(self, name: str, values: np.ndarray | str | None) -> np.ndarray:
        """Values in orientation ``name``'s order (collective when they must move).

        ``values`` is None (S's own), the name of a registered vector
        (:meth:`set_named_values`: moved to "b" on first use and kept there under its name),
        or any other vector in value order ("a"), moved at every call."""
        o = self._orientation(name)
        if values is None:
            return o.values
        if isinstance(values, str):
            entry = self._named.copies(values)  # InputError for an unknown name
            if name == "b" and "b" not in entry:
                entry["b"] = np.empty(o.nnz, dtype=self.dtype)
                self.placement.move_values(self._b_plan(), entry["a"], entry["b"])
            return entry[name]
        if name == "a":
            return values
        # a copy (at p > 1 an exchange) outside the kernels and shifts: a replay of this call
        # would run on this call's copy, stale once the caller changes ``values`` in place
        self._not_replayable()
        moved = np.empty(o.nnz, dtype=self.dtype)
        self.placement.move_values(self._b_plan(), values, moved)
        return moved

    # The paper's three kernels in orientation "a" (S itself), as loop pieces of the family.
    def _sddmm(self, A_loc, B_loc, vals, r, out):
        return self._sddmm_in("a", A_loc, B_loc, vals, r, out=out)[0]

    def _spmm_a(self, B_loc, vals, r, out):
        return self._spmm_x_in("a", B_loc, vals, r, out)

    def _spmm_b(self, A_loc, vals, r, out):
        return self._spmm_y_in("a", A_loc, vals, r, out=out)

    def _multi_pass(self, op: str, X, Y, vals, r, out, multi):
        """One multi-head call in orientation "a" (families whose loop pieces take
        ``multi=``, those that cut the dense width: :mod:`distmm.algorithms.multivalue`):
        ``op`` "sddmm" (X = A, Y = B, vals (nnz,), out (nnz, H)), "spmm_a" (X = B) or
        "spmm_b" (X = A) with vals (H, nnz). Collective."""
        if op == "sddmm":
            return self._sddmm_in("a", X, Y, vals, r, out=out, multi=multi)[0]
        if op == "spmm_a":
            return self._spmm_x_in("a", X, vals, r, out, multi=multi)
        return self._spmm_y_in("a", X, vals, r, out=out, multi=multi)

    @property
    def values(self) -> np.ndarray:
        """S's current values on this rank, in value order (orientation "a")."""
        return self._o["a"].values

    def _store_values(self, values: np.ndarray) -> None:
        self._o["a"].values[...] = values
        self._b_stale = "b" in self._o

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        return self._o["a"].coordinates()


__all__ = ["TwoOrientationAlgorithm"]
