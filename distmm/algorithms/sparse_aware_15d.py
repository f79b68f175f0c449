"""1.5D sparsity-aware family: each rank receives only the B rows its nonzeros touch.

Not in the IPDPS'22 paper, whose four families move whole dense blocks whatever S's pattern.
This is the sparsity-aware 1.5D scheme of Mukhopadhyay, Tripathy, Selvitopi, Yelick, Buluc
(2025), on the grid and Table II layout of the 1.5D dense shifting family (section V-A):

Grid (p/c) x c, position (u, v), q = p/c ranks per layer. A and B are cut into p row blocks;
block i lives on (i // c, i % c). Rank (u, v) stores the nonzeros of row superblock u (A blocks
uc .. uc + c - 1) in the column blocks j with j mod c = v, exactly as 1.5D dense shifting. A
is the replicated operand: it is all-gathered along the fiber into the superblock T (and
X-side outputs are reduce-scattered back), because S's rows are what a rank's superblock
holds whole; the B side is what sparsity saves on. Instead of shifting whole B blocks around
the layer, each rank receives, once per call, only the distinct B rows its nonzeros touch in
the other q - 1 blocks of its layer (point-to-point messages with the ranks holding them,
or a whole block where it needs most of one; :class:`distmm.core.exchange.RowExchange`),
and for a B-side output (SpMMB, FusedMMB) sends
back only the partial rows it produced for other ranks' blocks. Replication trades the
all-gather of A ((c - 1) mr/p words) for a layer of q ranks: fewer peers and, for a graph
ordered by a partitioner, fewer distinct rows needed.

Each rank stores two CSR blocks of its superblock rows: block 0, the nonzeros in its own B
block (columns numbered as the rows of the caller's B block, so its kernels read B in place),
and block 1, the others, with their columns numbered compactly in the order of the rows
received (sorted global ids). Value order: block 0's nonzeros, then block 1's (CSR order).
The exchange plan is built once when S is placed, from the pattern alone (phase "plan",
counted); every call reuses it. The local kernels are the node model's on these blocks.
With ``overlap`` the kernels on block 0 run while the rows for block 1 travel.

FusedMM strategies: "none" (SDDMM then SpMM, two exchanges of B and two fiber collectives),
"reuse" (one replication of A and one exchange of B's rows serve both kernels, run as two
local kernels) and "fusion" (the same communication, one fused local kernel).

Words per rank (exact, :func:`sparse_aware_15d_exact`): replication (c - 1) a r where a is
the rank's A rows, reduction (T - a) r where T is its superblock rows, and per exchange
r times the rows it sends (a gather: rows of its block others need; a scatter: the partial
rows it produced for others). :func:`distmm.core.exchange.exchange_model` gives every rank's
counts from the pattern alone.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from distmm.algorithms.base import DistributedAlgorithm, Orientation
from distmm.algorithms.model import FamilyModel, KernelCalls
from distmm.algorithms.multivalue import block_kernel
from distmm.core.aligned import aligned_empty
from distmm.core.coo import CooShare
from distmm.core.exchange import RowExchange, exchange_model
from distmm.core.exchange import plan_words as exchange_plan_words
from distmm.core.grid import ProcessGrid15D, fits_15d
from distmm.core.layout import block_of, block_offsets, block_range
from distmm.core.memory import (
    OPS,
    Memory,
    ceil_div,
    csr_bytes,
    merged,
    operand_bytes,
    perm_bytes,
    place_bytes,
    transpose_bytes,
)
from distmm.core.partition import (
    Partition,
    check_method,
    default_method,
    partition,
    partition_peak_bytes,
)
from distmm.core.permute import PARTITION_MODES, applied_mode, balance_permutation, permute_mode
from distmm.core.relay_rule import relay_rule
from distmm.errors import InputError, require, wait_quietly

STRATEGIES = ("none", "reuse", "fusion")


class SparseAware15DModel(FamilyModel):
    """The cost model of :class:`SparseAware15D` (``SparseAware15D.model``): its grid and
    width rules, the pattern-free Table III-style bound, kernel calls, exact words from a
    rank's exchange counts, the plan's words and memory (static methods)."""

    grid_allows = staticmethod(fits_15d)

    @staticmethod
    def min_width(p: int, c: int) -> int:
        """The smallest dense width r a call may use: A and B keep whole rows."""
        return 1

    @staticmethod
    def exact_words(op: str, m: int, n: int, r: int, p: int, c: int, strategy: str = "none",
                    nnz: float | None = None, **counts) -> dict[str, dict[str, float]]:
        """Words and messages sent per rank, per phase, by one ``op``. With a rank's counts
        (``a_rows``, ``super_rows``, ``gather_rows``, ``gather_peers``, ``scatter_rows``,
        ``scatter_peers``; :meth:`SparseAware15D._exact_counts`, or
        :meth:`distmm.core.exchange.ExchangeCounts.rank` from the pattern alone) exact for
        that rank; without them, the pattern-free bound where every rank needs every row of
        its layer's other blocks (a dense S: then it sends what 1.5D dense shifting sends).
        See :func:`sparse_aware_15d_exact`."""
        return sparse_aware_15d_exact(op, m, n, r, p, c, strategy, **counts)

    @staticmethod
    def plan_words(q: int, recv_rows: int, ask_peers: int, relay: bool = False,
                   root_rows: int | None = None) -> dict[str, int]:
        """Words and messages one rank sends building the exchange plan (phase "plan"): one
        count to each other rank of its layer, and the ids of the rows it needs to their
        ``ask_peers`` distinct parents (owners, or relays); with ``relay`` the relay tree's
        gather and reply on the layer's rank 0 (``root_rows`` there: the rows the layer's
        other ranks need). Exact: the counters equal it
        (:func:`distmm.core.exchange.plan_words`)."""
        return exchange_plan_words(q, recv_rows, ask_peers, relay, root_rows)

    @staticmethod
    def table3(strategy: str, n: int, r: int, p: int, c: float,
               phi: float = 0.0) -> tuple[float, float]:
        """Not in the paper: the pattern-free bound (every rank needs every row of its
        layer's other blocks), (messages, words) per rank of one FusedMMA, m = n. The
        pattern's real counts come from :func:`distmm.core.exchange.exchange_model`."""
        q = p / c
        k = 2 if strategy == "none" else 1
        return 2 * (c - 1) + k * (q - 1), n * r / p * (2 * (c - 1) + k * (q - 1))

    @staticmethod
    def one_rank_layer_saving(strategy: str, n: int, r: int, p: int, c: float,
                              phi: float = 0.0) -> tuple[float, float]:
        """Nothing: :meth:`table3` already counts no exchange in a layer of one rank."""
        return 0.0, 0.0

    @staticmethod
    def nonzero_visits(strategy: str, nnz: float, p: int, c: float) -> float:
        """Nonzeros one rank's kernels walk in one FusedMM (the fused kernel walks S once)."""
        return (1 if strategy == "fusion" else 2) * nnz / p

    @staticmethod
    def table4_best_c(strategy: str, p: int, phi: float = 0.0) -> float:
        """The real c minimising :meth:`table3`'s words: 2(c - 1) + k(p/c - 1)."""
        return math.sqrt((2 if strategy == "none" else 1) * p / 2)

    @staticmethod
    def local_calls(strategy: str, m: float, n: float, nnz: float, r: float, p: int,
                    c: int) -> list[KernelCalls]:
        """Two calls per kernel (block 0 and block 1), nnz/(2p) nonzeros each on the
        (mc/p)-row superblock at full width r; "none" and "reuse" run SDDMM and SpMMA."""
        z = nnz / (2 * p)
        if strategy == "fusion":
            return [KernelCalls("fusedmm", 2, z, m * c / p, n / p, r)]
        return [KernelCalls(kind, 2, z, m * c / p, n / p, r) for kind in ("sddmm", "spmm_a")]

    @staticmethod
    def memory_bytes(op: str, strategy: str, m: int, n: int, nnz: float, r: int, p: int,
                     c: int, dtype=np.float32, overlap: bool = False,
                     local: dict[str, int] | None = None) -> Memory:
        """Bytes one rank holds for one ``op``. Not collective.

        S's two CSR blocks of the superblock's rows (and their cached transposes where a
        call runs SpMMB), the partition ordering S (its default where one applies), the plan
        (the ids of the rows received, the rows sent), the superblock T and its accumulator
        (c > 1), the exchange buffers (the rows received
        and the rows sent at width r; a B-side output adds its partial rows and the rows
        coming back), the caller's dense blocks, and the SDDMM result a FusedMM with
        "none" or "reuse" passes to its SpMM. Without ``local``
        (:meth:`SparseAware15D.memory_counts`, or
        :func:`distmm.core.exchange.exchange_model`'s counts), the pattern-free bound:
        every row of the layer's other blocks received."""
        q, it = p // c, np.dtype(dtype).itemsize
        k = merged({"rows_a": ceil_div(m, p), "rows_b": ceil_div(n, p),
                    "super": ceil_div(m * c, p), "nnz_a": ceil_div(nnz, p),
                    "recv": ceil_div(n, p) * (q - 1), "send": ceil_div(n, p) * (q - 1),
                    "share": ceil_div(nnz, p),
                    # the partition that orders S by default (int64 parts of its n rows)
                    "partition": (8 * m if m == n else 8 * (m + n))
                    if default_method((m, n), p) else 0,
                    # rank 0 partitioning S at distribute (the default order)
                    "partitioner": partition_peak_bytes(m, n, nnz, p)
                    if default_method((m, n), p) else 0},
                   local)
        k.setdefault("t_cols", k["recv"] + k["rows_b"])
        k.setdefault("t_blocks", 2)
        parts = {"permutations": perm_bytes(m, n), "partition": k["partition"],
                 "S": csr_bytes(k["super"], k["nnz_a"], it, 2),
                 # the ids of the rows received and of the rows sent (forwarded ones
                 # included), four counts per layer rank (each phase's sends, receives)
                 # and a flag (whether it takes this rank's whole block)
                 "exchange plan": 8 * (k["recv"] + k["send"]) + 33 * q,
                 # block offsets of A and B, the two blocks' value offsets and column bases,
                 # the fiber's A block sizes
                 "bookkeeping": 16 * (p + 1) + 24 + 16 + 8 * c}
        call: dict[str, int] = {}
        if op in ("spmm_b", "fusedmm_b"):
            # adding one source's rows reads them out of the result first (a temporary)
            call["partial sum"] = k["send"] * r * it
            # built by the kernel for the blocks that have nonzeros
            parts["S transpose"] = transpose_bytes(k["t_cols"], k["nnz_a"], k["t_blocks"])
            parts["partial rows"] = (k["recv"] + k["send"]) * r * it
        if op != "spmm_b":  # every other op gathers B's rows
            parts["exchange"] = (k["recv"] + k["send"]) * r * it
        if c > 1:
            if op != "spmm_a":
                parts["replication"] = k["super"] * r * it
            if op in ("spmm_a", "fusedmm_a"):
                parts["reduction"] = k["super"] * r * it
        if op.startswith("fusedmm") and strategy != "fusion":
            call["SDDMM result"] = k["nnz_a"] * it
        parts.update(operand_bytes(op, k["rows_a"], k["rows_b"], r, k["nnz_a"], it))
        return Memory(parts, call, place_bytes(k["share"], k["nnz_a"], k["nnz_a"], it)
                      + parts["permutations"], partitioner=k["partitioner"])


class SparseAware15D(DistributedAlgorithm):
    """S distributed for the 1.5D sparsity-aware algorithms; SDDMM, SpMM and FusedMM on it.

    Collective construction over ``comm`` with p ranks and replication factor ``c`` (c must
    divide p); builds the exchange plan. Every operation is collective over ``comm`` and takes
    and returns dense blocks in this object's distribution: rank (u, v) holds rows
    ``dense_rows(side, rank)`` (block uc + v) of A ("a") and B ("b"), all r columns.
    """

    name = "15d-sparse-aware"
    strategies = STRATEGIES
    supports_overlap = True
    grid_class = ProcessGrid15D
    # Its words depend on S's pattern and order: the planner from m, n and nnz alone
    # (distmm.perf.planner.plan) leaves it out; distmm.perf.sparse_planner ranks it.
    needs_pattern = True
    model = SparseAware15DModel
    # Relay rows needed by many ranks of a layer through some of them (a tree of depth 2;
    # distmm.core.exchange.relay_parents), where that lowers the busiest rank's rows sent.
    relay = True

    def __init__(self, source: CooShare, comm, *args, relay=None, **kwargs) -> None:
        """As :class:`DistributedAlgorithm`; ``relay`` (default: the class's, True: "auto")
        builds the relay tree of the exchange (:func:`distmm.core.exchange.relay_parents`): a
        row needed by many ranks of a layer reaches some of them through others that need it
        anyway, where the rule of :func:`distmm.core.relay_rule.relay_rule` keeps it ("auto",
        "on", a :class:`~distmm.core.relay_rule.RelayRule`); False or "off": every row from
        its owner."""
        if relay is not None:
            self.relay = relay_rule(relay)
        super().__init__(source, comm, *args, **kwargs)

    def _balance_permutations(self, source: CooShare, mode: str, seed: int
                              ) -> tuple[np.ndarray, np.ndarray]:
        """The base class's orderings, or, for a partitioner's (``"kahip"``, ``"kahypar"``)
        or a saved partition's (``"partition"``), rows and columns ordered by part: the parts
        become the p blocks (:func:`order_by_partition`). The default (``"auto"``) is the
        partitioner of :func:`~distmm.core.partition.default_method` where it applies (p > 1,
        the package installed), unless the natural blocks give the busiest rank fewer words
        at this c (:func:`pick_order`), else the base class's.
        Collective."""
        default = permute_mode(self.permute) == "auto"
        if default:
            mode = default_method(self.shape, self.p) or mode
        if mode not in PARTITION_MODES + ("partition",):
            return super()._balance_permutations(source, mode, seed)
        part = order_by_partition(self, source, mode, seed, compare=default)
        if part is None:  # the default keeps the natural blocks at this c
            return super()._balance_permutations(source, applied_mode("auto", self.p), seed)
        self.permute = part  # a layout shared from this object follows the same parts
        perm, _ = part.permutation()
        if part.col_parts is None:  # a square S: columns follow the rows
            return perm, perm
        return perm, part.column_permutation()[0]

    def _setup(self, source: CooShare) -> None:
        m, n = self.shape
        p, c = self.p, self.c
        self.offsets = {"a": block_offsets(m, p), "b": block_offsets(n, p)}
        if getattr(self.permute, "is_partition", False):
            self.partition = self.permute
            self.offsets = {"a": self.permute.permutation()[1],
                            "b": self.permute.column_permutation()[1]}
        oa, ob = self.offsets["a"], self.offsets["b"]
        rows = self.row_inv[source.rows]
        cols = self.col_inv[source.cols]
        owners = self.grid.world_rank(block_of(rows, oa) // c, block_of(cols, ob) % c)
        self._own = self.grid.u * c + self.grid.v
        self._o: Orientation = self.placement.place("a", np.asarray(owners, dtype=np.int64), rows,
                                           cols, source.vals, self._layout())
        # what building the plan cost this rank, kept apart from the counters a caller resets
        self.plan_cost = {"words": self.stats.words("plan"),
                          "messages": self.stats.words("plan", "messages_sent"),
                          "seconds": self.stats.seconds.get("plan", 0.0)}
        fiber = self.grid.fiber_blocks()
        self._fiber_sizes = np.diff(oa)[fiber].astype(np.int64)

    def _layout(self):
        """Blocks 0 (own B block's columns) and 1 (the others, compact) of the superblock."""
        oa, ob, c, own = self.offsets["a"], self.offsets["b"], self.c, self._own
        u = self.grid.u
        row_base = int(oa[u * c])
        nrows = int(oa[u * c + c]) - row_base
        own_base, own_cols = int(ob[own]), int(ob[own + 1] - ob[own])

        def layout(x: np.ndarray, y: np.ndarray):
            remote = block_of(y, ob) != own
            needed = np.unique(y[remote])
            # the plan is built here (collective: every rank lays out its entries once, at
            # the same point of placing S), because block 1's compact columns follow the
            # order the rows arrive in, which the relay tree sets
            layer = np.arange(self.grid.q) * c + self.grid.v  # the layer's B blocks
            self.exchange = plan = RowExchange.build(
                self.layer, needed, block_of(needed, ob) // c, own_base, phase="plan",
                relay=self.relay, owner_of=lambda g: block_of(g, ob) // c,
                blocks=np.stack((ob[layer], ob[layer + 1]), axis=1))
            self._needed = ids = plan.buffer_ids  # the received rows (whole blocks: all)
            srt = np.argsort(ids, kind="stable")
            at = srt[np.searchsorted(ids, needed, sorter=srt)]  # sorted index -> position
            lc = y - own_base
            lc[remote] = at[np.searchsorted(needed, y[remote])]
            return (remote.astype(np.int64), x - row_base, lc, 2,
                    [(nrows, own_cols), (nrows, int(ids.size))], row_base, [own_base, 0])

        return layout

    def dense_rows(self, side: str, rank: int) -> np.ndarray:
        u, v = self.grid.position(rank)
        return block_range(self.offsets[side], u * self.c + v)

    # ----------------------------------------------------------------- values of S
    @property
    def values(self) -> np.ndarray:
        """S's current values on this rank: block 0's, then block 1's (a view)."""
        return self._o.values

    def _store_values(self, values: np.ndarray) -> None:
        self._o.values[...] = values

    def value_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        o = self._o
        own, remote = o.blocks
        rows = np.concatenate((own.row_ids(), remote.row_ids())) + o.row_base
        cols = np.concatenate((own.indices.astype(np.int64) + int(o.col_bases[0]),
                               self._needed[remote.indices]))
        return rows, cols

    def _describe(self) -> dict:
        x = self.exchange
        return {"value_order": "own B block's columns first, then the others (CSR order)",
                "exchange": {"rows_received": x.nrecv, "rows_sent": x.nsend,
                             "rows_relayed": int(x.relay_rows.size),
                             "whole_blocks_sent": int(x.whole.sum()),
                             "relay": "on" if x.relayed else ("off" if not self.relay
                                                              else "not needed"),
                             "peers_received": int(np.count_nonzero(x.recvcounts)
                                                   + np.count_nonzero(x.relay_recvcounts)),
                             "peers_sent": int(np.count_nonzero(x.sendcounts)
                                               + np.count_nonzero(x.relay_sendcounts)),
                             "plan": self.plan_cost}}

    # ----------------------------------------------------------------- the loop
    def _replicate_a(self, A_loc: np.ndarray) -> np.ndarray:
        """The superblock T: A's blocks of the fiber, all-gathered (phase "replication")."""
        if self.c == 1:
            return A_loc
        w = A_loc.shape[1]
        T = self._kernels.buffer("T", (int(self._fiber_sizes.sum()), w))
        self.fiber.allgatherv(A_loc, T, self._fiber_sizes * w)
        return T

    def _reduce_a(self, T_out: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Reduce-scatter the superblock output back to A's blocks (phase "reduction")."""
        if self.c == 1:
            return T_out
        w = T_out.shape[1]
        if out is None:
            out = aligned_empty((int(self._fiber_sizes[self.fiber.rank]), w), self.dtype)
        self.fiber.reduce_scatter(T_out, out, self._fiber_sizes * w)
        return out

    def _a_accumulator(self, r: int, out: np.ndarray | None) -> np.ndarray:
        """Where the A-side superblock output accumulates (the result itself when c = 1)."""
        rows = self._o.blocks[0].shape[0]
        if self.c > 1:
            return self._kernels.buffer("T_out", (rows, r))
        return aligned_empty((rows, r), self.dtype) if out is None else out

    def _start_gather(self, B_loc: np.ndarray, r: int):
        """Start the exchange of B's needed rows: (requests, the compact rows' buffer).
        Without overlap its first phase is complete on return (``wait``)."""
        x = self.exchange
        recv = self._kernels.buffer("recv", (x.nrecv, r))
        send = self._kernels.buffer("send", (x.nsend, r))
        return x.start_gather(B_loc, send, recv, wait=not self.overlap), recv

    def _kernel(self, t: int, op: str, vals, X, Y, out, accumulate: bool) -> None:
        """The node model's ``op`` on block t (values ``vals`` in value order)."""
        o = self._o
        S = o.blocks[t]
        if not S.nnz and (accumulate or op == "sddmm"):  # it would add nothing, write nothing
            return
        sv = o.block_values(vals, t)
        key = (self._kind, t, op, accumulate, X.shape[1])
        if op == "sddmm":
            self._kernels.run(key, (vals, X, Y, out), op, S, sv, X, Y, o.block_values(out, t),
                             accumulate=False)
        elif op in ("spmm_a", "spmm_b"):
            self._kernels.run(key, (vals, X, out), op, S, sv, X, None, out,
                             accumulate=accumulate)
        else:
            self._kernels.run(key, (vals, X, Y, out), op, S, sv, X, Y, out,
                             accumulate=accumulate)

    def _with_rows(self, B_loc: np.ndarray, r: int, run) -> np.ndarray:
        """Exchange B's needed rows and call ``run(t, Y)`` on block 0 (B's own rows) and block
        1 (the received rows); with overlap, block 0 runs while the rows travel."""
        reqs, recv = self._start_gather(B_loc, r)
        if not self.overlap:
            self.exchange.finish(reqs)
        run(0, B_loc)
        if self.overlap:
            self.exchange.finish(reqs)
        run(1, recv)
        return recv

    def _b_output(self, r: int, out: np.ndarray | None, own_kernel, remote_kernel
                  ) -> np.ndarray:
        """A B-side output: ``remote_kernel(partial)`` writes the partial rows of other ranks'
        blocks, which travel home while ``own_kernel(result)`` writes this rank's own block;
        then the received partial rows are added."""
        x = self.exchange
        result = aligned_empty((self._local_rows("b"), r), self.dtype) if out is None else out
        partial = self._kernels.buffer("partial", (x.nrecv, r))
        back = self._kernels.buffer("back", (x.nsend, r))
        remote_kernel(partial)
        reqs = x.start_scatter(partial, back, wait=not self.overlap)
        if not self.overlap:
            x.finish(reqs)
        own_kernel(result)
        if self.overlap:
            x.finish(reqs)
        x.add_received(result, back)
        return result

    # ----------------------------------------------------------------- the operations
    def _sddmm(self, A_loc, B_loc, vals, r, out, T=None):
        T = self._replicate_a(A_loc) if T is None else T
        if out is None:
            out = np.empty(self._o.nnz, dtype=self.dtype)
        self._with_rows(B_loc, r, lambda t, Y: self._kernel(t, "sddmm", vals, T, Y, out,
                                                            False))
        return out

    def _spmm_a(self, B_loc, vals, r, out):
        acc = self._a_accumulator(r, out)
        self._with_rows(B_loc, r, lambda t, Y: self._kernel(t, "spmm_a", vals, Y, None, acc,
                                                            t == 1))
        return self._reduce_a(acc, out)

    def _spmm_b(self, A_loc, vals, r, out, T=None):
        T = self._replicate_a(A_loc) if T is None else T
        return self._b_output(
            r, out, lambda res: self._kernel(0, "spmm_b", vals, T, None, res, False),
            lambda part: self._kernel(1, "spmm_b", vals, T, None, part, False))

    def _spmm_multi(self, side: str, X: np.ndarray, V: np.ndarray, heads: int,
                    out: np.ndarray | None) -> np.ndarray:
        """The multi-value SpMM (:mod:`~distmm.algorithms.multivalue`): this family's SpMMA or
        SpMMB loop at width heads * F with the multi-value kernel on each block (every head
        in one pass over its nonzeros), so one exchange of width heads * F moves the rows:
        the words of one single-value call of that width."""
        r, o = X.shape[1], self._o
        if side == "a":
            acc = self._a_accumulator(r, out)
            self._with_rows(X, r, lambda t, Y: block_kernel(self, o, t, "spmm_multi_a", V, Y,
                                                            acc, heads, first=t == 0))
            return self._reduce_a(acc, out)
        T = self._replicate_a(X)
        return self._b_output(
            r, out, lambda res: block_kernel(self, o, 0, "spmm_multi_b", V, T, res, heads, True),
            lambda part: block_kernel(self, o, 1, "spmm_multi_b", V, T, part, heads, True))

    def _fusedmm(self, side: str, A_loc, B_loc, strategy: str, r: int, out=None,
                 values=None) -> np.ndarray:
        vals = self._values_for("a", values)
        if strategy == "none":
            R = self._sddmm(A_loc, B_loc, vals, r, None)
            if side == "a":
                return self._spmm_a(B_loc, R, r, out)
            return self._spmm_b(A_loc, R, r, out)
        T = self._replicate_a(A_loc)
        if side == "a":
            acc = self._a_accumulator(r, out)
            if strategy == "fusion":
                self._with_rows(B_loc, r, lambda t, Y: self._kernel(
                    t, "fusedmm_a", vals, T, Y, acc, t == 1))
            else:
                R = np.empty(self._o.nnz, dtype=self.dtype)

                def both(t, Y):
                    self._kernel(t, "sddmm", vals, T, Y, R, False)
                    self._kernel(t, "spmm_a", R, Y, None, acc, t == 1)

                self._with_rows(B_loc, r, both)
            return self._reduce_a(acc, out)
        if strategy == "fusion":
            # this rank's own block is written while B's needed rows travel; then the partial
            # rows of the others' blocks, which travel home
            x = self.exchange
            reqs, recv = self._start_gather(B_loc, r)
            if not self.overlap:
                x.finish(reqs)
            res = aligned_empty((self._local_rows("b"), r), self.dtype) if out is None else out
            self._kernel(0, "fusedmm_b", vals, T, B_loc, res, False)
            if self.overlap:
                x.finish(reqs)
            return self._b_output(
                r, res, lambda res: None,
                lambda part: self._kernel(1, "fusedmm_b", vals, T, recv, part, False))
        R = np.empty(self._o.nnz, dtype=self.dtype)
        self._with_rows(B_loc, r, lambda t, Y: self._kernel(t, "sddmm", vals, T, Y, R, False))
        return self._b_output(
            r, out, lambda res: self._kernel(0, "spmm_b", R, T, None, res, False),
            lambda part: self._kernel(1, "spmm_b", R, T, None, part, False))

    def _exact_counts(self, op: str, strategy: str) -> dict:
        x = self.exchange
        return {"a_rows": self._local_rows("a"), "super_rows": int(self._fiber_sizes.sum()),
                "gather_rows": x.nsend,
                "gather_peers": int(np.count_nonzero(x.sendcounts)
                                    + np.count_nonzero(x.relay_sendcounts)),
                "scatter_rows": x.nrecv,
                "scatter_peers": int(np.count_nonzero(x.recvcounts)
                                     + np.count_nonzero(x.relay_recvcounts))}

    def _partition_bytes(self) -> int:
        """Bytes of the partition ordering S on this rank (its row and column parts)."""
        part = getattr(self, "partition", None)
        if part is None:
            return 0
        return int(part.parts.nbytes) + (0 if part.col_parts is None
                                          else int(part.col_parts.nbytes))

    def memory_counts(self, r: int) -> dict[str, int]:
        """This rank's sizes for :meth:`memory_bytes`."""
        x = self.exchange
        return {"rows_a": self._local_rows("a"), "rows_b": self._local_rows("b"),
                "super": int(self._fiber_sizes.sum()), "nnz_a": self._o.nnz,
                "recv": x.nrecv, "send": x.nsend,
                "partition": self._partition_bytes(),
                "t_blocks": sum(1 for blk in self._o.blocks if blk.nnz),
                "t_cols": sum(blk.shape[1] for blk in self._o.blocks if blk.nnz)}


def order_by_partition(obj: DistributedAlgorithm, source: CooShare, mode: str, seed: int,
                       compare: bool = False) -> Partition | None:
    """The partition that orders S for ``obj`` (collective over ``obj.comm``; every check is
    agreed on every rank before any of S's entries move).

    ``mode`` "partition": ``obj.permute`` is a saved :class:`~distmm.core.partition.Partition`,
    refused unless it was made for S's shape, its entry count and ``obj.p`` parts. "kahip"
    or "kahypar": S's pattern is gathered on rank 0 (counted under "distribute"), partitioned
    there (:func:`distmm.core.partition.partition`: rows and columns together for a square
    S, a row and a column partition for a rectangular one) and the parts broadcast. With
    ``compare`` (the default order), None where the natural blocks give the busiest rank
    fewer words at ``obj.c`` (:func:`pick_order`, the same rule
    as the planner's)."""
    m, n = obj.shape
    entries = obj.comm.allreduce(int(source.nnz))
    if mode == "partition":
        part = obj.permute
        obj._agree(part.problem((m, n), obj.p, entries))
        return part
    problem = None
    try:
        check_method(mode)
    except InputError as exc:
        problem = str(exc)
    obj._agree(problem)
    pieces = obj.comm.gather((source.rows, source.cols), root=0)
    obj.stats.add("distribute", 2 * source.nnz if obj.rank else 0,
                  2 * (entries - source.nnz) if obj.rank == 0 else 0,
                  int(obj.rank > 0), obj.p - 1 if obj.rank == 0 else 0)
    part, problem = None, None
    if obj.rank == 0:
        rows = np.concatenate([x[0] for x in pieces])
        cols = np.concatenate([x[1] for x in pieces])
        S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(m, n))
        try:
            part = partition(S, obj.p, mode, seed=seed)
        except InputError as exc:
            problem = str(exc)
        if part is not None and compare:
            # the planner's two orders, built alike (blocks: the base class's order)
            mine = order(rows, cols, (m, n), obj.p, part, seed)
            blocks = order(rows, cols, (m, n), obj.p, "blocks", seed)
            if pick_order(rows, cols, (m, n), obj.p, obj.c, [mine, blocks],
                          getattr(obj, "relay", True)) is blocks:
                part = None
    wait_quietly(obj.comm, 0)
    obj._agree(problem)
    part = obj.comm.bcast(part, root=0)
    if part is None:
        return None
    return Partition(part.parts, part.p, part.n, entries, part.method, part.imbalance,
                     part.seconds, part.col_parts)


def sparse_aware_15d_exact(op: str, m: int, n: int, r: int, p: int, c: int,
                           strategy: str = "none", *, a_rows: float | None = None,
                           super_rows: float | None = None, gather_rows: float | None = None,
                           gather_peers: float | None = None,
                           scatter_rows: float | None = None,
                           scatter_peers: float | None = None) -> dict[str, dict[str, float]]:
    """Words and messages sent per rank, per phase, by :class:`SparseAware15D` for one op.

    ``gather_rows``/``gather_peers``: rows this rank sends in one exchange of B's rows and to
    how many ranks; ``scatter_rows``/``scatter_peers``: the partial rows it sends back in a
    B-side output (the rows it receives in a gather) and to how many ranks. Missing counts
    take the pattern-free bound (m/p A rows, mc/p superblock rows, all n/p rows of its block
    to each of the q - 1 others). Returns ``{phase: {"words", "messages"}}`` for
    replication, propagation and reduction."""
    require(op in OPS, f"unknown op {op!r}")
    require(p % c == 0, f"c={c} does not divide p={p}")
    require(strategy in STRATEGIES, f"unknown strategy {strategy!r}")
    q = p // c
    a = m / p if a_rows is None else a_rows
    T = m * c / p if super_rows is None else super_rows
    g = n / p * (q - 1) if gather_rows is None else gather_rows
    gp = q - 1 if gather_peers is None else gather_peers
    s = n / p * (q - 1) if scatter_rows is None else scatter_rows
    sp = q - 1 if scatter_peers is None else scatter_peers
    fiber = c - 1
    repl = {"words": 0.0, "messages": 0}
    prop = {"words": 0.0, "messages": 0}
    red = {"words": 0.0, "messages": 0}

    def add(d: dict, words: float, msgs: int, times: int = 1) -> None:
        d["words"] += times * words
        d["messages"] += times * msgs

    gather = (g * r, gp)
    scatter = (s * r, sp)
    replicate = (fiber * a * r, fiber)
    reduce = ((T - a) * r, fiber)
    k = 2 if strategy == "none" else 1
    if op == "sddmm":
        add(repl, *replicate)
        add(prop, *gather)
    elif op == "spmm_a":
        add(prop, *gather)
        add(red, *reduce)
    elif op == "spmm_b":
        add(repl, *replicate)
        add(prop, *scatter)
    elif op == "fusedmm_a":
        add(repl, *replicate)
        add(prop, *gather, times=k)
        add(red, *reduce)
    else:
        add(repl, *replicate, times=k)
        add(prop, *gather)
        add(prop, *scatter)
    if c == 1:
        repl = {"words": 0.0, "messages": 0}
        red = {"words": 0.0, "messages": 0}
    return {"replication": repl, "propagation": prop, "reduction": red}


__all__ = ["SparseAware15D", "sparse_aware_15d_exact"]


# The family's order: also the planner's (distmm.perf.sparse_planner ranks the family with it)
def order(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int, permute="auto",
          seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict]:
    """(row_inv, col_inv, offsets, info): S's order as :func:`distmm.distribute` would make it
    with ``permute`` on p ranks (``inv[old] = new``; offsets of the parts when a partition
    sets the blocks: one array for a square S, a pair (rows', columns') for a rectangular
    one; else None) and how it was made (the partitioner's seconds). Not collective."""
    m, n = shape
    info: dict = {"permute": "partition" if getattr(permute, "is_partition", False)
                  else applied_mode(permute, p)}
    if permute_mode(permute) == "auto":  # the family's default: a partition where it can
        info["permute"] = default_method(shape, p) or info["permute"]
    part = None
    if info["permute"] in PARTITION_MODES:
        t0 = time.perf_counter()
        part = partition(sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=shape), p,
                         info["permute"], seed=seed)
        info["partition_s"] = time.perf_counter() - t0
    elif info["permute"] == "partition":
        part = permute
        problem = part.problem((m, n), p, int(rows.size))
        if problem is not None:
            raise InputError(problem)
    if part is not None:
        info["partition"] = part  # a run may reuse it (not JSON: callers printing info drop it)
        perm, offsets = part.permutation()
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.size)
        if part.col_parts is None:
            return inv, inv, offsets, info
        cperm, col_offsets = part.column_permutation()
        cinv = np.empty_like(cperm)
        cinv[cperm] = np.arange(cperm.size)
        return inv, cinv, (offsets, col_offsets), info
    row_w = np.bincount(rows, minlength=m)
    col_w = np.bincount(cols, minlength=n)
    if m == n:
        perm = balance_permutation(permute, m, p, seed, [row_w, col_w])
        perms = (perm, perm)
    else:
        perms = (balance_permutation(permute, m, p, seed, [row_w]),
                 balance_permutation(permute, n, p, seed + 1, [col_w]))
    invs = []
    for perm in perms:
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.size)
        invs.append(inv)
    return invs[0], invs[1], None, info


