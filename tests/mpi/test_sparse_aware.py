"""What only the sparsity-aware family does: results against scipy on the shapes where an
exchange plan can go wrong, and counted words equal to the model computed from the pattern
alone (:func:`distmm.core.exchange.exchange_model`), for every phase, every op and strategy,
every c, on every rank; building the plan costs what its formula says."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from families import COMM, P, gathered, grid_cs, scattered
from oracle import check, problem

import distmm
from distmm.algorithms.sparse_aware_15d import SparseAware15D, sparse_aware_15d_exact
from distmm.core import exchange
from distmm.core.exchange import exchange_model
from distmm.core.partition import default_method
from distmm.perf import bench, costmodel

NAME = SparseAware15D.name
CS = grid_cs(NAME)
PHASES = ("replication", "propagation", "reduction")
RUNS = [(op, None) for op in ("sddmm", "spmm-a", "spmm-b")] + [
    (op, s) for op in ("fusedmm-a", "fusedmm-b") for s in SparseAware15D.strategies]


def _coo(m, n, rows, cols, seed=0):
    rng = np.random.default_rng(seed)
    rows, cols = np.asarray(rows), np.asarray(cols)
    return sp.coo_matrix((rng.uniform(0.5, 1.5, rows.size), (rows, cols)), shape=(m, n))


def awkward():
    """(label, S, permute): shapes where a rank stores nothing, needs nothing, or sends
    nothing, with empty rows and columns, rectangular and square."""
    S, _, _ = problem(41, 29, 1, density=0.15, seed=3, empty_rows=True)
    keep = S.col % 4 != 1  # empty columns too
    yield "empty rows and columns", sp.coo_matrix(
        (S.data[keep], (S.row[keep], S.col[keep])), shape=S.shape), True
    # every nonzero in the first 3 rows: with blocks in natural order, the other ranks'
    # superblocks are empty (they store, need and compute nothing, but still send rows)
    rng = np.random.default_rng(4)
    yield "nonzeros in three rows", _coo(40, 33, rng.integers(0, 3, 30),
                                         rng.integers(0, 33, 30)), False
    # diagonal plus one dense column: only the ranks whose blocks meet column 0 away from
    # their own block need anything; the diagonal is local everywhere
    n = 4 * P + 3
    yield "diagonal and one column", _coo(n, n, np.r_[np.arange(n), np.arange(n)],
                                          np.r_[np.arange(n), np.zeros(n, int)]), False
    yield "hubs", hubs(6 * P + 5), False
    yield "wide and short", _coo(3, 57, [0, 0, 2, 2, 2], [0, 56, 5, 30, 31]), False
    yield "empty", sp.coo_matrix((9, 7)), True
    # most of every block needed (as on MovieLens's ratings): some pairs move whole blocks
    # (exchange.WHOLE_FRACTION), others their needed rows
    yield "mostly dense", mostly_dense(5 * P + 3, 6 * P + 1), False
    # rectangular with hidden blocks (users x items of a few communities, shuffled): a row
    # and a column partition; KaHyPar where installed (the default, KaHIP, above)
    yield "rectangular communities", planted_bipartite(37, 53, 4, seed=5), \
        "kahypar" if _installed("kahypar") else True


def _installed(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def planted_bipartite(m: int, n: int, k: int, seed: int = 0) -> sp.coo_matrix:
    """An m x n pattern of k communities (most nonzeros inside one, a few across), rows and
    columns shuffled: a partition of rows and columns recovers the communities."""
    rng = np.random.default_rng(seed)
    rc, cc = rng.integers(0, k, m), rng.integers(0, k, n)
    rows = rng.integers(0, m, 6 * m)
    inside = rng.random(rows.size) < 0.9
    cols = np.empty(rows.size, dtype=np.int64)
    for i, (r, keep) in enumerate(zip(rows, inside, strict=True)):
        pool = np.flatnonzero(cc == rc[r]) if keep else np.arange(n)
        cols[i] = rng.choice(pool if pool.size else np.arange(n))
    return _coo(m, n, rows, cols, seed)


def hubs(n: int, seed: int = 7) -> sp.coo_matrix:
    """A symmetric graph of n nodes, about three random neighbours each, and two hubs (nodes
    0 and n // 2) adjacent to every node: in natural-order blocks every rank of a layer needs
    the hubs' rows, so their owners are the busiest senders and the relay tree engages."""
    rng = np.random.default_rng(seed)
    rows = np.r_[rng.integers(0, n, 3 * n), np.arange(n), np.arange(n)]
    cols = np.r_[rng.integers(0, n, 3 * n), np.zeros(n, int), np.full(n, n // 2)]
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    S = (S + S.T).tocoo()
    return _coo(n, n, S.row, S.col, seed)


def mostly_dense(m: int, n: int, seed: int = 9) -> sp.coo_matrix:
    """A random m x n pattern of density 0.45: a rank needs most rows of its layer's other
    blocks, all of some (whole blocks) and not all of others."""
    S = sp.random(m, n, density=0.45, random_state=seed, format="coo")
    return _coo(m, n, S.row, S.col, seed)


CASES = list(awkward())
HUB = [k for k, x in enumerate(CASES) if x[0] == "hubs"][0]
DENSE = [k for k, x in enumerate(CASES) if x[0] == "mostly dense"][0]


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)), ids=[x[0] for x in CASES])
def test_every_op_matches_scipy_on_awkward_patterns(c, overlap, case):
    _, S, permute = CASES[case]
    r = 3
    rng = np.random.default_rng(case)
    A, B = rng.standard_normal((S.shape[0], r)), rng.standard_normal((S.shape[1], r))
    obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=r, dtype=np.float64, root=None,
                            permute=permute, overlap=overlap)
    A_loc, B_loc = scattered(obj, A, B)
    for op, strategy in RUNS * 2:  # twice: the kept buffers and prepared kernels serve again
        check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
    obj.close()


