"""The node-model interface itself: registry, options, model counters, fallback, SpGEMM."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from distmm.core.sparse import CSRBlock
from distmm.errors import InputError
from distmm.kernels import NODE_MODELS, NodeModel, make_node_model
from distmm.kernels.reference import ReferenceModel


def _block(m, n, density, seed, dtype=np.float64):
    M = sp.random(m, n, density=density, random_state=seed, format="csr", dtype=np.float64)
    return CSRBlock.from_scipy(M, dtype=dtype), M


class _Counting(NodeModel):
    """A model that natively has only spmm_a (via the reference code) and counts something."""

    name = "counting"
    native = frozenset({"spmm_a"})

    def __init__(self):
        super().__init__(fallback=ReferenceModel())
        self._ref = ReferenceModel()

    def _spmm_a(self, S, vals, B, out):
        self.count(widgets=2, calls_seen=1)
        self._ref._spmm_a(S, vals, B, out)


def test_write_mode_on_a_model_that_only_accumulates():
    """accumulate=False on a model without native write mode: the interface zero-fills out
    first (native spmm_a), and the fallback (the reference model) writes natively (sddmm)."""
    S, M = _block(9, 6, 0.4, 3)
    model = _Counting()
    assert "spmm_a" not in model.overwrites
    B = np.random.default_rng(2).standard_normal((6, 4))
    A = np.random.default_rng(3).standard_normal((9, 4))
    out = np.full((9, 4), np.nan)
    model.spmm_a(S, S.data, B, out, accumulate=False)
    np.testing.assert_allclose(out, M @ B, rtol=1e-12, atol=1e-15)
    vals = np.full(S.nnz, np.nan)
    model.sddmm(S, S.data, A, B, vals, accumulate=False)
    rows = np.repeat(np.arange(9), np.diff(S.indptr))  # S's stored order
    want = S.data * np.einsum("ij,ij->i", A[rows], B[S.indices])
    np.testing.assert_allclose(vals, want, rtol=1e-12)
    assert model.stats.as_dict()["sddmm"]["fallback_calls"] == 1


def test_registry_and_options():
    assert NODE_MODELS[0] == "reference"
    m = make_node_model("reference", panel_bytes=4096)
    assert m.options() == {"panel_bytes": 4096}
    with pytest.raises(InputError, match="unknown node model"):
        make_node_model("no-such-model")
    with pytest.raises(InputError, match="invalid options"):
        make_node_model("reference", tile=3)
    with pytest.raises(InputError, match="invalid options"):
        make_node_model("reference", panel_bytes=-1)


def test_counters_and_fallback_are_recorded():
    S, M = _block(7, 5, 0.4, 1)
    model = _Counting()
    B = np.random.default_rng(0).standard_normal((5, 3))
    out = np.zeros((7, 3))
    model.spmm_a(S, S.data, B, out)
    model.spmm_a(S, S.data, B, out)
    np.testing.assert_allclose(out, 2 * (M @ B), rtol=1e-12)
    A = np.random.default_rng(1).standard_normal((7, 3))
    vals = np.zeros(S.nnz)
    model.sddmm(S, S.data, A, B, vals)
    stats = model.stats.as_dict()
    assert stats["spmm_a"]["widgets"] == 4 and stats["spmm_a"]["calls_seen"] == 2
    assert stats["spmm_a"]["fallback_calls"] == 0
    assert stats["sddmm"]["fallback_calls"] == 1
    assert "widgets" not in stats["sddmm"]
    # nothing without a fallback
    bare = NodeModel()
    with pytest.raises(NotImplementedError, match="no sddmm"):
        bare.sddmm(S, S.data, A, B, vals)


def test_reset_zeroes_every_counter_and_the_next_calls_count_alone():
    """reset keeps the counter objects but zeroes them; as_dict lists only the operations
    called since, with exactly their counts (a prepared call records into the same ones)."""
    S, M = _block(7, 5, 0.4, 1)
    model = _Counting()
    B = np.random.default_rng(0).standard_normal((5, 3))
    A = np.random.default_rng(1).standard_normal((7, 3))
    out, vals = np.zeros((7, 3)), np.zeros(S.nnz)
    run = model.prepare("spmm_a", S, S.data, B, None, out)
    run(S.data, B, out)
    model.sddmm(S, S.data, A, B, vals)
    first = model.stats.as_dict()
    model.stats.reset()
    assert model.stats.as_dict() == {}
    run(S.data, B, out)
    again = model.stats.as_dict()
    assert list(again) == ["spmm_a"]
    assert again["spmm_a"]["calls"] == 1 and again["spmm_a"]["widgets"] == 2
    assert again["spmm_a"]["flops"] == first["spmm_a"]["flops"]
    assert again["spmm_a"]["bytes"] == first["spmm_a"]["bytes"]
    assert 0 < again["spmm_a"]["seconds"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reference_spgemm_matches_scipy(dtype):
    X, Xs = _block(40, 30, 0.1, 2, dtype)
    Y, Ys = _block(30, 25, 0.15, 3, dtype)
    model = make_node_model("reference")
    C = model.spgemm(X, Y)
    ref = (Xs.astype(dtype) @ Ys.astype(dtype)).tocsr()
    ref.sort_indices()
    assert C.shape == (40, 25) and C.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(C.indptr, ref.indptr)
    np.testing.assert_array_equal(C.indices, ref.indices)
    np.testing.assert_allclose(C.data, ref.data, rtol=1e-6)
    st = model.stats.as_dict()["spgemm"]
    expected_flops = 2 * sum(Ys.indptr[k + 1] - Ys.indptr[k] for k in Xs.indices)
    assert st["flops"] == expected_flops and st["calls"] == 1 and st["bytes"] > 0


def test_spgemm_rejects_mismatched_operands():
    X, _ = _block(4, 3, 0.5, 4)
    Y, _ = _block(4, 3, 0.5, 5)
    model = make_node_model("reference")
    with pytest.raises(ValueError, match="has 4 rows"):
        model.spgemm(X, Y)
    Z, _ = _block(3, 3, 0.5, 6, np.float32)
    with pytest.raises(ValueError, match="float64 but Y is float32"):
        model.spgemm(X, Z)


def test_spgemm_empty_operands():
    X = CSRBlock.from_coo([], [], [], (3, 4), np.float64)
    Y, _ = _block(4, 2, 0.5, 7)
    C = make_node_model("reference").spgemm(X, Y)
    assert C.shape == (3, 2) and C.nnz == 0 and C.indptr.tolist() == [0, 0, 0, 0]


def test_node_config_file(tmp_path):
    import argparse
    import json

    from distmm.cli.common import node_model_from_args

    def args(path):
        return argparse.Namespace(node_model="reference", node_config=path)

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"panel_bytes": 8192}))
    assert node_model_from_args(args(str(good))).options() == {"panel_bytes": 8192}
    assert node_model_from_args(args(None)).name == "reference"
    cases = {"[1, 2]": "must hold a JSON object", "{bad": "not a JSON file",
             '{"tile": 4}': "invalid options"}
    for i, (text, msg) in enumerate(cases.items()):
        f = tmp_path / f"bad{i}.json"
        f.write_text(text)
        with pytest.raises(InputError, match=msg):
            node_model_from_args(args(str(f)))
    with pytest.raises(InputError, match="no such file"):
        node_model_from_args(args(str(tmp_path / "missing.json")))


@pytest.mark.parametrize("name", NODE_MODELS)
def test_every_model_gets_the_same_operand_checks(name):
    """Validation happens once, in the interface, before any model (or fallback) runs."""
    S, _ = _block(6, 5, 0.5, 8)
    model = make_node_model(name)
    A, B = np.ones((6, 3)), np.ones((5, 3))
    cases = [
        (lambda: model.spmm_a(S, S.data, np.ones(5), np.zeros((6, 3))), "must be 2-D"),
        (lambda: model.spmm_a(S, S.data, B.astype(np.float32), np.zeros((6, 3))), "dtype"),
        (lambda: model.spmm_b(S, S.data, A, np.zeros((6, 3))), "has 6 rows, expected 5"),
        (lambda: model.sddmm(S, S.data, A, np.ones((5, 2)), np.zeros(S.nnz)), "width 2"),
        (lambda: model.sddmm(S, S.data[:-1], A, B, np.zeros(S.nnz)), "vals must have shape"),
        (lambda: model.fusedmm_a(S, S.data, A, B, np.zeros((6, 3))[:, ::2]), "width|contig"),
    ]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
    assert not model.stats.as_dict()  # nothing ran, nothing was counted


def test_machine_code_is_the_dispatchers_code_for_exactly_those_types():
    """numba_util.machine_code: the compiled entry of the argument types the dispatcher
    compiled, giving the dispatcher's result; None for types it has no overload of."""
    from numba import njit

    from distmm.kernels.numba_util import machine_code

    @njit
    def axpy(a, x, y, k):
        for i in range(x.size):
            y[i] += a * x[i] + k

    x, y = np.arange(5.0), np.zeros(5)
    axpy(2.0, x, y, 1)
    entry = machine_code(axpy, (2.0, x, y, 1))
    assert entry is not None and entry is not axpy
    z = np.zeros(5)
    entry(2.0, x, z, 1)
    np.testing.assert_array_equal(z, y)
    assert machine_code(axpy, (2.0, x.astype(np.float32), y, 1)) is None  # never compiled
    assert machine_code(axpy, (2.0, x[::2], y[:3], 1)) is None  # another layout
    ro = x.copy()
    ro.flags.writeable = False
    assert machine_code(axpy, (2.0, x, ro, 1)) is None  # read-only: another type
    assert machine_code(axpy.py_func, (2.0, x, y, 1)) is None  # no dispatcher (no JIT)


