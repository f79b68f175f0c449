"""``relay=`` through distmm.distribute and ``--relay`` on the command line: every setting
gives scipy's results, the counted exchange equals the pattern model built with the same
setting (the rule with injected alpha and beta included: a tree that does not pay is not
built, one that pays is), and the option is refused on every rank for the other families, for
an unknown value and where the ranks disagree."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from families import COMM, P, gathered, scattered
from oracle import check

import distmm
from distmm.cli import main
from distmm.core.exchange import exchange_model
from distmm.core.relay_rule import RelayRule
from distmm.errors import InputError

NAME = "15d-sparse-aware"
# a message as dear as 10^9 words: never pays; words dear and messages free: always pays
NEVER = RelayRule(alpha=1.0, beta=1e-9, r=4)
ALWAYS = RelayRule(alpha=1e-12, beta=1.0, r=4)


def hub_graph(n: int, seed: int = 7) -> sp.coo_matrix:
    """About three random neighbours a node and two hubs adjacent to every node: in
    natural-order blocks every rank needs the hubs' rows, so the relay tree engages."""
    rng = np.random.default_rng(seed)
    rows = np.r_[rng.integers(0, n, 3 * n), np.arange(n), np.arange(n)]
    cols = np.r_[rng.integers(0, n, 3 * n), np.zeros(n, int), np.full(n, n // 2)]
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    S = (S + S.T).tocoo()
    return sp.coo_matrix((rng.uniform(0.5, 1.5, S.nnz), (S.row, S.col)), shape=S.shape)


@pytest.mark.parametrize("relay", ["auto", "on", "off", True, False, NEVER, ALWAYS],
                         ids=["auto", "on", "off", "true", "false", "never", "always"])
def test_relay_setting_matches_scipy_and_the_model(relay):
    S = hub_graph(6 * P + 5)
    r = 4
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((S.shape[0], r)), rng.standard_normal((S.shape[1], r))
    obj = distmm.distribute(S, COMM, algorithm=NAME, r=r, dtype=np.float64, root=None,
                            permute=False, relay=relay)
    x = obj.exchange
    relayed = COMM.allreduce(int(x.relay_rows.size))
    setting = {"auto": True, "on": RelayRule(min_saving=0.0), "off": False}.get(relay, relay)
    model = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, 1,
                           obj.grid.order, offsets=(obj.offsets["a"], obj.offsets["b"]),
                           relay=setting)
    k = COMM.rank
    assert (x.nsend, x.nrecv, x.relay_rows.size) == (
        model.send_rows[k], model.recv_rows[k], model.relay_rows[k])
    if relay in ("off", False) or relay is NEVER or P < 3:
        assert relayed == 0
        if relay in ("off", False):
            assert obj.stats.describe()["exchange"]["relay"] == "off"
    if relay in ("on", ALWAYS) and P >= 3:
        assert relayed > 0, "the hubs' rows must go through relays"
    A_loc, B_loc = scattered(obj, A, B)
    for op, strategy in (("fusedmm-a", "fusion"), ("fusedmm-b", "none"), ("spmm-b", None)):
        check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
    obj.close()


def test_relay_is_refused_for_other_families_and_unknown_values():
    S = hub_graph(20)
    with pytest.raises(InputError, match="applies only to the 15d-sparse-aware"):
        distmm.distribute(S, COMM, algorithm="15d-dense-shift", root=None, relay="on")
    with pytest.raises(InputError, match="relay must be one of"):
        distmm.distribute(S, COMM, algorithm=NAME, root=None, relay="sometimes")


@pytest.mark.skipif(P == 1, reason="needs ranks that can disagree")
def test_ranks_that_disagree_on_relay_are_refused_everywhere():
    S = hub_graph(20)
    with pytest.raises(InputError, match="relay"):
        distmm.distribute(S, COMM, algorithm=NAME, root=None,
                          relay="on" if COMM.rank == 0 else "off")


@pytest.fixture(scope="module")
def hub_file(shared_tmp):
    path = os.path.join(str(shared_tmp), "relay_S.mtx")
    if COMM.rank == 0:
        scipy.io.mmwrite(path, hub_graph(6 * P + 5))
        rng = np.random.default_rng(1)
        np.save(os.path.join(str(shared_tmp), "relay_A.npy"), rng.standard_normal((6 * P + 5, 4)))
        np.save(os.path.join(str(shared_tmp), "relay_B.npy"), rng.standard_normal((6 * P + 5, 4)))
    COMM.Barrier()
    return str(shared_tmp)


def _run(d: str, out: str, *extra: str) -> list[str]:
    return ["run", "fusedmm-a", "--sparse", os.path.join(d, "relay_S.mtx"), "--a",
            os.path.join(d, "relay_A.npy"), "--b", os.path.join(d, "relay_B.npy"), "--out",
            os.path.join(d, out), *extra]


def test_cli_relay_refused_for_another_family(hub_file, capsys):
    code = main(_run(hub_file, "never_relay.h5", "--algorithm", "15d-dense-shift",
                     "--relay", "on"))
    err = capsys.readouterr().err
    assert code == 2
    if COMM.rank == 0:
        assert "--relay applies only to the 15d-sparse-aware" in err
    assert not os.path.exists(os.path.join(hub_file, "never_relay.h5"))


@pytest.mark.parametrize("relay", ["on", "off"])
def test_cli_relay_runs_and_matches_scipy(hub_file, relay, capsys):
    import h5py

    out = f"relay_{relay}.h5"
    assert main(_run(hub_file, out, "--algorithm", NAME, "--relay", relay,
                     "--permute", "none", "--dtype", "float64")) == 0
    capsys.readouterr()
    COMM.Barrier()
    if COMM.rank == 0:
        S = sp.csr_matrix(scipy.io.mmread(os.path.join(hub_file, "relay_S.mtx")))
        A = np.load(os.path.join(hub_file, "relay_A.npy"))
        B = np.load(os.path.join(hub_file, "relay_B.npy"))
        ref = S.multiply(A @ B.T) @ B
        with h5py.File(os.path.join(hub_file, out)) as f:
            got = f[list(f.keys())[0]][...]
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(P < 3, reason="a layer of three or more ranks can relay")
@pytest.mark.parametrize("alpha,beta,engaged", [(1.0, 1e-12, False), (1e-15, 1.0, True)])
def test_cli_relay_auto_follows_a_calibrated_machine(hub_file, alpha, beta, engaged, capsys):
    """--relay auto with a calibrated --machine keeps the tree where alpha and beta say it
    pays: a message dearer than any saving declines it, free messages keep it."""
    import json

    path = os.path.join(hub_file, f"machine_{alpha}.json")
    if COMM.rank == 0:
        with open(path, "w") as fh:
            json.dump({"alpha": alpha, "beta": beta, "gamma": 1e-10}, fh)
    COMM.Barrier()
    out = f"relay_auto_{alpha}.h5"
    assert main(_run(hub_file, out, "--algorithm", NAME, "--relay", "auto", "--machine", path,
                     "--permute", "none", "--dtype", "float64")) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    if COMM.rank == 0:
        runs = [x for x in lines if x.get("event") == "run"]
        assert runs and runs[0]["exchange"]["relay"] == ("on" if engaged else "not needed")


@pytest.mark.parametrize("relay", ["off", "on"])
def test_cli_tune_times_the_sparse_aware_candidates_with_the_relay(hub_file, relay,
                                                                    monkeypatch, capsys):
    """--algorithm auto --tune K times the sparsity-aware candidates with the run's --relay
    (--permute none keeps the natural blocks, where the hubs make the relay engage): every
    candidate of the family is built with it, the run reports the setting of the tuned
    object, and the result is scipy's."""
    import json

    import h5py

    from distmm.algorithms.sparse_aware_15d import SparseAware15D
    from distmm.core.relay_rule import relay_name

    seen, real = [], SparseAware15D.__init__

    def record(self, *args, **kwargs):  # the relay= each candidate of the family gets
        seen.append(kwargs.get("relay"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(SparseAware15D, "__init__", record)
    out = f"tune_relay_{relay}.h5"
    assert main(_run(hub_file, out, "--algorithm", "auto", "--tune", "40",
                     "--relay", relay, "--permute", "none", "--dtype", "float64")) == 0
    monkeypatch.undo()
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert seen and all(x is not None and relay_name(x).split(":")[0] == relay
                        for x in seen), seen
    if COMM.rank == 0:
        assert any(x.get("event") == "tune" and x["algorithm"] == NAME for x in lines)
        runs = [x for x in lines if x.get("event") == "run"]
        if runs[0].get("algorithm") == NAME and relay == "off":
            assert runs[0]["exchange"]["relay"] == "off"
    COMM.Barrier()
    if COMM.rank == 0:
        S = sp.csr_matrix(scipy.io.mmread(os.path.join(hub_file, "relay_S.mtx")))
        A = np.load(os.path.join(hub_file, "relay_A.npy"))
        B = np.load(os.path.join(hub_file, "relay_B.npy"))
        with h5py.File(os.path.join(hub_file, out)) as f:
            got = f[list(f.keys())[0]][...]
        np.testing.assert_allclose(got, S.multiply(A @ B.T) @ B, rtol=1e-9, atol=1e-9)