def model_counts(obj, S):
    """Every rank's exchange counts from the pattern and the object's permutation alone."""
    coo = sp.coo_matrix(S)
    return exchange_model(obj.row_inv[coo.row], obj.col_inv[coo.col], S.shape, obj.p, obj.c,
                          obj.grid.order, offsets=(obj.offsets["a"], obj.offsets["b"]))


@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("case", range(len(CASES)), ids=[x[0] for x in CASES])
@pytest.mark.parametrize("order", ["fiber", "layer"])
def test_counted_words_equal_the_pattern_model(c, case, order):
    _, S, permute = CASES[case]
    r = 5
    rng = np.random.default_rng(case)
    A, B = rng.standard_normal((S.shape[0], r)), rng.standard_normal((S.shape[1], r))
    obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=r, root=None, permute=permute,
                            order=order)
    model = model_counts(obj, S)
    mine = model.rank(COMM.rank)
    assert obj.plan_cost["words"] == model.plan_words[COMM.rank]
    assert obj.plan_cost["messages"] == model.plan_messages[COMM.rank]
    assert obj.values.size == model.nnz[COMM.rank]
    A_loc, B_loc = scattered(obj, A, B)
    m, n = S.shape
    for op, strategy in RUNS:
        key, st = op.replace("-", "_"), strategy or "none"
        exact = sparse_aware_15d_exact(key, m, n, r, P, c, st, **mine)
        assert exact == obj.stats.expected_words(key, r, st)
        obj.stats.reset()
        bench.run_op(obj, op, A_loc, B_loc, strategy)
        # what it receives: the same formula with the roles of sender and receiver swapped
        k = COMM.rank
        swapped = sparse_aware_15d_exact(
            key, m, n, r, P, c, st, a_rows=mine["a_rows"], super_rows=mine["super_rows"],
            gather_rows=int(model.recv_rows[k]), gather_peers=int(model.recv_peers[k]),
            scatter_rows=int(model.send_rows[k]), scatter_peers=int(model.send_peers[k]))
        assert obj.stats.words("propagation", "words_received") == \
            swapped["propagation"]["words"]
        assert obj.stats.words("propagation", "messages_received") == \
            swapped["propagation"]["messages"]
        for ph in PHASES:
            assert obj.stats.words(ph) == exact[ph]["words"], (op, strategy, ph)
            assert obj.stats.words(ph, "messages_sent") == exact[ph]["messages"], (op, ph)
            sent = COMM.allreduce(obj.stats.words(ph))
            assert sent == COMM.allreduce(obj.stats.words(ph, "words_received"))
        assert obj.stats.words("distribute") == 0 and obj.stats.words("plan") == 0
    obj.close()


