"""The relay threshold: by modelled time (alpha per extra message against beta per word saved)
where calibrated constants and the width are known, else the fixed fraction; the ``relay=``
values; and the tree that relay_parents and exchange_model keep under an injected rule (no
timings: the constants are given)."""

from __future__ import annotations

import numpy as np
import pytest

from distmm.core.exchange import exchange_model, relay_parents
from distmm.core.relay_rule import RELAY_MIN_SAVING, RelayRule, relay_name, relay_rule
from distmm.errors import InputError
from distmm.perf.planner import Machine


def test_timed_rule_compares_words_saved_with_extra_messages():
    rule = RelayRule(alpha=1e-5, beta=1e-9, r=100)
    # 10 rows * 100 words * 1e-9 = 1e-6 s saved against 1 message * 1e-5 s: not kept
    assert not rule.keeps(100, 90, 1)
    # 1000 rows saved: 1e-4 s against 1e-5 s
    assert rule.keeps(2000, 1000, 1)
    # ... but not against 20 extra messages (2e-4 s)
    assert not rule.keeps(2000, 1000, 20)
    assert not rule.keeps(10, 10, 0) and not rule.keeps(10, 11, 0)
    assert rule.timed and not RelayRule().timed


def test_fraction_rule_without_calibration():
    rule = RelayRule()
    assert rule.min_saving == RELAY_MIN_SAVING
    assert rule.keeps(100, 75, 50) and not rule.keeps(100, 76, 0)
    on = RelayRule(min_saving=0.0)
    assert on.keeps(100, 99, 5) and not on.keeps(100, 101, 0)


def test_relay_values():
    assert relay_rule("off") is False and relay_rule(False) is False
    assert relay_rule("on") == RelayRule(min_saving=0.0)
    assert relay_rule("auto") == RelayRule() == relay_rule(True) == relay_rule(None)
    calibrated = Machine(alpha=2e-6, beta=3e-10, source="machine.json")
    assert relay_rule("auto", calibrated, 64) == RelayRule(alpha=2e-6, beta=3e-10, r=64)
    # no width, or the built-in defaults: the fraction
    assert relay_rule("auto", calibrated, None) == RelayRule()
    assert relay_rule("auto", Machine(), 64) == RelayRule()
    # "on" and "off" are the user's, whatever the machine
    assert relay_rule("on", calibrated, 64) == RelayRule(min_saving=0.0)
    given = RelayRule(alpha=1.0, beta=1.0, r=1)
    assert relay_rule(given) is given
    assert relay_name("off") == "off" and relay_name("on") == "on"
    assert relay_name("auto").startswith("auto")
    for bad in ("yes", 3, "ON"):
        with pytest.raises(InputError, match="relay must be one of"):
            relay_rule(bad)


