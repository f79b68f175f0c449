"""Dynaspase (sparsity-aware FPGA GNN accelerator) simulator: config and runtime.

Modules, one job each: :mod:`.config` (accelerator parameters), :mod:`.partition` (Algorithm 9,
block profiling), :mod:`.perfmodel` (Table IV, Algorithm 7, static strategies S1/S2),
:mod:`.schedule` (Algorithm 8, double buffering), :mod:`.kernel` (one simulated product).
The node model that runs it under distmm's families is :mod:`distmm.kernels.dynaspase`.
"""

from distmm.sim.dynaspase.config import STRATEGIES, DynaspaseConfig
from distmm.sim.dynaspase.kernel import KernelResult, simulate_kernel
from distmm.sim.dynaspase.partition import KernelShape, choose_partition, num_tasks

__all__ = ["STRATEGIES", "DynaspaseConfig", "KernelResult", "KernelShape",
           "choose_partition", "num_tasks", "simulate_kernel"]