@pytest.mark.parametrize("relay", [True, False])
def test_relay_tree_on_hubs_matches_scipy_and_the_model(relay, monkeypatch):
    """The hubs' rows reach most ranks of a layer through relays (where a layer has three
    ranks or more), every op and strategy still equals scipy with and without overlap, the
    counters equal the pattern model built with the same tree (every phase, the plan
    included), and the tree lowers the busiest rank's rows sent; off, nothing is relayed.
    The tree is kept here whatever it saves (at q = 3 or 4 less than the default's
    threshold): test_relay_threshold_declines_a_small_saving tests the default."""
    _, S, _ = CASES[HUB]
    monkeypatch.setattr(SparseAware15D, "relay", relay)
    monkeypatch.setattr(exchange, "RELAY_MIN_SAVING", 0.0)
    r = 4
    m, n = S.shape
    rng = np.random.default_rng(11)
    A, B = rng.standard_normal((m, r)), rng.standard_normal((n, r))
    for c in CS:
        q = P // c
        for overlap in (False, True):
            obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=r, dtype=np.float64,
                                    root=None, permute=False, overlap=overlap)
            x = obj.exchange
            relayed = COMM.allreduce(int(x.relay_rows.size))
            if relay and q >= 3:
                assert relayed > 0, "the hubs' rows must go through relays"
                assert obj.stats.describe()["exchange"]["relay"] in ("on", "not needed")
            else:
                assert relayed == 0 and not x.relayed
            # every rank of a layer agrees whether it relays
            flags = COMM.allgather((obj.grid.v, x.relayed))
            assert all(f == dict(flags)[v] for v, f in flags)
            model = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, c,
                                   obj.grid.order, offsets=(obj.offsets["a"], obj.offsets["b"]),
                                   relay=relay)
            k = COMM.rank
            assert (x.nsend, x.nrecv, x.relay_rows.size) == (
                model.send_rows[k], model.recv_rows[k], model.relay_rows[k])
            assert obj.plan_cost["words"] == model.plan_words[k]
            assert obj.plan_cost["messages"] == model.plan_messages[k]
            A_loc, B_loc = scattered(obj, A, B)
            for op, strategy in RUNS:
                key, st = op.replace("-", "_"), strategy or "none"
                obj.stats.reset()
                check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
                exact = sparse_aware_15d_exact(key, m, n, r, P, c, st, **model.rank(k))
                assert exact == obj.stats.expected_words(key, r, st)
                for ph in PHASES:
                    assert obj.stats.words(ph) == exact[ph]["words"], (op, strategy, ph)
                    assert obj.stats.words(ph, "messages_sent") == exact[ph]["messages"]
                    # received: the model with the roles of sender and receiver swapped
                sw = sparse_aware_15d_exact(
                    key, m, n, r, P, c, st, a_rows=int(model.a_rows[k]),
                    super_rows=int(model.super_rows[k]), gather_rows=int(model.recv_rows[k]),
                    gather_peers=int(model.recv_peers[k]),
                    scatter_rows=int(model.send_rows[k]),
                    scatter_peers=int(model.send_peers[k]))
                assert obj.stats.words("propagation", "words_received") == \
                    sw["propagation"]["words"]
                assert obj.stats.words("propagation", "messages_received") == \
                    sw["propagation"]["messages"]
            obj.close()
        if relay and q >= 3:
            off = exchange_model(S.row, S.col, S.shape, P, c, relay=False)
            on = exchange_model(S.row, S.col, S.shape, P, c, relay=True)
            assert on.send_rows.max() < off.send_rows.max()
            assert (on.recv_rows == off.recv_rows).all()  # nobody receives anything extra


