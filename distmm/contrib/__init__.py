"""Reproductions kept for study that no distributed path calls: the OpSparse-style hash SpGEMM (CPU
and CUDA)."""
