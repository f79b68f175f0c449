"""S as a linear operator, so that iterative solvers (CG, LSQR, power iteration) read naturally.

``S.as_operator()`` returns an :class:`Operator` in the style of scipy's ``LinearOperator`` and
pylops-mpi's ``MPILinearOperator``: ``matvec(B)`` is S @ B (SpMMA: a side-"b" block in, a
side-"a" block out), ``rmatvec(A)`` is S^T @ A (SpMMB), ``.T`` and ``.H`` (the same for real
data) swap them, and ``op @ X`` is ``matvec``. The "vectors" are distributed dense blocks of
any width r (a block of r right-hand sides at once); both calls are collective and return
:class:`~distmm.core.dense.DenseBlock` results in the object's distribution, so a solver chains them
without reshuffling::

    op = S.as_operator()
    X = S.dense("b", r)                      # unknowns, side "b" (n x r)
    Y = op.rmatvec(op.matvec(X))             # S^T S X, side "b"
"""

from __future__ import annotations

import numpy as np

from distmm.core.dense import DenseBlock


class Operator:
    """S (or S^T when ``transposed``) of a distributed object, as a linear operator.

    Parameters
    ----------
    obj : DistributedMatrix
        The distributed S.
    values : ndarray, optional
        Values of S in the object's value order, pinned for every product (default: S's
        current values at each call).
    transposed : bool
        Whether this is the operator of S^T.

    Not collective to build; ``matvec`` and ``rmatvec`` are collective.
    """

    def __init__(self, obj, values: np.ndarray | None = None, transposed: bool = False) -> None:
        self.obj = obj
        self.values = values
        self.transposed = transposed
        m, n = obj.shape
        self.shape = (n, m) if transposed else (m, n)
        self.dtype = obj.dtype

    def matvec(self, X: np.ndarray, out: np.ndarray | None = None) -> DenseBlock:
        """This operator times X: S @ X (X side "b", result side "a"), or S^T @ X for the
        transposed operator (X side "a", result side "b"). Collective."""
        if self.transposed:
            return self.obj.spmm_b(X, values=self.values, out=out)
        return self.obj.spmm_a(X, values=self.values, out=out)

    def rmatvec(self, X: np.ndarray, out: np.ndarray | None = None) -> DenseBlock:
        """The adjoint times X: S^T @ X (X side "a", result side "b"), or S @ X for the
        transposed operator. Collective."""
        if self.transposed:
            return self.obj.spmm_a(X, values=self.values, out=out)
        return self.obj.spmm_b(X, values=self.values, out=out)

    @property
    def T(self) -> Operator:
        """The transposed operator (matvec and rmatvec swapped). Not collective."""
        return Operator(self.obj, self.values, not self.transposed)

    @property
    def H(self) -> Operator:
        """The adjoint: the transpose, since S is real. Not collective."""
        return self.T

    def __matmul__(self, X: np.ndarray) -> DenseBlock:
        return self.matvec(X)

    def __repr__(self) -> str:
        kind = "S^T" if self.transposed else "S"
        return f"<distmm Operator {kind} of shape {self.shape}, dtype {self.dtype}>"


__all__ = ["Operator"]