def test_relay_threshold_declines_a_small_saving():
    """By default a layer relays only where the tree lowers its busiest rank's rows sent by
    RELAY_MIN_SAVING or more; the run and the model agree on that choice."""
    _, S, _ = CASES[HUB]
    for c in CS:
        q = P // c
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=4, dtype=np.float64,
                                root=None, permute=False)
        off = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, c,
                             obj.grid.order, offsets=(obj.offsets["a"], obj.offsets["b"]),
                             relay=False)
        on = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, c,
                            obj.grid.order, offsets=(obj.offsets["a"], obj.offsets["b"]),
                            relay=True)
        k = COMM.rank
        assert (obj.exchange.nsend, obj.exchange.relay_rows.size) == (
            on.send_rows[k], on.relay_rows[k])
        busiest_on, busiest_off = on.send_rows.max(), off.send_rows.max()
        if COMM.allreduce(int(obj.exchange.relay_rows.size)) > 0:
            assert q >= 3 and busiest_on <= (1 - exchange.RELAY_MIN_SAVING) * busiest_off
        else:
            assert busiest_on == busiest_off
        obj.close()


def test_whole_blocks_where_most_rows_are_needed():
    """A rank needing WHOLE_FRACTION or more of a peer's block receives the whole block (sent
    from the caller's array, no packing): both ends agree on each pair, the received rows
    are the whole block's in order, and the model (every rank's rows, from the pattern)
    says the same; the results are scipy's (test_every_op_matches_scipy_on_awkward_patterns)
    and the counts the model's (test_counted_words_equal_the_pattern_model) on this case."""
    _, S, _ = CASES[DENSE]
    for c in CS:
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=2, root=None, permute=False)
        x, q = obj.exchange, P // c
        ob = obj.offsets["b"]
        blocks = np.arange(q) * c + obj.grid.v
        sizes = np.diff(ob)[blocks]
        # the pairs: what each rank takes whole from each other, and what it sends whole
        takes = obj.layer.comm.allgather([int(k) for k in range(q)
                                          if x.recvcounts[k] == sizes[k] and sizes[k]])
        gives = obj.layer.comm.allgather([int(k) for k in np.flatnonzero(x.whole)])
        me = obj.layer.rank
        assert all(me in takes[k] for k in gives[me])  # what I send whole, they take whole
        for k in np.flatnonzero(x.whole):
            assert x.sendcounts[k] == sizes[me]
        at = np.r_[0, np.cumsum(x.recvcounts)]
        for k in range(q):
            if me in gives[k]:  # k sends me its whole block: its rows, in order
                assert k in takes[me]
                assert np.array_equal(x.buffer_ids[at[k]:at[k + 1]],
                                      np.arange(ob[blocks[k]], ob[blocks[k] + 1]))
        model = model_counts(obj, S)
        assert (x.nsend, x.nrecv) == (model.send_rows[COMM.rank], model.recv_rows[COMM.rank])
        assert obj.stats.describe()["exchange"]["whole_blocks_sent"] == int(x.whole.sum())
        if q > 1:  # the case is dense enough that some pair moves a whole block
            assert COMM.allreduce(int(x.whole.sum())) > 0
        obj.close()


