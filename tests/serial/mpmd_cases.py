"""The bad-input and disagreement cases of docs/reliability.md, run by tests/serial/test_mpmd.py.

Each case is run under one MPMD ``mpiexec`` launch (``-n 1 -wdir DIR0 ... : -n 1 -wdir DIR1
...``): every rank has its own working directory, as node-local scratch gives, and may see
different files and be given different arguments. A case names

* ``files(rank, p)``: the files in that rank's directory for the case (name -> bytes, or a
  ``("link", target)``/``("hardlink", target)``/``("dir",)`` entry);
* ``cli(rank, p)``: the ``distmm`` arguments that rank gets, or ``api(rank, p)``: a function
  that rank calls (the Python API);
* ``message``: a regular expression the one error line must match (every rank gets the same
  error; rank 0 prints it);
* ``left``: what is left untouched (documented in the table).

Every case must end on every rank with exit status 2 (an InputError through the API) within
the time limit, with no traceback, no output file, and every input byte-identical. The table
in docs/reliability.md has one row per case id; test_mpmd checks that they stay in sync.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.io
import scipy.sparse as sp

M, N, R = 29, 17, 3
LAST = -1  # "the last rank" in the helpers below


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _mtx(matrix) -> bytes:
    buf = io.BytesIO()
    scipy.io.mmwrite(buf, matrix)
    return buf.getvalue()


_S = sp.random(M, N, density=0.25, format="coo", random_state=np.random.default_rng(0))
_RNG = np.random.default_rng(1)
S_MTX = _mtx(_S)
A_NPY = _npy(_RNG.standard_normal((M, R)))
B_NPY = _npy(_RNG.standard_normal((N, R)))
HEAD = b"%%MatrixMarket matrix coordinate real general\n"
MACHINE = json.dumps({"alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10}).encode()


def base_files() -> dict[str, Any]:
    """The good inputs every rank sees unless a case changes them."""
    return {"S.mtx": S_MTX, "A.npy": A_NPY, "B.npy": B_NPY, "node.json": b"{}\n",
            "machine.json": MACHINE}


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, a=np.ones((M, R)))
    return buf.getvalue()


def _with_value(value: float, shape=(M, R), at=(3, 1)) -> bytes:
    arr = np.ones(shape)
    arr[at] = value
    return _npy(arr)


def _bad_last_entry() -> bytes:
    """S with the row of its last entry (in the last rank's share of the file) set to 99."""
    lines = S_MTX.rstrip(b"\n").split(b"\n")
    lines[-1] = b"99 " + lines[-1].split(b" ", 1)[1]
    return b"\n".join(lines) + b"\n"


def _huge_s(value: float) -> bytes:
    return HEAD + f"{M} {N} 1\n1 1 {value}\n".encode()


RUN = ["run", "fusedmm-a", "--sparse", "S.mtx", "--a", "A.npy", "--b", "B.npy", "--out",
       "o.h5"]


@dataclass(frozen=True)
class Case:
    id: str
    title: str
    message: str
    left: str = "every input; no output file"
    files: Callable[[int, int], dict[str, Any]] = lambda rank, p: base_files()
    cli: Callable[[int, int], list[str]] | None = None
    api: Callable[[int, int], Any] | None = None


def on_last(change: dict[str, Any], drop: tuple[str, ...] = ()):
    """Files: the base set everywhere, with ``change`` (and without ``drop``) on the last rank."""
    def files(rank: int, p: int) -> dict[str, Any]:
        out = base_files()
        if rank == p - 1:
            out.update(change)
            for name in drop:
                out.pop(name)
        return out
    return files


def everywhere(change: dict[str, Any]):
    def files(rank: int, p: int) -> dict[str, Any]:
        return {**base_files(), **change}
    return files


def run_with(*extra: str):
    """Every rank: ``distmm run fusedmm-a`` on the base files plus ``extra`` options (a later
    option overrides an earlier one, as argparse does)."""
    return lambda rank, p: RUN + list(extra)


def split(first: list[str], rest: list[str]):
    """Arguments: ``first`` added on the first half of the ranks, ``rest`` on the others."""
    return lambda rank, p: RUN + (first if rank < p // 2 else rest)


LAST_RANK = r"\(reported by rank (1|3)\)"  # the last rank at p = 2 and 4

CASES: list[Case] = [
    # ---- files one rank sees differently (checked from headers, before any data is read)
    Case("sparse-missing-on-one", "--sparse file missing on the last rank",
         r"S\.mtx: no such file " + LAST_RANK, files=on_last({}, drop=("S.mtx",)),
         cli=run_with()),
    Case("a-missing-on-one", "--a file missing on the last rank",
         r"A\.npy: no such file " + LAST_RANK, files=on_last({}, drop=("A.npy",)),
         cli=run_with()),
    Case("b-missing-on-one", "--b file missing on the last rank",
         r"B\.npy: no such file " + LAST_RANK, files=on_last({}, drop=("B.npy",)),
         cli=run_with()),
    Case("a-directory-on-one", "--a names a directory on the last rank",
         r"--a A\.npy: is a directory, not a regular file; give a file " + LAST_RANK,
         files=on_last({"A.npy": ("dir",)}), cli=run_with()),
    Case("sparse-banner-on-one", "S's first line is not a Matrix Market banner on one rank",
         r"S\.mtx, line 1: not a Matrix Market file \(the first line must start with "
         r"'%%MatrixMarket'\) " + LAST_RANK,
         files=on_last({"S.mtx": b"hello\n1 1 1\n"}), cli=run_with()),
    Case("sparse-size-line-on-one", "S's size line is malformed on one rank",
         r"S\.mtx, line 2: bad size line .* " + LAST_RANK,
         files=on_last({"S.mtx": HEAD + b"29 17\n1 1 1\n"}), cli=run_with()),
    Case("sparse-shape-on-one", "S's header gives another shape on one rank (30 x 17)",
         r"different settings.*: --sparse S\.mtx: header \(29 x 17, 123 entries on ranks? 0"
         r".*; 30 x 17, 1 entries on ranks? (1|3)\)$",
         files=on_last({"S.mtx": HEAD + b"30 17 1\n1 1 1\n"}), cli=run_with()),
    Case("sparse-gzip-corrupt-on-one", "S is corrupt gzip data on one rank",
         r"S\.mtx: corrupt or truncated gzip data .* " + LAST_RANK,
         files=on_last({"S.mtx": b"\x1f\x8b" + b"\x00" * 40}), cli=run_with()),
    Case("sparse-entry-on-one", "an entry of S is out of range on one rank (read stage)",
         r"S\.mtx, line \d+: row index 99 is out of range 1\.\.29 .* " + LAST_RANK,
         files=on_last({"S.mtx": _bad_last_entry()}), cli=run_with()),
    Case("sparse-entries-differ", "S's header declares another entry count on one rank",
         r"different settings.*: --sparse S\.mtx: header \(29 x 17, 123 entries on ranks? 0"
         r".*; 29 x 17, 2 entries on ranks? (1|3)\)$",
         files=on_last({"S.mtx": HEAD + b"29 17 2\n1 1 1\n2 2 1\n"}), cli=run_with()),
    Case("a-rows-on-one", "A has 28 rows on one rank",
         r"different settings.*: --a A\.npy: header \(shape \(29, 3\), dtype float64 on "
         r"ranks? 0.*; shape \(28, 3\), dtype float64 on ranks? (1|3)\)$",
         files=on_last({"A.npy": _npy(np.ones((M - 1, R)))}), cli=run_with()),
    Case("a-width-on-one", "A has 4 columns (B has 3) on one rank",
         r"different settings.*: --a A\.npy: header \(shape \(29, 3\), dtype float64 on "
         r"ranks? 0.*; shape \(29, 4\), dtype float64 on ranks? (1|3)\)$",
         files=on_last({"A.npy": _npy(np.ones((M, 4)))}), cli=run_with()),
    Case("a-complex-on-one", "A is complex on one rank",
         r"different settings.*: --a A\.npy: header \(shape \(29, 3\), dtype float64 on "
         r"ranks? 0.*; shape \(29, 3\), dtype complex128 on ranks? (1|3)\)$",
         files=on_last({"A.npy": _npy(np.ones((M, R), dtype=complex))}), cli=run_with()),
    Case("a-1d-on-one", "A is 1-D on one rank",
         r"different settings.*: --a A\.npy: header \(shape \(29, 3\), dtype float64 on "
         r"ranks? 0.*; shape \(29,\), dtype float64 on ranks? (1|3)\)$",
         files=on_last({"A.npy": _npy(np.ones(M))}), cli=run_with()),
    Case("a-npz-on-one", "A is an .npz archive on one rank",
         r"A\.npy: is an \.npz archive; a single \.npy array is expected " + LAST_RANK,
         files=on_last({"A.npy": _npz()}), cli=run_with()),
    Case("a-junk-on-one", "A is not a .npy file on one rank",
         r"A\.npy: not a readable \.npy array file .* " + LAST_RANK,
         files=on_last({"A.npy": b"not numpy at all"}), cli=run_with()),
    Case("a-truncated-on-one", "A is truncated on one rank",
         r"A\.npy: truncated: its header says 29 x 3 float64 .* " + LAST_RANK,
         files=on_last({"A.npy": A_NPY[:-40]}), cli=run_with()),
    Case("a-nan-on-one", "A holds a NaN on one rank (value stage)",
         r"A\.npy: non-finite value nan at row 3, column 1.* " + LAST_RANK,
         files=on_last({"A.npy": _with_value(np.nan)}), cli=run_with()),
    Case("a-float32-overflow-on-one", "A holds finite 1e40 on one rank (float32 overflow)",
         r"A\.npy: finite values too large for float32 \(value 1e\+40 at row 3, column 1; "
         r"largest magnitude 1e\+40.*use --dtype float64 " + LAST_RANK,
         files=on_last({"A.npy": _with_value(1e40)}), cli=run_with()),
    Case("node-config-missing-on-one", "--node-config file missing on one rank",
         r"--node-config node\.json: no such file " + LAST_RANK,
         files=on_last({}, drop=("node.json",)), cli=run_with("--node-config", "node.json")),
    Case("node-config-json-on-one", "--node-config is not JSON on one rank",
         r"different settings.*: --node-config node\.json: header \(3 bytes on ranks? 0.*; "
         r"5 bytes on ranks? (1|3)\)$",
         files=on_last({"node.json": b"{oops"}), cli=run_with("--node-config", "node.json")),
    Case("node-config-differs-on-one", "--node-config has other content on one rank "
         "(another size)",
         r"different settings.*: --node-config node\.json: header \(3 bytes on ranks? 0.*; "
         r"13 bytes on ranks? (1|3)\)$",
         files=on_last({"node.json": b'{"seed": 1}\n\n'}),
         cli=run_with("--node-config", "node.json")),
    Case("node-config-option-on-one", "--node-config has an unknown option on one rank",
         r"different settings.*: --node-config node\.json: header \(3 bytes on ranks? 0.*; "
         r"12 bytes on ranks? (1|3)\)$",
         files=on_last({"node.json": b'{"bogus": 1}'}),
         cli=run_with("--node-config", "node.json")),
    Case("machine-missing-on-one", "--machine file missing on one rank (--algorithm auto)",
         r"--machine machine\.json: no such file " + LAST_RANK,
         files=on_last({}, drop=("machine.json",)),
         cli=run_with("--algorithm", "auto", "--machine", "machine.json")),
    Case("machine-fields-on-one", "--machine file lacks alpha on one rank",
         r"different settings.*: --machine machine\.json: header \(47 bytes on ranks? 0.*; "
         r"23 bytes on ranks? (1|3)\)$",
         files=on_last({"machine.json": b'{"beta": 1, "gamma": 1}'}),
         cli=run_with("--algorithm", "auto", "--machine", "machine.json")),
    Case("plan-machine-missing-on-one", "distmm plan --machine FILE missing on one rank",
         r"--machine machine\.json: no such file " + LAST_RANK,
         files=on_last({}, drop=("machine.json",)),
         cli=lambda rank, p: ["plan", "--m", "100", "--nnz", "1000", "--r", "8", "-p", "4",
                              "--machine", "machine.json"]),
    Case("bench-node-config-on-one", "distmm bench --node-config FILE missing on one rank",
         r"--node-config node\.json: no such file " + LAST_RANK,
         files=on_last({}, drop=("node.json",)),
         cli=lambda rank, p: ["bench", "--n", "50", "--r", "4", "--node-config",
                              "node.json"]),
    # ---- sizes and values the same on every rank
    Case("sparse-huge-header", "S's header claims 1e11 x 1e11 (every rank)",
         r"S\.mtx is 100000000000 x 100000000000 with 1 entries: distributing it needs at "
         r"least .* GiB per rank, more than this machine's", files=everywhere(
             {"S.mtx": HEAD + b"100000000000 100000000000 1\n1 1 1\n"}),
         cli=run_with()),
    Case("sparse-float32-overflow", "S holds finite 1e300 with float32 (every rank)",
         r"the sparse matrix has finite values too large for float32 \(largest magnitude "
         r"1e\+300.*--dtype float64", files=everywhere({"S.mtx": _huge_s(1e300)}),
         cli=run_with()),
    Case("auto-empty-matrix", "--algorithm auto on a 0 x 0 matrix",
         r"S\.mtx: the matrix is empty \(0 x 0, 0 entries\), so --algorithm auto has nothing "
         r"to plan for", files=everywhere({"S.mtx": HEAD + b"0 0 0\n",
                                           "A.npy": _npy(np.ones((0, R))),
                                           "B.npy": _npy(np.ones((0, R)))}),
         cli=run_with("--algorithm", "auto")),
    # ---- arguments that differ between ranks
    Case("c-differs", "-c 1 on half the ranks, -c 2 on the others",
         r"different settings, which must be identical on every rank: -c \(1 on rank"
         r"s? 0(, 1)?; 2 on ranks? (1|2, 3)\)$", cli=split(["-c", "1"], ["-c", "2"])),
    Case("algorithm-differs", "--algorithm differs between ranks",
         r"--algorithm \(15d-dense-shift on .*; 15d-sparse-shift on",
         cli=split([], ["--algorithm", "15d-sparse-shift"])),
    Case("dtype-differs", "--dtype differs between ranks",
         r"--dtype \(float32 on .*; float64 on", cli=split([], ["--dtype", "float64"])),
    Case("strategy-differs", "--strategy differs between ranks",
         r"--strategy \(None on .*; reuse on", cli=split([], ["--strategy", "reuse"])),
    Case("seed-differs", "--seed differs between ranks",
         r"--seed \(0 on .*; 1 on", cli=split([], ["--seed", "1"])),
    Case("op-differs", "the operation differs between ranks",
         r"OP \(fusedmm-a on .*; sddmm on",
         cli=lambda rank, p: RUN[:1] + ["fusedmm-a" if rank < p // 2 else "sddmm"] + RUN[2:]),
    Case("sparse-path-differs", "--sparse names another file on some ranks",
         r"--sparse \(S\.mtx on .*; T\.mtx on", files=everywhere({"T.mtx": S_MTX}),
         cli=split([], ["--sparse", "T.mtx"])),
    Case("usage-error-on-one", "-c x (not an integer) on the last rank only",
         r"argument -c/--replication: invalid int value: 'x' " + LAST_RANK,
         cli=lambda rank, p: RUN + (["-c", "x"] if rank == p - 1 else [])),
    Case("help-on-one", "--help on the last rank only",
         r"different settings, which must be identical on every rank: --help \(False on "
         r"ranks? 0(, 1, 2)?; True on ranks? (1|3)\)$",
         cli=lambda rank, p: RUN + (["--help"] if rank == p - 1 else [])),
    Case("command-differs", "run on some ranks, bench on the others",
         r"COMMAND \(run on .*; bench on",
         cli=lambda rank, p: RUN if rank < p // 2 else ["bench", "--n", "10"]),
    # ---- the output, checked before any input is read (rank 0 writes it)
    Case("out-is-a", "--out names the input A.npy",
         r"--out A\.npy: is the input file A\.npy; writing it would destroy the input",
         cli=run_with("--out", "A.npy")),
    Case("out-is-sparse", "--out names the input S.mtx",
         r"--out S\.mtx: is the input file S\.mtx", cli=run_with("--out", "S.mtx")),
    Case("out-symlink-to-b", "--out is a symbolic link to the input B.npy",
         r"--out link\.h5: is the input file B\.npy",
         files=everywhere({"link.h5": ("link", "B.npy")}), cli=run_with("--out", "link.h5")),
    Case("out-hardlink-to-a", "--out is a hard link to the input A.npy",
         r"--out hard\.h5: is the input file A\.npy",
         files=everywhere({"hard.h5": ("hardlink", "A.npy")}), cli=run_with("--out", "hard.h5")),
    Case("out-is-node-config", "--out names the --node-config file",
         r"--out node\.json: is the input file node\.json",
         cli=run_with("--node-config", "node.json", "--out", "node.json")),
    Case("out-existing-directory", "--out names an existing directory (reproduction 4)",
         r"--out outdir: is a directory; give the name of a file to write",
         files=everywhere({"outdir": ("dir",)}), cli=run_with("--out", "outdir")),
    Case("out-empty", "--out is the empty string",
         r"--out is empty; give the name of the file to write", cli=run_with("--out", "")),
    Case("out-trailing-slash", "--out newdir/ (a directory name)",
         r"--out newdir/: is a directory", cli=run_with("--out", "newdir/")),
    Case("out-missing-directory", "--out in a directory that does not exist",
         r"--out nodir/o\.h5: directory .*nodir does not exist",
         cli=run_with("--out", "nodir/o.h5")),
    # ---- plain argument errors (the same on every rank)
    Case("c-not-divisor", "-c does not divide the rank count",
         r"replication factor -c 3 must be a positive divisor of the \d ranks",
         cli=run_with("-c", "3")),
    Case("repeat-zero", "--repeat 0", r"--repeat must be at least 1, got 0",
         cli=run_with("--repeat", "0")),
    Case("missing-b-argument", "fusedmm-a without --b", r"fusedmm-a needs --b B\.npy",
         cli=lambda rank, p: RUN[:6] + RUN[8:]),
]


def _api_case(rank: int, p: int, **per_rank):
    """Call distmm.distribute with arguments that may differ by rank."""
    from mpi4py import MPI

    import distmm

    kwargs = {key: fn(rank, p) for key, fn in per_rank.items()}
    S = kwargs.pop("S", "S.mtx")
    return distmm.distribute(S, MPI.COMM_WORLD, **kwargs)


def _share(rank: int, p: int):
    """This rank's slice of S's entries as a CooShare; the last rank claims one more row."""
    from distmm.core.coo import CooShare

    lo, hi = rank * _S.nnz // p, (rank + 1) * _S.nnz // p
    shape = (M + 1, N) if rank == p - 1 else (M, N)
    return CooShare(shape=shape, rows=_S.row[lo:hi], cols=_S.col[lo:hi], vals=_S.data[lo:hi])


def _api_scatter_on_root_only(rank: int, p: int):
    from mpi4py import MPI

    import distmm

    obj = distmm.distribute("S.mtx", MPI.COMM_WORLD, c=1)
    A = np.load("A.npy") if rank == 0 else None
    return obj.scatter("a", A, root=None)


def _api_sddmm_missing_b(rank: int, p: int):
    from mpi4py import MPI

    import distmm

    obj = distmm.distribute("S.mtx", MPI.COMM_WORLD, c=1, dtype=np.float64)
    A = obj.scatter("a", np.load("A.npy"), root=None)
    B = obj.scatter("b", np.load("B.npy"), root=None)
    return obj.sddmm(A, B if rank == 0 else None)


def _last(p_value, other):
    return lambda rank, p: p_value if rank == p - 1 else other


CASES += [
    Case("api-c-differs", "distribute(c=...) differs: 1 on the last rank, 2 elsewhere",
         r"different settings, which must be identical on every rank: c \(2 on ranks? 0"
         r"(, 1, 2)?; 1 on ranks? (1|3)\)$",
         api=lambda rank, p: _api_case(rank, p, c=_last(1, np.int64(2)))),
    Case("api-algorithm-differs", "distribute(algorithm=...) differs on the last rank",
         r"algorithm \(15d-dense-shift on .*; 15d-sparse-shift on ranks? (1|3)\)",
         api=lambda rank, p: _api_case(rank, p, algorithm=_last("15d-sparse-shift",
                                                                  "15d-dense-shift"))),
    Case("api-dtype-differs", "distribute(dtype=...) differs on the last rank",
         r"dtype \(float32 on .*; float64 on ranks? (1|3)\)",
         api=lambda rank, p: _api_case(rank, p, dtype=_last(np.float64, np.float32))),
    Case("api-r-differs", "distribute(r=...) differs on the last rank",
         r"r \(3 on .*; 4 on ranks? (1|3)\)",
         api=lambda rank, p: _api_case(rank, p, r=_last(4, 3))),
    Case("api-seed-differs", "distribute(seed=...) differs on the last rank",
         r"seed \(0 on .*; 5 on ranks? (1|3)\)",
         api=lambda rank, p: _api_case(rank, p, seed=_last(5, 0))),
    Case("api-node-model-differs", "distribute(node_model=...) names an unknown model on one "
         "rank", r"unknown node model 'nonesuch'.* " + LAST_RANK,
         api=lambda rank, p: _api_case(rank, p, node_model=_last("nonesuch", "reference"))),
    Case("api-path-missing-on-one", "distribute('S.mtx') with the file missing on one rank",
         r"S\.mtx: no such file " + LAST_RANK, files=on_last({}, drop=("S.mtx",)),
         api=lambda rank, p: _api_case(rank, p)),
    Case("api-kind-differs", "S a path on rank 0, a scipy matrix elsewhere",
         r"S given as \(a path on rank 0; a scipy matrix held by root 0 on ranks? (1|1, 2, 3)\)$",
         api=lambda rank, p: _api_case(rank, p, S=lambda k, q: "S.mtx" if k == 0 else _S)),
    Case("api-cooshare-shape-differs", "S a CooShare of another shape on the last rank",
         r"shape of S \(\(29, 17\) on ranks? 0(, 1, 2)?; \(30, 17\) on ranks? (1|3)\)$",
         api=lambda rank, p: _api_case(rank, p, S=lambda k, q: _share(k, q))),
    Case("api-root-none-missing", "root=None with the matrix on rank 0 only",
         r"S is None on a rank that must provide the sparse matrix \(root=None",
         api=lambda rank, p: _api_case(rank, p, root=lambda k, q: None,
                                       S=lambda k, q: _S if k == 0 else None)),
    Case("api-scatter-root-only", "scatter(root=None) with A on rank 0 only",
         r"the global matrix for side 'a' must be a 2-D numpy array \(reported by ranks? "
         r"(1|1, 2, 3)\)", api=_api_scatter_on_root_only),
    Case("api-sddmm-none-on-some", "sddmm(A, B) with B None except on rank 0",
         r"B must be a 2-D numpy array", api=_api_sddmm_missing_b),
]
