"""Row and column permutations, the same on every rank without communication.

Convention: a permutation ``perm`` is an int64 array with ``perm[new] = old``. Permuting a
matrix S by row permutation ``pr`` and column permutation ``pc`` gives
``S' = S[pr][:, pc]``: new row i is old row ``pr[i]``, new column j is old column ``pc[j]``.
An entry (r, c) of S therefore moves to ``(inv_pr[r], inv_pc[c])`` in S', with
``inv = inverse_permutation(perm)`` (``inv[old] = new``); a dense factor X that multiplies S
from the right is permuted the same way as S's columns (``X' = X[pc]``), and a result Y' of
S' is brought back with ``Y = Y'[inv_pr]``.
"""

from __future__ import annotations

import numpy as np

from .errors import require

__all__ = ["random_permutation", "inverse_permutation", "identity_permutation"]


def random_permutation(n: int, seed: int) -> np.ndarray:
    """A uniformly random permutation of range(n) (``perm[new] = old``), int64.

    Not collective: it is a pure function of (n, seed), drawn from
    ``np.random.default_rng(seed)``, so every rank that passes the same arguments gets the same
    array without communicating.
    """
    require(n >= 0, f"permutation length must be non-negative, got {n}")
    require(
        isinstance(seed, (int, np.integer)) and int(seed) >= 0,
        f"seed must be a non-negative integer, got {seed!r}",
    )
    return np.random.default_rng(int(seed)).permutation(int(n)).astype(np.int64)


def inverse_permutation(perm: np.ndarray) -> np.ndarray:
    """The inverse permutation ``inv`` with ``inv[perm[i]] = i`` (so ``inv[old] = new``), int64.

    Not collective. Raises InputError if ``perm`` is not a 1-D permutation of range(len(perm)).
    """
    perm = np.asarray(perm)
    require(perm.ndim == 1, f"a permutation must be 1-D, got shape {perm.shape}")
    n = perm.size
    require(
        perm.dtype.kind in "iu"
        and (n == 0 or (perm.min() >= 0 and perm.max() < n))
        and np.bincount(perm.astype(np.int64), minlength=n).max(initial=1) == 1,
        "not a permutation of range(n)",
    )
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n, dtype=np.int64)
    return inv


def identity_permutation(n: int) -> np.ndarray:
    """The identity permutation ``arange(n)`` as int64. Not collective."""
    require(n >= 0, f"permutation length must be non-negative, got {n}")
    return np.arange(int(n), dtype=np.int64)
