"""What a distributed matrix has done and holds: its diagnostics, behind ``S.stats``.

Every distributed matrix (:class:`~distmm.algorithms.base.DistributedMatrix`) counts each word
it sends through :class:`~distmm.core.comm.CountingComm` into one :class:`MatrixStats`, which
is a :class:`~distmm.core.comm.CommStats` (per-phase words, messages and seconds of this rank)
with the rest of the object's diagnostics beside it: the node model's kernel counters, the run
report gathered over ranks, the configuration, the memory model and measured memory, and the
words the family's formulas predict for one call. A training loop needs none of them; a
benchmark or a test reads them all here.
"""

from __future__ import annotations

import weakref

from distmm.core.comm import CommStats, gather_report
from distmm.core.memory import Memory, held_bytes
from distmm.core.permute import applied_mode


class MatrixStats(CommStats):
    """The diagnostics of one distributed matrix (``S.stats``).

    As a :class:`~distmm.core.comm.CommStats`: ``words(phase)``, ``counts``, ``seconds``,
    ``as_dict()`` of this rank's communication (the object's wrappers add to it). Holds its
    matrix weakly (the matrix holds it)."""

    def __init__(self, owner) -> None:
        super().__init__()
        self._owner = weakref.ref(owner)

    @property
    def matrix(self):
        """The distributed matrix these are the diagnostics of."""
        return self._owner()

    @property
    def kernel(self):
        """The node model's kernel counters (calls, flops, bytes, seconds per operation)."""
        return self.matrix.kernel.stats

    def reset(self) -> None:
        """Zero the communication and kernel counters. Not collective."""
        super().reset()
        owner = self._owner()
        if owner is not None:
            owner.kernel.stats.reset()

    def report(self, root: int = 0) -> dict | None:
        """Per-phase words, messages and seconds, and kernel stats, summarised over ranks,
        with the configuration (:meth:`describe`) under ``"config"``.

        Collective over the matrix's communicator; returns the report on ``root`` and None
        elsewhere."""
        S = self.matrix
        per_rank = self.as_dict()
        for op, st in S.kernel.stats.as_dict().items():
            per_rank[f"kernel:{op}"] = st
        rep = gather_report(S.comm, per_rank, root=root)
        if rep is not None:
            rep["config"] = self.describe()
        return rep

    def keep_description(self) -> None:
        """Keep :meth:`describe`'s answer, for after the matrix lets its parts go (close).
        Not collective."""
        self._description = self.describe()

    def describe(self) -> dict:
        """The matrix's configuration as a JSON-ready dict. Not collective."""
        kept = self.__dict__.get("_description")
        if kept is not None:
            return dict(kept)
        S = self.matrix
        return {"algorithm": S.name, "p": S.p, "m": S.shape[0], "n": S.shape[1],
                "node_model": S.node_model, "node_options": S.kernel.options(),
                "dtype": str(S.dtype), "permute": applied_mode(S.permute, S.p),
                "checks": S.checks, "c": S.c, "order": S.grid.order,
                "overlap": S.overlap,
                **({"r": S.r} if S.r is not None else {}),
                **S._describe()}

    def expected_words(self, op: str, r: int, strategy: str = "none"
                       ) -> dict[str, dict[str, float]]:
        """What one call of ``op`` (sddmm, spmm_a, spmm_b, fusedmm_a, fusedmm_b) at width r
        with ``strategy`` sends from this rank: the family's ``model.exact_words`` for this
        matrix's shape and this rank's own counts (the nonzeros it shifts, its grid position),
        as ``{phase: {"words": w, "messages": k}}``; it receives as much. Exact wherever the
        family's formula is. Collective when the stored S^T must be built first (every rank
        calls it then); otherwise not."""
        S = self.matrix
        m, n = S.shape
        return S.model.exact_words(op, m, n, r, S.p, S.c, strategy,
                                   **S._exact_counts(op, strategy))

    def memory_model(self, op: str = "fusedmm_a", strategy: str | None = None,
                     r: int | None = None) -> Memory:
        """The family's memory model (``model.memory_bytes``) of one ``op`` on this rank, with
        its real block sizes.

        Not collective. ``strategy`` defaults to the family's default; ``r`` to the width
        given at construction. S's global nonzero count (which only the distribution term
        uses, for the caller's COO share) is taken as p times this rank's."""
        S = self.matrix
        strategy = strategy or S.strategies[-1]
        r = S._default_r(r)
        counts = S.memory_counts(r)
        return S.model.memory_bytes(op, strategy, S.shape[0], S.shape[1],
                                    S.p * counts["nnz_a"], r, S.p, S.c, S.dtype, S.overlap,
                                    local=counts)

    def memory_held(self) -> int:
        """Bytes of the arrays the matrix holds now (S's blocks, permutations, the buffers
        kept between calls), measured (:func:`distmm.core.memory.held_bytes`). Not
        collective."""
        return held_bytes(self.matrix)


__all__ = ["MatrixStats"]
