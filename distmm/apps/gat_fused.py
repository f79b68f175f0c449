"""GAT attention fused into one 1.5D dense shifting loop with an online softmax (forward).

The paper (Figure 9's caption) calls 1.5D local kernel fusion "incompatible with softmax
regularization of learned edge weights": the softmax of row i needs all of row i's scores
before any of them can weight a z_j. The online softmax of memory-efficient attention kernels
removes that obstacle. Each rank keeps, per row of its row superblock and head, a running
maximum m, a running sum l of exp(e - m) and an accumulator acc of exp(e - m) z_j; when a block
of B's rows arrives during the shifts (paper Algorithm 1), the block's scores are computed from
the per-node scalars it carries, m is raised, l and acc are rescaled by exp(m_old - m_new), and
the block's contributions are added. No SDDMM output is materialised (scores live one block at
a time) and S's values are not touched.

Communication, on rank (u, v) with H heads of F features:

* replication: all-gather of s_dst (H per row) over the fiber, the row superblock's scores;
* propagation: q - 1 shifts of the B block [z | s_src] (H (F + 1) per row) around the layer
  (Algorithm 1's last shift would only return a copy its owner never gave away, as in
  :mod:`distmm.algorithms.dense_shift_15d`);
* reduction: the c ranks of a fiber hold partial (m, l, acc) of the same rows over different
  columns; each sends every other member the partials of that member's rows (one all-to-all,
  H (F + 2) per row) and the owner merges them: M = max m_k, l = sum l_k exp(m_k - M),
  acc = sum acc_k exp(m_k - M); out = acc / l.

:func:`fused_words` gives the exact count. The unfused layer (``S.sddmm_add``,
``S.edge_softmax``, one ``S.spmm_a`` per head) moves the per-node scores, two edge
all-reduces and, per head, q - 1 shifts of width F and a reduce-scatter of width F.

This reads the 1.5D dense shifting object's stored blocks and communicators directly; it
belongs in :mod:`distmm.algorithms.dense_shift_15d` once that module takes new loop modes.
"""

from __future__ import annotations

import numpy as np

from distmm.algorithms.dense_shift_15d import DenseShift15D
from distmm.errors import require


def _fiber_rows(obj: DenseShift15D, u: int) -> list[int]:
    return np.diff(obj.offsets["a"])[obj.grid.fiber_blocks(u)].tolist()


def _layer_rows(obj: DenseShift15D, v: int) -> list[int]:
    return np.diff(obj.offsets["b"])[obj.grid.layer_blocks(v)].tolist()


def fused_words(obj: DenseShift15D, heads: int, features: int, rank: int) -> dict[str, int]:
    """Words ``rank`` sends per phase in one :func:`fused_attention`. Not collective."""
    u, v = obj.grid.position(rank)
    fib, lay = _fiber_rows(obj, u), _layer_rows(obj, v)
    own = fib[v]
    c, q = obj.c, obj.q
    out = {"replication": own * heads * (c - 1) if c > 1 else 0,
           "reduction": (sum(fib) - own) * heads * (features + 2) if c > 1 else 0,
           "propagation": 0}
    if q > 1:
        width = heads * (features + 1)
        # step s < q - 1 sends the block of layer position (u + s) mod q
        out["propagation"] = sum(lay[(u + s) % q] for s in range(q - 1)) * width
    return out


