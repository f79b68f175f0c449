"""Block ownership arithmetic shared by the distributions of paper Table II.

Rows of an m-row matrix split into ``nblocks`` near-equal contiguous blocks: block b holds rows
``[b*m // nblocks, (b+1)*m // nblocks)``, so sizes differ by at most one and no padding is stored.
When m is a multiple of ``nblocks`` every block has exactly m / nblocks rows, the case in which
the counted words equal the paper's formulas exactly.
"""

from __future__ import annotations

import numpy as np


def block_offsets(n: int, nblocks: int) -> np.ndarray:
    """Offsets (length nblocks + 1, int64) of ``nblocks`` near-equal blocks of ``n`` rows."""
    b = np.arange(nblocks + 1, dtype=np.int64)
    return (b * np.int64(n)) // np.int64(nblocks)


def block_of(index: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The block holding each global index, for blocks given by ``offsets``."""
    return np.searchsorted(offsets, np.asarray(index, dtype=np.int64), side="right") - 1


def block_sizes(offsets: np.ndarray) -> np.ndarray:
    """Rows in each block."""
    return np.diff(offsets)


def block_range(offsets: np.ndarray, b: int) -> np.ndarray:
    """The global indices (int64, ascending) of block ``b`` of the blocks given by ``offsets``."""
    return np.arange(offsets[b], offsets[b + 1], dtype=np.int64)
