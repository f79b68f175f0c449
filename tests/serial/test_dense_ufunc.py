"""DenseBlock's short path for plain ufunc calls (dense.py, ``_plain_call``) gives what its
general ``__array_ufunc__`` path gives: the same values, the same type, the same block
metadata, the same object for ``out=``, the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import distmm.core.dense as dense
from distmm.core.dense import DenseBlock
from distmm.errors import InputError


class _Owner:
    pass


OWNER, OTHER = _Owner(), _Owner()


def _block(side="a", owner=OWNER, seed=0, shape=(7, 3)):
    rng = np.random.default_rng(seed)
    return DenseBlock(rng.uniform(0.5, 2.0, shape), side, (20, shape[1]), owner)


def _cases():
    """(name, call) pairs; each call makes its own operands, so both paths see equal ones."""
    return [
        ("block * scalar", lambda: _block() * 2.0),
        ("scalar - block", lambda: 1.0 - _block()),
        ("block + block", lambda: _block() + _block(seed=1)),
        ("block + plain", lambda: _block() + np.ones((7, 3))),
        ("block * row (broadcast)", lambda: _block() * np.arange(3.0)),
        ("block * column slice", lambda: _block() * np.ones((7, 1))),
        ("exp", lambda: np.exp(_block())),
        ("negative", lambda: -_block()),
        ("comparison", lambda: _block() > 1.0),
        ("another owner's block", lambda: _block() + _block(owner=OTHER)),
        ("untyped view", lambda: _block()[:, :2] * 2.0),
        ("plain broadcast to a larger shape", lambda: _block() + np.ones((2, 7, 3))),
        ("divmod (two outputs)", lambda: np.divmod(_block(), 0.3)),
        ("in place, block out", lambda: _inplace(_block(), _block(seed=1))),
        ("in place, plain out", lambda: _inplace(np.ones((7, 3)), _block(seed=1))),
        ("out= a plain array", lambda: np.add(_block(), 1.0, out=np.empty((7, 3)))),
        ("where=", lambda: np.add(_block(), 1.0, out=_block(seed=2),
                                  where=np.eye(7, 3, dtype=bool))),
        ("reduce", lambda: np.add.reduce(_block(), axis=0)),
    ]


def _inplace(X, Y):
    X -= 0.5 * Y
    return X


def _describe(res):
    """What the comparison looks at: values, type, and the block metadata."""
    if isinstance(res, tuple):
        return tuple(_describe(x) for x in res)
    meta = None
    if isinstance(res, DenseBlock):
        meta = (res.side, res.global_shape, res.owner, res._block_shape, res.typed)
    return type(res), np.asarray(res).copy(), meta


@pytest.mark.parametrize("name,call", _cases(), ids=[n for n, _ in _cases()])
def test_short_path_matches_the_general_path(name, call, monkeypatch):
    fast = _describe(call())
    monkeypatch.setattr(dense, "_plain_call", lambda *args: None)
    slow = _describe(call())
    flat_fast = fast if isinstance(fast[0], tuple) else (fast,)
    flat_slow = slow if isinstance(slow[0], tuple) else (slow,)
    assert len(flat_fast) == len(flat_slow)
    for (t1, v1, m1), (t2, v2, m2) in zip(flat_fast, flat_slow, strict=True):
        assert t1 is t2, name
        np.testing.assert_array_equal(v1, v2, err_msg=name)
        assert m1 == m2, name


def test_in_place_returns_the_out_block_itself():
    X, Y = _block(), _block(seed=1)
    same = X
    X += Y
    assert X is same and X.typed and X.side == "a"


@pytest.mark.parametrize("fast", [True, False])
def test_sides_do_not_mix(fast, monkeypatch):
    if not fast:
        monkeypatch.setattr(dense, "_plain_call", lambda *args: None)
    with pytest.raises(InputError, match="combine"):
        _block("a") + _block("b")
    X = _block("a")
    with pytest.raises(InputError, match="combine"):
        X += _block("b")
