"""GAT parameters: layers with GATConv's shapes and meanings, initialisation, HDF5 files, Adam.

Each layer holds torch_geometric.nn.GATConv's parameters with the same shapes and meanings
(``lin.weight`` -> ``weight`` (heads * out_channels, in_channels), ``att_src`` and ``att_dst``
-> (heads, out_channels) (PyG stores them as (1, heads, out_channels)), ``bias`` -> (heads *
out_channels,) when heads are concatenated, (out_channels,) when averaged). Parameters are
replicated on every rank; nothing here communicates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from distmm.errors import InputError, require
from distmm.io.outputs import atomic_output

PARAMS = ("weight", "att_src", "att_dst", "bias")
# L2 regularisation applies to these (as in the GAT paper's code: weights, not biases)
DECAYED = ("weight", "att_src", "att_dst")


@dataclass
class GATLayer:
    """One GAT layer's parameters (see the module docstring for shapes)."""

    weight: np.ndarray
    att_src: np.ndarray
    att_dst: np.ndarray
    bias: np.ndarray
    concat: bool = True
    negative_slope: float = 0.2

    @property
    def heads(self) -> int:
        return int(self.att_src.shape[0])

    @property
    def out_channels(self) -> int:
        return int(self.att_src.shape[1])

    @property
    def in_channels(self) -> int:
        return int(self.weight.shape[1])

    @property
    def width(self) -> int:
        """Columns of the layer's output (heads * out_channels, or out_channels)."""
        return self.heads * self.out_channels if self.concat else self.out_channels

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in PARAMS}

    def check(self, where: str) -> str | None:
        """A message describing the first shape error, or None."""
        h, f = self.att_src.shape if self.att_src.ndim == 2 else (0, 0)
        if self.att_src.ndim != 2 or h < 1 or f < 1:
            return f"{where}: att_src must have shape (heads >= 1, out_channels >= 1), got " \
                   f"{self.att_src.shape}"
        want = {"weight": (h * f, self.weight.shape[1] if self.weight.ndim == 2 else -1),
                "att_dst": (h, f), "bias": (h * f if self.concat else f,)}
        for name, shape in want.items():
            if getattr(self, name).shape != shape or min(shape) < 1:
                return f"{where}: {name} has shape {getattr(self, name).shape}, expected {shape}"
        return None