def test_memoised_argument_types_are_numbas():
    """machine_code types plain ndarrays from a memo: the same type numba's typeof gives, for
    each dtype, dimension count, layout, read-only and unaligned array, in any order of
    first sight (a memo keyed on less would hand the first array's type to the next)."""
    from numba import typeof

    from distmm.kernels import numba_util

    raw = np.zeros(8 * 12 + 1, dtype=np.uint8)
    unaligned = np.ndarray((12,), np.float64, buffer=raw, offset=1)
    readonly = np.arange(6.0)
    readonly.flags.writeable = False
    arrays = [np.zeros(3), np.zeros(3, np.float32), np.zeros((3, 4)), np.zeros((3, 4), order="F"),
              np.zeros((3, 4))[:, ::2], np.zeros((3, 4))[:, :1], np.zeros((1, 4), order="F"),
              np.zeros(()), np.zeros(5)[::2], np.zeros(3, np.int32), np.zeros(3, np.uint32),
              np.zeros(2, np.complex128), np.zeros(3, bool), readonly, unaligned,
              np.zeros((2, 3, 4)).transpose(1, 0, 2)]
    for order in (arrays, arrays[::-1]):
        numba_util._ARRAY_TYPES.clear()
        for a in order:
            assert numba_util._numba_type(a) == typeof(a), a
    assert numba_util._numba_type(np.int32(3)) == typeof(np.int32(3))  # not memoised
    assert numba_util._numba_type(2**63) == typeof(2**63)


