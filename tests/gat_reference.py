"""Serial float64 numpy reference of a GAT layer and model, forward and hand-written backward.

The oracle for :mod:`distmm.apps.gat`. It works on a global edge list (``dst[k] <- src[k]``,
edge k carries attention ``alpha[k]`` and row ``dst[k]`` aggregates over its edges) with plain
numpy scatter operations, independent of the distributed code: no CSR blocks, no permutation,
no communication. The semantics are torch_geometric.nn.GATConv's (``lin`` without bias,
``att_src``/``att_dst`` per head, LeakyReLU, softmax over the edges into each node, dropout on
the attention coefficients, concatenation or mean of the heads, then ``bias``); dropout masks
are passed in already scaled (entries 0 or 1 / keep), so the reference does not depend on how
they are drawn. A node without edges gets output 0 before the bias.
"""

from __future__ import annotations

import numpy as np


def _seg_sum(vals: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n,) + vals.shape[1:])
    np.add.at(out, idx, vals)
    return out


def layer_forward(X, dst, src, p, xmask=None, amask=None):
    """One GAT layer. ``p``: dict weight (H*F, fin), att_src, att_dst (H, F), bias, heads,
    concat, negative_slope. Returns (Y, cache)."""
    n = X.shape[0]
    H, F = p["att_src"].shape
    Xd = X if xmask is None else X * xmask
    Z = (Xd @ p["weight"].T).reshape(n, H, F)
    ss = np.einsum("nhf,hf->nh", Z, p["att_src"])
    sd = np.einsum("nhf,hf->nh", Z, p["att_dst"])
    pre = sd[dst] + ss[src]
    e = np.where(pre > 0, pre, p["negative_slope"] * pre)
    m = np.full((n, H), -np.inf)
    np.maximum.at(m, dst, e)
    ex = np.exp(e - m[dst])
    den = _seg_sum(ex, dst, n)
    alpha = ex / den[dst]
    ad = alpha if amask is None else alpha * amask
    out = _seg_sum(ad[:, :, None] * Z[src], dst, n)
    Y = (out.reshape(n, H * F) if p["concat"] else out.mean(axis=1)) + p["bias"]
    cache = dict(Xd=Xd, Z=Z, pre=pre, alpha=alpha, ad=ad, xmask=xmask, amask=amask)
    return Y, cache


def layer_backward(dY, dst, src, p, cache):
    """Gradients of one layer: returns (dX, grads dict weight/att_src/att_dst/bias)."""
    Z, Xd, pre, alpha, ad = (cache[k] for k in ("Z", "Xd", "pre", "alpha", "ad"))
    n, H, F = Z.shape
    db = dY.sum(axis=0)
    dout = dY.reshape(n, H, F) if p["concat"] else np.repeat(dY[:, None, :] / H, H, axis=1)
    dad = np.einsum("ehf,ehf->eh", dout[dst], Z[src])
    dZ = _seg_sum(ad[:, :, None] * dout[dst], src, n)
    dalpha = dad if cache["amask"] is None else dad * cache["amask"]
    t = _seg_sum(alpha * dalpha, dst, n)
    de = alpha * (dalpha - t[dst])
    dpre = de * np.where(pre > 0, 1.0, p["negative_slope"])
    dsd = _seg_sum(dpre, dst, n)
    dss = _seg_sum(dpre, src, n)
    dZ += dsd[:, :, None] * p["att_dst"][None] + dss[:, :, None] * p["att_src"][None]
    grads = dict(weight=dZ.reshape(n, H * F).T @ Xd,
                 att_src=np.einsum("nh,nhf->hf", dss, Z),
                 att_dst=np.einsum("nh,nhf->hf", dsd, Z), bias=db)
    dX = dZ.reshape(n, H * F) @ p["weight"]
    if cache["xmask"] is not None:
        dX = dX * cache["xmask"]
    return dX, grads


def model_forward(X, dst, src, layers, xmasks=None, amasks=None):
    """Layers with ELU between them; returns (logits, caches)."""
    caches, h = [], X
    for k, p in enumerate(layers):
        xm = None if xmasks is None else xmasks[k]
        am = None if amasks is None else amasks[k]
        Y, cache = layer_forward(h, dst, src, p, xm, am)
        caches.append(cache)
        if k + 1 < len(layers):
            cache["elu_in"] = Y
            h = np.where(Y > 0, Y, np.expm1(np.minimum(Y, 0)))
        else:
            h = Y
    return h, caches


def model_backward(dlogits, dst, src, layers, caches):
    """Gradients of every layer's parameters (list of dicts), given d loss / d logits."""
    grads = [None] * len(layers)
    d = dlogits
    for k in range(len(layers) - 1, -1, -1):
        d, grads[k] = layer_backward(d, dst, src, layers[k], caches[k])
        if k > 0:
            Y = caches[k - 1]["elu_in"]
            d = d * np.where(Y > 0, 1.0, np.exp(np.minimum(Y, 0)))
    return grads


def cross_entropy(logits, labels, nodes):
    """Mean cross-entropy over ``nodes`` and its gradient w.r.t. all logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    loss = -logp[nodes, labels[nodes]].mean()
    d = np.zeros_like(logits)
    d[nodes] = np.exp(logp[nodes])
    d[nodes, labels[nodes]] -= 1.0
    return loss, d / len(nodes)


def random_layers(rng, sizes, heads, concat, slope=0.2):
    """Random parameters: ``sizes`` = [fin, F1, F2, ...], heads/concat per layer."""
    layers, fin = [], sizes[0]
    for F, H, cat in zip(sizes[1:], heads, concat, strict=True):
        layers.append(dict(weight=rng.standard_normal((H * F, fin)) / np.sqrt(fin),
                           att_src=rng.standard_normal((H, F)),
                           att_dst=rng.standard_normal((H, F)),
                           bias=rng.standard_normal(H * F if cat else F) * 0.1,
                           heads=H, concat=cat, negative_slope=slope))
        fin = H * F if cat else F
    return layers
