"""What the edge primitives keep for one distributed matrix between calls (its ``_edges`` part).

The primitives of :mod:`distmm.ops` are functions of a distributed matrix; the plans they build
once (S's structure never changes), the layout facts they cache and the communicators they
split live here, in one object the matrix owns and :meth:`DistributedMatrix.close
<distmm.algorithms.base.DistributedMatrix.close>` releases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpi4py import MPI


@dataclass(eq=False)
class EdgeState:
    """The edge primitives' state of one distributed matrix.

    Attributes
    ----------
    checked : set of str
        The primitives whose full check has passed (``checks="once"``: :mod:`.checks`).
    edge_plans : dict
        dim -> :class:`~distmm.ops.edges.EdgePlan`.
    holders : dict
        side -> :class:`~distmm.ops.holders.Holders`.
    transfer_plans : dict
        (source side, r) -> :class:`~distmm.ops.transfer.TransferPlan`.
    row_groups : dict
        side -> the row group's counting communicator (:func:`~distmm.ops.groups.row_group`).
    comms : list of MPI.Comm
        The communicators split for the matrix (the row groups'), freed by :meth:`close`.
    """

    checked: set[str] = field(default_factory=set)
    edge_plans: dict = field(default_factory=dict)
    holders: dict = field(default_factory=dict)
    transfer_plans: dict = field(default_factory=dict)
    row_groups: dict = field(default_factory=dict)
    comms: list[MPI.Comm] = field(default_factory=list)

    def close(self) -> None:
        """Free the communicators and forget every plan. Collective over the matrix's
        communicator when any communicator was split (every rank split the same ones)."""
        for sub in self.comms:
            if sub != MPI.COMM_NULL:
                sub.Free()
        self.comms = []
        self.row_groups = {}
        self.edge_plans = {}
        self.holders = {}
        self.transfer_plans = {}


__all__ = ["EdgeState"]