@dataclass
class GATModel:
    """A stack of GAT layers (ELU between them) and the graph convention they were built for."""

    layers: list[GATLayer]
    add_self_loops: bool = True

    @classmethod
    def init(cls, in_channels: int, hidden: int, heads: int, classes: int, out_heads: int = 1,
             layers: int = 2, seed: int = 0, dtype=np.float32, negative_slope: float = 0.2,
             add_self_loops: bool = True) -> GATModel:
        """The standard GAT: ``layers - 1`` hidden layers of ``heads`` concatenated heads of
        ``hidden`` units, then ``out_heads`` averaged heads of ``classes`` units. Glorot
        (uniform) weights and attention vectors, zero biases, as GATConv's ``reset_parameters``;
        seeded, so every rank builds the same model. Not collective."""
        require(heads >= 1 and out_heads >= 1, f"heads must be >= 1, got {heads}, {out_heads}")
        require(min(in_channels, hidden, classes) >= 1 and layers >= 1,
                "channels and layers must be >= 1")
        rng = np.random.default_rng(seed)
        out, fin = [], in_channels
        for k in range(layers):
            last = k == layers - 1
            h, f = (out_heads, classes) if last else (heads, hidden)
            out.append(GATLayer(
                weight=_glorot(rng, (h * f, fin), fin, h * f, dtype),
                att_src=_glorot(rng, (h, f), h, f, dtype),
                att_dst=_glorot(rng, (h, f), h, f, dtype),
                bias=np.zeros(f if last else h * f, dtype=dtype),
                concat=not last, negative_slope=negative_slope))
            fin = out[-1].width
        return cls(out, add_self_loops)

    def check(self, in_channels: int | None = None) -> str | None:
        """The first inconsistency (shapes, widths between layers), or None. Not collective."""
        if not self.layers:
            return "a GAT model needs at least one layer"
        fin = in_channels
        for k, layer in enumerate(self.layers):
            msg = layer.check(f"layer{k}")
            if msg:
                return msg
            if fin is not None and layer.in_channels != fin:
                return f"layer{k}: weight takes {layer.in_channels} input channels, " \
                       f"but its input has {fin}"
            fin = layer.width
        return None

    def astype(self, dtype) -> GATModel:
        return GATModel([GATLayer(**{k: v.astype(dtype) for k, v in la.arrays().items()},
                                  concat=la.concat, negative_slope=la.negative_slope)
                         for la in self.layers], self.add_self_loops)

    # ------------------------------------------------------------------ HDF5
    def save(self, path: str | os.PathLike) -> None:
        """Write ``/layer0``, ``/layer1``, ... (datasets weight, att_src, att_dst, bias; attrs
        heads, out_channels, concat, negative_slope, add_self_loops), atomically. Call on one
        rank."""
        with atomic_output(path) as tmp, h5py.File(tmp, "w") as out:
            out.attrs["format"] = "distmm-gat"
            for k, layer in enumerate(self.layers):
                g = out.create_group(f"layer{k}")
                for name, arr in layer.arrays().items():
                    g.create_dataset(name, data=arr)
                g.attrs.update({"heads": layer.heads, "out_channels": layer.out_channels,
                                "concat": bool(layer.concat),
                                "negative_slope": float(layer.negative_slope),
                                "add_self_loops": bool(self.add_self_loops)})

    @classmethod
    def load(cls, path: str | os.PathLike, dtype=np.float32) -> GATModel:
        """Read a file written by :meth:`save` (or by hand with the same layout). Missing
        groups, datasets or attributes and wrong shapes raise :class:`InputError`. Not
        collective: every rank reading the same file fails alike."""
        try:
            fh = h5py.File(path, "r")
        except OSError as exc:
            raise InputError(f"{path}: not a readable HDF5 file ({exc})") from None
        layers, loops = [], set()
        with fh:
            require("layer0" in fh, f"{path}: no group /layer0")
            k = 0
            while f"layer{k}" in fh:
                g = fh[f"layer{k}"]
                missing = [n for n in PARAMS if n not in g] + [
                    a for a in ("heads", "out_channels", "concat", "negative_slope",
                                "add_self_loops") if a not in g.attrs]
                require(not missing, f"{path}: /layer{k} lacks {', '.join(missing)}")
                layer = GATLayer(**{n: np.asarray(g[n], dtype=dtype) for n in PARAMS},
                                 concat=bool(g.attrs["concat"]),
                                 negative_slope=float(g.attrs["negative_slope"]))
                require((layer.att_src.ndim == 2 and layer.heads == int(g.attrs["heads"])
                         and layer.out_channels == int(g.attrs["out_channels"])),
                        f"{path}: /layer{k} att_src has shape {layer.att_src.shape}, but the "
                        f"attributes say heads={g.attrs['heads']}, "
                        f"out_channels={g.attrs['out_channels']}")
                loops.add(bool(g.attrs["add_self_loops"]))
                layers.append(layer)
                k += 1
        require(len(loops) == 1, f"{path}: the layers disagree on add_self_loops")
        model = cls(layers, loops.pop())
        msg = model.check()
        require(msg is None, f"{path}: {msg}")
        return model


def _glorot(rng, shape, fan_in, fan_out, dtype) -> np.ndarray:
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=shape).astype(dtype)


@dataclass
class Adam:
    """Adam (Kingma and Ba) with coupled L2 weight decay on :data:`DECAYED` parameters, as
    ``torch.optim.Adam(weight_decay=...)`` applies it. Updates a model in place; identical on
    every rank given identical (all-reduced) gradients. Not collective."""

    lr: float = 0.005
    weight_decay: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    step_count: int = 0
    m: list[dict[str, np.ndarray]] = field(default_factory=list)
    v: list[dict[str, np.ndarray]] = field(default_factory=list)

    def step(self, model: GATModel, grads: list[dict[str, np.ndarray]]) -> None:
        if not self.m:
            self.m = [{k: np.zeros_like(a) for k, a in la.arrays().items()} for la in model.layers]
            self.v = [{k: np.zeros_like(a) for k, a in la.arrays().items()} for la in model.layers]
        self.step_count += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.step_count, 1 - b2 ** self.step_count
        for layer, g, m, v in zip(model.layers, grads, self.m, self.v, strict=True):
            for name in PARAMS:
                p = getattr(layer, name)
                gr = g[name] + self.weight_decay * p if name in DECAYED else g[name]
                m[name] *= b1
                m[name] += (1 - b1) * gr
                v[name] *= b2
                v[name] += (1 - b2) * gr * gr
                p -= (self.lr * (m[name] / c1) / (np.sqrt(v[name] / c2) + self.eps)).astype(p.dtype)