def test_pattern_free_bound_is_dense_shifting():
    """Without a pattern the model is a dense S's: every rank needs every row of its layer's
    other blocks, which 1.5D dense shifting's fusion strategy also sends (m = n)."""
    n, r = 64 * 10, 8
    for p, c in ((64, 1), (64, 4), (16, 2)):
        ours = costmodel.total(SparseAware15D.model.exact_words("fusedmm_a", n, n, r, p, c,
                                                                "fusion"))
        dense = costmodel.total(costmodel.exact("15d-dense-shift", "fusedmm_a", n, n, r, p, c,
                                                "fusion"))
        assert ours == pytest.approx(dense)
    # a dense S at this p: the pattern model equals the bound on every rank
    S = sp.coo_matrix(np.ones((3 * P, 2 * P)))
    for c in CS:
        model = exchange_model(S.row, S.col, S.shape, P, c)
        for k in range(P):
            got = sparse_aware_15d_exact("fusedmm_b", 3 * P, 2 * P, 4, P, c, "reuse",
                                         **model.rank(k))
            bound = sparse_aware_15d_exact("fusedmm_b", 3 * P, 2 * P, 4, P, c, "reuse")
            assert got == bound


def test_memory_model_counts_what_the_rank_holds():
    S, A, B = problem(50, 44, 4, density=0.1, seed=8)
    for c in CS:
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=4, root=None)
        counts = obj.memory_counts(4)
        x = obj.exchange
        assert (counts["recv"], counts["send"]) == (x.nrecv, x.nsend)
        mem = obj.stats.memory_model("fusedmm_a", "fusion", 4)
        assert mem.parts["exchange"] == (x.nrecv + x.nsend) * 4 * 4
        obj.close()


def shuffled_grid(k: int, seed: int = 0):
    """A k x k grid graph (with self-loops) whose vertex order is shuffled."""
    idx = np.arange(k * k).reshape(k, k)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel(), idx.ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel(), idx.ravel()]
    shuffle = np.random.default_rng(seed).permutation(k * k)
    S = _coo(k * k, k * k, shuffle[rows], shuffle[cols], seed)
    return (S + S.T).tocoo()


@pytest.mark.parametrize("mode", ["kahip", "kahypar", "file"])
def test_partitioned_order_matches_scipy_and_the_model(mode, shared_tmp):
    from distmm.core.partition import load_partition, partition, save_partition

    pytest.importorskip("kahip" if mode == "file" else mode)
    S = shuffled_grid(9)
    r = 3
    permute = mode
    if mode == "file":
        path = f"{shared_tmp}/grid.part.h5"
        if COMM.rank == 0:
            save_partition(partition(S, P, "kahip"), path)
        COMM.Barrier()
        permute = load_partition(path)
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((81, r)), rng.standard_normal((81, r))
    for c in CS:
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=r, dtype=np.float64,
                                root=None, permute=permute)
        assert np.array_equal(np.diff(obj.offsets["a"]),
                              np.bincount(obj.partition.parts, minlength=P))
        A_loc, B_loc = scattered(obj, A, B)
        for op, strategy in RUNS:
            check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
        model = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, c,
                               offsets=obj.offsets["a"])
        exact = sparse_aware_15d_exact("fusedmm_b", 81, 81, r, P, c, "fusion",
                                       **model.rank(COMM.rank))
        assert exact == obj.stats.expected_words("fusedmm_b", r, "fusion")
        obj.stats.reset()
        obj.fusedmm_b(A_loc, B_loc, "fusion")
        assert obj.stats.words("propagation") == exact["propagation"]["words"]
        obj.close()


