"""Node models: the pluggable local kernel each rank runs (see :mod:`distmm.kernels.base`).

Each model is registered by name with the module and class that implement it; modules are
imported only when a model is made, so a model's optional dependencies cost nothing to others.
"""

from __future__ import annotations

import importlib

from distmm.errors import InputError, require
from distmm.kernels.base import KernelStats, NodeModel, OpStats

# name -> "module:Class"; the order is the order of `--node-model` choices
_REGISTRY: dict[str, str] = {
    "reference": "distmm.kernels.reference:ReferenceModel",
    "sputnik": "distmm.kernels.sputnik:SputnikModel",
    "hash-spgemm": "distmm.kernels.hash_spgemm:HashSpGEMMModel",
    "sparch": "distmm.kernels.sparch:SpArchModel",
    "dynaspase": "distmm.kernels.dynaspase:DynaspaseModel",
}

NODE_MODELS = tuple(_REGISTRY)


def node_model_class(name: str) -> type[NodeModel]:
    """The class registered under ``name``. Not collective."""
    require(name in _REGISTRY,
            f"unknown node model {name!r}; choose one of {', '.join(NODE_MODELS)}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_node_model(name: str, **options) -> NodeModel:
    """A fresh node model by name (one per distributed object, so stats stay separate).

    ``options`` are the model's keyword arguments (e.g. from ``--node-config FILE``); an
    unknown or invalid option raises :class:`InputError`. Not collective, but deterministic,
    so every rank given the same arguments raises the same error."""
    cls = node_model_class(name)
    try:
        model = cls(**options)
    except (TypeError, ValueError) as exc:
        raise InputError(f"node model {name!r}: invalid options {options!r} ({exc})") from None
    # Every model falls back to the reference model for what it lacks natively.
    if model._fallback is None and name != "reference":
        from distmm.kernels.reference import ReferenceModel

        model._fallback = ReferenceModel()
    return model


__all__ = ["KernelStats", "NODE_MODELS", "NodeModel", "OpStats", "make_node_model",
           "node_model_class"]
