"""Training a distributed GAT: the standard split, Adam, dropout, early stopping, checkpoints.

One epoch is one full-batch step (forward with dropout, backward, Adam) followed by an
inference pass (no dropout) that gives the losses and accuracies of the epoch's record.
Early stopping follows the GAT paper's code (execute_cora.py): the patience counter restarts
whenever the validation accuracy is at least its best so far or the validation loss at most its
best so far, and the parameters kept are those of the last epoch at which both held at once.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import h5py
import numpy as np

from distmm.apps.gat import DistGAT, Dropout, cross_entropy
from distmm.apps.gat_model import PARAMS, Adam, GATLayer, GATModel
from distmm.errors import InputError, require
from distmm.io.outputs import write_h5_atomic

# the SpMM/SDDMM loops' communication (values: moving per-call values into S^T's order), with
# the whole-row layer's all-gathers of their output pieces and its A/B transfers
# (distmm.apps.gat_layout; none in 1.5D dense shifting)
COMM_PHASES = ("replication", "propagation", "reduction", "values", "gat_allgather",
               "gat_transfer")
# per-node scores onto edges, the edge softmax and the backward pass's edge reductions
SOFTMAX_PHASES = ("sddmm_add", "softmax", "expand", "row_reduce", "col_reduce", "plan")


def standard_split(labels: np.ndarray, per_class: int = 20, val: int = 500, test: int = 1000,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """The GAT paper's split sizes, made reproducibly: nodes are visited in the order of a
    permutation drawn with ``numpy.random.default_rng(seed)``; the first ``per_class`` nodes
    of each class are the training set, the next ``val`` nodes not in it the validation set
    and the ``test`` nodes after those the test set. Returns sorted node-id arrays (``train``,
    ``val``, ``test``). Not collective (every rank computes the same split)."""
    n = labels.size
    require(per_class >= 1 and val >= 0 and test >= 0, "split sizes must be positive")
    order = np.random.default_rng(seed).permutation(n)
    train = []
    for k in np.unique(labels):
        members = order[labels[order] == k]
        require(members.size >= per_class,
                f"class {k} has {members.size} nodes, fewer than {per_class} per class")
        train.append(members[:per_class])
    train = np.concatenate(train)
    rest = order[~np.isin(order, train)]
    require(rest.size >= val + test, f"{n} nodes are too few for the split "
                                     f"({train.size} + {val} + {test})")
    return {"train": np.sort(train), "val": np.sort(rest[:val]),
            "test": np.sort(rest[val:val + test])}


@dataclass
class TrainConfig:
    """Hyper-parameters (defaults: the GAT paper's Cora setup)."""

    epochs: int = 1000
    patience: int = 100
    lr: float = 0.005
    weight_decay: float = 5e-4
    dropout: float = 0.6
    attention_dropout: float = 0.6
    seed: int = 0


@dataclass
class TrainState:
    """Everything a run needs to continue bit-identically: the model, Adam's moments, the
    epoch count, the early-stopping record and the best model so far."""

    model: GATModel
    adam: Adam
    epoch: int = 0
    best_acc: float = -1.0
    best_loss: float = np.inf
    best_epoch: int = -1
    bad_epochs: int = 0
    best_model: GATModel | None = None
    history: list[dict] = field(default_factory=list)

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | os.PathLike, config: TrainConfig) -> None:
        """Write the state to HDF5 atomically (call on one rank)."""
        data, attrs = {}, {}
        for tag, model in (("model", self.model), ("best", self.best_model or self.model)):
            for k, la in enumerate(model.layers):
                for name, arr in la.arrays().items():
                    data[f"{tag}/layer{k}/{name}"] = arr
        for tag, moments in (("adam_m", self.adam.m), ("adam_v", self.adam.v)):
            for k, d in enumerate(moments):
                for name, arr in d.items():
                    data[f"{tag}/layer{k}/{name}"] = arr
        attrs = {"epoch": self.epoch, "best_acc": self.best_acc, "best_loss": self.best_loss,
                 "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs,
                 "adam_step": self.adam.step_count, "config": asdict(config),
                 "layers": [{"concat": la.concat, "negative_slope": la.negative_slope}
                            for la in self.model.layers],
                 "add_self_loops": self.model.add_self_loops}
        write_h5_atomic(path, data, attrs)

    @classmethod
    def load(cls, path: str | os.PathLike, dtype) -> tuple[TrainState, dict]:
        """Read a checkpoint written by :meth:`save`; returns (state, saved config dict).
        Not collective."""
        import json

        try:
            fh = h5py.File(path, "r")
        except OSError as exc:
            raise InputError(f"{path}: not a readable checkpoint ({exc})") from None
        with fh:
            try:
                meta = json.loads(fh.attrs["layers"])
                loops = bool(fh.attrs["add_self_loops"])

                def model(tag):
                    return GATModel([GATLayer(**{n: np.asarray(fh[f"{tag}/layer{k}/{n}"], dtype)
                                                 for n in PARAMS}, **m)
                                     for k, m in enumerate(meta)], loops)

                def moments(tag):
                    if tag not in fh:
                        return []
                    return [{n: np.asarray(fh[f"{tag}/layer{k}/{n}"], dtype) for n in PARAMS}
                            for k in range(len(meta))]

                config = json.loads(fh.attrs["config"])
                adam = Adam(lr=config["lr"], weight_decay=config["weight_decay"],
                            step_count=int(fh.attrs["adam_step"]), m=moments("adam_m"),
                            v=moments("adam_v"))
                state = cls(model("model"), adam, epoch=int(fh.attrs["epoch"]),
                            best_acc=float(fh.attrs["best_acc"]),
                            best_loss=float(fh.attrs["best_loss"]),
                            best_epoch=int(fh.attrs["best_epoch"]),
                            bad_epochs=int(fh.attrs["bad_epochs"]), best_model=model("best"))
            except KeyError as exc:
                raise InputError(f"{path}: not a GAT checkpoint (missing {exc})") from None
            except (TypeError, ValueError, AttributeError, OSError) as exc:
                raise InputError(f"{path}: not a valid GAT checkpoint ({exc})") from None
        problem = _state_problem(state, config)
        require(problem is None, f"{path}: not a valid GAT checkpoint ({problem})")
        return state, config


