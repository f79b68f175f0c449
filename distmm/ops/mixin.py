"""The primitives of :mod:`distmm.ops` as methods of every distributed object.

:class:`distmm.algorithms.base.DistributedMatrix` inherits :class:`EdgeOps`, so ``S.row_sum``,
``S.edge_softmax``, ``S.xty`` and the rest exist on every family. Each method only delegates;
shapes, collectives and word formulas are documented on the functions (and in
docs/primitives.md).
"""

from __future__ import annotations

import numpy as np

from distmm.ops import edges, rowwise, softmax, transfer, xty


class EdgeOps:
    """Edge-value and dense-block primitives (every method is collective over ``self.comm``)."""

    def reduce(self, values: np.ndarray, dim: str = "row", op: str = "sum") -> np.ndarray:
        """Per-row ("row": A side) or per-column ("col": B side) sum or max of edge values;
        see :func:`distmm.ops.edges.reduce`."""
        return edges.reduce(self, values, dim, op)

    def row_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum of each row's edge values, A-side per-node block."""
        return edges.reduce(self, values, "row", "sum")

    def row_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum of each row's edge values (-inf for empty rows), A-side per-node block."""
        return edges.reduce(self, values, "row", "max")

    def col_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum of each column's edge values, B-side per-node block."""
        return edges.reduce(self, values, "col", "sum")

    def col_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum of each column's edge values (-inf for empty columns), B-side block."""
        return edges.reduce(self, values, "col", "max")

    def expand(self, side: str, X: np.ndarray) -> np.ndarray:
        """Per-node values of ``side`` at every nonzero, in value order; see
        :func:`distmm.ops.edges.expand`."""
        return edges.expand(self, side, X)

    def sddmm_add(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``u_i + v_j`` at every nonzero (per head); see :func:`distmm.ops.edges.sddmm_add`."""
        return edges.sddmm_add(self, u, v)

    def edge_softmax(self, values: np.ndarray, dim: str = "row") -> np.ndarray:
        """Stable softmax of edge scores within rows or columns; see
        :func:`distmm.ops.softmax.edge_softmax`."""
        return softmax.edge_softmax(self, values, dim)

    def edge_softmax_backward(self, alpha: np.ndarray, grad_alpha: np.ndarray,
                              dim: str = "row") -> np.ndarray:
        """Gradient with respect to the scores; see
        :func:`distmm.ops.softmax.edge_softmax_backward`."""
        return softmax.edge_softmax_backward(self, alpha, grad_alpha, dim)

    def row_dot(self, side: str, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Dot product of each row of X with the same row of Y; see
        :func:`distmm.ops.rowwise.row_dot`."""
        return rowwise.row_dot(self, side, X, Y)

    def xty(self, X: np.ndarray, Y: np.ndarray, side: str | None = None) -> np.ndarray:
        """X^T Y of two same-side blocks, replicated; see :func:`distmm.ops.xty.xty`."""
        return xty.xty(self, X, Y, side)

    def transfer(self, X: np.ndarray, to_side: str) -> np.ndarray:
        """Move a block of the other side into ``to_side``'s distribution (square S); see
        :func:`distmm.ops.transfer.transfer`."""
        return transfer.transfer(self, X, to_side)
