"""distmm.torch without MPI collectives: the optional import and the zero-copy conversions."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import distmm


def test_import_without_torch_names_the_extra(monkeypatch):
    """With torch missing, importing distmm.torch raises the optional-extra InputError."""
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    monkeypatch.delitem(sys.modules, "distmm.torch", raising=False)
    with pytest.raises(distmm.InputError, match=r"pip install distmm\[torch\]"):
        importlib.import_module("distmm.torch")
    monkeypatch.delitem(sys.modules, "distmm.torch", raising=False)


def test_as_numpy_is_a_view_unless_the_tensor_is_strided():
    torch = pytest.importorskip("torch", reason="needs PyTorch (pip install distmm[torch])")
    from distmm.torch import as_numpy

    t = torch.arange(12, dtype=torch.float32, requires_grad=True).reshape(3, 4)
    a = as_numpy(t)
    assert a.ctypes.data == t.data_ptr() and a.flags.c_contiguous
    s = t[:, 1]  # non-contiguous: one copy into contiguous memory
    b = as_numpy(s)
    assert b.ctypes.data != t.data_ptr() and b.flags.c_contiguous
    np.testing.assert_array_equal(b, [1, 5, 9])
