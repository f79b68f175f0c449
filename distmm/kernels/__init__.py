"""Node models: the pluggable local kernel each rank runs (see :mod:`distmm.kernels.base`)."""

from __future__ import annotations

from distmm.errors import require
from distmm.kernels.base import KernelStats, NodeModel, OpStats

NODE_MODELS = ("reference",)


def make_node_model(name: str) -> NodeModel:
    """A fresh node model by name (one per distributed object, so stats stay separate)."""
    require(name in NODE_MODELS,
            f"unknown node model {name!r}; choose one of {', '.join(NODE_MODELS)}")
    from distmm.kernels.reference import ReferenceModel

    return ReferenceModel()


__all__ = ["KernelStats", "NODE_MODELS", "NodeModel", "OpStats", "make_node_model"]