def fused_attention(obj: DenseShift15D, s_dst: np.ndarray, s_src: np.ndarray, Z: np.ndarray,
                    negative_slope: float = 0.2,
                    edge_scale: np.ndarray | None = None) -> np.ndarray:
    """``out_i,h = sum_j softmax_j(LeakyReLU(s_dst[i,h] + s_src[j,h])) * scale_ij,h z_j,h``.

    Parameters
    ----------
    obj : DenseShift15D
        A square S whose A and B layouts coincide.
    s_dst, s_src : ndarray, shape (local nodes, H)
        Per-node scores (A side and B side), in ``obj.dtype``.
    Z : ndarray, shape (local nodes, H * F)
        The nodes' features per head (B side).
    edge_scale : ndarray, shape (nnz_local, H), optional
        Factors applied to the normalised coefficients (attention dropout), value order.

    Returns
    -------
    ndarray, shape (local nodes, H, F): this rank's rows of the output (A side); a row without
    nonzeros gives 0.

    Collective over ``obj.comm``; words per phase :func:`fused_words`.
    """
    require(isinstance(obj, DenseShift15D), "the fused attention runs on 15d-dense-shift")
    H = s_dst.shape[1]
    F = Z.shape[1] // H
    dt = obj.dtype
    u, v, c, q = obj.grid.u, obj.grid.v, obj.c, obj.q
    fib, lay = _fiber_rows(obj, u), _layer_rows(obj, v)
    # replication: the superblock's destination scores
    T = np.empty((sum(fib), H), dtype=dt)
    obj.fiber.allgatherv(np.ascontiguousarray(s_dst, dtype=dt), T, [k * H for k in fib])
    o = obj._orientation("a")
    nrows = sum(fib)
    m = np.full((nrows, H), -np.inf, dtype=dt)
    lsum = np.zeros((nrows, H), dtype=dt)
    acc = np.zeros((H, nrows, F), dtype=dt)
    width = H * (F + 1)
    cur = np.zeros((max(lay), width), dtype=dt)
    nxt = np.empty_like(cur)
    cur[:lay[u], :H * F] = Z
    cur[:lay[u], H * F:] = s_src
    left, right = (u - 1) % q, (u + 1) % q
    kernel = obj.kernel
    for step in range(q):
        t = (u + step) % q
        blk = o.blocks[t]
        Yb = cur[:lay[t]]
        if blk.nnz:
            with obj.stats.timer("compute"):
                rows = blk.row_ids()
                pre = T[rows] + Yb[blk.indices, H * F:]
                e = np.where(pre > 0, pre, negative_slope * pre)
                starts = blk.indptr[:-1][np.diff(blk.indptr) > 0]
                present = np.flatnonzero(np.diff(blk.indptr) > 0)
                bmax = np.maximum.reduceat(e, starts, axis=0)
                new = np.maximum(m[present], bmax)
                old = m[present]
                scale = np.where(np.isneginf(old), 0.0, np.exp(old - new)).astype(dt)
                m[present] = new
                lsum[present] *= scale
                acc[:, present, :] *= scale.T[:, :, None]
                p = np.exp(e - m[rows])
                lsum[present] += np.add.reduceat(p, starts, axis=0)
                if edge_scale is not None:
                    p = p * o.block_values(edge_scale, t)
                for h in range(H):
                    kernel.spmm_a(blk, np.ascontiguousarray(p[:, h]),
                                  np.ascontiguousarray(Yb[:, h * F:(h + 1) * F]), acc[h])
        if step < q - 1:
            obj.layer.shift(cur[:lay[t]], nxt[:lay[(t + 1) % q]], dest=left, source=right)
            cur, nxt = nxt, cur
    # reduction: merge the fiber's partials of each member's rows on that member
    part = np.concatenate([m, lsum, acc.transpose(1, 0, 2).reshape(nrows, H * F)], axis=1)
    w = H * (F + 2)
    own = fib[v]
    if c > 1:
        recv = np.empty((c, own, w), dtype=dt)
        obj.fiber.alltoallv(np.ascontiguousarray(part), [k * w for k in fib], recv,
                            [own * w] * c, phase="reduction")
    else:
        recv = part[None]
    ms, ls, accs = recv[:, :, :H], recv[:, :, H:2 * H], recv[:, :, 2 * H:].reshape(c, own, H, F)
    M = ms.max(axis=0)
    with np.errstate(invalid="ignore"):
        fac = np.where(np.isneginf(ms), 0.0, np.exp(ms - M[None])).astype(dt)
    total = (ls * fac).sum(axis=0)
    num = (accs * fac[..., None]).sum(axis=0)
    out = np.zeros((own, H, F), dtype=dt)
    np.divide(num, total[..., None], out=out, where=total[..., None] > 0)
    return out
