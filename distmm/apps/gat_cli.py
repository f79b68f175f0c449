"""``distmm gat train`` and ``distmm gat predict``: a graph attention network on a distributed S.

Every rank parses the same arguments and reads the same small inputs (labels, split, weights),
so every check is made identically everywhere before anything is written; the graph is read in
parts by all ranks (Matrix Market), the features by rows. Rank 0 prints one JSON line per epoch
on stdout and a progress line on stderr, and writes the output files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import h5py
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm import signals
from distmm.apps.gat import DistGAT, distribute_graph
from distmm.apps.gat_model import GATModel
from distmm.apps.gat_train import TrainConfig, TrainState, evaluate, standard_split, train
from distmm.core.permute import PERMUTE_MODES
from distmm.errors import InputError, agree, require
from distmm.io.matrix_market import read_csr_block
from distmm.io.npy import load_dense_npy
from distmm.io.outputs import check_output, write_h5_atomic
from distmm.kernels import NODE_MODELS


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``gat`` (with ``train`` and ``predict``) to the ``distmm`` sub-parsers."""
    from distmm.cli import job_options

    gat = subparsers.add_parser("gat", help="graph attention network (GAT): train on labelled "
                                            "nodes, or predict logits with saved weights")
    gat.set_defaults(func=run)
    sub = gat.add_subparsers(dest="gat_command", required=True)
    tr = sub.add_parser("train", help="train a GAT; write its weights (HDF5)")
    _inputs(tr)
    tr.add_argument("--labels", required=True, help="one integer class per line, node order")
    tr.add_argument("--split", default="standard",
                    help="'standard' (per class / val / test sizes from --split-sizes, drawn "
                         "with --split-seed) or a JSON file {\"train\": [...], \"val\": [...], "
                         "\"test\": [...]} of node ids (default standard)")
    tr.add_argument("--split-sizes", default="20,500,1000",
                    help="labelled nodes per class, validation and test nodes (default "
                         "%(default)s)")
    tr.add_argument("--split-seed", type=int, default=0)
    tr.add_argument("--out", required=True, help="weights file (HDF5, written atomically)")
    tr.add_argument("--hidden", type=int, default=8, help="hidden units per head (default 8)")
    tr.add_argument("--heads", type=int, default=8, help="heads of hidden layers (default 8)")
    tr.add_argument("--out-heads", type=int, default=1,
                    help="heads of the output layer, averaged (default 1)")
    tr.add_argument("--layers", type=int, default=2, help="GAT layers (default 2)")
    tr.add_argument("--negative-slope", type=float, default=0.2)
    tr.add_argument("--no-self-loops", action="store_true",
                    help="do not add self-loops (a node without in-edges then outputs its bias)")
    tr.add_argument("--epochs", type=int, default=1000, help="most epochs (default 1000)")
    tr.add_argument("--patience", type=int, default=100,
                    help="stop after this many epochs without a better validation accuracy or "
                         "loss (default 100)")
    tr.add_argument("--lr", type=float, default=0.005)
    tr.add_argument("--weight-decay", type=float, default=5e-4)
    tr.add_argument("--dropout", type=float, default=0.6, help="feature dropout (default 0.6)")
    tr.add_argument("--attention-dropout", type=float, default=0.6)
    tr.add_argument("--model-seed", type=int, default=0,
                    help="seed of the initial weights and of the dropout masks (default 0)")
    tr.add_argument("--checkpoint", help="write the training state here (HDF5) every "
                                         "--checkpoint-every epochs and at the end")
    tr.add_argument("--checkpoint-every", type=int, default=50)
    tr.add_argument("--resume", help="continue bit-identically from this checkpoint")
    tr.set_defaults(gat_func=cmd_train)
    job_options(tr)
    pr = sub.add_parser("predict", help="logits of every node with saved weights (HDF5)")
    _inputs(pr)
    pr.add_argument("--weights", required=True, help="weights file from 'distmm gat train'")
    pr.add_argument("--out", required=True, help="HDF5 file with /logits (n x classes, "
                                                 "original node order), written atomically")
    pr.add_argument("--fused", action="store_true",
                    help="run each layer's attention as one fused online-softmax loop")
    pr.set_defaults(gat_func=cmd_predict)
    return gat