def test_partition_files_that_do_not_fit_are_refused_everywhere(shared_tmp):
    from distmm.core.partition import Partition, load_partition, save_partition
    from distmm.errors import InputError

    S = shuffled_grid(5)
    n = 25
    cases = {"rows": Partition(np.zeros(n + 1, dtype=np.int64), P, n + 1, S.nnz, "kahip",
                               0.03, 0.0),
             "parts": Partition(np.zeros(n, dtype=np.int64), P + 1, n, S.nnz, "kahip", 0.03,
                                0.0),
             "nonzeros": Partition(np.zeros(n, dtype=np.int64), P, n, S.nnz + 1, "kahip",
                                   0.03, 0.0)}
    for what, part in cases.items():
        path = f"{shared_tmp}/{what}.part.h5"
        if COMM.rank == 0:
            save_partition(part, path)
        COMM.Barrier()
        with pytest.raises(InputError, match=what):
            distmm.distribute(S, COMM, algorithm=NAME, root=None,
                              permute=load_partition(path))
    if COMM.rank == 0:
        with open(f"{shared_tmp}/corrupt.part.h5", "wb") as f:
            f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 40)
    COMM.Barrier()
    with pytest.raises(InputError, match="cannot read"):
        load_partition(f"{shared_tmp}/corrupt.part.h5")
    # a partitioner's order is the sparse-aware family's layout only
    with pytest.raises(InputError, match="15d-sparse-aware"):
        distmm.distribute(S, COMM, algorithm="15d-dense-shift", root=None, permute="kahip")
    # a square S's file for a rectangular S of as many rows, and the other way round
    R = sp.coo_matrix(np.ones((n, 7)))
    for what, (mat, part) in {
            "square": (R, Partition(np.zeros(n, dtype=np.int64), P, n, R.nnz, "kahip", 0.03,
                                    0.0)),
            "rectangular": (S, Partition(np.zeros(n, dtype=np.int64), P, n, S.nnz, "kahip",
                                         0.03, 0.0, np.zeros(7, dtype=np.int64)))}.items():
        path = f"{shared_tmp}/{what}.part.h5"
        if COMM.rank == 0:
            save_partition(part, path)
        COMM.Barrier()
        with pytest.raises(InputError, match="matrix"):
            distmm.distribute(mat, COMM, algorithm=NAME, root=None, permute=load_partition(path))


@pytest.mark.parametrize("shape", [(40, 40), (40, 31), (30, 52)])
def test_the_planner_orders_s_as_a_run_does(shape):
    """At every c the run's default order is the planner's pick (pick_order) of the same
    orders: the partition where it applies, unless the natural blocks give the busiest rank
    fewer words; a denser rectangular S (the last shape) is one where the blocks can win."""
    from distmm.perf.sparse_planner import default_orders, pick_order

    density = 0.4 if shape == (30, 52) else 0.1
    S, _, _ = problem(*shape, 1, density=density, seed=6)
    orders = default_orders(S.row, S.col, S.shape, P, "auto")
    assert (len(orders) == 2) == (default_method(S.shape, P) is not None)
    for c in CS:
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, root=None)
        row_inv, col_inv, offsets, info = pick_order(S.row, S.col, S.shape, P, c, orders)
        assert np.array_equal(row_inv, obj.row_inv) and np.array_equal(col_inv, obj.col_inv)
        if info["permute"] in ("none", "blocks"):
            assert offsets is None and getattr(obj, "partition", None) is None
        else:
            assert info["permute"] == "kahip" and obj.partition.method == "kahip"
            oa, ob = offsets if isinstance(offsets, tuple) else (offsets, offsets)
            assert np.array_equal(oa, obj.offsets["a"]) and np.array_equal(ob, obj.offsets["b"])
        obj.close()


