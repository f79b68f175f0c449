"""Graph attention networks (Velickovic et al., ICLR 2018; the paper's reference [3]) on a
distributed S, forward and backward by hand.

Convention: S[i, j] != 0 means an edge j -> i; row i of S lists the nodes i aggregates from
(``--transpose`` in the command line serves the other convention). Per layer and head h, with
GATConv's semantics (torch_geometric.nn.GATConv):

    z = X W^T                                  local GEMM on each rank's node rows
    s_src[j] = a_src . z_j,  s_dst[i] = a_dst . z_i         per node, per head
    e_ij = LeakyReLU(s_dst[i] + s_src[j])      per-node values expanded onto S's nonzeros
    alpha_ij = softmax of e_i. over row i      edge softmax (row max and row sum reduced)
    out_i = sum_j alpha_ij z_j                 SpMM S(alpha_h) z_h, every head in one call
    y = concat_h(out) (or mean_h) + bias, ELU between layers.

On every family every head is in one call of each kind: the aggregation is one multi-value
SpMM ``S.spmm_a(z, values=alpha^T)`` on z seen as (nodes, heads * out_channels), and the
backward one multi-head SDDMM ``S.sddmm(dout, z, heads=H)`` (d alpha) and one multi-value
``S.spmm_b`` (dz) (:mod:`distmm.algorithms.multivalue`): one communication pass each. Where
the family cuts the dense width into column pieces, the calls take this rank's column piece
of the heads' (nodes, heads * F) array (each head padded with zero columns where heads * F is
below the family's smallest width, :meth:`~distmm.apps.gat_layout.NodeLayout.width`). The
fused layer (``fused=True``) runs the family's compiled attention loop instead, forward and
backward.
A node with no in-edges (self-loops off) aggregates over nothing: its output is 0 before the
bias (as in PyG), never NaN.

Layout and communication. The layer input X (node features) is S's B side (columns) and the
output is the A side (rows). The per-node scores reach the edges with the additive SDDMM
(``S.sddmm_add``), the softmax is ``S.edge_softmax(dim="row")``, and the backward pass uses
``S.expand``, ``S.row_sum`` and ``S.col_sum`` (:mod:`distmm.ops`, docs/primitives.md). Every
family serves: each rank keeps whole rows of its A-side and B-side node blocks
(:mod:`distmm.apps.gat_layout`), hands the family's SpMM and SDDMM its column piece of each
head's block, all-gathers the SpMM's output pieces over the row group, and moves per-node rows
between the A and B blocks where they differ (the 2.5D families; nothing moves in the 1.5D
ones). Weights are replicated; their gradients are sums over the nodes each rank counts (once
per row group), all-reduced once per step in one packed buffer (phase ``gat_weights``): one
message for all parameters of all layers instead of one ``S.xty`` per matrix, and the first
layer's input may be a scipy sparse matrix, which ``S.xty`` does not take.

Dropout is drawn from a hash of (seed, step, layer, original ids): feature masks from the
original node id and feature column, attention masks from the original (row, col) of the edge
and the head, so the results do not depend on p, c or the permutation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from numba import njit, prange

from distmm.apps.gat_features import SparseFeatures
from distmm.apps.gat_layout import NodeLayout
from distmm.apps.gat_model import PARAMS, GATLayer, GATModel
from distmm.core.coo import CooShare
from distmm.errors import require

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# splitmix64's finaliser multipliers, and the scale of a 53-bit draw to [0, 1) (_mix,
# uniform_hash and their compiled form in _dropout_kernel)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_UNIT = 1.0 / (1 << 53)
FEATURE, ATTENTION = 0, 1


# ---------------------------------------------------------------------------------- the graph
def graph_share(share: CooShare, add_self_loops: bool = True,
                transpose: bool = False, comm: MPI.Comm = MPI.COMM_WORLD) -> CooShare:
    """GAT's S from this rank's share of an adjacency matrix: the pattern of its stored entries
    (values 1; duplicates are merged when S is placed), optionally transposed, with existing
    self-loops removed and, with ``add_self_loops``, one self-loop per node added (as GATConv
    does). Not collective beyond reading ``comm``'s size and rank: rank k adds the self-loops
    of nodes ``k n / p .. (k + 1) n / p - 1``. The matrix must be square (checked by the
    caller, the global shape being known on every rank)."""
    rows, cols = (share.cols, share.rows) if transpose else (share.rows, share.cols)
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    n = share.shape[0]
    if add_self_loops:
        p, k = comm.Get_size(), comm.Get_rank()
        loops = np.arange(k * n // p, (k + 1) * n // p, dtype=np.int64)
        rows, cols = np.concatenate([rows, loops]), np.concatenate([cols, loops])
    return CooShare((n, n), rows, cols, np.ones(rows.size))


def distribute_graph(S, comm: MPI.Comm = MPI.COMM_WORLD, add_self_loops: bool = True,
                     transpose: bool = False, algorithm: str = "15d-dense-shift", c: int = 1,
                     **options):
    """Place GAT's S (see :func:`graph_share`) on a grid; returns the distributed object.

    Collective. ``S`` is anything :func:`distmm.api.as_coo_share` accepts (a Matrix Market
    path read in parts by every rank, a CooShare, a scipy matrix on rank 0). ``options`` go to
    :func:`distmm.api.distribute` (dtype, permute, seed, node_model, order, overlap). Any
    family of :data:`distmm.algorithms.ALGORITHMS` serves (:mod:`distmm.apps.gat_layout`). A
    non-square matrix raises InputError on every rank.
    """
    from distmm.api import as_coo_share, distribute

    share = as_coo_share(S, comm)
    require(share.shape[0] == share.shape[1],
            f"GAT needs a square adjacency matrix, got {share.shape[0]} x {share.shape[1]}")
    share = graph_share(share, add_self_loops, transpose, comm)
    return distribute(share, comm, algorithm=algorithm, c=c, **options)


# ---------------------------------------------------------------------------------- dropout
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


def _stream_base(stream: tuple[int, ...]) -> np.uint64:
    """The hash's offset for a stream (seed, step, layer, kind): each part mixed in turn."""
    base = np.zeros(1, dtype=np.uint64)
    for part in stream:
        base = _mix(base + np.asarray([part], dtype=np.uint64) + _GOLDEN)
    return base[0]


