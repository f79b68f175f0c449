"""Accelerator simulators (SpArch, Dynaspase) and the Dynaspase GNN inference built on them.

They model hardware, cycle by cycle or transaction by transaction, and know nothing of
distmm's node-model interface: the node models that run them under the distributed families
are :mod:`distmm.kernels.sparch` and :mod:`distmm.kernels.dynaspase`, beside the production
kernels. The production kernels never import this package."""