def test_default_order_is_the_partitioner_and_matches_scipy_and_the_model():
    """permute="auto" (the default) on a square S with p > 1: KaHIP's parts are the blocks
    (at c > 1 the natural blocks where they send fewer words, as the planner picks); results
    equal scipy and the counters the pattern model, at every c."""
    pytest.importorskip("kahip")
    S = shuffled_grid(9, seed=3)
    r = 4
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((81, r)), rng.standard_normal((81, r))
    from distmm.perf.sparse_planner import default_orders, pick_order

    orders = default_orders(S.row, S.col, S.shape, P, "auto")
    for c in CS:
        obj = distmm.distribute(S, COMM, algorithm=NAME, c=c, r=r, dtype=np.float64,
                                root=None)
        picked = pick_order(S.row, S.col, S.shape, P, c, orders)[3]["permute"]
        if P == 1 or picked == "blocks":  # at c = 1 the partition (a grid: it always wins)
            assert getattr(obj, "partition", None) is None and (P == 1 or c > 1)
        else:
            assert obj.partition.method == "kahip"
            assert np.array_equal(np.diff(obj.offsets["a"]),
                                  np.bincount(obj.partition.parts, minlength=P))
        A_loc, B_loc = scattered(obj, A, B)
        for op, strategy in RUNS:
            check(op, gathered(obj, op, A_loc, B_loc, strategy), S, A, B, rtol=1e-10)
        model = exchange_model(obj.row_inv[S.row], obj.col_inv[S.col], S.shape, P, c,
                               offsets=(obj.offsets["a"], obj.offsets["b"]))
        exact = sparse_aware_15d_exact("fusedmm_a", 81, 81, r, P, c, "fusion",
                                       **model.rank(COMM.rank))
        obj.stats.reset()
        obj.fusedmm_a(A_loc, B_loc, "fusion")
        for ph in PHASES:
            assert obj.stats.words(ph) == exact[ph]["words"], ph
        obj.close()


def test_default_order_without_the_partitioner_is_the_natural_blocks(monkeypatch):
    """When KaHIP is not installed the default falls back to the base class's order."""
    import distmm.algorithms.sparse_aware_15d as family

    monkeypatch.setattr(family, "default_method", lambda shape, p: None)
    S = shuffled_grid(6)
    obj = distmm.distribute(S, COMM, algorithm=NAME, root=None)
    assert getattr(obj, "partition", None) is None
    assert obj.stats.describe()["permute"] == ("none" if P == 1 else "blocks")
    obj.close()


def test_auto_ranks_the_aware_family_from_the_pattern():
    """plan_distributed (what --algorithm auto ranks): the oblivious families' rows are
    plan()'s, the sparsity-aware family's are plan_sparse's on the whole pattern, every rank
    gets the same ranking, and a partitioner's order leaves only the aware family."""
    from distmm.api import as_coo_share
    from distmm.perf.planner import plan
    from distmm.perf.sparse_planner import plan_distributed, plan_sparse

    S = shuffled_grid(10, seed=1)
    r = 16
    share = as_coo_share(S if COMM.rank == 0 else None, COMM)
    rows, part = plan_distributed(share, COMM, r)
    key = [(x["algorithm"], x["strategy"], x["c"], x["time_s"]) for x in rows]
    assert COMM.allgather(key) == [key] * P
    aware = [x for x in rows if x["algorithm"] == NAME]
    expect, _ = plan_sparse(S.row, S.col, S.shape, r, P)
    assert sorted((x["strategy"], x["c"], x["words"], x["memory"]) for x in aware) == sorted(
        (x["strategy"], x["c"], x["max_words"], x["memory_bytes"]) for x in expect
        if x["algorithm"] == NAME)
    others = [(x["algorithm"], x["strategy"], x["c"], x["words"]) for x in rows
              if x["algorithm"] != NAME]
    assert others == [(x["algorithm"], x["strategy"], x["c"], x["words"])
                      for x in plan(100, 100, S.nnz, r, P)
                      if x["algorithm"] != NAME]
    if rows[0]["algorithm"] != NAME or default_method(S.shape, P) is None:
        assert part is None
    else:
        assert part.method == "kahip" and part.p == P
    if default_method(S.shape, P) is not None:
        only, _ = plan_distributed(share, COMM, r, permute="kahip")
        assert {x["algorithm"] for x in only} == {NAME}


