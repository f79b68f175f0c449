"""ALS on distributed FusedMM against serial references, in every family, c and strategy.

Oracles (tests/mpi/als_reference.py): ``exact_als`` solves every row's normal equations with
numpy.linalg.solve; ``scipy_cg_als`` runs the same batched CG with scipy.sparse products. With
enough CG iterations (3r) the distributed factors must equal the exact ones to 1e-9 (relative
to the largest factor entry, float64); with few iterations they must equal the serial CG's to
1e-9 (same arithmetic, different summation order). The problems are small planted low-rank
matrices with awkward shapes, users and items without training ratings, and a held-out split.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import scipy.sparse as sp
from als_reference import exact_als, init, rmse, scipy_cg_als, split
from mpi4py import MPI

import distmm
from distmm.apps import als
from distmm.apps.als_io import read_ratings
from distmm.errors import InputError
from distmm.io import generate
from distmm.kernels import NODE_MODELS
from distmm.perf import costmodel

COMM = MPI.COMM_WORLD
P = COMM.Get_size()
R = 8  # at least one column per rank of a layer in every family and c up to p = 8
TOL = 1e-9


def planted(m=37, n=29, rank=3, per_row=6, seed=5, noise=0.05, empty=True):
    """The planted matrix as scipy COO on every rank (rows 4 and 11, columns 2 and 20 are
    emptied so that some users and items have no rating at all)."""
    parts = [generate.planted_low_rank_chunk(m, n, rank, per_row, seed, t, noise,
                                             chunk_rows=8) for t in range(-(-m // 8))]
    rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
    if empty:
        keep = ~np.isin(rows, [4, 11]) & ~np.isin(cols, [2, 20])
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    return sp.coo_matrix((vals, (rows, cols)), shape=(m, n))


def _close(got, ref, tol=TOL):
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def _fit_and_gather(S, **kw):
    res = als.fit(S, COMM, **kw)
    F = res.factors()
    history = res.history
    res.close()
    return F, history


def _configs(strategies="default"):
    p = COMM.Get_size()
    for algorithm, cls in distmm.ALGORITHMS.items():
        cs = costmodel.valid_cs(algorithm, p, R)
        if strategies == "default":
            for c in cs:
                yield algorithm, c, cls.strategies[-1]
        else:
            for strategy in cls.strategies:
                yield algorithm, cs[-1], strategy


@pytest.mark.parametrize("algorithm,c,strategy", list(_configs()))
def test_enough_cg_iterations_equal_exact_als(algorithm, c, strategy):
    S = planted()
    F, history = _fit_and_gather(S, rank=R, lam=0.3, epochs=2, cg_iters=3 * R,
                                 test_fraction=0.2, seed=1, algorithm=algorithm, c=c,
                                 strategy=strategy)
    train, test = split(S, 0.2, 1)
    A0, B0 = init(*S.shape, R, 1)
    trace = []
    A, B = exact_als(train, A0, B0, 0.3, 2,
                     callback=lambda e, a, b: trace.append((rmse(train, a, b),
                                                            rmse(test, a, b))))
    if COMM.rank == 0:
        _close(F[0], A)
        _close(F[1], B)
        got = [(h["train_rmse"], h["test_rmse"]) for h in history]
        np.testing.assert_allclose(got, trace, rtol=1e-9)
        # Users and items without a training rating keep their initial factors exactly.
        idle_a = np.diff(train.indptr) == 0
        idle_b = np.diff(train.tocsc().indptr) == 0
        assert idle_a[[4, 11]].all() and idle_b[[2, 20]].all()
        np.testing.assert_array_equal(F[0][idle_a], A0[idle_a])
        np.testing.assert_array_equal(F[1][idle_b], B0[idle_b])


@pytest.mark.parametrize("algorithm,c,strategy", list(_configs("all")))
@pytest.mark.parametrize("weighted,cg_tol", [(False, 0.0), (True, 0.2)])
def test_few_cg_iterations_equal_serial_cg(algorithm, c, strategy, weighted, cg_tol):
    S = planted(m=23, n=31, per_row=7, seed=9)
    F, history = _fit_and_gather(S, rank=R, lam=0.05, epochs=2, cg_iters=3,
                                 cg_tol=cg_tol, weighted=weighted, seed=4,
                                 algorithm=algorithm, c=c, strategy=strategy)
    train, _ = split(S, 0.0, 4)
    A, B = scipy_cg_als(train, *init(*S.shape, R, 4), 0.05, 2, 3, cg_tol, weighted)
    if COMM.rank == 0:
        _close(F[0], A)
        _close(F[1], B)
        assert history[-1]["test_rmse"] is None
        if cg_tol:  # the tolerance stops some half-steps early, identically on every rank
            assert min(min(h["cg_iterations"]) for h in history) < 3


def test_epochs_after_the_second_replay_every_kernel_call():
    """ALS binds its calls (als.SideCalls, the RMSE's SDDMMs): on 1.5D dense shifting with
    c = 1, from the third epoch on no FusedMM, SpMM or SDDMM of the training or the test
    object runs the family's loop again (each replays its kept kernels and shifts); the
    factors still equal the serial CG's."""
    S = planted(m=23, n=31, per_row=7, seed=9)
    loops = []

    def counted(loop):
        def run(*args, **kwargs):
            loops.append(1)
            return loop(*args, **kwargs)
        return run

    def watch(record, res):
        if record["epoch"] == 2:  # from here on, count every call that runs the loop
            for obj in (res.obj, res.test_obj):
                obj._propagate = counted(obj._propagate)
                obj._one_rank_step = counted(obj._one_rank_step)  # the loop on one rank

    res = als.fit(S, COMM, rank=R, lam=0.05, epochs=4, cg_iters=3, test_fraction=0.2,
                  seed=4, callback=watch)
    F = res.factors()
    res.close()
    assert not loops, f"{len(loops)} calls ran the family's loop after the second epoch"
    train, _ = split(S, 0.2, 4)
    A, B = scipy_cg_als(train, *init(*S.shape, R, 4), 0.05, 4, 3, 0.0, False)
    if COMM.rank == 0:
        _close(F[0], A)
        _close(F[1], B)


def test_default_cg_test_rmse_within_one_percent_of_exact():
    S = planted(m=120, n=90, rank=4, per_row=30, seed=2, noise=0.1, empty=False)
    _, history = _fit_and_gather(S, rank=4, lam=0.1, epochs=8, cg_iters=3,
                                 test_fraction=0.15, seed=3)
    train, test = split(S, 0.15, 3)
    A, B = exact_als(train, *init(*S.shape, 4, 3), 0.1, 8)
    exact = rmse(test, A, B)
    assert abs(history[-1]["test_rmse"] - exact) <= 0.01 * exact
    assert exact < 0.15  # the planted structure is found (noise 0.1, unit-variance signal)


def test_epoch_record_and_breakdown():
    S = planted()
    seen = []
    res = als.fit(S, COMM, rank=R, lam=0.1, epochs=2, cg_iters=2, test_fraction=0.2,
                  callback=lambda rec, r: seen.append(rec["epoch"]))
    assert seen == [1, 2] and len(res.history) == 2
    for rec in res.history:
        assert rec["seconds"] >= rec["fusedmm_comm_seconds"] + rec["fusedmm_compute_seconds"] \
            - 1e-12
        assert rec["fusedmm_compute_seconds"] > 0 and rec["cg_iterations"] == [2, 2]
        # Words summed over ranks: FusedMM moves dense blocks at p > 1, nothing at p = 1.
        assert (rec["fusedmm_words"] > 0) == (COMM.size > 1)
        assert rec["other_words"] >= 0
    # The row dot products of the CG are counted under their own phase where rows are split.
    rep = res.obj.stats.report()
    if COMM.rank == 0 and res.obj.p > 1 and res.config.algorithm != "15d-dense-shift":
        assert rep["phases"]["row_dot"]["words_sent"]["sum"] > 0
    res.close()


@pytest.mark.parametrize("algorithm", list(distmm.ALGORITHMS))
def test_row_dot_words_per_epoch_are_exact(algorithm):
    words = []
    c = costmodel.valid_cs(algorithm, COMM.Get_size(), R)[0]
    res = als.fit(planted(), COMM, rank=R, epochs=3, cg_iters=3, cg_tol=0.3, c=c,
                  algorithm=algorithm,
                  callback=lambda rec, r: words.append(r.obj.stats.words("row_dot")))
    for k in (1, 2):
        its = res.history[k]["cg_iterations"]
        assert words[k] - words[k - 1] == als.epoch_row_dot_words(res.obj, its)
    res.close()


def test_auto_float32_and_a_separate_test_set():
    """--algorithm auto (the planner's pick) and float32 agree with the float64 default run;
    a test set given separately scores like the same entries held out by the split."""
    S = planted()
    train, test = split(S, 0.2, 1)
    kw = {"rank": R, "lam": 0.3, "epochs": 2, "cg_iters": 3, "seed": 1}
    F, history = _fit_and_gather(train, test=test, **kw)
    res = als.fit(train, COMM, test=test, algorithm="auto", **kw)
    assert res.config.algorithm in distmm.ALGORITHMS
    assert res.config.strategy in distmm.ALGORITHMS[res.config.algorithm].strategies
    F_auto = res.factors()
    res.close()
    F32, _ = _fit_and_gather(train, test=test, dtype="float32", **kw)
    _, split_history = _fit_and_gather(S, test_fraction=0.2, **kw)
    if COMM.rank == 0:
        _close(F_auto[0], F[0])
        _close(F_auto[1], F[1])
        assert F32[0].dtype == np.float32
        _close(F32[0], F[0], tol=1e-4)
        _close(F32[1], F[1], tol=1e-4)
        np.testing.assert_allclose([h["test_rmse"] for h in history],
                                   [h["test_rmse"] for h in split_history], rtol=1e-9)


def test_auto_prices_the_sparsity_aware_family_from_the_pattern():
    """--algorithm auto plans with the ratings' pattern: where each rank's users rate only
    that rank's items (block diagonal, in the natural blocks), the sparsity-aware family
    moves no row of a factor and is the pick at p > 1 (every sparsity-oblivious family
    moves some); its factors are those of a run of the default family."""
    mb, nb = 6, 5
    rows, cols = [], []
    for k in range(P):
        u, i = np.meshgrid(np.arange(mb), np.arange(nb), indexing="ij")
        keep = (u + 2 * i + k) % 3 != 0  # not every pair rated
        rows.append(k * mb + u[keep])
        cols.append(k * nb + i[keep])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    S = sp.coo_matrix((1.0 + (rows * cols) % 5, (rows, cols)), shape=(P * mb, P * nb))
    kw = {"rank": 4, "lam": 0.3, "epochs": 2, "cg_iters": 3, "seed": 1}
    res = als.fit(S, COMM, algorithm="auto", **kw)
    if P > 1:
        assert res.config.algorithm == "15d-sparse-aware"
        assert res.obj.stats.words("propagation") == 0
    F_auto = res.factors()
    res.close()
    F, _ = _fit_and_gather(S, **kw)
    if COMM.rank == 0:
        _close(F_auto[0], F[0])
        _close(F_auto[1], F[1])


@pytest.mark.parametrize("permute", ["auto", "random", "none"])
def test_held_out_split_shares_the_training_layout(permute):
    """The held-out entries are scored with the training factors, so the test object must
    share the training object's blocks. The "blocks" permutation is chosen from per-row
    counts, which differ between the two sets (90 x 70 with 10% held out gave two layouts at
    p = 2 when each set chose its own): the test RMSE must be that of the gathered factors."""
    S = planted(90, 70, rank=4, per_row=8, seed=3, empty=False)
    res = als.fit(S, COMM, rank=R, lam=0.1, epochs=1, cg_iters=2, test_fraction=0.1, seed=3,
                  permute=permute)
    F, history = res.factors(), res.history
    res.close()
    if COMM.rank == 0:
        _, test = split(S, 0.1, 3)
        assert test.nnz > 0
        np.testing.assert_allclose(history[-1]["test_rmse"], rmse(test, *F), rtol=1e-9)


@pytest.mark.parametrize("node_model", [m for m in NODE_MODELS if m != "reference"])
def test_every_node_model_gives_the_reference_factors(node_model):
    kw = {"rank": R, "epochs": 2, "cg_iters": 3, "test_fraction": 0.2}
    F, _ = _fit_and_gather(planted(), **kw)
    G, _ = _fit_and_gather(planted(), node_model=node_model, **kw)
    if COMM.rank == 0:
        _close(G[0], F[0])
        _close(G[1], F[1])


def test_layout_options_do_not_change_the_answer():
    """Overlap, the permutation modes and the rank order move blocks, not the result."""
    kw = {"rank": R, "epochs": 2, "cg_iters": 3}
    F, _ = _fit_and_gather(planted(), **kw)
    c = costmodel.valid_cs("15d-dense-shift", COMM.size)[-1]
    for extra in ({"overlap": True, "permute": "random"},
                  {"permute": "none", "order": "layer", "c": c}):
        G, _ = _fit_and_gather(planted(), **kw, **extra)
        if COMM.rank == 0:
            _close(G[0], F[0])
            _close(G[1], F[1])


def test_predict_matches_factor_products():
    S = planted()
    res = als.fit(S, COMM, rank=R, epochs=1, cg_iters=2)
    F = res.factors()
    res.close()
    if COMM.rank == 0:
        A, B = F
        users, items = np.array([0, 36, 5]), np.array([28, 0, 5])
        np.testing.assert_allclose(als.predict(A, B, users, items), (A @ B.T)[users, items])
        with pytest.raises(InputError, match="user ids"):
            als.predict(A, B, np.array([37]), np.array([0]))


def test_planted_generator_does_not_depend_on_p():
    share = generate.planted_low_rank(50, 40, 3, 9, 7, COMM, noise=0.2, pattern="power-law",
                                      chunk_rows=6)
    got = share.gather_scipy(COMM, root=0)
    if COMM.rank == 0:
        parts = [generate.planted_low_rank_chunk(50, 40, 3, 9, 7, t, 0.2, "power-law", 6)
                 for t in range(9)]
        rows, cols, vals = (np.concatenate(x) for x in zip(*parts, strict=True))
        ref = sp.coo_matrix((vals, (rows, cols)), shape=(50, 40)).toarray()
        np.testing.assert_array_equal(got.toarray(), ref)
        assert got.nnz == len(set(zip(got.row, got.col, strict=True)))  # no duplicates
        clean = generate.planted_low_rank_chunk(50, 40, 3, 9, 7, 0, 0.0, "power-law", 6)
        A = generate.planted_factors("a", clean[0], 3, 7)
        B = generate.planted_factors("b", clean[1], 3, 7)
        np.testing.assert_allclose(clean[2], np.einsum("ij,ij->i", A, B))


@pytest.mark.parametrize("kw,match", [
    ({"rank": 0}, "rank must be"), ({"lam": -0.1}, "lambda must be"),
    ({"epochs": 0}, "epochs must be"), ({"cg_iters": 0}, "cg_iters"),
    ({"test_fraction": 1.0}, "test_fraction"), ({"algorithm": "nope"}, "unknown algorithm"),
])
def test_bad_parameters_fail_on_every_rank(kw, match):
    with pytest.raises(InputError, match=match):
        als.fit(planted(), COMM, **kw)


def test_empty_and_non_finite_ratings_fail_on_every_rank():
    with pytest.raises(InputError, match="empty"):
        als.fit(sp.coo_matrix((5, 4)), COMM, rank=2)
    S = planted().tocsr()
    S.data[3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        als.fit(S, COMM, rank=2)


def test_hdf5_ratings_and_their_errors(shared_tmp):
    S = planted()
    good, bad = shared_tmp / "r.h5", shared_tmp / "bad.h5"
    if COMM.rank == 0:
        with h5py.File(good, "w") as fh:
            fh["row"], fh["col"], fh["rating"] = S.row, S.col, S.data
            fh.attrs["shape"] = np.array(S.shape)
        with h5py.File(bad, "w") as fh:
            fh["row"], fh["col"] = S.row, np.where(np.arange(S.nnz) == 7, 99, S.col)
            fh["rating"] = S.data
            fh.attrs["shape"] = np.array(S.shape)
    COMM.Barrier()
    got = read_ratings(good, COMM).gather_scipy(COMM)
    if COMM.rank == 0:
        np.testing.assert_array_equal(got.toarray(), S.toarray())
    with pytest.raises(InputError, match="entry 7 .* outside the shape"):
        read_ratings(bad, COMM)
    with pytest.raises(InputError, match="no such file"):
        read_ratings(shared_tmp / "missing.h5", COMM)


def test_checkpoint_resume_is_bit_identical_and_loads_in_another_family(shared_tmp):
    S = planted()
    ck = str(shared_tmp / f"ck-{COMM.size}.h5")
    kw = {"rank": R, "lam": 0.2, "cg_iters": 3, "test_fraction": 0.2, "seed": 6}
    full, _ = _fit_and_gather(S, epochs=3, **kw)
    _fit_and_gather(S, epochs=2, checkpoint=ck, checkpoint_every=1, **kw)
    resumed, history = _fit_and_gather(S, epochs=3, checkpoint=ck, resume=True, **kw)
    other = max(costmodel.valid_cs("25d-sparse-replicate", COMM.size, R))
    moved, _ = _fit_and_gather(S, epochs=3, checkpoint=ck, resume=True,
                               algorithm="25d-sparse-replicate", c=other, **kw)
    single, _ = _fit_and_gather(S, epochs=3, checkpoint=ck, resume=True, dtype="float32",
                                **kw)  # the fingerprint does not depend on the dtype
    if COMM.rank == 0:
        _close(single[0], full[0], tol=1e-4)
        assert [h["epoch"] for h in history] == [1, 2, 3]
        np.testing.assert_array_equal(resumed[0], full[0])
        np.testing.assert_array_equal(resumed[1], full[1])
        _close(moved[0], full[0])
        _close(moved[1], full[1])
    # Another problem (a different lambda or data), or a corrupt file, is refused everywhere.
    with pytest.raises(InputError, match="another problem .*lam"):
        als.fit(S, COMM, epochs=3, checkpoint=ck, resume=True, **{**kw, "lam": 0.3})
    with pytest.raises(InputError, match="another problem .*hash"):
        als.fit(planted(seed=8), COMM, epochs=3, checkpoint=ck, resume=True, **kw)
    junk = shared_tmp / "junk.h5"
    if COMM.rank == 0:
        junk.write_bytes(b"not hdf5 at all")
    COMM.Barrier()
    with pytest.raises(InputError, match="corrupt"):
        als.fit(S, COMM, epochs=3, checkpoint=str(junk), resume=True, **kw)
