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

from distmm.errors import require

__all__ = ["PARTITION_MODES", "PERMUTE_MODES", "applied_mode", "balance_permutation",
           "block_imbalance", "block_sorted_permutation", "identity_permutation",
           "inverse_permutation", "locality_permutation", "permute_mode",
           "random_permutation"]

# How S's rows and columns are permuted before distribution (see ``balance_permutation``).
PERMUTE_MODES = ("auto", "blocks", "random", "none")
# Orderings by a graph partitioner (distmm.core.partition), which only the sparsity-aware
# family applies (its blocks follow the parts); "partition" is a saved one passed as an object.
PARTITION_MODES = ("kahip", "kahypar")


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


def block_sorted_permutation(n: int, nblocks: int, seed: int, chunk: int = 1) -> np.ndarray:
    """Rows assigned to ``nblocks`` near-equal blocks at random, in natural order inside each.

    Rows are cut into runs of ``chunk`` consecutive ids; the runs are shuffled (seeded), cut into
    the blocks ``layout.block_offsets(n, nblocks)``, and each block is sorted back into natural
    order. With ``chunk = 1`` every block holds exactly the rows ``random_permutation(n, seed)``
    would give it, so the load balance is the random permutation's; longer runs keep more of the
    locality a real graph has in its natural order (neighbours with nearby ids land in the same
    block), at the price of a coarser balance. ``perm[new] = old``; not collective (a pure
    function of its arguments).
    """
    from distmm.core.layout import block_offsets

    require(isinstance(nblocks, (int, np.integer)) and nblocks >= 1,
            f"the number of blocks must be a positive integer, got {nblocks!r}")
    require(isinstance(chunk, (int, np.integer)) and chunk >= 1,
            f"the run length must be a positive integer, got {chunk!r}")
    n, chunk = int(n), int(chunk)
    runs = random_permutation(-(-n // chunk), seed)
    perm = (runs[:, None] * chunk + np.arange(chunk, dtype=np.int64)).reshape(-1)
    perm = perm[perm < n]
    block = np.repeat(np.arange(int(nblocks), dtype=np.int64),
                      np.diff(block_offsets(n, int(nblocks))))
    return perm[np.lexsort((perm, block))]


# Run lengths tried by :func:`locality_permutation`, longest first.
RUN_LENGTHS = (256, 64, 16, 4)


def block_imbalance(perm: np.ndarray, counts: np.ndarray, nblocks: int) -> float:
    """Largest block's share of ``counts`` over the mean block's, under ``perm``.

    ``counts[old]`` is a per-row weight (nonzeros in the row); block b holds the rows
    ``perm[block_offsets(n, nblocks)[b]:...[b + 1]]``. 1.0 is perfect balance. Not collective.
    """
    from distmm.core.layout import block_offsets

    sums = np.add.reduceat(counts[perm], block_offsets(perm.size, nblocks)[:-1]) \
        if perm.size >= nblocks else np.bincount(np.arange(perm.size), counts[perm],
                                                 minlength=nblocks)
    sums = np.asarray(sums, dtype=np.float64)
    mean = sums.mean() if sums.size else 0.0
    return float(sums.max() / mean) if mean > 0 else 1.0


def locality_permutation(counts: list[np.ndarray], nblocks: int, seed: int,
                         tolerance: float = 1.05) -> np.ndarray:
    """The longest-run :func:`block_sorted_permutation` that balances as well as random.

    ``counts`` holds one per-row weight array for every block structure the permutation must
    balance (for a square S permuted symmetrically: nonzeros per row and per column). Runs of
    :data:`RUN_LENGTHS` are tried, longest first; the first whose imbalance (the worst over
    ``counts``) is within ``tolerance`` times that of single rows (exactly the random
    permutation's blocks) wins. Long runs keep a real graph's locality; skewed matrices, whose
    heavy rows cluster by id, fall back to short runs or single rows. Not collective.
    """
    n = counts[0].size
    single = block_sorted_permutation(n, nblocks, seed)
    target = tolerance * max(block_imbalance(single, w, nblocks) for w in counts)
    for run in RUN_LENGTHS:
        if run * nblocks * 4 > n:  # fewer than four runs a block: balance is luck
            continue
        perm = block_sorted_permutation(n, nblocks, seed, chunk=run)
        if max(block_imbalance(perm, w, nblocks) for w in counts) <= target:
            return perm
    return single


def permute_mode(mode: str | bool) -> str:
    """``mode`` as a name of :data:`PERMUTE_MODES` (``True`` and ``False`` mean ``"auto"`` and
    ``"none"``); InputError if it is none of them. Not collective."""
    if isinstance(mode, (bool, np.bool_)):
        return "auto" if mode else "none"
    if getattr(mode, "is_partition", False):
        return "partition"
    require(isinstance(mode, str) and mode in PERMUTE_MODES + PARTITION_MODES,
            f"unknown permutation {mode!r}; choose one of "
            f"{', '.join(PERMUTE_MODES + PARTITION_MODES)}")
    return mode


def applied_mode(mode: str | bool, nblocks: int) -> str:
    """The scheme ``mode`` applies with ``nblocks`` blocks: ``"auto"`` is ``"none"`` for one
    block (one rank balances nothing, and the natural order is usually the fastest) and
    ``"blocks"`` otherwise. Not collective."""
    mode = permute_mode(mode)
    if mode == "auto":
        return "none" if nblocks == 1 else "blocks"
    return mode


def balance_permutation(mode: str | bool, n: int, nblocks: int, seed: int,
                        counts: list[np.ndarray] | None = None) -> np.ndarray:
    """The permutation of one side of S for load balance, by ``mode``.

    ``"random"``: uniformly random (paper section VI). ``"blocks"``: rows to blocks at random,
    natural order inside blocks (:func:`locality_permutation` with the global per-row weights
    ``counts``, or single rows, exactly the random permutation's blocks, without them).
    ``"none"``: identity. ``"auto"``, ``True`` and ``False``: see :func:`applied_mode`. Not
    collective.
    """
    mode = applied_mode(mode, nblocks)
    require(mode not in PARTITION_MODES + ("partition",),
            f"--permute {mode} orders S by a graph partition whose parts become the blocks, "
            "which only the 15d-sparse-aware family's layout follows; use it with that "
            "algorithm")
    if mode == "none":
        return identity_permutation(n)
    if mode == "random":
        return random_permutation(n, seed)
    if counts is None:
        return block_sorted_permutation(n, nblocks, seed)
    return locality_permutation(counts, nblocks, seed)
