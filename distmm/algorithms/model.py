"""The pieces of the cost model that every family's own formulas share.

Each family module states its Table III row, its departures from it, its Table IV optimum,
its grid and width rules and the local kernel calls its loop makes (paper section V); this
module holds only what those statements are made of, so that :mod:`distmm.perf.costmodel` and the
planner can ask any family the same questions through the registry
(:data:`distmm.algorithms.ALGORITHMS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

KERNEL_KINDS = ("fusedmm", "sddmm", "spmm_a", "spmm_b")


@dataclass(frozen=True)
class KernelCalls:
    """``count`` calls of one node-model kernel, all alike, made by one rank in one FusedMMA.

    ``kind`` is one of :data:`KERNEL_KINDS` ("fusedmm" is ``fusedmm_a``); each call walks
    ``nnz`` nonzeros of a ``rows`` x ``cols`` block with dense operands of ``width`` columns.
    ``unpacked`` says the block arrived as a COO packet and is rebuilt (bincount of its rows)
    before the call; ``transposed`` says the call builds the block's transpose (``spmm_b`` on a
    block that arrived this step, so no cached transpose exists)."""

    kind: str
    count: int
    nnz: float
    rows: float
    cols: float
    width: float
    unpacked: bool = False
    transposed: bool = False

    @property
    def walked_rows(self) -> float:
        """Rows the kernel's parallel loop walks: the block's, or its transpose's (spmm_b)."""
        return self.cols if self.kind == "spmm_b" else self.rows

    @property
    def gathered_rows(self) -> float:
        """Rows of the dense operand gathered at random through the column indices."""
        return self.rows if self.kind == "spmm_b" else self.cols

    def as_dict(self) -> dict:
        return asdict(self)