def _hub(q: int = 6, rows_per_owner: int = 40):
    """Layer rank 0 owns one row (id 0) that every other rank needs, and each rank owns
    ``rows_per_owner`` rows its right neighbour needs: the hub makes rank 0 the busiest."""
    rows, dests, owners = [], [], []
    for d in range(1, q):
        rows.append(0)
        dests.append(d)
        owners.append(0)
    for k in range(q):
        for j in range(rows_per_owner // 8 if k == 0 else 1):
            rows.append(1 + k * 1000 + j)
            dests.append((k + 1) % q)
            owners.append(k)
    return np.array(rows), np.array(dests), np.array(owners)


def test_relay_parents_under_injected_constants():
    rows, dests, owners = _hub()
    q = 6
    on = relay_parents(rows, dests, owners, q, rule=RelayRule(min_saving=0.0))
    assert np.any(on != owners)  # the hub engages a relay
    before = int(np.bincount(owners, minlength=q).max())
    after = int(np.bincount(on, minlength=q).max())
    assert after < before
    # a message costs as much as 1e6 words: the tree does not pay
    slow = RelayRule(alpha=1.0, beta=1e-6, r=1)
    assert np.array_equal(relay_parents(rows, dests, owners, q, rule=slow), owners)
    # words dear, messages free: kept, the same tree as "on"
    fast = RelayRule(alpha=1e-12, beta=1e-6, r=128)
    assert np.array_equal(relay_parents(rows, dests, owners, q, rule=fast), on)


def test_exchange_model_follows_the_rule():
    # a star: row 0 needed by every row of a 6-rank layer (c = 1), and a ring
    n, p = 60, 6
    rows = np.r_[np.arange(1, n), np.arange(n)]
    cols = np.r_[np.zeros(n - 1, dtype=np.int64), (np.arange(n) + 10) % n]
    on = exchange_model(rows, cols, (n, n), p, 1, relay=RelayRule(min_saving=0.0))
    off = exchange_model(rows, cols, (n, n), p, 1, relay=False)
    slow = exchange_model(rows, cols, (n, n), p, 1, relay=RelayRule(alpha=1.0, beta=1e-9, r=8))
    assert on.relay_rows.sum() > 0 and on.send_rows.max() < off.send_rows.max()
    assert slow.relay_rows.sum() == 0
    assert np.array_equal(slow.send_rows, off.send_rows)


def _write_hubs(path, n=41, seed=7):
    """Two hubs adjacent to every node, about three random neighbours each (symmetric)."""
    import scipy.io
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.r_[rng.integers(0, n, 3 * n), np.arange(n), np.arange(n)]
    cols = np.r_[rng.integers(0, n, 3 * n), np.zeros(n, int), np.full(n, n // 2)]
    S = sp.coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)).tocsr()
    scipy.io.mmwrite(str(path), (S + S.T).tocoo())


def _aware_rows(capsys, *argv):
    import json

    from distmm.cli import main

    assert main(["plan", *argv]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return [row for row in rows if row["algorithm"] == "15d-sparse-aware"]


def test_plan_sparse_reports_the_relay_on_and_off(tmp_path, capsys):
    """`distmm plan --sparse --relay on` prints the family's rows with the relay and, where it
    engages, the same candidates without it; `--relay off` only without, the same words."""
    path = tmp_path / "hubs.mtx"
    _write_hubs(path)
    common = ["--sparse", str(path), "-p", "6", "--r", "8", "--permute", "none"]
    on = _aware_rows(capsys, *common, "--relay", "on")
    engaged = [row for row in on if row["relay"] == "on" and row["relayed_rows"] > 0]
    assert engaged, "the hubs' rows go through relays at p = 6, c = 1"
    for row in engaged:
        twin = [x for x in on if x["relay"] == "off" and (x["strategy"], x["c"])
                == (row["strategy"], row["c"])]
        # at c > 1 the busiest rank's words may be the fiber's, which the relay leaves
        assert len(twin) == 1 and twin[0]["max_words"] >= row["max_words"]
        if row["c"] == 1:
            assert twin[0]["max_words"] > row["max_words"]
    off = _aware_rows(capsys, *common, "--relay", "off")
    assert off and all(row["relay"] == "off" and row["relayed_rows"] == 0 for row in off)
    # the "off" rows of the first plan are the second's at those c (which has every c)
    assert {(x["strategy"], x["c"], x["max_words"]) for x in off} >= {
        (x["strategy"], x["c"], x["max_words"]) for x in on if x["relay"] == "off"}


def test_plan_sparse_memory_counts_the_partitioner_only_where_distribute_partitions(
        tmp_path, capsys):
    from distmm.core.partition import default_method, partition_peak_bytes

    if default_method((4, 4), 2) is None:
        pytest.skip("needs kahip (distmm[partition])")
    path = tmp_path / "hubs.mtx"
    _write_hubs(path)
    common = ["--sparse", str(path), "-p", "4", "--r", "8", "--relay", "off"]
    made = _aware_rows(capsys, *common)
    blocks = _aware_rows(capsys, *common, "--permute", "blocks")
    nnz = made[0]["nnz"]
    assert all(row["memory_bytes"] >= partition_peak_bytes(41, 41, nnz, 4) for row in made)
    assert all(row["memory_bytes"] < partition_peak_bytes(41, 41, nnz, 4) for row in blocks)
