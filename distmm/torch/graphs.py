"""A graph from PyTorch data (``edge_index``), placed on MPI ranks for distmm.torch's layers.

Conventions (PyTorch Geometric's): ``edge_index`` is a (2, E) integer tensor, row 0 the
sources and row 1 the targets of the edges, and messages flow from source to target. distmm's
sparse matrix S has the **target as its row and the source as its column** (``S[i, j] != 0``
for an edge j -> i), so ``S @ X`` aggregates each node's in-neighbours. S lives on the
``15d-dense-shift`` family (default) or the sparsity-aware ``15d-sparse-aware`` one: in both,
the A side (rows) and the B side (columns) of a rank are the same nodes, whole rows, so a
layer's output is the next layer's input with no redistribution. The other families split the
dense rows by columns over a group of ranks (A and B sides of a rank differ) and are refused.

Every rank holds the whole ``edge_index`` (and ``edge_weight``); node tensors are cut to this
rank's nodes, :attr:`Graph.nodes`, in that order (not a contiguous range: at p > 1 the nodes
come in runs spread over the graph, for load balance). Edge tensors in distmm's value order are
this rank's nonzeros of S (duplicate edges summed into one nonzero).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import distmm
from distmm.errors import InputError, agree
from distmm.torch import functions as F_
from distmm.torch.functions import torch

# The families a graph is placed on: those whose A and B blocks of a rank are the same nodes,
# whole rows (node tensors of one layout serve both sides). The others (15d-sparse-shift and
# the 2.5D families) split dense rows by columns over a group of ranks.
FAMILIES = ("15d-dense-shift", "15d-sparse-aware")

# the dtypes distmm computes in; float16 and bfloat16 are computed in float32
NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
_TORCH_THREADS_AT_IMPORT = torch.get_num_threads()


class NodeTensor(torch.Tensor):
    """A tensor of one rank's node rows in a graph's layout (:attr:`Graph.nodes` order).

    Made by ``graph.scatter``, ``graph.local`` and ``graph.as_local`` and returned by the
    layers; torch keeps the type through every operation on it (dropout, Linear, indexing), so
    the layers can tell this rank's rows from a tensor in the global node order, at every p.
    Otherwise an ordinary tensor."""


class AllGather(torch.autograd.Function):
    """Every rank's (rows, ...) block concatenated in rank order; backward: the sum over the
    ranks of the output gradients, this rank's slice (torch.distributed.nn's convention)."""

    @staticmethod
    def forward(ctx, x, comm, counts):
        ctx.comm, ctx.counts = comm, counts
        x = x.detach().contiguous()
        inner = int(np.prod(x.shape[1:], dtype=np.int64))
        out = torch.empty((int(sum(counts)),) + tuple(x.shape[1:]), dtype=x.dtype)
        sizes = [int(k) * inner for k in counts]
        comm.Allgatherv(x.numpy().reshape(-1), [out.numpy().reshape(-1), sizes])
        return out

    @staticmethod
    def backward(ctx, G):
        G = G.contiguous().clone()
        ctx.comm.Allreduce(MPI.IN_PLACE, G.numpy(), op=MPI.SUM)
        start = int(sum(ctx.counts[:ctx.comm.Get_rank()]))
        return G[start:start + ctx.counts[ctx.comm.Get_rank()]], None, None


class AllReduceSum(torch.autograd.Function):
    """The sum of x over the ranks; backward passes the gradient through unchanged, since each
    rank's share of the global sum is its own x (the data-parallel convention: the global loss
    is the sum of the ranks' terms, and parameter gradients are summed afterwards)."""

    @staticmethod
    def forward(ctx, x, comm):
        out = x.detach().contiguous().clone()
        comm.Allreduce(MPI.IN_PLACE, out.numpy(), op=MPI.SUM)
        return out

    @staticmethod
    def backward(ctx, G):
        return G, None


