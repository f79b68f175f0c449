"""Typed distributed dense blocks: this rank's piece of A (m x r) or B (n x r).

A :class:`DenseBlock` is a numpy array (an ``ndarray`` subclass, as mpi4py-fft's ``DistArray``)
that also knows

* ``side``: ``"a"`` (rows indexed like S's rows: A, and every SpMMA / FusedMMA output) or
  ``"b"`` (rows indexed like S's columns: B, SpMMB / FusedMMB outputs);
* ``global_shape``: ``(m, r)`` or ``(n, r)``, so the dense width r is known on every rank even
  when the family splits the r columns across ranks and the local width alone is ambiguous;
* ``owner``: the distributed object (``distmm.distribute(...)``) whose distribution it is in.

Operations refuse a block of the wrong side, or of another distributed object whose dense
distribution differs (another family, grid, shape or permutation), with an
:class:`~distmm.errors.InputError`; with a square S an A-side and a B-side block can have the
same local shape and hold different rows, which a bare array cannot tell apart. (Two objects
with identical dense distributions, e.g. the same S placed with and without ``overlap``, accept
each other's blocks: the rows and columns they hold are the same.)

NumPy semantics. Elementwise arithmetic on blocks of one side and owner (``X + Y``, ``2 * X``,
``np.exp(X)``, ``X[...] = 0``, ``X.copy()``) gives a block of that side and owner. Anything that
changes the shape (reductions such as ``np.sum(X)`` or ``X.sum(axis=0)``, ``X[:, :2]``, ``X.T``,
``X @ W``) gives a plain ndarray or scalar, never a block with a stale side: those results are no
longer in the object's distribution. Mixing blocks of different sides or owners elementwise
raises :class:`~distmm.errors.InputError`; blocks of one side but different owners or widths
combine into a plain ndarray. mpi4py's buffer methods accept blocks as they accept any
C-contiguous ndarray.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from distmm.errors import InputError

SIDES = ("a", "b")


class DenseBlock(np.ndarray):
    """This rank's block of a distributed dense matrix (see the module docstring).

    Made by the distributed object (``S.dense``, ``S.scatter``, ``S.wrap`` and every
    dense-output operation), not by calling the class. Not collective.
    """

    side: str | None
    global_shape: tuple[int, int] | None
    owner: Any
    # The block's layout token (layout_token): absent (None) until a replayed call asks for
    # one, and dropped by any attribute assignment (__setattr__, resize, __setstate__).
    _layout: object | None = None

    def __new__(cls, array: np.ndarray, side: str, global_shape: tuple[int, int],
                owner: Any) -> DenseBlock:
        return _typed(np.asarray(array).view(cls), side,
                      (int(global_shape[0]), int(global_shape[1])), owner)

    def __array_finalize__(self, obj: np.ndarray | None) -> None:
        # A view or copy of the same shape (X.copy(), X[...], X.astype(...)) keeps the
        # metadata; a new shape (a slice, a transpose) is no longer a block of the layout.
        same = isinstance(obj, DenseBlock) and obj.shape == self.shape
        meta = self.__dict__
        meta["side"] = obj.side if same else None
        meta["global_shape"] = obj.global_shape if same else None
        meta["owner"] = obj.owner if same else None
        meta["_block_shape"] = obj._block_shape if same else None

    # ------------------------------------------------------------------ layout token
    def layout_token(self) -> object:
        """This block's layout token, made on first use. Not collective.

        Any attribute assignment (``X.shape = ...``, ``X.dtype = ...``, ``X.strides = ...``,
        ``X.side = ...``, anything) and ``X.resize`` or ``X.__setstate__`` drop it, and the next
        call makes a new one. A repeated call (distmm/algorithms/calls.py, plan.py) compares
        a block's token with the one its checks remembered instead of reading its shape,
        strides and dtype every time: those change in place only through such assignments.

        Returns
        -------
        object
            The same object on every call until something is assigned to the block.
        """
        token = self.__dict__.get("_layout")
        if token is None:
            token = self.__dict__["_layout"] = object()
        return token

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__.pop("_layout", None)
        super().__setattr__(name, value)

    def resize(self, *args, **kwargs) -> None:
        self.__dict__.pop("_layout", None)
        super().resize(*args, **kwargs)

    def __setstate__(self, state) -> None:
        self.__dict__.pop("_layout", None)
        super().__setstate__(state)

    @property
    def typed(self) -> bool:
        """Whether the metadata is valid (False for a reshaped view: treat as a plain array)."""
        return self.side is not None and self.shape == self._block_shape

    # Views of another shape are not blocks of the layout: plain arrays.
    @property
    def T(self) -> np.ndarray:
        return self.view(np.ndarray).T

    def transpose(self, *axes) -> np.ndarray:
        return self.view(np.ndarray).transpose(*axes)

    def reshape(self, *shape, **kwargs) -> np.ndarray:
        return self.view(np.ndarray).reshape(*shape, **kwargs)

    @property
    def r(self) -> int | None:
        """The global dense width r (None for a reshaped view)."""
        return None if self.global_shape is None else self.global_shape[1]

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(out, DenseBlock) and not out.typed:
            return out.view(np.ndarray)
        return out

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs, **kwargs):
        """Run the ufunc on plain arrays; wrap an elementwise result of the block's shape."""
        if method == "__call__" and (not kwargs or (len(kwargs) == 1 and "out" in kwargs)):
            done = _plain_call(ufunc, inputs, kwargs.get("out"))
            if done is not None:
                return done
        meta, mixed = None, False
        for x in inputs + tuple(kwargs.get("out", ())):
            if isinstance(x, DenseBlock) and x.typed:
                if meta is not None and meta.side != x.side:
                    raise InputError(
                        f"cannot combine a side-{meta.side!r} block with a side-{x.side!r} "
                        "block elementwise: their rows are different rows of S's layout")
                if meta is not None and (meta.owner is not x.owner
                                         or meta.global_shape != x.global_shape):
                    mixed = True
                meta = x
        args = tuple(x.view(np.ndarray) if isinstance(x, DenseBlock) else x for x in inputs)
        outs = kwargs.get("out")
        if outs is not None:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, DenseBlock) else x
                                  for x in outs)
        result = getattr(ufunc, method)(*args, **kwargs)
        if outs is not None and method == "__call__":
            # As numpy does: an in-place operation (X += Y) returns the out= object itself.
            mine = tuple(o if isinstance(o, DenseBlock) else res for o, res in
                         zip(outs, result if isinstance(result, tuple) else (result,),
                             strict=True))
            return mine if isinstance(result, tuple) else mine[0]
        if method != "__call__" or meta is None or mixed:
            return result
        like = meta

        def wrap(res):
            if isinstance(res, np.ndarray) and res.shape == like.shape:
                return DenseBlock(res, like.side, like.global_shape, like.owner)
            return res

        return tuple(wrap(x) for x in result) if isinstance(result, tuple) else wrap(result)

    def __reduce__(self):
        # Pickling (e.g. sending a block with lower-case mpi4py calls) keeps only the data:
        # the owner is a process-local object.
        return np.asarray(self).__reduce__()

    def __repr__(self) -> str:
        if not self.typed:
            return super().__repr__()
        return (f"DenseBlock(side={self.side!r}, global_shape={self.global_shape}, "
                f"local_shape={self.shape}, dtype={self.dtype})\n{np.asarray(self)!r}")