def busiest_rows(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int, c: int,
                 ordered: tuple, relay: bool = True) -> int:
    """The busiest rank's words per FusedMMA ("fusion") at width 1 (every phase's words are
    proportional to r) with S's entries ``rows``/``cols`` (original coordinates) in the order
    ``ordered`` (:func:`order`'s result) at replication c, with or without the relay tree.
    Not collective."""
    row_inv, col_inv, offsets, _ = ordered
    m, n = shape
    model = exchange_model(row_inv[rows], col_inv[cols], shape, p, c, offsets=offsets,
                           relay=relay)
    return int(max(sum(ph["words"] for ph in sparse_aware_15d_exact(
        "fusedmm_a", m, n, 1, p, c, "fusion", **model.rank(k)).values()) for k in range(p)))


def default_orders(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int,
                   permute="auto", seed: int = 0) -> list[tuple]:
    """The orders the family's ``permute`` may place S in: :func:`order`'s, and with the
    default (``"auto"``) where it partitions, the natural-order blocks too, second (the run
    keeps, at its c, the partition where it saves the busiest rank at least
    :data:`PARTITION_MIN_SAVING` of the blocks' words: :func:`pick_order`). Not collective."""
    first = order(rows, cols, shape, p, permute, seed)
    if permute_mode(permute) == "auto" and "partition" in first[3]:
        return [first, order(rows, cols, shape, p, "blocks", seed)]
    return [first]


# The share of the natural blocks' busiest-rank words a partition must save to be kept.
# A partition's parts balance nonzeros, not rows, and its rank packs the rows it sends where
# the blocks' ranks often send whole blocks straight from the caller's array; a small saving
# of words does not repay that (docs/algorithms/15d-sparse-aware.md, "Ordering").
PARTITION_MIN_SAVING = 0.25


def pick_order(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], p: int, c: int,
               orders: list[tuple], relay: bool = True) -> tuple:
    """Of :func:`default_orders`' orders (the partition, then the natural blocks), the one the
    run keeps at replication c: the partition where its busiest rank sends at most
    ``1 - PARTITION_MIN_SAVING`` of the blocks' busiest rank's words (:func:`busiest_rows`),
    else the blocks. Why: a partition balances nonzeros and minimises total volume, which on
    a matrix no order helps (MovieLens's ratings) can leave the busiest rank more words than
    the natural blocks, or too few fewer to pay for its packed rows and row imbalance.
    Not collective."""
    if len(orders) == 1:
        return orders[0]
    part, blocks = (busiest_rows(rows, cols, shape, p, c, o, relay) for o in orders)
    return orders[0] if part <= (1.0 - PARTITION_MIN_SAVING) * blocks else orders[1]
