"""Edge-value and dense-block primitives on a distributed S (collective, counted).

These are the building blocks of training loops (ALS, GAT, PyTorch adapters) beyond the paper's
three kernels: reductions of edge values to per-node vectors, expanding per-node vectors onto
S's nonzeros, edge softmax, row-wise dot products, X^T Y and transfers between the A-side and
B-side distributions. Every word they send goes through the object's counting communicator
under a phase of its own, and each has an exact word formula tested against the counts.
"""
