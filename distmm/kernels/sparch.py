"""SpArch as a node model: SpGEMM natively, SpMM as SpGEMM with a dense right matrix."""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from distmm.core.sparse import CSRBlock
from distmm.kernels.base import NodeModel
from distmm.sim.sparch.config import SpArchConfig
from distmm.sim.sparch.model import run_model
from distmm.sim.sparch.numeric import spgemm
from distmm.sim.sparch.simulate import make_config, product

_COUNTERS = ("model_cycles", "model_seconds", "dram_read_bytes", "dram_write_bytes",
             "left_read_bytes", "right_read_bytes", "partial_read_bytes", "partial_write_bytes",
             "final_write_bytes", "energy_nj", "multiplications", "partial_matrices",
             "merge_rounds", "prefetch_hits", "prefetch_accesses")


class SpArchModel(NodeModel):
    """A rank's local kernel run on a modelled SpArch chip (Li et al., HPCA 2020).

    ``spgemm`` is native; ``spmm_a`` / ``spmm_b`` run as SpGEMM of S (or S^T) with the dense
    block as the right matrix, accumulated into ``out``; SDDMM and FusedMM are not SpArch
    operations and fall back to the reference model (counted as ``fallback_calls``). Every
    native call adds the model's counters (``model_cycles``, ``model_seconds``, DRAM bytes by
    kind, ``energy_nj``, ``partial_matrices``, ``merge_rounds``, ``prefetch_hits`` /
    ``prefetch_accesses``, ...) to its operation's stats. Keyword options are the fields of
    :class:`SpArchConfig` (or ``config``: a SpArchConfig or dict); bad ones raise ValueError.
    """

    name = "sparch"
    native = frozenset({"spgemm", "spmm_a", "spmm_b"})

    def __init__(self, fallback: NodeModel | None = None,
                 config: SpArchConfig | dict | None = None, **options) -> None:
        super().__init__(fallback)
        known = {f.name for f in fields(SpArchConfig)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown SpArch option(s) {', '.join(unknown)}")
        self.config = make_config(config, **options)

    def options(self) -> dict:
        return self.config.as_dict()

    def _account(self, report: dict) -> None:
        c = report["counters"]
        self.count(**{k: c[k] for k in _COUNTERS})

    def _spgemm(self, X: CSRBlock, Y: CSRBlock) -> CSRBlock:
        C = product(X, Y)
        self._account(run_model(X.indptr, X.indices, Y.indptr, Y.indices,
                                (X.shape[0], X.shape[1], Y.shape[1]), self.config))
        return C

    def _dense_spgemm(self, ptr: np.ndarray, idx: np.ndarray, vals: np.ndarray,
                      D: np.ndarray, out: np.ndarray) -> None:
        """out += X @ D with X = (ptr, idx, vals) and D dense (k x r), modelled as SpGEMM."""
        k, r = D.shape
        if idx.size == 0 or r == 0:
            return
        d_ptr = np.arange(0, (k + 1) * r, r, dtype=np.int64)
        d_idx = np.tile(np.arange(r, dtype=np.int32), k)
        c_ptr, c_idx, c_val = spgemm(ptr, idx, vals, d_ptr, d_idx, D.reshape(-1), r,
                                     np.dtype(np.float64))
        rows = np.repeat(np.arange(ptr.size - 1), np.diff(c_ptr))
        acc = np.zeros(out.shape, dtype=np.float64)
        acc[rows, c_idx] = c_val
        out += acc.astype(out.dtype)
        self._account(run_model(ptr, idx, d_ptr, d_idx, (ptr.size - 1, k, r), self.config))

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals) @ B."""
        # operands were checked by the interface (kernels/checks.py)
        self._dense_spgemm(S.indptr, S.indices, vals, B, out)

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals)^T @ A, S^T read from the block's cached transpose."""
        if S.nnz == 0 or A.shape[1] == 0:
            return
        indptr_t, indices_t, perm = S.transpose()
        self._dense_spgemm(indptr_t, indices_t, vals[perm], A, out)