def _inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graph", required=True, help="adjacency (n x n) .mtx[.gz]: S[i, j] != 0 "
                                                  "means an edge j -> i")
    p.add_argument("--transpose", action="store_true",
                   help="the file lists edges i -> j at [i, j] (use its transpose)")
    p.add_argument("--features", required=True, help="node features (n x f): .mtx[.gz], "
                                                     ".npy or .h5 (dataset /features)")
    p.add_argument("--raw-features", action="store_true",
                   help="do not row-normalise the features (default: each row sums to 1, as "
                        "in the GAT paper's preprocessing)")
    p.add_argument("--algorithm", default="15d-dense-shift",
                   help="algorithm family (GAT runs on 15d-dense-shift)")
    p.add_argument("-c", "--replication", type=int, default=1, dest="c")
    p.add_argument("--order", default="fiber", choices=["fiber", "layer"])
    p.add_argument("--node-model", default="reference", choices=list(NODE_MODELS))
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--permute", default="auto", choices=list(PERMUTE_MODES),
                   help="load balance of S's rows and columns (default auto; see distmm run)")
    p.add_argument("--no-permute", action="store_true", help="same as --permute none")
    p.add_argument("--seed", type=int, default=0, help="seed of the permutation")


def run(args: argparse.Namespace) -> int:
    """Dispatch ``distmm gat <train|predict>``. Collective over COMM_WORLD."""
    return args.gat_func(args)


# ------------------------------------------------------------------------------------ inputs
def _out_dir_ok(path: str, what: str, inputs=()) -> None:
    """Refuse an output path that cannot be written or would overwrite an input (every rank
    checks the same path, so the error is raised alike everywhere)."""
    msg = check_output(path, what, inputs)
    require(msg is None, msg or "")


def _read_features(path: str, nodes: np.ndarray, n: int, comm: MPI.Comm, dtype, normalise):
    """This rank's rows of the feature matrix (scipy CSR for .mtx, dense otherwise), checked
    collectively (row count, finiteness)."""
    msg, X = None, None
    try:
        if path.endswith((".mtx", ".mtx.gz")):
            full = read_csr_block(path).to_scipy().tocsr()
            rows = full.shape[0]
            X = full[nodes] if rows == n else None
        elif path.endswith(".npy"):
            full = load_dense_npy(path)
            rows = full.shape[0]
            X = np.asarray(full[np.sort(nodes)]) if rows == n else None
            if X is not None:
                X = X[np.argsort(np.argsort(nodes))]
        elif path.endswith((".h5", ".hdf5")):
            with h5py.File(path, "r") as fh:
                require("features" in fh, f"{path}: no dataset /features")
                ds = fh["features"]
                require(ds.ndim == 2, f"{path}: /features must be 2-D, got {ds.shape}")
                rows = ds.shape[0]
                order = np.argsort(nodes)
                X = np.asarray(ds[nodes[order]]) if rows == n else None
                if X is not None:
                    X = X[np.argsort(order)]
        else:
            raise InputError(f"--features {path}: expected .mtx, .mtx.gz, .npy or .h5")
        if X is None:
            msg = f"--features has {rows} rows but the graph has {n} nodes"
        elif not np.isfinite(X.data if sp.issparse(X) else X).all():
            msg = f"--features {path} holds NaN or infinite values"
    except (InputError, OSError) as exc:
        msg = str(exc)
    agree(comm, msg)
    if sp.issparse(X):
        X = X.astype(dtype).tocsr()
        if normalise:
            s = np.asarray(X.sum(axis=1)).ravel()
            X = (sp.diags(1.0 / np.where(s != 0, s, 1.0)) @ X).astype(dtype).tocsr()
        # sorted column indices, no duplicates: the layer's products then run on the SpMM
        # kernels (distmm.apps.gat_features); the dropout masks are keyed by column, not slot
        X.sum_duplicates()
    else:
        X = np.ascontiguousarray(X, dtype=dtype)
        if normalise:
            s = X.sum(axis=1, keepdims=True)
            X = X / np.where(s != 0, s, 1.0).astype(dtype)
    return X


