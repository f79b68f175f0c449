"""A block of S on the wire: one COO packet of 3 words per nonzero.

The families that shift S (1.5D sparse shifting, 2.5D dense replicating; paper sections V-B
and V-C) send a block as one message laid out ``[rows | cols | third]``: the nonzeros' local
row indices, their local column indices and one value word each (S's value for SpMM, the
partial dot product for SDDMM, the SDDMM output for the SpMM half of FusedMM). That is the
paper's accounting, "each nonzero consists of three words". distmm counts elements, so every
index and every value is one word whatever its width: the packet is an integer array of the
width of the data type (:func:`word_dtype`), the value words carrying the values' bits.
Nonzeros travel in CSR order, so the receiver rebuilds the CSR structure with a bincount of the
rows (:func:`packet_block`).

A multi-head call (several value vectors of S, or one partial dot product per head) sends its
H value words per nonzero in the same message, ``[rows | cols | H values]``: the indices once
and 2 + H words a nonzero (:func:`packet_heads`), where H single-value calls would send 3 H.
"""

from __future__ import annotations

import numpy as np

from distmm.core.sparse import INDEX_DTYPE, INDPTR_DTYPE, CSRBlock

WORDS_PER_NONZERO = 3
# The integer word that carries one COO entry (row, column, value bits) of each data type.
_WORD = {np.dtype(np.float32): np.dtype(np.int32), np.dtype(np.float64): np.dtype(np.int64)}


def word_dtype(dtype) -> np.dtype:
    """The packet word of a float32 (int32) or float64 (int64) run."""
    return _WORD[np.dtype(dtype)]


def index_words(rows: np.ndarray, cols: np.ndarray, dtype) -> np.ndarray:
    """The ``[rows | cols]`` part of a packet for a ``dtype`` run (2 nnz words)."""
    return np.concatenate((rows, cols)).astype(word_dtype(dtype))


def pack(buf: np.ndarray, index: np.ndarray, values, dtype,
         perm: np.ndarray | None = None, heads: int = 0) -> None:
    """Write a packet into ``buf``: ``index`` (from :func:`index_words`), then one value word
    per nonzero: ``values`` (an array, taken through ``perm`` when given, or a scalar such as
    0 for partial sums that start empty). With ``heads`` H > 0, H value words per nonzero
    (:func:`packet_heads`): ``values`` is then (H, nnz) or a scalar."""
    nnz = index.size // 2
    buf[:2 * nnz] = index
    out = packet_values(buf, nnz, dtype) if heads == 0 else \
        packet_heads(buf, nnz, heads, dtype)
    if perm is None or np.isscalar(values):
        out[...] = values
    else:
        np.take(values, perm, axis=-1, out=out)


def packet_values(buf: np.ndarray, nnz: int, dtype) -> np.ndarray:
    """The value words of a packet of ``nnz`` nonzeros, as a ``dtype`` view into ``buf``."""
    return buf[2 * nnz:3 * nnz].view(dtype)


def packet_heads(buf: np.ndarray, nnz: int, heads: int, dtype,
                 edge_major: bool = False) -> np.ndarray:
    """The ``heads`` value words per nonzero of a multi-head packet of ``nnz`` nonzeros, as a
    ``dtype`` view into ``buf``: (heads, nnz), one row per head (values of S), or with
    ``edge_major`` (nnz, heads), one row per nonzero (partial dot products)."""
    v = buf[2 * nnz:(2 + heads) * nnz].view(dtype)
    return v.reshape(nnz, heads) if edge_major else v.reshape(heads, nnz)


def packet_block(buf: np.ndarray, nnz: int, shape: tuple[int, int],
                 values: np.ndarray) -> CSRBlock:
    """The CSR block of a received packet of ``nnz`` nonzeros (sent in CSR order), with
    ``values`` (usually :func:`packet_values`) as its data."""
    rows = buf[:nnz]
    indptr = np.zeros(shape[0] + 1, dtype=INDPTR_DTYPE)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    indices = buf[nnz:2 * nnz].astype(INDEX_DTYPE, copy=False)
    return CSRBlock(shape=shape, indptr=indptr, indices=indices, data=values)


__all__ = ["WORDS_PER_NONZERO", "index_words", "pack", "packet_block", "packet_heads",
           "packet_values", "word_dtype"]
