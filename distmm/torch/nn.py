"""Graph layers on a distributed :class:`~distmm.torch.graph.Graph`, as ``torch.nn.Module``\\ s.

``GCNConv``, ``GATConv`` and ``SAGEConv`` compute what PyTorch Geometric's layers of the same
names compute, with the same parameter names and shapes (``load_state_dict`` of a PyG layer's
weights works), called as ``conv(x, graph)`` where PyG takes ``conv(x, edge_index)``: ``x`` is
this rank's node tensor (rows ``graph.nodes``, from ``graph.scatter`` or ``graph.local``) and
the result is this rank's rows of the output. Every call is collective over ``graph.comm``
(forward and backward): every rank calls the same layers in the same order.

:class:`DataParallel` wraps a model so that its parameters start equal on every rank and
their gradients are summed over the ranks after each backward; with ``graph.mean`` for the
loss, a PyG training loop keeps its shape.

float16 and bfloat16 inputs are computed in float32 and the result returned in the input's
dtype; float32 and float64 are computed as they are (one distributed S per dtype, made on
first use).
"""

from __future__ import annotations

import math
import weakref

import numpy as np
from mpi4py import MPI

from distmm.errors import InputError
from distmm.torch import functions as fn
from distmm.torch.attention import attend
from distmm.torch.functions import torch
from distmm.torch.graphs import NP_DTYPES, Graph, NodeTensor

F = torch.nn.functional
LOW_PRECISION = (torch.float16, torch.bfloat16)


def _work_dtype(x) -> torch.dtype:
    """The dtype a layer computes in for input ``x`` (float32 for float16 / bfloat16)."""
    if not isinstance(x, torch.Tensor):
        return torch.float32
    if x.dtype in LOW_PRECISION:
        return torch.float32
    return x.dtype if x.dtype in NP_DTYPES else torch.float32


# A layer's input with at most this share of nonzero entries, passed again unchanged, is
# multiplied by the weights in a sparse form kept from the call before (0 turns this off).
SPARSE_INPUT_DENSITY = 0.1


class InputForm:
    """The sparse form of a layer's input that comes back unchanged on every call.

    A model's first layer usually gets the same feature tensor every epoch, and bag-of-words
    features (Cora's: 1.3% nonzero) make its dense product by the weights most of the epoch's
    work. A call on the tensor of the call before (the same object, the same version counter,
    so not changed in place, and needing no gradient) counts its nonzeros once and, when at
    most ``SPARSE_INPUT_DENSITY`` of the entries are nonzero, keeps a sparse copy whose products
    with the weights (and their gradients) replace the dense ones. A new tensor on every call
    (input dropout) takes the dense product and costs nothing more; the tensor is held by a
    weak reference."""

    def __init__(self) -> None:
        self.ref = None
        self.version = -1
        self.sparse = None
        self.counted = False

    def __getstate__(self) -> dict:  # a copy or a pickle starts afresh (no weak reference)
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def sparse_of(self, x):
        """The kept sparse form of ``x`` (2-D, strided), or None for the dense product."""
        if SPARSE_INPUT_DENSITY <= 0 or x.requires_grad or x.layout != torch.strided:
            return None
        if self.ref is None or self.ref() is not x or x._version != self.version:
            self.ref, self.version = weakref.ref(x), x._version
            self.sparse, self.counted = None, False
            return None
        if not self.counted:
            self.counted = True
            plain = x.as_subclass(torch.Tensor).detach()
            if int(torch.count_nonzero(plain)) <= SPARSE_INPUT_DENSITY * plain.numel():
                self.sparse = _csr_pair(plain)
        return self.sparse


def _csr_pair(x):
    """(x, x^T) as torch CSR tensors (the products' fast path on the CPU, both ways)."""
    import warnings

    import scipy.sparse as sp
    a = sp.csr_matrix(x.numpy())
    with warnings.catch_warnings():  # torch's "sparse CSR support is in beta" notice
        warnings.simplefilter("ignore", UserWarning)
        return tuple(torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)), torch.from_numpy(
                m.indices.astype(np.int64)), torch.from_numpy(m.data), m.shape)
            for m in (a, a.T.tocsr()))


class SparseProduct(torch.autograd.Function):
    """``x W^T`` for a kept sparse ``x`` (its CSR and its transpose's), differentiable in W:
    ``dW = (x^T G)^T``, the transpose's CSR times G (torch's own backward of a sparse product
    transposes x on every call)."""

    @staticmethod
    def forward(ctx, pair, weight):
        ctx.pair = pair
        return pair[0] @ weight.t()

    @staticmethod
    def backward(ctx, G):
        return None, (ctx.pair[1] @ G).t()


def _product(x, weight, bias, dtype, form: InputForm | None = None):
    """``x W^T + b`` in ``dtype``; ``x`` in the sparse form ``form`` keeps when it has one."""
    sparse = form.sparse_of(x) if form is not None and x.dtype == dtype else None
    weight = weight.to(dtype)
    bias = None if bias is None else bias.to(dtype)
    if sparse is None:
        return F.linear(x.as_subclass(torch.Tensor).to(dtype), weight, bias)
    out = SparseProduct.apply(sparse, weight)
    return out if bias is None else out + bias