@pytest.mark.parametrize("op", ["spmm_a", "sddmm", "fusedmm_a"])
def test_a_prepared_call_runs_its_first_calls_machine_code(op, monkeypatch):
    """A prepared reference call goes through numba's dispatcher once and then calls the
    compiled code of those argument types directly (machine_code is asked once), with the
    dispatcher's results on new arrays alike in dtype, layout and flags."""
    import distmm.kernels.base as base

    asked = []

    def spy(dispatcher, args):
        entry = machine_code(dispatcher, args)
        asked.append(entry)
        return entry

    machine_code = base.machine_code
    monkeypatch.setattr(base, "machine_code", spy)
    S, M = _block(37, 23, 0.2, 5, np.float32)
    model = ReferenceModel()
    rng = np.random.default_rng(1)
    r = 16

    def operands():
        A = rng.standard_normal((37, r)).astype(np.float32)
        B = rng.standard_normal((23, r)).astype(np.float32)
        out = np.zeros(S.nnz if op == "sddmm" else (37, r), np.float32)
        return A, B, out

    A, B, out = operands()
    X, Y = (B, None) if op == "spmm_a" else (A, B)
    run = model.prepare(op, S, S.data, X, Y, out, accumulate=False)
    Md = M.astype(np.float64)
    for _ in range(3):
        A, B, out = operands()
        run(S.data, *((B,) if op == "spmm_a" else (A, B)), out)
        D = (Md.multiply(A.astype(np.float64) @ B.T.astype(np.float64))).tocsr()
        want = {"spmm_a": Md @ B, "sddmm": D.data, "fusedmm_a": D @ B}[op]
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    assert len(asked) == 1 and asked[0] is not None
    assert model.stats.ops[op].calls == 3