class Pattern:
    """One sparsity pattern of the graph (coalesced edges, optionally with every self-loop),
    its distributed objects per dtype and its per-kind values in value order."""

    def __init__(self, graph: Graph, rows: np.ndarray, cols: np.ndarray) -> None:
        n = graph.num_nodes
        self.graph = graph
        self.keys, inverse = np.unique(rows * n + cols, return_inverse=True)
        self.inverse = inverse.reshape(-1)  # input edge -> coalesced entry
        self.rows, self.cols = self.keys // n, self.keys % n  # targets, sources
        self.objs: dict = {}
        self.local: np.ndarray | None = None  # this rank's values -> coalesced entries
        self.values: dict = {}
        self.order = self.counts = None  # every rank's values -> coalesced entries (to_edges)

    def obj(self, np_dtype):
        """The distributed S of this pattern in ``np_dtype`` (collective on first use)."""
        key = np.dtype(np_dtype).name
        if key not in self.objs:
            g = self.graph
            S = _coo(self.rows, self.cols, np.ones(self.keys.size), g.num_nodes)
            layout = g.layout if g.layout is not None else g.permute
            obj = distmm.distribute(S, g.comm, algorithm=g.algorithm, c=g.c,
                                    dtype=np_dtype, permute=layout, seed=g.seed, root=None)
            if g.layout is None:
                g.layout = obj
            rows, cols = obj.value_coordinates()
            local = np.searchsorted(self.keys, obj.row_perm[rows].astype(np.int64)
                                    * g.num_nodes + obj.col_perm[cols])
            assert self.local is None or np.array_equal(local, self.local)
            self.local = local
            self.objs[key] = obj
        return self.objs[key]

    def value_tensor(self, kind: str, coalesced: np.ndarray, dtype):
        """Cached tensor of this rank's values in value order, from per-entry ``coalesced``."""
        key = (kind, dtype)
        if key not in self.values:
            self.obj(NP_DTYPES[dtype])
            self.values[key] = torch.from_numpy(
                np.ascontiguousarray(coalesced[self.local], dtype=NP_DTYPES[dtype]))
        return self.values[key]


def _coo(rows, cols, vals, n):
    import scipy.sparse as sp
    return sp.coo_matrix((vals, (rows, cols)), shape=(n, n))