def _plain_call(ufunc: np.ufunc, inputs: tuple, outs: tuple | None):
    """:meth:`DenseBlock.__array_ufunc__` for its common case, a plain call of a one-output
    ufunc (``X * 2``, ``X + Y``, ``np.exp(X)``, ``X -= Y``: ``out=`` one array) whose typed
    blocks are all of one side, owner and global shape: the result, typed like them where it
    has their shape (an ``out=`` block itself, as numpy returns it); None for anything else
    (the general path decides, and words a side mismatch). Written out because a training
    loop's elementwise arithmetic on blocks pays for it at every operation."""
    if ufunc.nout != 1 or (outs is not None and len(outs) != 1):
        return None
    like = None
    args = []
    for x in inputs if outs is None else (*inputs, outs[0]):
        if type(x) is DenseBlock:
            d = x.__dict__
            if d["side"] is None or x.shape != d["_block_shape"]:
                return None  # an untyped view: the general path treats it as plain
            if like is None:
                like = d
            elif d is not like and (d["side"] != like["side"] or d["owner"] is not like["owner"]
                                    or d["global_shape"] != like["global_shape"]):
                return None
            args.append(x.view(np.ndarray))
        elif isinstance(x, DenseBlock):
            return None
        else:
            args.append(x)
    if outs is not None:
        out = args.pop()
        result = ufunc(*args, out=out)
        return outs[0] if isinstance(outs[0], DenseBlock) else result
    result = ufunc(*args)
    if like is None or type(result) is not np.ndarray or result.shape != like["_block_shape"]:
        return result
    return _typed(result.view(DenseBlock), like["side"], like["global_shape"], like["owner"])


def _typed(view: DenseBlock, side: str, global_shape: tuple[int, int], owner) -> DenseBlock:
    """``view`` (a fresh DenseBlock view of an array) given a block's metadata, as is. The
    metadata is written to the instance dict: ``__setattr__`` is for what callers assign."""
    meta = view.__dict__
    meta["side"] = side
    meta["global_shape"] = global_shape
    meta["owner"] = owner
    meta["_block_shape"] = view.shape
    return view


# Entries per call of a ``fill`` in ``S.dense``: each of a fill's float64 or uint64
# temporaries (hashed_normal makes about ten) is then 512 KiB, whatever the block's size.
FILL_CHUNK = 1 << 16


def hashed_normal(seed: int = 0, scale: float = 1.0) -> Callable[[np.ndarray, np.ndarray],
                                                                 np.ndarray]:
    """A ``fill`` for ``S.dense``: standard normal entries (times ``scale``) that depend only on
    (seed, global row, global column), so the same matrix comes out at every rank count.

    Returns ``fill(rows, cols) -> (len(rows), len(cols)) float64`` for original row ids and
    global column indices. Entries come from a SplitMix64 hash of the three integers and a
    Box-Muller transform: fast, vectorised and reproducible, not a cryptographic generator.
    Not collective.
    """
    def fill(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        rr = np.asarray(rows, dtype=np.uint64)[:, None]
        cc = np.asarray(cols, dtype=np.uint64)[None, :]
        key = _mix(_mix(np.uint64(seed) ^ np.uint64(0x6A09E667F3BCC909)) ^ rr) ^ cc
        u1 = _unit(_mix(key))
        u2 = _unit(_mix(key ^ np.uint64(0xBB67AE8584CAA73B)))
        return scale * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)

    return fill


def _mix(x):
    """SplitMix64's finaliser (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _unit(x: np.ndarray) -> np.ndarray:
    """The top 53 bits of a uint64 as a float in (0, 1]."""
    return ((x >> np.uint64(11)).astype(np.float64) + 1.0) / float(2**53)


__all__ = ["FILL_CHUNK", "SIDES", "DenseBlock", "hashed_normal"]
