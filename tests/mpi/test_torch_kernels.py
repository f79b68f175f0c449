"""distmm.torch's SDDMM, SpMMA, SpMMB, FusedMMA and FusedMMB: forward against a dense torch
reference on the global matrices, backward by torch.autograd.gradcheck (finite differences in
float64), on every family, at c = 1 and the deepest valid replication: full Jacobians on
15d-dense-shift at c = 1, gradcheck's fast mode (random projections) elsewhere.

The inputs are global tensors perturbed identically on every rank (tests/mpi/torch_global.py),
so every rank makes the same collective calls in the same order.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="distmm.torch needs PyTorch (pip install distmm[torch]); "
                    "./tasks install installs the CPU wheel")

from torch_global import (  # noqa: E402
    COMM,
    GlobalLayout,
    configs,
    full_jacobian,
    global_tensor,
    problem,
    width,
)

import distmm  # noqa: E402
import distmm.torch as dt  # noqa: E402

M, N = 8, 7
R = width()
S = problem(M, N, seed=5)
CONFIGS = configs(R)


def dense_reference(op: str, lay: GlobalLayout, A, B, v):
    """The global result with plain torch on the dense S(v) (an independent oracle)."""
    Sd = torch.zeros(M, N, dtype=torch.float64)
    Sd[torch.from_numpy(lay.rows.astype(np.int64)),
       torch.from_numpy(lay.cols.astype(np.int64))] = v
    if op == "spmm_a":
        return Sd @ B
    if op == "spmm_b":
        return Sd.T @ A
    R_ = Sd * (A @ B.T)
    if op == "sddmm":
        return R_
    return R_ @ B if op == "fusedmm_a" else R_.T @ A


def global_values(lay: GlobalLayout):
    """S's values in the layout's global edge order, requiring grad."""
    csr = S.tocsr()
    csr.sort_indices()
    return torch.tensor(csr.data, dtype=torch.float64, requires_grad=True)


def make(op: str, lay: GlobalLayout):
    """f(A, B[, v]) -> global output, for gradcheck (every rank calls it identically)."""
    obj = lay.obj

    def f(A, B, v=None):
        A_loc = lay.extract(A, "dense", "a")
        B_loc = lay.extract(B, "dense", "b")
        v_loc = None if v is None else lay.extract(v, "edges")
        if op == "sddmm":
            return lay.gather(dt.sddmm(obj, A_loc, B_loc, v_loc), "edges")
        if op == "spmm_a":
            return lay.gather(dt.spmm_a(obj, B_loc, v_loc), "dense", "a")
        if op == "spmm_b":
            return lay.gather(dt.spmm_b(obj, A_loc, v_loc), "dense", "b")
        fn = dt.fusedmm_a if op == "fusedmm_a" else dt.fusedmm_b
        return lay.gather(fn(obj, A_loc, B_loc, v_loc), "dense", "a" if op == "fusedmm_a"
                          else "b")

    return f


@pytest.mark.parametrize("with_values", [False, True], ids=["S-values", "values-tensor"])
@pytest.mark.parametrize("op", ["sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b"])
@pytest.mark.parametrize("algorithm,c", CONFIGS)
def test_forward_and_gradcheck(algorithm, c, op, with_values):
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=R, dtype=np.float64,
                            root=None)
    lay = GlobalLayout(obj, S, R)
    A = global_tensor((M, R), seed=1)
    B = global_tensor((N, R), seed=2)
    v = global_values(lay)
    f = make(op, lay)
    args = (A, B, v) if with_values else (A, B)
    out = f(*args)
    ref = dense_reference(op, lay, A, B, v)
    if op == "sddmm":
        ref = ref[torch.from_numpy(lay.rows.astype(np.int64)),
                  torch.from_numpy(lay.cols.astype(np.int64))]
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    # Full Jacobians on the first configuration; elsewhere gradcheck's fast mode (a random
    # projection u^T J v of both Jacobians: a few collective calls instead of one per entry).
    fast = not (full_jacobian((algorithm, c), CONFIGS[0]) and with_values)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-6, fast_mode=fast)


@pytest.mark.parametrize("algorithm,c", CONFIGS[:1])
def test_backward_counts_like_the_forward_calls(algorithm, c):
    """SpMMA's backward is one SpMMB and one SDDMM: the words it adds equal those of those two
    numpy calls made directly (every word of the backward goes through the counting wrapper)."""
    obj = distmm.distribute(S, COMM, algorithm=algorithm, c=c, r=R, dtype=np.float64,
                            root=None)
    lay = GlobalLayout(obj, S, R)
    B = lay.extract(global_tensor((N, R), seed=2), "dense", "b").detach().requires_grad_()
    v = torch.from_numpy(obj.values.copy()).requires_grad_()
    G = torch.ones(obj.dense_rows("a", obj.rank).size, B.shape[1], dtype=torch.float64)
    # The first call of each kind runs the full cross-rank checks (checks="once"): make them
    # before counting, so both sides below count the kernels' words alone.
    obj.spmm_b(G.numpy(), values=v.detach().numpy())
    obj.sddmm(G.numpy(), B.detach().numpy(), values=np.ones_like(obj.values))
    Y = dt.spmm_a(obj, B, v)
    obj.stats.reset()
    Y.backward(G)
    torch_words = obj.stats.words()
    obj.stats.reset()
    obj.spmm_b(G.numpy(), values=v.detach().numpy())
    obj.sddmm(G.numpy(), B.detach().numpy(), values=np.ones_like(obj.values))
    assert torch_words == obj.stats.words()
    # and the result is the numpy API's
    np.testing.assert_allclose(B.grad.numpy(), obj.spmm_b(G.numpy(), values=v.detach().numpy()))


def test_requires_grad_must_agree():
    """A tensor that requires grad on some ranks only would leave those ranks alone in a
    collective backward: refused on every rank, before any kernel runs."""
    if COMM.size == 1:
        pytest.skip("needs two ranks to disagree")
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    B = torch.zeros(obj.dense_rows("b", obj.rank).size, 3, dtype=torch.float64,
                    requires_grad=COMM.rank == 0)
    with pytest.raises(distmm.InputError, match="require gradients"):
        dt.spmm_a(obj, B)
    # a wrong dtype on one rank: distmm's own check, raised everywhere
    B = torch.zeros(obj.dense_rows("b", obj.rank).size, 3,
                    dtype=torch.float32 if COMM.rank == COMM.size - 1 else torch.float64)
    with pytest.raises(distmm.InputError, match="dtype"):
        dt.spmm_a(obj, B)


@pytest.mark.parametrize("bad", ["array", "meta"])
def test_an_argument_that_is_no_cpu_tensor_is_refused_everywhere(bad):
    """A numpy array where a tensor belongs, or a tensor on another device, on the last rank
    only: every rank raises the same InputError naming the argument, before any kernel."""
    obj = distmm.distribute(S, COMM, dtype=np.float64, root=None)
    rows = obj.dense_rows("b", obj.rank).size
    B = torch.zeros(rows, 3, dtype=torch.float64)
    if COMM.rank == COMM.size - 1:
        B = B.numpy() if bad == "array" else torch.zeros(rows, 3, dtype=torch.float64,
                                                          device="meta")
    obj.stats.reset()
    with pytest.raises(distmm.InputError, match="B must be a torch.Tensor" if bad == "array"
                       else "B is on meta; distmm.torch takes CPU tensors"):
        dt.spmm_a(obj, B)
    assert obj.stats.seconds.get("compute", 0.0) == 0.0
    obj.close()
