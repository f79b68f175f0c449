"""Accelerator simulators (SpArch, Dynaspase) and the Dynaspase GNN inference built on them;
reachable as node models, not needed by the production kernels."""