def _linear(x, lin: torch.nn.Linear, dtype, form: InputForm | None = None):
    return _product(x, lin.weight, lin.bias, dtype, form)


def _input(x, graph, in_channels: int, extra: str | None = None):
    """(the tensor to compute with, a problem or None, the dtype to compute in).

    With a problem, the layer computes on zeros of the right shape, so that every rank reaches
    the call's one collective check, where the problem is raised on every rank."""
    if not isinstance(graph, Graph):
        raise InputError("the second argument must be a distmm.torch graph (distmm.torch."
                         f"graph), got {type(graph).__name__}")
    problem = graph.check_nodes(x)
    if problem is None and (x.dim() != 2 or x.shape[1] != in_channels):
        problem = (f"x must have shape (nodes, {in_channels}), got {tuple(x.shape)}")
    problem = problem or extra
    dtype = _work_dtype(x)
    if problem is not None:
        return torch.zeros(graph.num_local, in_channels, dtype=dtype), problem, dtype
    return x, None, dtype


@torch.compiler.disable
def _aggregate(graph: Graph, z, kind: str, pattern: str, problem: str | None):
    """``S(values of kind) @ z`` on this rank's nodes; the call's one collective check."""
    obj = graph.obj(z.dtype, pattern)
    fn._check_call(obj, problem, x=z)
    return fn.SpMMA.apply(obj, z, graph.values(kind, z.dtype, pattern))


@torch.compiler.disable
def _attend(graph: Graph, z, att_src, att_dst, pattern: str, slope: float, dropout: float,
            training: bool, problem: str | None):
    """GAT's attention and aggregation, all heads in one call of each kind: z (nodes, H, C)
    -> (nodes, H, C); one autograd node (:mod:`distmm.torch.attention`)."""
    obj = graph.obj(z.dtype, pattern)
    fn._check_call(obj, problem, x=z)
    return attend(obj, z, att_src, att_dst, slope, dropout if training else 0.0)


def _output(out, x_in):
    """The layer's result as a node tensor, in the input's dtype (float16 / bfloat16 inputs
    were computed in float32)."""
    if isinstance(x_in, torch.Tensor) and x_in.dtype in LOW_PRECISION:
        out = out.to(x_in.dtype)
    return out.as_subclass(NodeTensor)


def _glorot(t) -> None:
    bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    torch.nn.init.uniform_(t, -bound, bound)


