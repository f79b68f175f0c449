"""The agreement helper's messages and the small input rules of issue #25, on one process:
plain numbers in messages, numpy integers accepted as integers, problems grouped by rank."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from distmm.errors import (
    Checks,
    InputError,
    _describe_disagreement,
    _describe_problems,
    agree,
    as_int,
)
from distmm.io.matrix_market import read_matrix_market


def test_as_int_takes_numpy_integers_only():
    assert as_int(np.int64(3), "c") == 3 and type(as_int(np.int32(3), "c")) is int
    assert as_int(7, "c") == 7
    for bad in (True, 2.0, "2", None, np.float64(2)):
        with pytest.raises(InputError, match="c must be an integer"):
            as_int(bad, "c")


def test_problems_grouped_by_rank():
    assert _describe_problems([None, None], 2) is None
    assert _describe_problems(["x: gone", "x: gone"], 2) == "x: gone"  # everyone: no ranks
    assert _describe_problems([None, "x: gone", None, "x: gone"], 4) == (
        "x: gone (reported by ranks 1, 3)")
    assert _describe_problems(["a\nb", None, "c"], 3) == (
        "a b (reported by rank 0); c (reported by rank 2)")
    many = _describe_problems([f"p{k}" for k in range(5)], 5)
    assert many.endswith("and 2 more different problem(s)")


def test_disagreement_names_each_setting_and_its_ranks():
    assert _describe_disagreement([{"c": 1}, {"c": 1}]) is None
    text = _describe_disagreement([{"c": 1, "r": 3}, {"c": 2, "r": 3}, {"c": 2, "r": 3}])
    assert text.endswith("c (1 on rank 0; 2 on ranks 1, 2)")
    # A setting some ranks lack follows from one they all have: only the latter is named.
    text = _describe_disagreement([{"cmd": "run", "--out": "o"}, {"cmd": "bench", "--n": 3}])
    assert text.endswith("cmd (run on rank 0; bench on rank 1)")


def test_checks_keep_the_first_problem_and_agree_on_one_rank():
    checks = Checks(MPI.COMM_SELF)
    with checks.guard():
        raise InputError("first")
    checks.require(False, "second")
    assert not checks.ok and checks.problem == "first"
    with pytest.raises(InputError, match="^first$"):
        checks.agree()
    agree(MPI.COMM_SELF, None, {"c": np.int64(2)})  # one rank always agrees with itself


def test_messages_print_plain_numbers(tmp_path):
    path = tmp_path / "S.mtx"
    path.write_text("%%MatrixMarket matrix coordinate integer general\n3 3 2\n1 1 1\n1.5 2 2\n")
    with pytest.raises(InputError) as info:
        read_matrix_market(path, MPI.COMM_SELF)
    assert "row index 1.5 is not an integer" in str(info.value)
    path.write_text("%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 1 2.5\n")
    with pytest.raises(InputError) as info:
        read_matrix_market(path, MPI.COMM_SELF)
    assert "value 2.5 is not an integer" in str(info.value) and "np." not in str(info.value)