class Graph:
    """A graph placed on the ranks of ``comm``: see :func:`graph`.

    Attributes
    ----------
    num_nodes : int
        N, the global node count.
    nodes : np.ndarray of int64
        This rank's nodes (global ids), in the order of the rows of its node tensors.
    num_local : int
        ``nodes.size``.
    comm : MPI.Comm
        The ranks.
    normalized : bool
        Whether the graph's own edge values are GCN-normalised (``normalize=True``).
    """

    def __init__(self, edge_index, num_nodes: int, comm: MPI.Comm, edge_weight, add_self_loops,
                 normalize, c: int, permute, seed: int, algorithm: str) -> None:
        self.comm, self.c, self.permute, self.seed = comm, c, permute, seed
        self.algorithm = algorithm
        self.p, self.rank = comm.Get_size(), comm.Get_rank()
        self.layout = None
        msg, src, dst, w = _read_edges(edge_index, num_nodes, edge_weight)
        if algorithm not in FAMILIES:
            msg = msg or (
                f"graph() places a graph on {' or '.join(FAMILIES)}, not {algorithm!r}: the "
                "layers need a rank's A side (rows of S, the targets) and B side (columns, the "
                "sources) to be the same nodes, whole rows, so that one layer's output is the "
                "next one's input; the other families split the dense rows by columns over a "
                "group of ranks")
        agree(comm, msg, same={"num_nodes": num_nodes, "edges": -1 if src is None else src.size,
                               "checksum": None if src is None else _checksum(src, dst, w),
                               "algorithm": str(algorithm)})
        self.num_nodes, self.num_edges = int(num_nodes), int(src.size)
        self.normalized = bool(normalize)
        if add_self_loops or normalize:
            src, dst, w = _remaining_self_loops(src, dst, w, num_nodes) if add_self_loops else (
                src, dst, w)
            if normalize:
                w = _gcn_norm(src, dst, w, num_nodes)
        self.src, self.dst, self.weight = src, dst, w  # the edges after the options
        self._duplicates: dict = {}
        self.patterns: dict = {"base": Pattern(self, dst, src)}
        obj = self.pattern("base").obj(np.float32)
        self.nodes = obj.local_rows("a")
        if not np.array_equal(self.nodes, obj.local_rows("b")):  # square, one permutation
            raise InputError("internal: the A and B blocks of a rank hold different nodes")
        self.num_local = int(self.nodes.size)
        self.counts = np.array(comm.allgather(self.num_local), dtype=np.int64)
        self._all_nodes: np.ndarray | None = None
        _settle_torch_threads()

    # ------------------------------------------------------------------ patterns and values
    def pattern(self, name: str) -> Pattern:
        """"base" (the edges after the graph's options) or "loops" (those and every
        self-loop). Not collective; the objects are made collectively on first use."""
        if name not in self.patterns:
            n = np.arange(self.num_nodes, dtype=np.int64)
            base = self.patterns["base"]
            if np.isin(n * self.num_nodes + n, base.keys).all():
                self.patterns[name] = base
            else:
                self.patterns[name] = Pattern(self, np.concatenate([self.dst, n]),
                                              np.concatenate([self.src, n]))
        return self.patterns[name]

    def obj(self, dtype=torch.float32, pattern: str = "base"):
        """The distributed S (a distmm object; rows targets, columns sources) whose values are
        the graph's edge values (summed over duplicates). Collective on first use per dtype."""
        pat = self.pattern(pattern)
        return pat.obj(NP_DTYPES[dtype])

    def values(self, kind: str = "weight", dtype=torch.float32, pattern: str = "base"):
        """This rank's values of S in value order, as a tensor (cached, no gradient).

        ``kind``: "weight" (the graph's edge values summed over duplicates; self-loops of the
        "loops" pattern that the graph lacks are 0), "gcn" (PyG's ``gcn_norm`` of those with
        the remaining self-loops, on the "loops" pattern), "mean" (1 / in-degree per edge,
        duplicates counted, on "base"), "ones"."""
        pat = self.pattern(pattern)
        key = (kind, dtype)
        if key not in pat.values:
            n = self.num_nodes
            if kind == "gcn":
                s, d, w = _remaining_self_loops(self.src, self.dst, self.weight, n)
                coalesced = _sum_into(pat, s, d, _gcn_norm(s, d, w, n))
            elif kind == "gcn_noloops":
                coalesced = _sum_into(pat, self.src, self.dst,
                                      _gcn_norm(self.src, self.dst, self.weight, n))
            elif kind == "mean":
                deg = np.bincount(self.dst, minlength=n).astype(np.float64)
                per_edge = 1.0 / deg[self.dst]
                coalesced = _sum_into(pat, self.src, self.dst, per_edge)
            elif kind == "weight":
                coalesced = _sum_into(pat, self.src, self.dst, self.weight)
            elif kind == "ones":
                coalesced = np.ones(pat.keys.size)
            else:
                raise InputError(f"unknown value kind {kind!r}")
            return pat.value_tensor(kind, coalesced, dtype)
        return pat.values[key]

    def duplicate_edges(self, ignore_loops: bool = False) -> bool:
        """Whether an edge (source, target) appears more than once (self-loops ignored when
        ``ignore_loops``). Not collective; computed once per graph."""
        if ignore_loops not in self._duplicates:
            keep = self.src != self.dst if ignore_loops else slice(None)
            keys = self.dst[keep] * self.num_nodes + self.src[keep]
            self._duplicates[ignore_loops] = bool(np.unique(keys).size < keys.size)
        return self._duplicates[ignore_loops]

    # ------------------------------------------------------------------ node tensors
    def _register(self, t):
        return t.as_subclass(NodeTensor)

    def as_local(self, t):
        """Mark ``t``, already this rank's rows in :attr:`nodes` order (from a per-rank loader,
        say), as a node tensor. Not collective; the row count is checked."""
        if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] != self.num_local:
            raise InputError(f"as_local takes this rank's {self.num_local} rows, got "
                             f"{_describe(t)}")
        return self._register(t)

    def local(self, X):
        """This rank's rows of a global node tensor ``X`` (N, ...) that every rank holds.

        Not collective. Differentiable (the gradient reaches X's rows of this rank)."""
        if not isinstance(X, torch.Tensor) or X.dim() == 0 or X.shape[0] != self.num_nodes:
            raise InputError(f"graph.local takes a tensor of {self.num_nodes} rows (every "
                             f"node), got {_describe(X)}")
        return self._register(X[torch.from_numpy(self.nodes)])

    def _every_node(self) -> np.ndarray:
        if self._all_nodes is None:
            self._all_nodes = np.concatenate(self.comm.allgather(self.nodes))
        return self._all_nodes

    def scatter(self, X=None, root: int = 0):
        """This rank's rows of the global node tensor ``X`` (N, ...) held by ``root`` (other
        ranks pass None). Collective over ``comm``. No gradient."""
        msg = None
        if self.rank == root and (not isinstance(X, torch.Tensor) or X.dim() == 0
                                  or X.shape[0] != self.num_nodes):
            msg = (f"graph.scatter: the root's tensor must have {self.num_nodes} rows (every "
                   f"node), got {_describe(X)}")
        agree(self.comm, msg)
        meta = self.comm.bcast((X.dtype, tuple(X.shape[1:])) if self.rank == root else None,
                               root=root)
        dtype, inner = meta
        width = int(np.prod(inner, dtype=np.int64))
        out = torch.empty((self.num_local,) + inner, dtype=dtype)
        view = _bytes(out)
        sizes = [int(k) * width * out.element_size() for k in self.counts]
        if self.rank == root:
            send = X.detach()[torch.from_numpy(self._every_node())].contiguous()
            self.comm.Scatterv([_bytes(send), sizes], view, root=root)
        else:
            self._every_node()
            self.comm.Scatterv(None, view, root=root)
        return self._register(out)

    def gather(self, Y, root: int | None = 0):
        """The global node tensor (N, ...) made of every rank's rows ``Y`` (this rank's
        :attr:`nodes`), on ``root`` (None elsewhere), or on every rank with ``root=None``.
        Collective. No gradient."""
        ok = isinstance(Y, torch.Tensor) and Y.dim() > 0 and Y.shape[0] == self.num_local
        agree(self.comm, None if ok else (f"graph.gather takes this rank's {self.num_local} "
                                          f"rows, got {_describe(Y)}"),
              same={"shape": None if not ok else tuple(Y.shape[1:]),
                    "dtype": None if not ok else str(Y.dtype)})
        Y = Y.detach().contiguous()
        nodes = torch.from_numpy(self._every_node())
        width = int(np.prod(Y.shape[1:], dtype=np.int64)) * Y.element_size()
        sizes = [int(k) * width for k in self.counts]
        buf = torch.empty((self.num_nodes,) + tuple(Y.shape[1:]), dtype=Y.dtype)
        if root is None:
            self.comm.Allgatherv(_bytes(Y), [_bytes(buf), sizes])
        else:
            self.comm.Gatherv(_bytes(Y), [_bytes(buf), sizes] if self.rank == root else None,
                              root=root)
            if self.rank != root:
                return None
        out = torch.empty_like(buf)
        out[nodes] = buf
        return out

    def check_nodes(self, x, name: str = "x") -> str | None:
        """A problem with ``x`` as this rank's node tensor, or None (not collective: the
        layers agree on the result in the call's one collective check)."""
        if not isinstance(x, torch.Tensor):
            return f"{name} must be a torch.Tensor, got {type(x).__name__}"
        if x.dim() == 0 or x.shape[0] != self.num_local:
            whole = " (every node: pass graph.local(x) or graph.scatter(x))" if (
                x.dim() and x.shape[0] == self.num_nodes) else ""
            return (f"{name} has {x.shape[0] if x.dim() else 0} rows{whole}; this rank holds "
                    f"{self.num_local} of the graph's {self.num_nodes} nodes (graph.nodes)")
        if not isinstance(x, NodeTensor):
            return (f"{name} was not made by graph.scatter, graph.local or graph.as_local (nor "
                    "computed from such a tensor): a tensor in the global node order passed "
                    "as this rank's rows gives wrong results at p > 1; cut it with "
                    "graph.local(x) or graph.scatter(x)")
        return None

    # ------------------------------------------------------------------ edge tensors
    def to_values(self, t, pattern: str = "base"):
        """An edge tensor (E, ...) in ``edge_index`` order (every rank holds it) as this
        rank's edge tensor in value order (duplicate edges summed; self-loops the options or
        the pattern added get 0). Not collective; differentiable."""
        pat = self.pattern(pattern)
        if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] != self.num_edges:
            raise InputError(f"to_values takes an edge tensor of {self.num_edges} rows "
                             f"(edge_index order), got {_describe(t)}")
        pat.obj(NP_DTYPES.get(t.dtype, np.float32))
        index = torch.from_numpy(pat.inverse[:self.num_edges])
        total = t.new_zeros((pat.keys.size,) + tuple(t.shape[1:])).index_add(0, index, t)
        return total[torch.from_numpy(pat.local)]

    def to_edges(self, v, pattern: str = "base"):
        """This rank's edge tensor ``v`` in value order as an edge tensor (E, ...) in
        ``edge_index`` order on every rank (duplicate edges each get their nonzero's value).
        Collective; differentiable (the gradient sums every rank's output gradients)."""
        pat = self.pattern(pattern)
        ok = isinstance(v, torch.Tensor) and v.dim() > 0 and pat.local is not None and (
            v.shape[0] == pat.local.size)
        have = 0 if pat.local is None else pat.local.size
        agree(self.comm, None if ok else (f"to_edges takes this rank's {have} values (value "
                                          f"order), got {_describe(v)}"))
        if pat.order is None:
            pat.counts = self.comm.allgather(int(pat.local.size))
            pat.order = torch.from_numpy(np.concatenate(self.comm.allgather(pat.local)))
        every = AllGather.apply(v, self.comm, pat.counts)
        coalesced = every.new_zeros((pat.keys.size,) + tuple(v.shape[1:]))
        coalesced = coalesced.index_copy(0, pat.order, every)
        return coalesced[torch.from_numpy(pat.inverse[:self.num_edges])]

    def spmm_heads(self, alpha, z, pattern: str = "base"):
        """Every head's aggregation ``Y[i, k] = sum_j alpha[(i, j), k] z[j, k]`` in one
        distributed multi-value SpMM (:mod:`distmm.torch.heads`), differentiable in ``alpha``
        and ``z``.

        ``alpha``: (this rank's nonzeros, h) in value order of the pattern ("base", or "loops"
        with every self-loop); ``z``: (num_local, h, F) node tensor. Returns (num_local, h, F).
        Collective."""
        from distmm.torch.heads import spmm_heads
        ok = (isinstance(z, torch.Tensor) and isinstance(alpha, torch.Tensor) and z.dim() == 3
              and alpha.dim() == 2 and z.shape[0] == self.num_local
              and alpha.shape[1] == z.shape[1] and z.dtype in NP_DTYPES)
        agree(self.comm, None if ok else (
            f"spmm_heads takes alpha (nonzeros, h) and z ({self.num_local}, h, F) of one float "
            f"dtype, got {_describe(alpha)} and {_describe(z)}"))
        F_._check_call(self.obj(z.dtype, pattern), None, alpha=alpha, z=z)
        return spmm_heads(self, pattern, alpha, z.contiguous())

    # ------------------------------------------------------------------ reductions
    def sum(self, x):
        """The sum of ``x`` (any shape) over the ranks, on every rank. Collective;
        differentiable (each rank's gradient is its own term's)."""
        if self.p == 1:
            return x
        return AllReduceSum.apply(x, self.comm)

    def mean(self, x):
        """The global mean of the entries of this rank's ``x`` and every other rank's: e.g.
        ``graph.mean(F.cross_entropy(out[mask], y[mask], reduction="none"))`` is the loss over
        every rank's masked nodes. Collective; differentiable."""
        count = int(x.numel()) if self.p == 1 else self.comm.allreduce(int(x.numel()))
        if count == 0:
            raise InputError("graph.mean: no entries on any rank")
        return self.sum(x.sum()) / count


