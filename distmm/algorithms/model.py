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


class FamilyModel:
    """A family's cost model: static formulas, reached as ``ALGORITHMS[name].model``.

    Every family states, as static methods of its model class (in the family's own module):
    ``grid_allows(p, c)`` (its grid rule), ``min_width(p, c)``, ``table3`` (its Table III
    row), ``one_rank_layer_saving``, ``departure`` (what Table III counts and distmm does not
    send), ``nonzero_visits``, ``table4_best_c``, ``local_calls`` (the kernel calls one rank
    makes), ``exact_words`` (the words and messages each phase sends, exact where the family's
    formula is) and ``memory_bytes``. :mod:`distmm.perf.costmodel`, the planner and the tests
    ask them through the registry; none of them needs a distributed object. Only
    :meth:`departure` has a default (none).
    """

    @staticmethod
    def grid_allows(p: int, c: int) -> bool:
        """Whether p ranks form this family's grid with replication factor c."""
        raise NotImplementedError

    @staticmethod
    def departure(strategy: str, n: int, r: int, p: int, c: float,
                  phi: float = 0.0) -> tuple[float, float]:
        """(messages, words) per rank of one FusedMM that Table III counts and distmm does not
        send, beyond the shifts of a one-rank layer (default: none)."""
        return 0.0, 0.0
