"""The Dynaspase node model: each rank's SpMM runs on the simulated accelerator.

In a distributed step, ``spmm_a`` (out += S B) and ``spmm_b`` (out += S^T A) are Aggregate
kernels (paper section III-A): the sparse block plays A and the dense block plays H, and the
runtime partitions, profiles and maps them block by block (Algorithm 7) before scheduling the
tasks on the cores (Algorithm 8). SDDMM has no primitive on Dynaspase, so ``sddmm`` and the
fused operations fall back to the reference model (counted in ``fallback_calls``).
"""

from __future__ import annotations

import numpy as np

from distmm.core.sparse import CSRBlock
from distmm.kernels.base import NodeModel
from distmm.sim.dynaspase.config import DynaspaseConfig
from distmm.sim.dynaspase.kernel import KernelResult, simulate_kernel


class DynaspaseModel(NodeModel):
    """Simulated Dynaspase FPGA (U250, 7 cores of 16 x 16 ALUs at 250 MHz by default).

    Keyword options are the fields of :class:`DynaspaseConfig` (``strategy``, ``p_sys``,
    ``n_cc``, ``eta``, ``freq_mhz``, ``ddr_gbps``, ...). Results are exact (computed in the
    block's dtype); every call adds model counters: ``model_cycles``, ``model_seconds``,
    ``blocks_gemm``, ``blocks_spdmm``, ``blocks_spmm``, ``blocks_empty`` (block pairs per
    primitive), ``model_tasks``, ``model_dram_bytes``.
    """

    name = "dynaspase"
    native = frozenset({"spmm_a", "spmm_b"})

    def __init__(self, fallback: NodeModel | None = None, **options) -> None:
        super().__init__(fallback)
        self.config = DynaspaseConfig(**options)
        self.last: KernelResult | None = None

    def options(self) -> dict:
        return self.config.as_dict()

    def _aggregate(self, X, Y: np.ndarray, out: np.ndarray) -> None:
        if X.shape[0] == 0 or Y.shape[1] == 0:
            return
        res = simulate_kernel(X, Y, "aggregate", self.config)
        out += res.result
        self.last = res
        self.count(model_cycles=res.cycles, model_seconds=res.seconds,
                   blocks_gemm=res.counts["gemm"], blocks_spdmm=res.counts["spdmm"],
                   blocks_spmm=res.counts["spmm"], blocks_empty=res.counts["empty"],
                   model_tasks=res.tasks, model_dram_bytes=res.schedule.dram_bytes)

    def _spmm_a(self, S: CSRBlock, vals: np.ndarray, B: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals) @ B as one Aggregate kernel."""
        self._aggregate(S.to_scipy(vals), B, out)

    def _spmm_b(self, S: CSRBlock, vals: np.ndarray, A: np.ndarray, out: np.ndarray) -> None:
        """out += S(vals)^T @ A as one Aggregate kernel on the transposed block."""
        self._aggregate(S.to_scipy(vals).T.tocsr(), A, out)