def _read_labels(path: str, n: int) -> np.ndarray:
    try:
        y = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (OSError, ValueError) as exc:
        raise InputError(f"--labels {path}: not a file of integers, one per line ({exc})"
                         ) from None
    require(y.ndim == 1 and y.size == n, f"--labels has {y.size} labels but the graph has "
                                         f"{n} nodes")
    require(y.min() >= 0, f"--labels {path}: labels must be non-negative classes")
    return y


def _read_split(args, y: np.ndarray) -> dict[str, np.ndarray]:
    if args.split == "standard":
        try:
            per_class, val, test = (int(v) for v in args.split_sizes.split(","))
        except ValueError:
            raise InputError(f"--split-sizes must be three integers, got {args.split_sizes!r}"
                             ) from None
        return standard_split(y, per_class, val, test, args.split_seed)
    try:
        with open(args.split) as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"--split {args.split}: not a JSON file ({exc})") from None
    require(isinstance(raw, dict) and all(k in raw for k in ("train", "val", "test")),
            f"--split {args.split}: needs lists 'train', 'val' and 'test'")
    out = {}
    for k in ("train", "val", "test"):
        ids = np.asarray(raw[k], dtype=np.int64).ravel()
        require(ids.size == 0 or (ids.min() >= 0 and ids.max() < y.size),
                f"--split {args.split}: {k} holds node ids outside 0..{y.size - 1}")
        out[k] = np.unique(ids)
    return out


def _graph(args, add_self_loops: bool):
    return distribute_graph(args.graph, MPI.COMM_WORLD, add_self_loops=add_self_loops,
                            transpose=args.transpose, algorithm=args.algorithm, c=args.c,
                            dtype=np.dtype(args.dtype),
                            permute="none" if args.no_permute else args.permute,
                            seed=args.seed, order=args.order, node_model=args.node_model)


def _emit(comm: MPI.Comm, record: dict) -> None:
    if comm.rank == 0:
        print(json.dumps(record, sort_keys=True), flush=True)