def _state_problem(state: TrainState, config) -> str | None:
    """The first inconsistency of a loaded checkpoint (counters, models, Adam's moments), or
    None. Not collective."""
    if not isinstance(config, dict) or not all(k in config for k in ("lr", "weight_decay")):
        return "attribute config must be a JSON object with the training options"
    if state.epoch < 0 or state.bad_epochs < 0 or state.adam.step_count < 0:
        return (f"negative counters (epoch {state.epoch}, bad_epochs {state.bad_epochs}, "
                f"adam_step {state.adam.step_count})")
    if not -1 <= state.best_epoch <= state.epoch:
        return f"best_epoch {state.best_epoch} is outside -1..epoch {state.epoch}"
    for tag, model in (("model", state.model), ("best", state.best_model)):
        msg = model.check()
        if msg is not None:
            return f"/{tag}: {msg}"
    for tag, moments in (("adam_m", state.adam.m), ("adam_v", state.adam.v)):
        for k, d in enumerate(moments):
            for name, arr in d.items():
                want = getattr(state.model.layers[k], name).shape
                if arr.shape != want:
                    return f"/{tag}/layer{k}/{name} has shape {arr.shape}, expected {want}"
    return None


def _masks(nodes: np.ndarray, split: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.isin(nodes, v) for k, v in split.items()}


