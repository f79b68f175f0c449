"""The algorithm families, one module each, and their registry.

The paper's four (section V): :mod:`.dense_shift_15d` (1.5D dense shifting, V-A),
:mod:`.sparse_shift_15d` (1.5D sparse shifting, V-B), :mod:`.dense_replicate_25d` (2.5D dense
replicating, V-C) and :mod:`.sparse_replicate_25d` (2.5D sparse replicating, V-D); and, beyond
the paper, :mod:`.sparse_aware_15d` (1.5D sparsity-aware: each rank receives only the rows its
nonzeros touch), all on the shared base class in :mod:`.base`. Each family's class owns
everything about it: its grid and width rules, its strategies, its loop, its exact words, its
Table III row and Table IV optimum, and the local kernel calls the planner costs.
:data:`ALGORITHMS` lists them; the cost model, the planner, the command line and the tests
iterate it instead of comparing names. Applications reach a family by name through
:func:`distmm.distribute`. docs/algorithms/ describes each family.
"""

from __future__ import annotations

from distmm.algorithms.base import DistributedMatrix
from distmm.algorithms.dense_replicate_25d import DenseReplicate25D
from distmm.algorithms.dense_shift_15d import DenseShift15D
from distmm.algorithms.sparse_aware_15d import SparseAware15D
from distmm.algorithms.sparse_replicate_25d import SparseReplicate25D
from distmm.algorithms.sparse_shift_15d import SparseShift15D
from distmm.errors import require

ALGORITHMS: dict[str, type[DistributedMatrix]] = {
    cls.name: cls for cls in (DenseShift15D, SparseShift15D, DenseReplicate25D,
                              SparseReplicate25D, SparseAware15D)
}


def family(name: str) -> type[DistributedMatrix]:
    """The class of the family called ``name``; InputError naming the families otherwise."""
    require(name in ALGORITHMS,
            f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


__all__ = ["ALGORITHMS", "family"]