# ------------------------------------------------------------------------------------ train
def cmd_train(args: argparse.Namespace) -> int:
    """``distmm gat train``. Collective."""
    comm = MPI.COMM_WORLD
    dtype = np.dtype(args.dtype)
    require(args.heads >= 1 and args.out_heads >= 1,
            f"--heads and --out-heads must be >= 1, got {args.heads}, {args.out_heads}")
    require(args.hidden >= 1 and args.layers >= 1, "--hidden and --layers must be >= 1")
    require(args.epochs >= 0 and args.patience >= 1 and args.checkpoint_every >= 1,
            "--epochs must be >= 0, --patience and --checkpoint-every >= 1")
    require(0 <= args.dropout < 1 and 0 <= args.attention_dropout < 1,
            "dropout rates must be in [0, 1)")
    inputs = (args.graph, args.features, args.labels)
    _out_dir_ok(args.out, "--out", inputs)
    if args.checkpoint:
        _out_dir_ok(args.checkpoint, "--checkpoint", inputs)
    state = None
    config = TrainConfig(args.epochs, args.patience, args.lr, args.weight_decay, args.dropout,
                         args.attention_dropout, args.model_seed)
    if args.resume:
        state, saved = TrainState.load(args.resume, dtype)
        require(all(saved.get(k) == v for k, v in vars(config).items() if k != "epochs"),
                f"--resume {args.resume}: the checkpoint was made with other training "
                f"options {saved}")
    obj = _graph(args, not args.no_self_loops)
    n = obj.shape[0]
    y = _read_labels(args.labels, n)
    split = _read_split(args, y)
    nodes = obj.local_rows("a")
    X = _read_features(args.features, nodes, n, comm, dtype, not args.raw_features)
    classes = int(y.max()) + 1
    if state is None:
        model = GATModel.init(X.shape[1], args.hidden, args.heads, classes, args.out_heads,
                              args.layers, args.model_seed, dtype, args.negative_slope,
                              not args.no_self_loops)
    else:
        model = state.model
        msg = model.check(X.shape[1])
        require(msg is None and model.layers[-1].width == classes,
                f"--resume {args.resume}: the checkpoint does not fit these inputs ({msg})")
    gat = DistGAT(obj, model)

    def on_epoch(st: TrainState, record: dict) -> None:
        _emit(comm, {"event": "epoch", **record})
        if comm.rank == 0:
            print(f"gat train: epoch {st.epoch}/{config.epochs} loss {record['train_loss']:.4f}"
                  f" val {record['val_acc']:.3f} best {st.best_acc:.3f}@{st.best_epoch}",
                  file=sys.stderr, flush=True)
        saved = bool(args.checkpoint) and st.epoch % args.checkpoint_every == 0
        if saved and comm.rank == 0:
            st.save(args.checkpoint, config)
        if st.epoch < config.epochs and st.bad_epochs < config.patience:
            _safe_point(comm, st, config, args.checkpoint, saved)

    state = train(gat, X, y[nodes], split, config, state, on_epoch)
    if args.checkpoint and comm.rank == 0:
        state.save(args.checkpoint, config)
    gat.model = state.best_model
    final = evaluate(gat, X, y[nodes], split)
    _emit(comm, {"event": "result", "best_epoch": state.best_epoch, "epochs": state.epoch,
                 **final, "split_sizes": {k: int(v.size) for k, v in split.items()},
                 "config": vars(config), **obj.stats.describe()})
    if comm.rank == 0:
        state.best_model.save(args.out)
    comm.Barrier()
    return 0


def _safe_point(comm: MPI.Comm, state: TrainState, config: TrainConfig,
                checkpoint: str | None, saved: bool) -> None:
    """Stop every rank here if any rank got SIGTERM or SIGINT (:mod:`distmm.signals`); rank 0
    first writes ``checkpoint`` unless this epoch's is already written. Collective."""
    signum = signals.agreed(comm)
    if not signum:
        return
    msg = None
    if checkpoint and not saved and comm.rank == 0:
        try:
            state.save(checkpoint, config)
        except OSError as exc:
            msg = f"--checkpoint {checkpoint}: cannot write ({exc.strerror or exc})"
    agree(comm, msg)
    done = (f"checkpoint {checkpoint} written (continue with --resume {checkpoint})"
            if checkpoint else "no --checkpoint was given, so nothing was written")
    raise signals.Stopped(signum, f"stopped by {signals.name(signum)} after epoch "
                                  f"{state.epoch} of {config.epochs}; {done}")


# ------------------------------------------------------------------------------------ predict
def cmd_predict(args: argparse.Namespace) -> int:
    """``distmm gat predict``. Collective."""
    comm = MPI.COMM_WORLD
    dtype = np.dtype(args.dtype)
    _out_dir_ok(args.out, "--out", (args.graph, args.features, args.weights))
    model = GATModel.load(args.weights, dtype)
    obj = _graph(args, model.add_self_loops)
    nodes = obj.local_rows("a")
    X = _read_features(args.features, nodes, obj.shape[0], comm, dtype, not args.raw_features)
    msg = model.check(X.shape[1])
    require(msg is None, f"--weights {args.weights}: {msg}")
    gat = DistGAT(obj, model, fused=args.fused)
    logits, _ = gat.forward(X, None)
    full = obj.gather("a", np.ascontiguousarray(logits), root=0)
    if comm.rank == 0:
        write_h5_atomic(args.out, {"logits": full},
                        {"weights": os.path.abspath(args.weights), "graph": args.graph})
        _emit(comm, {"event": "predict", "nodes": int(full.shape[0]),
                     "classes": int(full.shape[1]), "out": args.out})
    comm.Barrier()
    return 0