def uniform_hash(keys: np.ndarray, *stream: int) -> np.ndarray:
    """Uniform [0, 1) numbers, a pure function of each non-negative integer key and of the
    stream (e.g. seed, step, layer, kind). Not collective."""
    x = _mix(np.asarray(keys, dtype=np.int64).astype(np.uint64) * _GOLDEN + _stream_base(stream))
    return (x >> np.uint64(11)).astype(np.float64) * _UNIT


def keep_scale(u: np.ndarray, rate: float, dtype) -> np.ndarray:
    """Inverted-dropout factors: 0 where ``u < rate``, 1 / (1 - rate) elsewhere."""
    return np.where(u >= rate, 1.0 / (1.0 - rate), 0.0).astype(dtype)


@njit(parallel=True, cache=True, nogil=True)
def _dropout_kernel(keys, base, rate, scale, out):
    """out[i] = scale where the uniform draw of keys[i] is >= rate, else 0 (see
    :func:`dropout_factors`)."""
    for i in prange(keys.shape[0]):
        x = np.uint64(keys[i]) * _GOLDEN + base
        x = x ^ (x >> np.uint64(30))  # _mix, on one element
        x = x * _MIX1
        x = x ^ (x >> np.uint64(27))
        x = x * _MIX2
        x = x ^ (x >> np.uint64(31))
        u = np.float64(x >> np.uint64(11)) * _UNIT
        out[i] = scale if u >= rate else 0.0