def test_run_auto_picks_the_aware_family_and_reuses_its_partition(monkeypatch, shared_tmp,
                                                                   capsys):
    """A graph whose exchange is tiny (a shuffled grid, partitioned) at a large width: the
    planner picks the sparsity-aware family; the run partitions once and is right."""
    import json
    import os

    import h5py
    import scipy.io

    from distmm.cli import main

    if default_method((1, 1), 2) is None:
        pytest.skip("kahip is not installed")
    S = shuffled_grid(16, seed=2)
    n, r = 256, 512
    d = os.path.join(shared_tmp, "auto_aware")
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((n, r)), rng.standard_normal((n, r))
    if COMM.rank == 0:
        os.makedirs(d, exist_ok=True)
        scipy.io.mmwrite(os.path.join(d, "S.mtx"), S)
        np.save(os.path.join(d, "A.npy"), A)
        np.save(os.path.join(d, "B.npy"), B)
    COMM.Barrier()
    # the planner's order and the run's both partition through the family's module
    made = []
    import distmm.algorithms.sparse_aware_15d as family
    real_family = family.partition
    monkeypatch.setattr(family, "partition",
                        lambda *a, **k: made.append(1) or real_family(*a, **k))
    out = os.path.join(d, f"out{P}.h5")
    code = main(["run", "fusedmm-a", "--sparse", os.path.join(d, "S.mtx"),
                 "--a", os.path.join(d, "A.npy"), "--b", os.path.join(d, "B.npy"),
                 "--out", out, "--algorithm", "auto", "--tune", "1", "--dtype", "float64"])
    assert code == 0
    printed = capsys.readouterr().out
    if COMM.rank != 0:
        return
    recs = [json.loads(line) for line in printed.strip().splitlines()]
    run = next(x for x in recs if x["event"] == "run")
    if P > 1:
        assert recs[0]["event"] == "plan" and recs[0]["algorithm"] == NAME
        assert run["algorithm"] == NAME
        assert made == [1]  # one partition: the planner's, which serves the run
    with h5py.File(out, "r") as h5:
        check("fusedmm-a", h5["result"][()], S, A, B, rtol=1e-9)


@pytest.mark.skipif(P == 1, reason="point-to-point needs a peer")
@pytest.mark.parametrize("form", ["started", "blocking", "mixed"])
def test_point_to_point_exchange_counts_and_checks_sizes(form):
    """CountingComm.start_exchange, the exchange's primitive, and its blocking form
    CountingComm.exchange (a single Sendrecv with one peer each way; "mixed": even ranks
    block, odd ones start, and the messages still match): each rank sends rank + 1 numbers
    to the next rank and receives from the previous; the counters say exactly that (words
    and one message each way), and a message of another size than the receive expects
    (another call's width: shorter or longer) raises InputError on the receiving rank."""
    from distmm.core.comm import CommStats, CountingComm
    from distmm.errors import InputError

    comm = CountingComm(COMM.Dup(), CommStats())
    me, nxt, prv = COMM.rank, (COMM.rank + 1) % P, (COMM.rank - 1) % P
    blocking = form == "blocking" or (form == "mixed" and me % 2 == 0)

    def exchange(sends, recvs, channel=0):
        if blocking:
            comm.exchange(sends, recvs, channel)
        else:
            comm.finish(comm.start_exchange(sends, recvs, channel))

    send = np.full(me + 1, float(me))
    got = np.zeros(prv + 1)
    exchange([(nxt, send)], [(prv, got)], channel=2)
    assert (got == prv).all()
    c = comm.stats.counts["propagation"]
    assert (c["words_sent"], c["words_received"]) == (me + 1, prv + 1)
    assert (c["messages_sent"], c["messages_received"]) == (1, 1)
    with pytest.raises(InputError, match="arrived from rank"):
        exchange([(nxt, send)], [(prv, np.zeros(prv + 2))])
    with pytest.raises(InputError, match="arrived"):
        exchange([(nxt, np.full(me + 2, 1.0))], [(prv, np.zeros(prv + 1))])
    for bad in (comm.start_exchange, comm.exchange):
        with pytest.raises(ValueError, match="channel"):
            bad([(nxt, send)], [(prv, got)], channel=8)
    comm.comm.Free()
