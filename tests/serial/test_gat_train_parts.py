"""Serial pieces of GAT training: the standard split, the dropout hash, Adam against a
hand-computed step, and the weights file's round trip and refusals."""

from __future__ import annotations

import ctypes
import ctypes.util

import h5py
import numpy as np
import pytest

from distmm.apps.gat import (
    dropout_factors,
    elu,
    feature_mask,
    keep_scale,
    leaky_relu,
    leaky_relu_backward,
    uniform_hash,
)
from distmm.apps.gat_model import Adam, GATModel
from distmm.apps.gat_train import standard_split
from distmm.errors import InputError


def test_standard_split_sizes_disjoint_reproducible():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 700)
    a = standard_split(y, 20, 100, 300, seed=3)
    b = standard_split(y, 20, 100, 300, seed=3)
    c = standard_split(y, 20, 100, 300, seed=4)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["train"], c["train"])
    assert [a[k].size for k in ("train", "val", "test")] == [80, 100, 300]
    assert np.bincount(y[a["train"]]).tolist() == [20] * 4
    allids = np.concatenate([a["train"], a["val"], a["test"]])
    assert np.unique(allids).size == allids.size
    with pytest.raises(InputError, match="too few"):
        standard_split(y, 20, 400, 300)


def test_dropout_hash_is_uniform_and_keyed():
    keys = np.arange(200000)
    u = uniform_hash(keys, 1, 2, 3)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs((u < 0.6).mean() - 0.6) < 0.005
    np.testing.assert_array_equal(u[::7], uniform_hash(keys[::7], 1, 2, 3))
    assert (uniform_hash(keys, 1, 2, 4) != u).mean() > 0.99
    m = keep_scale(u, 0.6, np.float32)
    assert set(np.unique(m).tolist()) == {0.0, np.float32(1 / 0.4)}
    # a node's mask depends on its id, not its position
    X = np.ones((3, 5))
    ids = np.array([7, 2, 9])
    a = feature_mask(X, ids, 0.5, 0, 1, 0, np.float64)
    b = feature_mask(X[::-1], ids[::-1], 0.5, 0, 1, 0, np.float64)
    np.testing.assert_array_equal(a, b[::-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_dropout_factors_equal_the_numpy_hash(dtype):
    """dropout_factors (one compiled pass, what training uses) is bitwise keep_scale of
    uniform_hash (the numpy definition) for any keys, stream and rate, 1-D or 2-D keys."""
    rng = np.random.default_rng(4)
    keys = np.concatenate([np.arange(5000), rng.integers(0, 2**62, 5000)]).reshape(-1, 4)
    for stream in ((), (0,), (3, 9, 1, 0), (2**40, 7)):
        u = uniform_hash(keys, *stream)
        for rate in (0.0, 0.3, 0.6, 0.999999):  # rates in [0, 1), as the CLI requires
            want = keep_scale(u, rate, dtype)
            got = dropout_factors(keys, rate, dtype, *stream)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(dropout_factors(keys[:, 1], rate, dtype, *stream),
                                          want[:, 1])


def _libm_expm1(dtype):
    """The C library's expm1 in the element's own precision (expm1f for float32), one scalar
    call per element: what the compiled ELU evaluates."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    f = libm.expm1f if dtype == np.float32 else libm.expm1
    f.restype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    f.argtypes = [f.restype]
    return lambda Y: np.array([f(float(y)) for y in Y.reshape(-1)], dtype=dtype).reshape(Y.shape)


@pytest.mark.skipif(ctypes.util.find_library("m") is None, reason="no C math library to load")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_elu_is_the_c_librarys_bit_for_bit(dtype):
    """elu (compiled, expm1 only where used) against numpy's expression with the C library's
    expm1, bit for bit, over six decades of magnitude and the special values (signed zeros,
    infinities, NaN, subnormals); and within 2 units in the last place of numpy's own expm1
    (numpy builds with a vectorised expm1 of their own differ from the C library's there)."""
    rng = np.random.default_rng(6)
    Y = np.concatenate([rng.standard_normal(20000) * s for s in (1e-6, 1e-3, 0.1, 1, 10, 100)])
    Y[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1e-45, 1e-45, -88.0, -104.0, 5.0]
    Y = Y.astype(dtype).reshape(-1, 40)
    want = np.where(Y > 0, Y, _libm_expm1(dtype)(np.minimum(Y, 0)))
    got = elu(Y)
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = np.uint32 if dtype == np.float32 else np.uint64
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))
    np.testing.assert_array_equal(elu(Y[:, ::3]), want[:, ::3])  # a strided input
    numpys = np.where(Y > 0, Y, np.expm1(np.minimum(Y, 0)))
    np.testing.assert_array_max_ulp(got[~nan], numpys[~nan], maxulp=2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("slope", [0.2, 0.01, 1.0 / 3.0])
def test_compiled_leaky_relu_is_numpys_bit_for_bit(dtype, slope):
    """leaky_relu and its backward (compiled) against the numpy expressions they replace,
    over six decades of magnitude and the special values."""
    rng = np.random.default_rng(7)
    X = np.concatenate([rng.standard_normal(20000) * s for s in (1e-6, 1e-3, 0.1, 1, 10, 100)])
    X[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1e-45, 1e-45, -3e38]
    X = X.astype(dtype).reshape(-1, 8)
    G = rng.standard_normal(X.shape).astype(dtype)
    G[:2] = [np.inf, -0.0, np.nan, 1e-45, -1e-45, 0.0, 3e38, -3e38]
    bits = np.uint32 if dtype == np.float32 else np.uint64
    for got, want in [(leaky_relu(X, slope), np.where(X > 0, X, slope * X)),
                      (leaky_relu_backward(G, X, slope),
                       G * np.where(X > 0, 1.0, slope).astype(dtype))]:
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))
    strided = X[:, ::3]  # a strided input
    np.testing.assert_array_equal(leaky_relu(strided, slope),
                                  np.where(strided > 0, strided, slope * strided))


def test_adam_step_matches_formula():
    model = GATModel.init(3, 2, 2, 2, layers=1, seed=0, dtype=np.float64)
    before = {k: v.copy() for k, v in model.layers[0].arrays().items()}
    rng = np.random.default_rng(1)
    grads = [{k: rng.standard_normal(v.shape) for k, v in before.items()}]
    opt = Adam(lr=0.01, weight_decay=0.1)
    opt.step(model, grads)
    for k, p0 in before.items():
        g = grads[0][k] + (0.1 * p0 if k != "bias" else 0.0)
        m, v = 0.1 * g, 0.001 * g * g
        want = p0 - 0.01 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8)
        np.testing.assert_allclose(model.layers[0].arrays()[k], want, rtol=1e-12)


def test_weights_round_trip_and_refusals(tmp_path):
    model = GATModel.init(5, 4, 3, 2, out_heads=2, seed=0, dtype=np.float64,
                          add_self_loops=False)
    path = tmp_path / "w.h5"
    model.save(path)
    back = GATModel.load(path, np.float64)
    assert back.add_self_loops is False and len(back.layers) == 2
    for a, b in zip(model.layers, back.layers, strict=True):
        assert (a.concat, a.heads, a.out_channels) == (b.concat, b.heads, b.out_channels)
        for k, v in a.arrays().items():
            np.testing.assert_array_equal(v, b.arrays()[k])
    with h5py.File(path, "a") as fh:
        del fh["layer1/att_dst"]
    with pytest.raises(InputError, match="lacks att_dst"):
        GATModel.load(path, np.float64)
    with pytest.raises(InputError, match="heads must be >= 1"):
        GATModel.init(5, 4, 0, 2)
