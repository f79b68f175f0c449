"""Applications built on distmm's kernels and node models (GNN inference on Dynaspase, ...)."""