def dropout_factors(keys: np.ndarray, rate: float, dtype, *stream: int) -> np.ndarray:
    """Inverted-dropout factors of ``keys``: ``keep_scale(uniform_hash(keys, *stream), rate,
    dtype)`` in one compiled pass, bitwise the same (the same integer hash, float conversion
    and comparison; numpy takes about twenty passes over the keys). Not collective.

    Parameters
    ----------
    keys : ndarray of non-negative integers, any shape
        One key per factor (a feature entry's or an edge's original ids, see the callers).
    rate : float
        The dropout rate, in [0, 1).
    dtype : numpy dtype
        The factors' dtype.
    *stream : int
        The stream (seed, step, layer, kind), as :func:`uniform_hash` takes it.

    Returns
    -------
    ndarray, the shape of ``keys``: 0 or 1 / (1 - rate).
    """
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    out = np.empty(keys.shape, dtype=dtype)
    _dropout_kernel(keys.reshape(-1), _stream_base(stream), float(rate), 1.0 / (1.0 - rate),
                    out.reshape(-1))
    return out


@dataclass
class Dropout:
    """Dropout rates and the stream that makes masks reproducible: ``step`` is the training
    step, ``seed`` the run's seed."""

    features: float = 0.6
    attention: float = 0.6
    seed: int = 0
    step: int = 0


def feature_mask(X, node_ids: np.ndarray, rate: float, seed: int, step: int, layer: int,
                 dtype):
    """Factors for ``X``'s entries (dense: all of them; scipy CSR: its stored entries, the
    others being zero anyway), keyed by (original node id, column). Not collective."""
    fin = X.shape[1]
    if sp.issparse(X):
        rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
        keys = node_ids[rows] * fin + X.indices
    else:
        keys = node_ids[:, None] * fin + np.arange(fin)[None, :]
    return dropout_factors(keys, rate, dtype, seed, step, layer, FEATURE)


# ---------------------------------------------------------------------------------- ELU
@njit(parallel=True, cache=True, nogil=True)
def _elu_kernel(y, out):
    for i in prange(y.shape[0]):
        v = y[i]
        if v > 0:
            out[i] = v
        elif v < 0 or v != v:  # expm1 in the element's own precision (expm1f for float32)
            out[i] = math.expm1(v)
        else:  # +-0: np.minimum(-0.0, 0) is +0.0, and expm1(+0.0) = +0.0
            out[i] = 0.0


def elu(Y: np.ndarray) -> np.ndarray:
    """ELU, ``np.where(Y > 0, Y, expm1(np.minimum(Y, 0)))`` with the C library's expm1 (expm1f
    for float32) bit for bit, in one compiled pass that evaluates expm1 only where it is used
    (numpy's float32 expm1 is a scalar loop over every element, most of a Cora layer's
    activation time). numpy builds whose expm1 is vectorised differ from the C library's by at
    most 2 units in the last place. Not collective.

    Parameters
    ----------
    Y : ndarray of float32 or float64, any shape

    Returns
    -------
    ndarray, a new C-contiguous array of Y's shape and dtype.
    """
    Y = np.ascontiguousarray(Y)
    out = np.empty_like(Y)
    _elu_kernel(Y.reshape(-1), out.reshape(-1))
    return out


# ---------------------------------------------------------------------------------- LeakyReLU
@njit(parallel=True, cache=True, nogil=True)
def _leaky_kernel(x, slope, out):
    for i in prange(x.shape[0]):
        v = x[i]
        out[i] = v if v > 0 else slope * v


@njit(parallel=True, cache=True, nogil=True)
def _leaky_grad_kernel(g, x, slope, out):
    for i in prange(x.shape[0]):
        out[i] = g[i] * (1.0 if x[i] > 0 else slope)