def graph(edge_index, num_nodes: int, comm: MPI.Comm = MPI.COMM_WORLD, edge_weight=None,
          add_self_loops: bool = False, normalize: bool = False, c: int = 1,
          permute="auto", seed: int = 0, algorithm: str = "15d-dense-shift") -> Graph:
    """Place a graph given as PyTorch data on the ranks of ``comm``.

    Parameters
    ----------
    edge_index : Tensor or ndarray, shape (2, E), integer
        Row 0 the sources, row 1 the targets (PyTorch Geometric's convention). Every rank
        passes the same edges (checked).
    num_nodes : int
        N; node ids are 0 .. N-1.
    comm : MPI.Comm
        The ranks.
    edge_weight : Tensor, shape (E,), optional
        Edge weights in ``edge_index`` order (default 1).
    add_self_loops : bool
        Add a self-loop of weight 1 to each node without one (PyG's
        ``add_remaining_self_loops``: a node's existing self-loop keeps its weight).
    normalize : bool
        Scale the weights as GCN does, ``D^-1/2 A D^-1/2`` with D the weighted in-degree
        (PyG's ``gcn_norm``; with ``add_self_loops`` that is ``D^-1/2 (A + I) D^-1/2``).
    c, permute, seed
        distmm's replication factor and load-balancing permutation (:func:`distmm.distribute`;
        with ``15d-sparse-aware``, ``permute="kahip"`` or ``"kahypar"`` orders the nodes by a
        graph partition, or a saved :class:`distmm.core.partition.Partition` is used).
    algorithm : {"15d-dense-shift", "15d-sparse-aware"}
        The family S is placed on (:data:`FAMILIES`; the others are refused on every rank).

    Returns
    -------
    Graph
        Collective over ``comm``.
    """
    return Graph(edge_index, num_nodes, comm, edge_weight, add_self_loops, normalize, c,
                 permute, seed, algorithm)


