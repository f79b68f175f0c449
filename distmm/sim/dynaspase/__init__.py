"""Dynaspase (sparsity-aware FPGA GNN accelerator) simulator: config, runtime and node model.

Modules, one job each: :mod:`.config` (accelerator parameters), :mod:`.partition` (Algorithm 9,
block profiling), :mod:`.perfmodel` (Table IV, Algorithm 7, static strategies S1/S2),
:mod:`.schedule` (Algorithm 8, double buffering), :mod:`.kernel` (one simulated product),
:mod:`.model` (the distmm node model).
"""

from distmm.sim.dynaspase.config import STRATEGIES, DynaspaseConfig
from distmm.sim.dynaspase.kernel import KernelResult, simulate_kernel
from distmm.sim.dynaspase.model import DynaspaseModel
from distmm.sim.dynaspase.partition import KernelShape, choose_partition, num_tasks

__all__ = ["STRATEGIES", "DynaspaseConfig", "DynaspaseModel", "KernelResult", "KernelShape",
           "choose_partition", "num_tasks", "simulate_kernel"]