def leaky_relu(X: np.ndarray, slope: float) -> np.ndarray:
    """LeakyReLU, ``np.where(X > 0, X, slope * X)`` bitwise (the slope rounded to X's dtype, as
    numpy's scalar promotion does), in one compiled pass instead of three with temporaries.
    Not collective.

    Parameters
    ----------
    X : ndarray of float32 or float64, any shape
    slope : float
        The negative slope.

    Returns
    -------
    ndarray, a new C-contiguous array of X's shape and dtype.
    """
    X = np.ascontiguousarray(X)
    out = np.empty_like(X)
    _leaky_kernel(X.reshape(-1), X.dtype.type(slope), out.reshape(-1))
    return out


def leaky_relu_backward(G: np.ndarray, X: np.ndarray, slope: float) -> np.ndarray:
    """The gradient through :func:`leaky_relu` at ``X``: ``G * np.where(X > 0, 1, slope)`` in
    G's dtype, bitwise, in one compiled pass. Not collective.

    Parameters
    ----------
    G, X : ndarray of one shape, float32 or float64
        The gradient with respect to the output, and the input.

    Returns
    -------
    ndarray, a new C-contiguous array of G's shape and dtype.
    """
    G, X = np.ascontiguousarray(G), np.ascontiguousarray(X)
    require(G.shape == X.shape, f"leaky_relu_backward: shapes {G.shape} and {X.shape} differ")
    out = np.empty_like(G)
    _leaky_grad_kernel(G.reshape(-1), X.reshape(-1), G.dtype.type(slope), out.reshape(-1))
    return out


