"""Distributed data: communicators and word counting, the process grid, block ownership, sparse and
dense blocks, permutations."""