def _counted_masks(gat: DistGAT, split: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The split's masks over ``gat.nodes``, restricted to the rows this rank counts (each
    node once over its row group)."""
    return {k: m & gat.counted for k, m in _masks(gat.nodes, split).items()}


def evaluate(gat: DistGAT, X, labels: np.ndarray, split: dict[str, np.ndarray]) -> dict:
    """Inference-mode losses and accuracies of every split set (global). Collective."""
    logits, _ = gat.forward(X, None)
    return _metrics(gat, logits, labels, split)


def _metrics(gat: DistGAT, logits, labels, split, extra: float = 0.0) -> dict:
    masks = _counted_masks(gat, split)
    correct = logits.argmax(axis=1) == labels
    local = [extra]
    for k in split:
        local += [cross_entropy(logits, labels, masks[k], max(1, split[k].size))[0],
                  float(correct[masks[k]].sum())]
    total = np.empty(len(local))
    gat.obj.world.allreduce(np.array(local), total, phase="gat_metrics")
    out = {"train_loss": float(total[0])}
    for i, k in enumerate(split):
        out[f"{k}_loss"] = float(total[1 + 2 * i])
        out[f"{k}_acc"] = float(total[2 + 2 * i]) / max(1, split[k].size)
    return out


def train(gat: DistGAT, X, labels: np.ndarray, split: dict[str, np.ndarray],
          config: TrainConfig, state: TrainState | None = None,
          on_epoch: Callable[[TrainState, dict], None] | None = None,
          stop_after: int | None = None) -> TrainState:
    """Train ``gat.model`` in place; returns the state (its ``best_model`` is the result).

    ``X`` holds this rank's input rows (``gat.input_nodes``; dense or scipy CSR), ``labels``
    the labels of its output rows (``gat.nodes``; the same nodes in the 1.5D families),
    ``split`` the global train/val/test node ids (identical on every rank).
    ``on_epoch(state, record)`` is called after every epoch on every rank (the record holds
    loss, accuracies and the seconds split into SpMM/SDDMM communication, their compute, the
    softmax's reductions and the rest). ``state`` continues a run from a checkpoint;
    ``stop_after`` ends after that many epochs of this call (for checkpoint tests).
    Collective over ``gat.obj.comm``.
    """
    require(split["train"].size > 0, "the training set is empty")
    if state is None:
        state = TrainState(gat.model, Adam(lr=config.lr, weight_decay=config.weight_decay))
    gat.model = state.model
    train_mask = _masks(gat.nodes, split)["train"]
    stats = gat.obj.stats
    done = 0
    while state.epoch < config.epochs and state.bad_epochs < config.patience:
        if stop_after is not None and done >= stop_after:
            break
        before = dict(stats.seconds)
        t0 = time.perf_counter()
        drop = Dropout(config.dropout, config.attention_dropout, config.seed, state.epoch)
        logits, caches = gat.forward(X, drop)
        loss, dlog = gat.loss(logits, labels, train_mask, split["train"].size)
        grads = gat.backward(dlog, caches)
        state.adam.step(state.model, grads)
        record = _metrics(gat, gat.forward(X, None)[0], labels, split, extra=loss)
        wall = time.perf_counter() - t0
        delta = {ph: stats.seconds.get(ph, 0.0) - before.get(ph, 0.0) for ph in stats.seconds}
        secs = {"comm": sum(delta.get(p, 0.0) for p in COMM_PHASES),
                "compute": delta.get("compute", 0.0),
                "softmax": sum(delta.get(p, 0.0) for p in SOFTMAX_PHASES)}
        secs["rest"] = max(0.0, wall - sum(secs.values()))
        state.epoch += 1
        done += 1
        acc, vloss = record["val_acc"], record["val_loss"]
        acc_ok, loss_ok = acc >= state.best_acc, vloss <= state.best_loss
        if acc_ok and loss_ok:
            state.best_model = copy.deepcopy(state.model)
            state.best_epoch = state.epoch
        if acc_ok or loss_ok:
            state.best_acc = max(acc, state.best_acc)
            state.best_loss = min(vloss, state.best_loss)
            state.bad_epochs = 0
        else:
            state.bad_epochs += 1
        record = {"epoch": state.epoch, **record, "seconds": wall,
                  **{f"seconds_{k}": v for k, v in secs.items()}}
        state.history.append(record)
        if on_epoch is not None:
            on_epoch(state, record)
    if state.best_model is None:
        state.best_model = copy.deepcopy(state.model)
    return state
