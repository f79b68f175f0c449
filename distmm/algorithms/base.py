"""The distributed matrix (:class:`DistributedMatrix`), the type users hold and every
algorithm family's base, assembled from parts with one job each.

A distributed matrix binds a sparse matrix S (m x n) to a process grid, a replication factor,
a node model and a dtype. Dense operands live in its own distribution: each rank holds one
block of A (m x r) and one of B (n x r); every operation takes and returns blocks in that
distribution, so training loops chain calls without reshuffling. SDDMM results and S's values
are flat arrays aligned with the rank's stored nonzeros of S ("value order"). Rows and
columns are permuted before distribution for load balance (paper section VI;
:meth:`Placement.balance_permutations`), invisibly to the scatter/gather helpers; callers that
fill their blocks themselves read :meth:`local_rows`.

The parts, each with its own state, which the matrix's methods call: ``_ops``
(:mod:`.operations`: the operations' front-ends, owning the per-call checks of :mod:`.calls`,
read as ``_calls``), ``_kernels`` (:mod:`.prepared`: prepared kernel calls and scratch
buffers), ``placement`` (:mod:`.placement`), ``_named`` (:mod:`.values`), ``stats``
(:mod:`.stats`) and ``_edges`` (:mod:`distmm.ops.state`: the edge primitives' plans and
communicators). Plans (:mod:`.plan`, :mod:`.trace`) are objects the caller asks for;
:mod:`.dense_io` holds the layout functions and :mod:`.lifetime` what ``close`` does; a
family's cost formulas sit on its ``model`` (:mod:`.model`). What the constructor assembles
before the family places S is :mod:`.construction`. This module holds the family hooks, the
dense-layout geometry and the public surface.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from distmm.algorithms import construction, dense_io, lifetime
from distmm.algorithms import plan as plans
from distmm.algorithms.lifetime import ClosedError
from distmm.algorithms.model import FamilyModel
from distmm.algorithms.operator import Operator
from distmm.algorithms.placement import Orientation
from distmm.core.coo import CooShare
from distmm.core.dense import DenseBlock
from distmm.core.grid import ProcessGrid15D, check_grid
from distmm.core.layout import block_offsets
from distmm.errors import InputError, agree, require
from distmm.kernels import NodeModel
from distmm.ops import edges, rowwise, softmax, transfer, xty

# Where newly built objects are recorded (see track_objects); None: nowhere.
_TRACKED: list | None = None


def track_objects(into: list | None) -> None:
    """Record every distributed object constructed from now on in the list ``into``.

    Not collective. ``None`` stops recording. For harnesses and sweeps that build objects in
    loops: MPI has a fixed number of communicator ids per process (2048 in MPICH), and every
    object holds a few until :meth:`DistributedMatrix.close`, so such code closes what it
    recorded, in the order it was built (the same order on every rank, since close is
    collective).
    """
    global _TRACKED
    _TRACKED = into


class DistributedMatrix:
    """A sparse matrix S distributed over MPI ranks: what :func:`distmm.distribute` returns.

    The type users hold, and the base class of every algorithm family (one subclass per
    family, :data:`distmm.algorithms.ALGORITHMS`). Its surface is what a training loop uses:
    the operations (:meth:`sddmm`, :meth:`spmm_a`, :meth:`spmm_b`, :meth:`fusedmm_a`,
    :meth:`fusedmm_b`), dense layouts (:meth:`dense`, :meth:`scatter`, :meth:`gather`,
    :meth:`wrap`, :meth:`local_rows`), S's values (:attr:`values`, :meth:`set_values`,
    named vectors), the edge primitives (:mod:`distmm.ops`), call plans for loops
    (:meth:`plan`, :meth:`bind`), :meth:`as_operator` and :meth:`close`. Diagnostics
    (words, timings, memory, the run report) live behind :attr:`stats`
    (:class:`~distmm.algorithms.stats.MatrixStats`); the family's cost-model formulas on its
    class, ``type(S).model``.

    A family defines the grid (``grid_class``, whose shape rule is ``model.grid_allows``),
    ``_setup`` (placing S with :meth:`_place`), the owner of each nonzero in each
    orientation, the dense blocks each rank holds (``dense_rows``), and the loop pieces
    ``_sddmm``, ``_spmm_a``, ``_spmm_b``, ``_fusedmm``; its formulas go on a
    :class:`~distmm.algorithms.model.FamilyModel` subclass set as ``model``.

    Construction is collective over ``comm`` (p ranks): ``c`` is the replication factor
    (``model.grid_allows(p, c)``), ``order`` the rank order of the grid
    (:data:`distmm.core.grid.RANK_ORDERS`), ``overlap`` overlaps each propagation shift with
    the local kernel; the rest is described at :func:`distmm.distribute`. Every argument is
    checked the same way on every rank before any message.

    The dense width r is a property of each call, read from its blocks: S's placement does not
    depend on it. Families that cut the r columns of A and B across ranks (``splits_r``) state
    their minimum r per call (:meth:`r_rule`). ``r`` given at construction is only a default
    width, used where a call has no block to read it from (:meth:`dense`, :meth:`dense_cols`
    without r). ``checks`` picks the per-call validation (see :mod:`distmm.algorithms.calls`).
    An object owns sub-communicators: free them with :meth:`close` or a ``with`` block.
    """

    name = "abstract"
    # The family's cost model (static formulas; model.py): ``ALGORITHMS[name].model``.
    model: type[FamilyModel] = FamilyModel
    strategies: tuple[str, ...] = ()
    # Whether the family cuts the r columns of A and B into column blocks across ranks.
    splits_r = False
    # Why the FusedMM strategies the family lacks cannot exist (ends a refused strategy's
    # message).
    strategy_note = ""
    # The process grid the family runs on (ProcessGrid15D or ProcessGrid25D).
    grid_class: type = ProcessGrid15D

    def __init__(self, source: CooShare, comm: MPI.Comm, c: int = 1, r: int | None = None,
                 node_model: str | NodeModel = "reference", dtype=np.float32,
                 permute: bool | str = "auto", seed: int = 0, order: str = "fiber",
                 check_finite: bool = True, overlap: bool = False,
                 checks: str = "once") -> None:
        if _TRACKED is not None:
            _TRACKED.append(self)
        # the parts, the permutations, the grid and its communicators (construction.py)
        construction.assemble(self, source, comm, c, r, node_model, dtype, permute, seed,
                              order, check_finite, overlap, checks,
                              permute if isinstance(permute, DistributedMatrix) else None)
        self._setup(source)

    @classmethod
    def _check_arguments(cls, p: int, c, order: str, shape: tuple[int, int]) -> None:
        """The family's rank-independent checks of its construction arguments (InputError)."""
        cls._check_grid(p, c, order)

    @classmethod
    def _check_grid(cls, p: int, c, order: str = "fiber") -> None:
        """The family's grid rule for p and c (and the rank order), with its message."""
        check_grid(p, c, order, cls.model.grid_allows, cls.grid_class.rule,
                   f"the {cls.name} algorithm")

    def _setup(self, source: CooShare) -> None:
        """Place S (given as this rank's COO share, original coordinates) on ``self.grid``
        and build what the family's loop needs (collective; the family's part of
        construction)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- subclass hooks
    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        """Global permuted rows of ``side``'s dense block on ``rank`` (local order)."""
        raise NotImplementedError

    def r_rule(self) -> tuple[int, str]:
        """(the smallest dense width r a call may use, why). Not collective."""
        return 1, "at least one column"

    def _exact_counts(self, op: str, strategy: str) -> dict:
        """This rank's own counts that the family's ``model.exact_words`` takes (default:
        none; :meth:`MatrixStats.expected_words`)."""
        return {}

    def _col_blocks(self) -> int:
        """How many column blocks r is cut into (families with ``splits_r``)."""
        return 1

    def _col_block(self, rank: int) -> int:
        """The column block of r that ``rank`` holds (the same for A and B)."""
        return 0

    def _grid_comms(self) -> list[MPI.Comm]:
        """The sub-communicators this object created (freed by :meth:`close`)."""
        grid = getattr(self, "grid", None)
        if grid is None:
            return []
        names = ("row_comm", "col_comm", "layer_comm", "fiber_comm")
        return [getattr(grid, a) for a in names if hasattr(grid, a)]

    # ----------------------------------------------------------------- dense layout
    def dense_cols(self, side: str, rank: int, r: int | None = None) -> slice:
        """Columns (of r) of ``side``'s dense block on ``rank``. Not collective.

        Families that keep whole rows return ``slice(None)`` for any r. The others cut r into
        column blocks (offsets computed once per r and cached); ``r`` defaults to the width
        given at construction."""
        if not self.splits_r:
            return slice(None)
        co = self._col_offsets(self._default_r(r))
        b = self._col_block(rank)
        return slice(int(co[b]), int(co[b + 1]))

    def _col_offsets(self, r: int) -> np.ndarray:
        co = self._col_cache.get(r)
        if co is None:
            co = self._col_cache[r] = block_offsets(r, self._col_blocks())
        return co

    def local_width(self, r: int, rank: int | None = None) -> int:
        """Columns of a width-r dense block held by ``rank`` (default: this rank)."""
        if not self.splits_r:
            return r
        co = self._col_offsets(r)
        b = self._col_block(self.rank if rank is None else rank)
        return int(co[b + 1] - co[b])

    def local_shape(self, side: str, r: int) -> tuple[int, int]:
        """Shape of this rank's block of a width-r dense matrix on ``side``. Not collective."""
        return self._local_rows(side), self.local_width(r)

    def _call_key(self, op: str, X) -> str | tuple[str, int]:
        """The key under which calls of ``op`` whose first dense operand is ``X`` keep their
        remembered operands (calls.py): ``(op, width)`` in a family that keeps whole dense
        rows (the local width is r, the same on every rank), so that a loop alternating
        widths (the layers of a model) skips the checks of each width's repeats; ``op``
        where the r columns are split across ranks. Not collective."""
        if self.splits_r:
            return op
        shape = getattr(X, "shape", None)
        return (op, shape[-1]) if shape else op

    def _local_rows(self, side: str) -> int:
        n = self._rows_cache.get(side)
        if n is None:
            n = self._rows_cache[side] = int(self.dense_rows(side, self.rank).size)
        return n

    def _default_r(self, r: int | None) -> int:
        r = self.r if r is None else r
        require(r is not None,
                f"the {self.name} algorithm splits the r columns of A and B across ranks, so "
                "the width must be given here (r=...), or at construction as a default")
        return r

    def _check_r(self, r) -> int:
        """Rank-independent check of a dense width; returns it as an int."""
        require(isinstance(r, (int, np.integer)) and not isinstance(r, bool),
                f"the dense width r must be an integer, got {r!r}")
        problem = self._calls.r_problem(int(r))
        require(problem is None, problem or "")
        return int(r)

    def _block(self, side: str, r: int, array: np.ndarray) -> DenseBlock:
        """``array`` (this rank's block, no copy) typed as a block of this object."""
        if type(array) is DenseBlock:  # (read from its dict: every call's result passes here)
            meta = array.__dict__
            shape = meta["global_shape"]
            if meta["owner"] is self and meta["side"] == side and shape is not None \
                    and shape[1] == r:
                return array
        elif isinstance(array, DenseBlock) and array.owner is self and array.side == side \
                and array.r == r:
            return array
        nrows = self.shape[0] if side == "a" else self.shape[1]
        return DenseBlock(array, side, (nrows, r), self)

    # ----------------------------------------------------------------- scratch and plans
    def release_buffers(self) -> None:
        """Free what the object keeps between calls to make the next call cheaper: the
        scratch buffers of every width used so far, the prepared kernel calls and the steps
        the plans keep (:meth:`PreparedCalls.release`). S's blocks, its cached transposes and
        named vectors stay. Not collective (local state only); call it between calls, on any
        ranks."""
        self._require_open()
        self._kernels.release()

    # ----------------------------------------------------------------- checks
    def _agree(self, message: str | None, same: dict | None = None) -> None:
        """Collective check: raise the same InputError everywhere if any rank has a message
        or a setting in ``same`` differs between ranks (:func:`distmm.errors.agree`).

        A small allgather, counted under phase "other"."""
        if self.p > 1:
            self.stats.add("other", self.p - 1, self.p - 1, self.p - 1, self.p - 1)
        agree(self.comm, message, same)

    def _begin(self, kind, dense: tuple, values: np.ndarray | None = None,
               out: np.ndarray | None = None, out_side: str | None = None,
               strategy: str | None = None) -> int:
        """Check one call's operands per ``checks`` and return its dense width r
        (:meth:`CallChecks.begin`). Collective unless the policy allows a local check."""
        return self._calls.begin(kind, dense, values, out, out_side, strategy)

    def _require_open(self) -> None:
        """Raise InputError on every use after :meth:`close`. Not collective."""
        if self._closed:
            raise ClosedError(self._closed_message())

    def _closed_message(self) -> str:
        return (f"this {self.name} object was closed (close() or the end of its with-block "
                "freed its communicators and arrays); distribute S again")

    def __getattr__(self, name: str):
        # Only for attributes not found (never on the hot path): after close() the object
        # keeps none of its arrays, and any use of one is the closed object's error.
        if self.__dict__.get("_closed", False) and not name.startswith("__"):
            raise ClosedError(self._closed_message())
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def check_inputs(self, *pairs: tuple[str, np.ndarray, str],
                     values: np.ndarray | None = None) -> int:
        """Fully check dense blocks given as (side, array, name) and optional values of S.

        Collective (one small allgather), whatever ``checks`` says: a problem found on any
        rank raises the same InputError on every rank. Returns the dense width r the blocks
        agree on."""
        self._require_open()
        return self._calls.full_check(pairs, values, None, None)

    # ----------------------------------------------------------------- public operations
    # (the _ops part, operations.py, checks the call; each family implements _sddmm,
    # _spmm_a, _spmm_b and _fusedmm)
    def sddmm(self, A_loc: np.ndarray, B_loc: np.ndarray,
              values: np.ndarray | str | None = None, out: np.ndarray | None = None,
              heads: int | None = None) -> np.ndarray:
        """SDDMM: R = S(values) * (A B^T) at S's nonzeros, this rank's R in value order
        (``out`` when given; ``heads``: one column per head). Collective. Parameters:
        :meth:`Operations.sddmm <distmm.algorithms.operations.Operations.sddmm>`."""
        return self._ops.sddmm(A_loc, B_loc, values, out, heads)

    def spmm_a(self, B_loc: np.ndarray, values: np.ndarray | str | None = None,
               out: np.ndarray | None = None) -> DenseBlock:
        """SpMMA: S(values) @ B, this rank's side-"a" block of the m x r result (``out`` when
        given). Collective. Parameters: :meth:`Operations.spmm
        <distmm.algorithms.operations.Operations.spmm>`."""
        return self._ops.spmm("a", B_loc, values, out)

    def spmm_b(self, A_loc: np.ndarray, values: np.ndarray | str | None = None,
               out: np.ndarray | None = None) -> DenseBlock:
        """SpMMB: S(values)^T @ A, this rank's side-"b" block of the n x r result (``out``
        when given). Collective. Parameters: :meth:`Operations.spmm
        <distmm.algorithms.operations.Operations.spmm>`."""
        return self._ops.spmm("b", A_loc, values, out)

    def fusedmm_a(self, A_loc: np.ndarray, B_loc: np.ndarray, strategy: str | None = None,
                  values: np.ndarray | str | None = None,
                  out: np.ndarray | None = None) -> DenseBlock:
        """FusedMMA: (S(values) * (A B^T)) @ B, this rank's side-"a" block of the m x r
        result (``out`` when given); ``strategy`` one of :attr:`strategies` (default the
        last). Collective. Parameters: :meth:`Operations.fusedmm
        <distmm.algorithms.operations.Operations.fusedmm>`."""
        return self._ops.fusedmm("a", A_loc, B_loc, strategy, values, out)

    def fusedmm_b(self, A_loc: np.ndarray, B_loc: np.ndarray, strategy: str | None = None,
                  values: np.ndarray | str | None = None,
                  out: np.ndarray | None = None) -> DenseBlock:
        """FusedMMB: (S(values) * (A B^T))^T @ A, this rank's side-"b" block of the n x r
        result (``out`` when given); the mirror of :meth:`fusedmm_a`. Collective."""
        return self._ops.fusedmm("b", A_loc, B_loc, strategy, values, out)

    def as_operator(self, values: np.ndarray | None = None) -> Operator:
        """S as a linear operator for iterative solvers (:class:`~distmm.algorithms.
        operator.Operator`): ``matvec(B)`` is :meth:`spmm_a`, ``rmatvec(A)`` is
        :meth:`spmm_b`, ``.T`` / ``.H`` swap them; ``values`` pins S's values (default: S's
        current values at each call). Not collective."""
        self._require_open()
        return Operator(self, values)

    # ----------------------------------------------------------------- edge primitives
    # (distmm.ops: functions of the matrix, their state in the _edges part; every one is
    # collective over comm; shapes, phases and word formulas are documented on the functions
    # and in docs/primitives.md)
    def reduce(self, values: np.ndarray, dim: str = "row", op: str = "sum") -> np.ndarray:
        """Per-row ("row": A side) or per-column ("col": B side) sum or max of edge values
        (:func:`distmm.ops.edges.reduce`)."""
        return edges.reduce(self, values, dim, op)

    def row_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum of each row's edge values, an A-side per-node block."""
        return edges.reduce(self, values, "row", "sum")

    def row_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum of each row's edge values (-inf for empty rows), an A-side block."""
        return edges.reduce(self, values, "row", "max")

    def col_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum of each column's edge values, a B-side per-node block."""
        return edges.reduce(self, values, "col", "sum")

    def col_max(self, values: np.ndarray) -> np.ndarray:
        """Maximum of each column's edge values (-inf for empty columns), a B-side block."""
        return edges.reduce(self, values, "col", "max")

    def expand(self, side: str, X: np.ndarray) -> np.ndarray:
        """Per-node values of ``side`` at every nonzero, in value order
        (:func:`distmm.ops.edges.expand`)."""
        return edges.expand(self, side, X)

    def sddmm_add(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``u_i + v_j`` at every nonzero, per head (:func:`distmm.ops.edges.sddmm_add`)."""
        return edges.sddmm_add(self, u, v)

    def edge_softmax(self, values: np.ndarray, dim: str = "row") -> np.ndarray:
        """Stable softmax of edge scores within rows or columns
        (:func:`distmm.ops.softmax.edge_softmax`)."""
        return softmax.edge_softmax(self, values, dim)

    def edge_softmax_backward(self, alpha: np.ndarray, grad_alpha: np.ndarray,
                              dim: str = "row") -> np.ndarray:
        """Gradient of :meth:`edge_softmax` with respect to the scores
        (:func:`distmm.ops.softmax.edge_softmax_backward`)."""
        return softmax.edge_softmax_backward(self, alpha, grad_alpha, dim)

    def row_dot(self, side: str, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Dot product of each row of X with the same row of Y
        (:func:`distmm.ops.rowwise.row_dot`)."""
        return rowwise.row_dot(self, side, X, Y)

    def xty(self, X: np.ndarray, Y: np.ndarray, side: str | None = None) -> np.ndarray:
        """X^T Y of two same-side blocks, replicated (:func:`distmm.ops.xty.xty`)."""
        return xty.xty(self, X, Y, side)

    def transfer(self, X: np.ndarray, to_side: str) -> np.ndarray:
        """A block of the other side moved into ``to_side``'s distribution, square S
        (:func:`distmm.ops.transfer.transfer`)."""
        return transfer.transfer(self, X, to_side)

    # ----------------------------------------------------------------- call plans
    def plan(self, op: str, *operands, out=None, **options) -> plans.CallPlan:
        """``op``'s call on ``operands`` as an object for a loop: ``step = S.plan("fusedmm_a",
        A, B, out=Y)`` once, then ``step()`` (the held operands) or ``step(A2, B2, out=Y2)``
        (new ones) every iteration; each returns what ``getattr(S, op)(*operands, out=out,
        **options)`` returns. Making a plan is not collective; calling it is. Parameters and
        what a plan's repeat skips: :func:`~distmm.algorithms.plan.make_plan`."""
        return plans.make_plan(self, op, operands, out, options)

    def bind(self, op: str, *operands, out, **options) -> plans.CallPlan:
        """:meth:`plan` with a required ``out=`` buffer, written by every call (a bound call
        never allocates). Not collective; calling it is."""
        if out is None:
            self._require_open()
            raise InputError("bind needs out=: a bound call writes the same buffer every time")
        return plans.make_plan(self, op, operands, out, options, verb="bind")

    def _replayable(self) -> bool:
        """Whether a call is local kernels on the caller's arrays (and its result) and
        shifts between the object's buffers and nothing else, always the same steps for the
        same operands, so that a plan's repeat may run those steps alone (plan.py). The
        family that can says so."""
        return False

    def _traced_shift(self, comm, sendbuf: np.ndarray, recvbuf: np.ndarray, dest: int,
                      source: int) -> None:
        """Note one cyclic shift (``comm.shift`` with these arguments) in the trace of a
        plan's call, if one is under way (trace.py). Not collective."""
        if self._tracer is not None:
            self._tracer.shift(comm, sendbuf, recvbuf, dest, source)

    def _not_replayable(self) -> None:
        """Called by a family during a call that does work besides its kernels and shifts
        (moves or copies the caller's data): a plan keeps no steps of it. Not collective."""
        if self._tracer is not None:
            self._tracer.not_replayable()

    # ----------------------------------------------------------------- values of S
    @property
    def values(self) -> np.ndarray:
        """S's current values on this rank, in value order (a view: do not resize)."""
        raise NotImplementedError

    def set_values(self, values: np.ndarray) -> None:
        """Replace S's values (this rank's, in value order) without redistributing S.

        Collective: every rank calls it with its own values; they are checked everywhere."""
        self._require_open()
        self._agree(self._calls.check_values(values))
        self._store_values(values)
        self._kernels.forget()

    def _store_values(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def set_named_values(self, name: str, values: np.ndarray) -> None:
        """Keep another vector of edge values under ``name``, beside S's own.

        Collective (checked everywhere, like :meth:`set_values`). Every operation's ``values=``
        then accepts ``name``; where a strategy runs on the stored S^T, the vector is moved
        into S^T's order on first use and kept, so alternating between named vectors (ALS:
        ratings for the right-hand side, ones for the matvec) moves nothing after that.
        Registering a name again replaces its vector and its moved copies."""
        require(isinstance(name, str) and name != "",
                f"a value vector's name must be a non-empty string, got {name!r}")
        self._agree(self._calls.check_values(values))
        self._named.set(name, values)
        self._kernels.forget()

    def named_values(self, name: str) -> np.ndarray:
        """The vector registered as ``name`` (value order; a view: do not resize). Not
        collective."""
        return self._named.get(name)

    def drop_named_values(self, name: str) -> None:
        """Forget the vector registered as ``name`` and its moved copies. Not collective."""
        self._named.drop(name)
        self._kernels.forget()

    def _named_or(self, values: np.ndarray | str | None) -> np.ndarray | None:
        """``values`` with a registered name replaced by its vector (value order)."""
        return self.named_values(values) if isinstance(values, str) else values

    def _values_for(self, name: str, values: np.ndarray | str | None) -> np.ndarray:
        """The values a FusedMM runs with, in orientation ``name``'s order: S's own (None),
        a registered vector (its name) or an array in value order. Families that store S in
        one orientation only have them in value order already."""
        values = self._named_or(values)
        return self.values if values is None else values

    # ----------------------------------------------------------------- dense data in and out
    # (dense_io.py: functions of the matrix's public layout; the full descriptions are there)
    def local_rows(self, side: str) -> np.ndarray:
        """Original row ids of ``side``'s block on this rank ("a": rows of A, "b": rows of
        B). Not collective."""
        return dense_io.local_rows(self, side)

    def dense(self, side: str, r: int | None = None, fill=0.0) -> DenseBlock:
        """A new width-r dense matrix on ``side`` as this rank's typed block, filled with a
        constant or ``fill(rows, cols)`` (:func:`distmm.algorithms.dense_io.dense`). Not
        collective, but meant to be called on every rank."""
        return dense_io.dense(self, side, r, fill)

    def wrap(self, side: str, X_loc: np.ndarray, r: int | None = None) -> DenseBlock:
        """This rank's block of a width-r matrix typed as a DenseBlock of ``side``, no copy
        (:func:`distmm.algorithms.dense_io.wrap`). Not collective."""
        return dense_io.wrap(self, side, X_loc, r)

    def scatter(self, side: str, X: np.ndarray | None, root: int | None = 0) -> DenseBlock:
        """Distribute a global dense matrix (original order) from ``root``, or from every
        rank's own copy with ``root=None`` (:func:`distmm.algorithms.dense_io.scatter`).
        Collective."""
        return dense_io.scatter(self, side, X, root)

    def gather(self, side: str, X_loc: np.ndarray, root: int = 0) -> np.ndarray | None:
        """The global matrix of these blocks on ``root`` in original row order, None
        elsewhere (:func:`distmm.algorithms.dense_io.gather`). Collective."""
        return dense_io.gather(self, side, X_loc, root)

    def gather_values(self, values: np.ndarray | None = None, root: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Values in value order (S's own if None) on ``root`` as COO in original
        coordinates, sorted by (row, col); None elsewhere. Collective."""
        return dense_io.gather_values(self, values, root)

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Global permuted (row, col) of S for each stored nonzero in value order."""
        raise NotImplementedError

    # ----------------------------------------------------------------- diagnostics
    # Everything a training loop does not need lives in ``self.stats`` (stats.py); the
    # family gives it these hooks.
    def _balance_permutations(self, source: CooShare, mode: str, seed: int
                              ) -> tuple[np.ndarray, np.ndarray]:
        """The row and column permutations S is placed in, by ``mode`` (a family whose blocks
        follow a partition overrides this; default: :meth:`Placement.balance_permutations`).
        Collective."""
        return self.placement.balance_permutations(source, mode, seed)

    def _describe(self) -> dict:
        """The family's own entries of ``stats.describe()`` (default: none)."""
        return {}

    # Every family states its memory model as ``model.memory_bytes(op, strategy, m, n, nnz,
    # r, p, c, dtype, overlap, local)`` returning a :class:`distmm.core.memory.Memory`;
    # ``local`` takes a rank's own sizes (:meth:`memory_counts`) in place of the worst-rank
    # sizes the model assumes without them (``stats.memory_model``).
    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's sizes that the family's memory model reads, for width ``r`` (rows of
        its blocks, its stored nonzeros per orientation built so far). Not collective."""
        raise NotImplementedError

    # ----------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Free the communicators this object created: the grid's sub-communicators and the
        edge primitives' row groups (:class:`~distmm.ops.state.EdgeState`).

        Collective over ``comm`` (every rank must close the object). It also lets go of every
        array the object holds (S's blocks and values, the permutations, the loop's indices,
        the buffers kept between calls, named vectors), so that a closed object that is still
        referred to holds no memory. Afterwards every operation, and every use of what was
        released, raises InputError; ``closed``, ``stats`` (its counters and ``describe()``)
        and the configuration (``shape``, ``p``, ``c``, ``dtype``, ...) stay; closing again
        does nothing. The caller's ``comm`` is not freed (:mod:`.lifetime`)."""
        lifetime.close(self, self._grid_comms())

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def __enter__(self) -> DistributedMatrix:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The name family modules written before the public type was named still use.
DistributedAlgorithm = DistributedMatrix

__all__ = ["DistributedAlgorithm", "DistributedMatrix", "InputError", "Orientation"]