# ---------------------------------------------------------------------------- helpers
def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a tensor of shape {tuple(t.shape)}"
    return "None" if t is None else f"a {type(t).__name__}"


def _bytes(t):
    """A byte view of a contiguous tensor for mpi4py (any dtype, bool included)."""
    return t.view(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)


def _read_edges(edge_index, num_nodes, edge_weight):
    """(problem or None, sources, targets, weights as float64)."""
    try:
        ei = edge_index.detach().cpu().numpy() if isinstance(edge_index, torch.Tensor) else (
            np.asarray(edge_index))
    except Exception as exc:  # noqa: BLE001 - any unreadable input is the user's to fix
        return f"edge_index could not be read: {exc}", None, None, None
    if ei.ndim != 2 or ei.shape[0] != 2 or not np.issubdtype(ei.dtype, np.integer):
        return (f"edge_index must be a (2, E) integer tensor (sources, targets), got shape "
                f"{ei.shape} of {ei.dtype}", None, None, None)
    if not isinstance(num_nodes, (int, np.integer)) or num_nodes < 1:
        return f"num_nodes must be a positive integer, got {num_nodes!r}", None, None, None
    ei = ei.astype(np.int64)
    if ei.size and (ei.min() < 0 or ei.max() >= num_nodes):
        return (f"edge_index has node ids in [{ei.min()}, {ei.max()}], outside "
                f"[0, {num_nodes})", None, None, None)
    E = ei.shape[1]
    if edge_weight is None:
        w = np.ones(E)
    else:
        w = (edge_weight.detach().cpu().numpy() if isinstance(edge_weight, torch.Tensor)
             else np.asarray(edge_weight)).astype(np.float64)
        if w.shape != (E,):
            return f"edge_weight must have shape ({E},), got {w.shape}", None, None, None
        if not np.isfinite(w).all():
            return "edge_weight has NaN or infinite entries", None, None, None
    return None, ei[0].copy(), ei[1].copy(), w