class GCNConv(torch.nn.Module):
    """``out = D^-1/2 (A + I) D^-1/2 (x W^T) + b`` (PyG's ``GCNConv``; Kipf and Welling).

    Parameters: ``lin.weight`` (out_channels, in_channels), ``bias`` (out_channels,).
    ``add_self_loops`` and ``normalize`` as in PyG (the graph's edge weights enter the degrees);
    with ``normalize=False`` the graph's own edge values are used as they are. A graph built
    with ``normalize=True`` is refused by a normalising layer (it would be normalised twice).
    """

    def __init__(self, in_channels: int, out_channels: int, add_self_loops: bool = True,
                 normalize: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.add_self_loops, self.normalize = add_self_loops, normalize
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self._form = InputForm()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _glorot(self.lin.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    @torch.compiler.disable
    def forward(self, x, graph: Graph):
        twice = ("this graph's edge values are already GCN-normalised (graph(..., "
                 "normalize=True)); use GCNConv(..., normalize=False) with it"
                 ) if self.normalize and getattr(graph, "normalized", False) else None
        x_in = x
        x, problem, dtype = _input(x, graph, self.in_channels, twice)
        z = _linear(x, self.lin, dtype, self._form)
        if self.normalize:
            kind, pattern = "gcn", "loops" if self.add_self_loops else "base"
            if not self.add_self_loops:
                kind = "gcn_noloops"
        else:
            kind, pattern = "weight", "base"
        out = _aggregate(graph, z, kind, pattern, problem)
        if self.bias is not None:
            out = out + self.bias.to(dtype)
        return _output(out, x_in)


class GATConv(torch.nn.Module):
    """Graph attention (PyG's ``GATConv``; Velickovic et al.), all heads in one call.

    ``alpha_ij = softmax_j(LeakyReLU(a_dst . z_i + a_src . z_j))`` over node i's in-edges
    (with a self-loop per node when ``add_self_loops``), ``z = x W^T`` split into ``heads``
    heads of ``out_channels``; the output concatenates the heads (``concat``) or averages them,
    plus ``bias``. Dropout on the attention coefficients while training. Parameters:
    ``lin.weight`` (heads * out_channels, in_channels), ``att_src`` and ``att_dst`` (1, heads,
    out_channels), ``bias``. A graph with duplicate edges is refused (PyG gives each copy its
    own attention; distmm's S holds one nonzero per pair).
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 add_self_loops: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.in_channels, self.out_channels, self.heads = in_channels, out_channels, heads
        self.concat, self.negative_slope, self.dropout = concat, negative_slope, dropout
        self.add_self_loops = add_self_loops
        self.lin = torch.nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = torch.nn.Parameter(torch.empty(1, heads, out_channels))
        size = heads * out_channels if concat else out_channels
        self.bias = torch.nn.Parameter(torch.empty(size)) if bias else None
        self._form = InputForm()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _glorot(self.lin.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    @torch.compiler.disable
    def forward(self, x, graph: Graph):
        dup = ("GATConv: the graph has duplicate edges; PyG would give each copy its own "
               "attention, distmm holds one nonzero per pair: remove them first (e.g. "
               "torch_geometric.utils.coalesce)") if isinstance(graph, Graph) and (
            graph.duplicate_edges(ignore_loops=self.add_self_loops)) else None
        x_in = x
        x, problem, dtype = _input(x, graph, self.in_channels, dup)
        H, C = self.heads, self.out_channels
        z = _linear(x, self.lin, dtype, self._form).view(-1, H, C)
        pattern = "loops" if self.add_self_loops else "base"
        out = _attend(graph, z, self.att_src.to(dtype), self.att_dst.to(dtype), pattern,
                      self.negative_slope, self.dropout, self.training, problem)
        out = out.reshape(-1, H * C) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias.to(dtype)
        return _output(out, x_in)


class SAGEConv(torch.nn.Module):
    """GraphSAGE with mean aggregation (PyG's ``SAGEConv``; Hamilton et al.):
    ``out_i = W_l mean_{j -> i} x_j + b_l + W_r x_i``. Parameters: ``lin_l.weight``
    (out_channels, in_channels), ``lin_l.bias``, ``lin_r.weight`` (when ``root_weight``).
    ``normalize`` scales each output row to unit L2 norm. The product by ``W_l`` is applied
    before the aggregation when it narrows the rows (the same value: the mean is linear)."""

    def __init__(self, in_channels: int, out_channels: int, normalize: bool = False,
                 root_weight: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.root_weight = normalize, root_weight
        self.lin_l = torch.nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_r = (torch.nn.Linear(in_channels, out_channels, bias=False) if root_weight
                      else None)
        self._form = InputForm()

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()

    @torch.compiler.disable
    def forward(self, x, graph: Graph):
        x_in = x
        x, problem, dtype = _input(x, graph, self.in_channels)
        if self.out_channels < self.in_channels:
            out = _aggregate(graph, _product(x, self.lin_l.weight, None, dtype, self._form),
                             "mean", "base", problem)
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias.to(dtype)
        else:
            xw = x.as_subclass(torch.Tensor).to(dtype)
            out = _linear(_aggregate(graph, xw, "mean", "base", problem), self.lin_l, dtype)
        if self.lin_r is not None:
            out = out + _linear(x, self.lin_r, dtype, self._form)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return _output(out, x_in)


class DataParallel(torch.nn.Module):
    """Data parallelism over the ranks of ``comm``, in the spirit of DistributedDataParallel.

    On construction the wrapped module's parameters and buffers are broadcast from rank 0
    (every rank starts from the same model). After every backward pass through the wrapper's
    output, the parameters' gradients are summed over the ranks in one all-reduce (a packed
    buffer; a gradient that is None on a rank counts as zeros). With each rank's loss being its
    share of the global loss (``graph.mean`` or ``graph.sum``), the gradients are then those of
    the global loss on every rank, and the optimiser steps alike everywhere. Collective: every
    rank must run the forward and the backward. ``module`` is the wrapped model
    (``model.module.state_dict()`` has the unprefixed names).
    """

    def __init__(self, module: torch.nn.Module, comm: MPI.Comm = MPI.COMM_WORLD) -> None:
        super().__init__()
        self.module, self.comm = module, comm
        self._queued = False
        with torch.no_grad():
            tensors = [t for t in list(module.parameters()) + list(module.buffers())
                       if t.is_floating_point()]
            if tensors and comm.Get_size() > 1:
                flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors])
                comm.Bcast(flat.numpy(), root=0)
                pos = 0
                for t in tensors:
                    t.copy_(flat[pos:pos + t.numel()].view_as(t))
                    pos += t.numel()

    def forward(self, *args, **kwargs):
        out = self.module(*args, **kwargs)
        if torch.is_grad_enabled() and self.comm.Get_size() > 1:
            for t in _tensors(out):
                if t.requires_grad:
                    t.register_hook(self._on_grad)
        return out

    def _on_grad(self, grad):
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.allreduce_grads)
        return grad

    def allreduce_grads(self) -> None:
        """Sum every parameter's gradient over the ranks (collective; called after each
        backward by the wrapper; call it yourself after a backward that bypassed it)."""
        self._queued = False
        params = [p for p in self.module.parameters() if p.requires_grad]
        if not params:
            return
        dtype = torch.float64 if any(p.dtype == torch.float64 for p in params) else (
            torch.float32)
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                          .reshape(-1).to(dtype) for p in params])
        self.comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
        pos = 0
        for p in params:
            g = flat[pos:pos + p.numel()].view_as(p).to(p.dtype)
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
            pos += p.numel()


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []


__all__ = ["DataParallel", "GATConv", "GCNConv", "SAGEConv"]