# ---------------------------------------------------------------------------------- the model
class DistGAT:
    """A GAT model bound to a distributed S: forward, backward and loss on this rank's nodes.

    Parameters
    ----------
    obj : DistributedMatrix
        S placed by :func:`distribute_graph` (square), on any family of
        :data:`distmm.algorithms.ALGORITHMS`.
    model : GATModel
        Replicated parameters (identical on every rank), in ``obj.dtype``.
    fused : bool
        Each layer's attention, forward and backward, runs as one loop of the family's
        compiled kernels (:meth:`~distmm.algorithms.dense_shift_15d.DenseShift15D.
        fused_attention` with its statistics, then ``fused_attention_backward``) instead
        of the additive SDDMM, the edge softmax and one SpMM per head; the caches keep the
        per-node scores and each row's log-sum-exp instead of the coefficients. 1.5D dense
        shifting only (the paper calls 1.5D fusion incompatible with the softmax; the loop
        that goes beyond it exists for that family alone).
    Construction is not collective. Every rank holds whole rows of two node blocks
    (:class:`~distmm.apps.gat_layout.NodeLayout`): ``input_nodes`` (original ids of S's B
    side, the rows of a layer's input, the features) and ``nodes`` (the A side, the rows of a
    layer's output, the logits); they are the same in the 1.5D families. In the families that
    split the dense width, each block is held by a row group: ``counted`` marks the rows of
    ``nodes`` this rank counts in a sum over nodes (a loss), so that each node counts once.
    Forward and backward are collective over ``obj.comm``.
    """

    def __init__(self, obj, model: GATModel, fused: bool = False) -> None:
        require(obj.shape[0] == obj.shape[1], "GAT needs a square S")
        require(not fused or obj.name == "15d-dense-shift",
                f"the fused online-softmax attention runs on 15d-dense-shift only, not "
                f"{obj.name!r} (the paper calls 1.5D fusion incompatible with the softmax; "
                "the fused loop beyond it is that family's); run without fused")
        self.obj, self.model, self.fused = obj, model, bool(fused)
        self.layout = NodeLayout(obj)
        self.nodes = self.layout.nodes["a"]
        self.input_nodes = self.layout.nodes["b"]
        self.counted = self.layout.counted["a"]
        rows, cols = obj.value_coordinates()
        self.edge_keys = obj.row_perm[rows] * obj.shape[1] + obj.col_perm[cols]
        self.dtype = obj.dtype
        self._ones = np.ones(rows.size, dtype=self.dtype)
        # the sparse features of the last forward, as a block for the SpMM kernels
        self._features: SparseFeatures | None = None

    def loss(self, logits: np.ndarray, labels: np.ndarray, mask: np.ndarray, count: int
             ) -> tuple[float, np.ndarray]:
        """:func:`cross_entropy` on this rank's ``nodes``: the loss over the ``mask``ed rows it
        counts (``counted``; sum the ranks' losses for the global one) and the gradient on
        every masked row it holds (every holder of a row needs it). Not collective."""
        loss, grad = cross_entropy(logits, labels, mask, count)
        if not self.counted.all():
            loss = cross_entropy(logits, labels, mask & self.counted, count)[0]
        return loss, grad

    # ---------------------------------------------------------------- forward
    def layer_forward(self, k: int, layer: GATLayer, X, drop: Dropout | None):
        """One layer: ``X`` holds whole rows of ``input_nodes``; returns (Y, whole rows of
        ``nodes``, (nodes, width)), cache). Collective."""
        obj, lay = self.obj, self.layout
        H, F = layer.heads, layer.out_channels
        xmask = amask = None
        if drop is not None and drop.features > 0:
            xmask = feature_mask(X, self.input_nodes, drop.features, drop.seed, drop.step, k,
                                 self.dtype)
        feats = SparseFeatures.of(X, self.dtype, self._features)
        if feats is not None:  # Xd: the values of X's stored entries, masked
            self._features = feats
            Xd = X.data if xmask is None else X.data * xmask
            Z = feats.times_t(Xd, layer.weight).reshape(-1, H, F)
        else:
            Xd = X
            if xmask is not None and sp.issparse(X):
                Xd = X.copy()
                Xd.data = Xd.data * xmask
            elif xmask is not None:
                Xd = X * xmask
            Z = np.ascontiguousarray(Xd @ layer.weight.T, dtype=self.dtype).reshape(-1, H, F)
        s_src = np.einsum("nhf,hf->nh", Z, layer.att_src)
        s_dst = lay.transfer(np.einsum("nhf,hf->nh", Z, layer.att_dst), "a")
        if drop is not None and drop.attention > 0:
            keys = self.edge_keys[:, None] * H + np.arange(H)[None, :]
            amask = dropout_factors(keys, drop.attention, self.dtype, drop.seed, drop.step, k,
                                    ATTENTION)
        if self.fused:  # one compiled loop; the backward recomputes alpha from L
            out, L = obj.fused_attention(s_dst, s_src, Z.reshape(-1, H * F),
                                         layer.negative_slope, amask, return_stats=True)
            return self._combine(layer, out), dict(k=k, Xd=Xd, feats=feats, Z=Z, out=out, L=L,
                                                   s_dst=s_dst, s_src=s_src, xmask=xmask,
                                                   amask=amask)
        pre = obj.sddmm_add(s_dst, s_src)
        e = leaky_relu(pre, layer.negative_slope)
        alpha = obj.edge_softmax(e, dim="row")
        ad = alpha if amask is None else alpha * amask
        # every head in one multi-value SpMM, on this rank's column piece of the heads
        got = obj.spmm_a(self._piece("b", Z), values=np.ascontiguousarray(ad.T))
        out = lay.allgather("a", self._plain(got), H, F)
        cache = dict(k=k, Xd=Xd, feats=feats, Z=Z, pre=pre, alpha=alpha, ad=ad, out=out,
                     xmask=xmask, amask=amask)
        return self._combine(layer, out), cache

    def _piece(self, side: str, X: np.ndarray) -> np.ndarray:
        """This rank's column piece of the (rows, H, F) whole rows ``X`` on ``side``, as a
        block of the multi-head calls' width (typed where the family cuts the width, which
        then reads it from the block). Not collective."""
        lay = self.layout
        piece = lay.piece(side, X)
        if not lay.pieces_split():
            return piece
        H, F = X.shape[1], X.shape[2]
        return self.obj.wrap(side, piece, H * lay.width(F, H))

    @staticmethod
    def _plain(X) -> np.ndarray:
        """A result block of the family as a plain ndarray (no copy)."""
        return np.asarray(X).view(np.ndarray)

    @staticmethod
    def _combine(layer: GATLayer, out: np.ndarray) -> np.ndarray:
        """Heads concatenated or averaged, plus the bias: (nodes, H, F) -> (nodes, width)."""
        H, F = layer.heads, layer.out_channels
        return (out.reshape(-1, H * F) if layer.concat else out.mean(axis=1)) + layer.bias

    def forward(self, X, drop: Dropout | None = None):
        """Logits of this rank's ``nodes`` (nodes, classes) and the caches for
        :meth:`backward`, from ``X``, whole rows of ``input_nodes`` (dense or scipy CSR).
        ``drop=None`` is inference (no dropout). Collective."""
        caches, h = [], X
        last = len(self.model.layers) - 1
        for k, layer in enumerate(self.model.layers):
            Y, cache = self.layer_forward(k, layer, h, drop)
            caches.append(cache)
            if k < last:
                if cache is not None:
                    cache["elu_in"] = Y
                h = self.layout.transfer(elu(Y), "b")
            else:
                h = Y
        return h, caches

    # ---------------------------------------------------------------- backward
    def layer_backward(self, layer: GATLayer, dY: np.ndarray, cache: dict, need_dx: bool):
        """Gradients of one layer (local sums over the rows this rank counts, not yet
        all-reduced) and, if ``need_dx``, d loss / d X (whole rows of ``input_nodes``).
        ``dY`` holds whole rows of ``nodes``, the same on every holder of a row.
        Collective."""
        Z, Xd, out = cache["Z"], cache["Xd"], cache["out"]
        H, F = Z.shape[1], Z.shape[2]
        na = dY.shape[0]
        if layer.concat:
            dout = dY.reshape(na, H, F)
        else:
            dout = np.repeat((dY / H)[:, None, :], H, axis=1)
        if "L" in cache:  # the fused layer's (DenseShift15D.fused_attention_backward)
            dZ, d_dst, d_src = self.obj.fused_attention_backward(
                cache["s_dst"], cache["s_src"], Z.reshape(-1, H * F), out, cache["L"], dout,
                layer.negative_slope, cache["amask"])
        else:
            dZ, d_dst, d_src = self._attention_backward(layer, cache, dout)
        dZ += d_dst[:, :, None] * layer.att_dst[None] + d_src[:, :, None] * layer.att_src[None]
        dZ2 = dZ.reshape(-1, H * F)
        # each node's terms once per row group: the rows this rank counts
        cb, ca = self.layout.counted["b"], self.layout.counted["a"]
        split_b, split_a = not cb.all(), not ca.all()
        dZc = dZ2 * cb[:, None] if split_b else dZ2
        feats = cache["feats"]
        XtdZ = feats.t_times(Xd, dZc) if feats is not None else Xd.T @ dZc
        zc = Z * cb[:, None, None] if split_b else Z
        grads = {"weight": np.asarray(XtdZ.T, dtype=self.dtype),
                 "att_src": np.einsum("nh,nhf->hf", d_src, zc),
                 "att_dst": np.einsum("nh,nhf->hf", d_dst, zc),
                 "bias": (dY[ca] if split_a else dY).sum(axis=0)}
        dX = None
        if need_dx:
            dX = dZ2 @ layer.weight
            if cache["xmask"] is not None:
                dX = dX * cache["xmask"]
        return dX, grads

    def _attention_backward(self, layer: GATLayer, cache: dict, dout: np.ndarray):
        """The unfused attention's backward: (dZ, d s_dst, d s_src). Collective."""
        obj, lay = self.obj, self.layout
        Z, pre, alpha, ad, out = (cache[k] for k in ("Z", "pre", "alpha", "ad", "out"))
        H, F = Z.shape[1], Z.shape[2]
        # d alpha_ij = dout_i . z_j (SDDMM); d z_j = sum_i alpha_ij dout_i (SpMM on S^T):
        # every head in one call of each, on this rank's column pieces
        d2 = self._piece("a", np.ascontiguousarray(dout))
        dad = obj.sddmm(d2, self._piece("b", Z), values=self._ones, heads=H)
        dZ = lay.allgather("b", self._plain(obj.spmm_b(d2, values=np.ascontiguousarray(ad.T))),
                           H, F)
        dalpha = dad if cache["amask"] is None else dad * cache["amask"]
        # Softmax backward, d e_ij = alpha_ij (d alpha_ij - t_i) with t_i = sum_k alpha_ik
        # d alpha_ik: since d alpha_ik = mask_ik dout_i . z_k, t_i = dout_i . out_i, a local
        # dot product (as in memory-efficient attention), so one expansion replaces the edge
        # all-reduce of S.edge_softmax_backward.
        t = np.einsum("nhf,nhf->nh", dout, out)
        de = alpha * (dalpha - obj.expand("a", t))
        dpre = leaky_relu_backward(de, pre, layer.negative_slope)
        return dZ, lay.transfer(obj.row_sum(dpre), "b"), obj.col_sum(dpre)

    def backward(self, dlogits: np.ndarray, caches: list[dict]) -> list[dict[str, np.ndarray]]:
        """Gradients of every layer's parameters, summed over all ranks (one all-reduce,
        phase ``gat_weights``; identical on every rank), from ``dlogits`` on every row of
        ``nodes`` (:meth:`loss` gives them). Collective."""
        layers = self.model.layers
        grads = [None] * len(layers)
        d = dlogits
        for k in range(len(layers) - 1, -1, -1):
            d, grads[k] = self.layer_backward(layers[k], d, caches[k], need_dx=k > 0)
            if k > 0:
                d = self.layout.transfer(d, "a")
                Y = caches[k - 1]["elu_in"]
                d = d * np.where(Y > 0, 1.0, np.exp(np.minimum(Y, 0))).astype(self.dtype)
        return self.allreduce_grads(grads)

    def allreduce_grads(self, grads: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Sum every gradient over the ranks in one packed all-reduce. Collective."""
        flat = np.concatenate([g[name].reshape(-1) for g in grads for name in PARAMS])
        total = np.empty_like(flat)
        self.obj.world.allreduce(flat, total, phase="gat_weights")
        out, pos = [], 0
        for g in grads:
            d = {}
            for name in PARAMS:
                d[name] = total[pos:pos + g[name].size].reshape(g[name].shape)
                pos += g[name].size
            out.append(d)
        return out

    def gradient_words(self, rank: int) -> int:
        """Words ``rank`` sends in :meth:`allreduce_grads` (not collective)."""
        size = sum(a.size for la in self.model.layers for a in la.arrays().values())
        p = self.obj.p
        return 2 * size * (p - 1) // p if p > 1 else 0

    def gather(self, Y: np.ndarray, root: int = 0) -> np.ndarray | None:
        """The whole (n, width) array, original node order, on ``root`` from every rank's
        whole rows ``Y`` of ``nodes`` (logits); None elsewhere. Collective."""
        return self.layout.gather("a", Y, root)


def cross_entropy(logits: np.ndarray, labels: np.ndarray, mask: np.ndarray, count: int
                  ) -> tuple[float, np.ndarray]:
    """Sum over this rank's ``mask``ed nodes of the cross-entropy, divided by ``count`` (the
    global number of such nodes), and its gradient w.r.t. the logits. Not collective."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    idx = np.flatnonzero(mask)
    loss = -float(logp[idx, labels[idx]].sum()) / count
    d = np.zeros_like(logits)
    d[idx] = np.exp(logp[idx])
    d[idx, labels[idx]] -= 1.0
    return loss, d / count
