"""``distmm.als``: alternating least squares on distributed FusedMM (see
:mod:`distmm.apps.als`)."""

from distmm.apps.als import ALSConfig, ALSResult, fit, initial_factors, predict, split_ratings

__all__ = ["ALSConfig", "ALSResult", "fit", "initial_factors", "predict", "split_ratings"]