def _checksum(src, dst, w) -> tuple:
    k = np.arange(1, src.size + 1, dtype=np.int64)
    return (int((src * k).sum() % (1 << 61)), int((dst * k).sum() % (1 << 61)),
            float(np.round(w.sum(), 6)))


def _remaining_self_loops(src, dst, w, n):
    """PyG's ``add_remaining_self_loops`` (fill 1): loops removed, then one per node, with the
    weight of the node's (last) existing loop or 1."""
    loop = src == dst
    loop_w = np.ones(n)
    loop_w[src[loop]] = w[loop]
    nodes = np.arange(n, dtype=np.int64)
    return (np.concatenate([src[~loop], nodes]), np.concatenate([dst[~loop], nodes]),
            np.concatenate([w[~loop], loop_w]))


def _gcn_norm(src, dst, w, n):
    """``w_e / sqrt(deg(src) deg(dst))`` with deg the weighted in-degree (PyG's gcn_norm)."""
    deg = np.bincount(dst, weights=w, minlength=n)
    with np.errstate(divide="ignore"):
        dis = np.where(deg > 0, deg ** -0.5, 0.0)
    return dis[src] * w * dis[dst]


def _sum_into(pat: Pattern, src, dst, w) -> np.ndarray:
    """Per-edge values summed onto ``pat``'s coalesced entries (edges not in pat: error)."""
    keys = dst * pat.graph.num_nodes + src
    pos = np.searchsorted(pat.keys, keys)
    assert np.array_equal(pat.keys[np.minimum(pos, pat.keys.size - 1)], keys)
    return np.bincount(pos, weights=w, minlength=pat.keys.size)


def _settle_torch_threads() -> None:
    """torch's intra-op threads follow distmm's per-rank share of the node's cores, unless the
    user chose a count (OMP_NUM_THREADS, or torch.set_num_threads before this call)."""
    import os

    from distmm.kernels import threads
    if "OMP_NUM_THREADS" in os.environ or torch.get_num_threads() != _TORCH_THREADS_AT_IMPORT:
        return
    share = threads.STATE.get("threads")
    if share:
        torch.set_num_threads(int(share))

