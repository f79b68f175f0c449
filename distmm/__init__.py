"""distmm: distributed-memory SDDMM, SpMM and FusedMM on 1.5D and 2.5D MPI grids."""

__version__ = "0.1.0"
