"""Counter-based random numbers: a value that depends only on a seed and global ids.

Applications that must give the same answer at every rank count (ALS's train/test split and its
initial factors, the planted low-rank generator) cannot draw from one random stream, since which
rank draws what depends on p. Instead each number is a hash of (seed, tag, global ids): any rank
computes the number of any entry alone, with no communication and no global arrays. The mixer
is SplitMix64's finaliser (Steele, Lea and Flood, OOPSLA 2014), vectorised over numpy uint64
arrays (which wrap on overflow, as the mixer needs).
"""

from __future__ import annotations

import numpy as np

__all__ = ["hash_normal", "hash_uniform", "mix64"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 of each element of ``x`` (uint64 in, uint64 out). Not collective."""
    with np.errstate(over="ignore"):  # wrap-around is the point
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _hash(seed: int, tag: int, keys: tuple[np.ndarray, ...]) -> np.ndarray:
    h = mix64(np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF) ^ mix64(np.uint64(tag)))
    for key in keys:
        h = mix64(h ^ np.asarray(key).astype(np.int64).view(np.uint64))
    return h


def hash_uniform(seed: int, tag: int, *keys: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) doubles, one per broadcast element of the integer ``keys``.

    Not collective. ``tag`` separates independent uses of one seed (e.g. the split and the
    initial factors). Keys are non-negative ids (row, column, ...); their broadcast shape is the
    result's shape. Each value is ``(h >> 11) * 2**-53`` of a chained SplitMix64 hash, so it
    depends on (seed, tag, keys) only.
    """
    keys = np.broadcast_arrays(*(np.asarray(k, dtype=np.int64) for k in keys))
    h = _hash(seed, tag, tuple(keys))
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def hash_normal(seed: int, tag: int, *keys: np.ndarray) -> np.ndarray:
    """Standard normal doubles from two :func:`hash_uniform` draws (Box-Muller). Not
    collective; the same keys always give the same value."""
    u1 = hash_uniform(seed, 2 * tag, *keys)
    u2 = hash_uniform(seed, 2 * tag + 1, *keys)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
