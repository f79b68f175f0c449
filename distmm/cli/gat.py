"""``distmm gat train`` and ``distmm gat predict``: a graph attention network on a distributed S.

Every rank parses the same arguments and reads the same small inputs (labels, split, weights),
so every check is made identically everywhere before anything is written; the graph is read in
parts by all ranks (Matrix Market), the features by rows. Rank 0 prints one JSON line per epoch
on stdout and a progress line on stderr, and writes the output files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys

import h5py
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from distmm.algorithms import ALGORITHMS
from distmm.api import as_coo_share
from distmm.apps.gat import DistGAT, distribute_graph
from distmm.apps.gat_features import normalize_rows, read_mtx_rows
from distmm.apps.gat_layout import NodeLayout
from distmm.apps.gat_memory import edge_bounds, gat_memory, graph_edges
from distmm.apps.gat_model import GATModel
from distmm.apps.gat_train import TrainConfig, TrainState, evaluate, standard_split, train
from distmm.cli import files
from distmm.cli.common import (
    emit,
    job_options,
    memory_limit_option,
    parse_limit,
    permute_name,
    resolve_limit,
)
from distmm.core.memory import format_bytes
from distmm.core.permute import PERMUTE_MODES
from distmm.errors import Checks, InputError, agree, require
from distmm.io.hdf5 import sparse_header
from distmm.io.matrix_market import mtx_header
from distmm.io.npy import load_dense_npy, npy_header
from distmm.io.outputs import write_h5_atomic
from distmm.kernels import NODE_MODELS
from distmm.perf.planner import partitioner_problem
from distmm.runtime import signals


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``gat`` (with ``train`` and ``predict``) to the ``distmm`` sub-parsers."""
    gat = subparsers.add_parser("gat", help="graph attention network (GAT): train on labelled "
                                            "nodes, or predict logits with saved weights")
    gat.set_defaults(func=run)
    sub = gat.add_subparsers(dest="gat_command", required=True)
    tr = sub.add_parser("train", help="train a GAT; write its weights (HDF5)")
    _inputs(tr)
    memory_limit_option(tr, "auto", "refuse a training whose modelled memory per rank "
                                    "exceeds this before reading the graph and features")
    files.input_option(tr, "--labels", required=True,
                       help="one integer class per line, node order")
    files.input_option(tr, "--split", default="standard", keywords=("standard",),
                    help="'standard' (per class / val / test sizes from --split-sizes, drawn "
                         "with --split-seed) or a JSON file {\"train\": [...], \"val\": [...], "
                         "\"test\": [...]} of node ids (default standard)")
    tr.add_argument("--split-sizes", default="20,500,1000",
                    help="labelled nodes per class, validation and test nodes (default "
                         "%(default)s)")
    tr.add_argument("--split-seed", type=int, default=0)
    files.output_option(tr, "--out", required=True,
                        help="weights file (HDF5, written atomically)")
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
    files.output_option(tr, "--checkpoint", replaces=("resume",),
                        help="write the training state here (HDF5) every --checkpoint-every "
                             "epochs and at the end (may be the --resume file)")
    tr.add_argument("--checkpoint-every", type=int, default=50)
    files.input_option(tr, "--resume", help="continue bit-identically from this checkpoint")
    _fused_option(tr)
    tr.set_defaults(gat_func=cmd_train)
    job_options(tr)
    pr = sub.add_parser("predict", help="logits of every node with saved weights (HDF5)")
    _inputs(pr)
    files.input_option(pr, "--weights", required=True,
                       help="weights file from 'distmm gat train'")
    files.output_option(pr, "--out", required=True,
                        help="HDF5 file with /logits (n x classes, original node order), "
                             "written atomically")
    _fused_option(pr)
    pr.set_defaults(gat_func=cmd_predict)
    return gat


def _fused_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fused", action=argparse.BooleanOptionalAction, default=None,
                   help="each layer's attention (and its backward) as one loop of compiled "
                        "kernels with an online softmax (default where the family has it: "
                        "15d-dense-shift); --no-fused: the additive SDDMM, edge softmax and "
                        "one SpMM per head")


def _fused(args: argparse.Namespace, obj) -> bool:
    """--fused, by default where the family has the fused loop (measured against the
    unfused layer in docs/gat.md). Rank-independent."""
    has = hasattr(obj, "fused_attention_backward")
    require(has or not args.fused, f"--fused: the fused attention loop runs on 15d-dense-shift "
            f"only, not {obj.name!r}; run without --fused")
    return has if args.fused is None else args.fused


def _inputs(p: argparse.ArgumentParser) -> None:
    files.input_option(p, "--graph", required=True,
                       help="adjacency (n x n) .mtx[.gz]: S[i, j] != 0 means an edge j -> i")
    p.add_argument("--transpose", action="store_true",
                   help="the file lists edges i -> j at [i, j] (use its transpose)")
    files.input_option(p, "--features", required=True,
                       help="node features (n x f): .mtx[.gz], .npy or .h5 (dataset "
                            "/features; real numbers)")
    p.add_argument("--normalize-features", action="store_true",
                   help="scale each feature row to sum 1 (the GAT paper's preprocessing; "
                        "rows summing to zero, a negative or a tiny number are refused); "
                        "default: the features as given, as in PyG")
    p.add_argument("--raw-features", action="store_true",
                   help="deprecated, no effect: the features are used as given unless "
                        "--normalize-features")
    p.add_argument("--algorithm", default="15d-dense-shift", choices=list(ALGORITHMS),
                   help="algorithm family (default %(default)s; every family runs GAT)")
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
def _read_features(path: str, obj, comm: MPI.Comm, dtype, normalise: bool):
    """This rank's rows of the feature matrix: the input rows of a GAT layer on ``obj``
    (``obj.local_rows("b")``), scipy CSR for .mtx (read in parts, each entry sent to the ranks
    needing its row), dense otherwise (only the rank's rows read); checked collectively (row
    count, finiteness, and with ``normalise`` the rows' sums: :func:`normalize_rows`)."""
    nodes, n = obj.local_rows("b"), obj.shape[0]
    msg, X = None, None
    try:
        if path.endswith((".mtx", ".mtx.gz")):
            by_rank = [obj.col_perm[obj.dense_rows("b", k)] for k in range(obj.p)]
            X, msg, rows = read_mtx_rows(path, by_rank, n, comm)
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
                require(isinstance(ds, h5py.Dataset) and ds.ndim == 2,
                        f"{path}: /features must be a 2-D dataset, got "
                        f"{getattr(ds, 'shape', 'a group')}")
                require(ds.dtype.kind in "iuf", f"--features {path}: /features holds "
                                                f"{ds.dtype}; real numbers are expected")
                rows = ds.shape[0]
                order = np.argsort(nodes)
                X = np.asarray(ds[nodes[order]]) if rows == n else None
                if X is not None:
                    X = X[np.argsort(order)]
        else:
            raise InputError(f"--features {path}: expected .mtx, .mtx.gz, .npy or .h5")
        if X is None:
            msg = msg or f"--features has {rows} rows but the graph has {n} nodes"
        elif not np.isfinite(X.data if sp.issparse(X) else X).all():
            msg = f"--features {path} holds NaN or infinite values"
    except (InputError, OSError) as exc:
        msg = str(exc)
    # per-rank files (an MPMD launch) must agree on the width as well as on the rows
    agree(comm, msg, {"--features columns": None if X is None else int(X.shape[1])})
    if sp.issparse(X):
        X = X.astype(dtype).tocsr()
        # sorted column indices, no duplicates: the layer's products then run on the SpMM
        # kernels (distmm.apps.gat_features); the dropout masks are keyed by column, not slot
        X.sum_duplicates()
    else:
        X = np.ascontiguousarray(X, dtype=dtype)
    if normalise:
        X = normalize_rows(X, nodes, NodeLayout(obj).counted["b"], comm)
    return X


def _features_choice(args: argparse.Namespace, comm: MPI.Comm) -> bool:
    """Whether to row-normalise the features (``--normalize-features``); ``--raw-features``
    is accepted with a note (it is the default now) and refused beside
    ``--normalize-features``."""
    require(not (args.raw_features and args.normalize_features),
            "--raw-features and --normalize-features contradict each other; give one "
            "(--raw-features is the default and deprecated)")
    if args.raw_features and comm.Get_rank() == 0:
        print("distmm gat: --raw-features is deprecated and has no effect: the features are "
              "used as given unless --normalize-features", file=sys.stderr, flush=True)
    return bool(args.normalize_features)


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
        try:
            ids = np.asarray(raw[k], dtype=np.int64).ravel()
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"--split {args.split}: {k} must be a list of integer node ids"
                             ) from None
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


def _digest(*arrays) -> str:
    """A short digest of arrays, so that ranks can compare per-rank inputs cheaply."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _model_options(model: GATModel) -> dict[str, object]:
    """The command-line model options a model was built with (``--hidden`` and ``--heads``
    only where it has a hidden layer)."""
    first, last = model.layers[0], model.layers[-1]
    hidden = len(model.layers) > 1
    return {"--layers": len(model.layers), "--hidden": first.out_channels if hidden else None,
            "--heads": first.heads if hidden else None, "--out-heads": last.heads,
            "--negative-slope": float(first.negative_slope),
            "--no-self-loops": not model.add_self_loops}


def _options_differ(model: GATModel, args: argparse.Namespace) -> str | None:
    """The model options of the command line that differ from the checkpoint's, or None."""
    given = {"--layers": args.layers, "--hidden": args.hidden, "--heads": args.heads,
             "--out-heads": args.out_heads, "--negative-slope": float(args.negative_slope),
             "--no-self-loops": bool(args.no_self_loops)}
    saved = _model_options(model)
    differ = [f"{k} {given[k]} (checkpoint: {v})" for k, v in saved.items()
              if v is not None and given[k] != v]
    return ", ".join(differ) or None


# ------------------------------------------------------------------------------------ train
def cmd_train(args: argparse.Namespace) -> int:
    """``distmm gat train``. Collective; every check is agreed before the work."""
    comm = MPI.COMM_WORLD
    dtype = np.dtype(args.dtype)
    require(args.heads >= 1 and args.out_heads >= 1,
            f"--heads and --out-heads must be >= 1, got {args.heads}, {args.out_heads}")
    require(args.hidden >= 1 and args.layers >= 1, "--hidden and --layers must be >= 1")
    require(args.epochs >= 0 and args.patience >= 1 and args.checkpoint_every >= 1,
            "--epochs must be >= 0, --patience and --checkpoint-every >= 1")
    require(0 <= args.dropout < 1 and 0 <= args.attention_dropout < 1,
            "dropout rates must be in [0, 1)")
    config = TrainConfig(args.epochs, args.patience, args.lr, args.weight_decay, args.dropout,
                         args.attention_dropout, args.model_seed)
    checks, state, saved = Checks(comm), None, {}
    with checks.guard():  # each rank reads its own --resume file
        if args.resume:
            state, saved = TrainState.load(args.resume, dtype)
            require(all(saved.get(k) == v for k, v in vars(config).items() if k != "epochs"),
                    f"--resume {args.resume}: the checkpoint was made with other training "
                    f"options {saved}")
            differ = _options_differ(state.model, args)
            require(differ is None, f"--resume {args.resume}: the checkpoint's model was "
                                    f"built with other options; given {differ}")
    checks.agree(same={"--resume epoch": None if state is None else state.epoch})
    normalise = _features_choice(args, comm)
    refuse_oversized(args, comm)
    obj = _graph(args, not args.no_self_loops)
    n = obj.shape[0]
    checks, y, split = Checks(comm), None, None
    with checks.guard():  # each rank reads its own labels and split
        y = _read_labels(args.labels, n)
        split = _read_split(args, y)
    checks.agree(same={"--labels (content)": None if y is None else _digest(y),
                       "--split (content)": None if split is None else
                       _digest(*(split[k] for k in sorted(split)))})
    nodes = obj.local_rows("a")
    X = _read_features(args.features, obj, comm, dtype, normalise)
    classes = int(y.max()) + 1
    if state is None:
        model = GATModel.init(X.shape[1], args.hidden, args.heads, classes, args.out_heads,
                              args.layers, args.model_seed, dtype, args.negative_slope,
                              not args.no_self_loops)
    else:
        model = state.model
        msg = model.check(X.shape[1])
        if msg is None and model.layers[-1].width != classes:
            msg = (f"its output layer has {model.layers[-1].width} classes, the labels "
                   f"{classes}")
        require(msg is None, f"--resume {args.resume}: the checkpoint does not fit these "
                             f"inputs ({msg})")
    gat = DistGAT(obj, model, fused=_fused(args, obj))

    def save_checkpoint(st: TrainState) -> None:
        files.write_output(comm, args.checkpoint, "--checkpoint",
                           lambda path: st.save(path, config))

    def on_epoch(st: TrainState, record: dict) -> None:
        emit({"event": "epoch", **record}, comm)
        if comm.rank == 0:
            print(f"gat train: epoch {st.epoch}/{config.epochs} loss {record['train_loss']:.4f}"
                  f" val {record['val_acc']:.3f} best {st.best_acc:.3f}@{st.best_epoch}",
                  file=sys.stderr, flush=True)
        saved = bool(args.checkpoint) and st.epoch % args.checkpoint_every == 0
        if saved:
            save_checkpoint(st)
        if st.epoch < config.epochs and st.bad_epochs < config.patience:
            _safe_point(comm, st, config, args.checkpoint, saved, save_checkpoint)

    state = train(gat, X, y[nodes], split, config, state, on_epoch)
    if args.checkpoint:
        save_checkpoint(state)
    gat.model = state.best_model
    final = evaluate(gat, X, y[nodes], split)
    emit({"event": "result", "best_epoch": state.best_epoch, "epochs": state.epoch,
          **final, "split_sizes": {k: int(v.size) for k, v in split.items()},
          "config": vars(config), **obj.stats.describe()}, comm)
    files.write_output(comm, args.out, "--out", state.best_model.save)
    return 0


def _safe_point(comm: MPI.Comm, state: TrainState, config: TrainConfig,
                checkpoint: str | None, saved: bool, save) -> None:
    """Stop every rank here if any rank got SIGTERM or SIGINT
    (:mod:`distmm.runtime.signals`); rank 0
    first writes ``checkpoint`` (``save(state)``, collective) unless this epoch's is already
    written. Collective."""
    signum = signals.agreed(comm)
    if not signum:
        return
    if checkpoint and not saved:
        save(state)
    done = (f"checkpoint {checkpoint} written (continue with --resume {checkpoint})"
            if checkpoint else "no --checkpoint was given, so nothing was written")
    raise signals.Stopped(signum, f"stopped by {signals.name(signum)} after epoch "
                                  f"{state.epoch} of {config.epochs}; {done}")


# ------------------------------------------------------------------------------------ predict
def cmd_predict(args: argparse.Namespace) -> int:
    """``distmm gat predict``. Collective; every check is agreed before the work."""
    comm = MPI.COMM_WORLD
    dtype = np.dtype(args.dtype)
    checks, model = Checks(comm), None
    with checks.guard():  # each rank reads its own --weights file
        model = GATModel.load(args.weights, dtype)
    checks.agree(same={"--weights (model)": None if model is None else
                       _digest(*(a for la in model.layers for a in la.arrays().values()))})
    normalise = _features_choice(args, comm)
    obj = _graph(args, model.add_self_loops)
    X = _read_features(args.features, obj, comm, dtype, normalise)
    msg = model.check(X.shape[1])
    require(msg is None, f"--weights {args.weights}: {msg}")
    gat = DistGAT(obj, model, fused=_fused(args, obj))
    logits, _ = gat.forward(X, None)
    full = gat.gather(logits, root=0)
    files.write_output(comm, args.out, "--out", lambda path: write_h5_atomic(
        path, {"logits": full}, {"weights": os.path.abspath(args.weights),
                                 "graph": args.graph}))
    if full is not None:
        emit({"event": "predict", "nodes": int(full.shape[0]),
              "classes": int(full.shape[1]), "out": args.out}, comm)
    return 0


def _symmetric(path: str) -> bool:
    """Whether a Matrix Market file's banner says symmetric (its entries are mirrored)."""
    with open(path, "rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    with (gzip.open if gzipped else open)(path, "rt", errors="replace") as fh:
        return "symmetric" in fh.readline().lower()


def _feature_sizes(path: str) -> tuple[int, int | None]:
    """(columns, stored entries or None for dense features) from the features file's header."""
    if path.endswith((".mtx", ".mtx.gz")):
        _, cols, entries = mtx_header(path)
        return cols, entries
    if path.endswith(".npy"):
        return int(npy_header(path)[0][1]), None
    with h5py.File(path, "r") as fh:
        return int(fh["features"].shape[1]), None


def _loops_stored(path: str, comm: MPI.Comm) -> int:
    """The self-loops a graph file stores (collective: each rank reads its part)."""
    share = as_coo_share(path, comm)
    return int(comm.allreduce(int(np.count_nonzero(share.rows == share.cols))))


def refuse_oversized(args: argparse.Namespace, comm: MPI.Comm) -> None:
    """Collective: the same InputError on every rank when GAT training's memory model
    (:mod:`distmm.apps.gat_memory`) exceeds --memory-limit, from the graph's and features'
    headers and the labels (classes), before the graph or the features are read; it names the
    largest --hidden that fits. A file that cannot be read here is reported by the reading
    that follows."""
    limit = resolve_limit(parse_limit(args), comm)
    msg = None
    if limit is not None:
        try:
            n, _, nnz = sparse_header(args.graph)
            symmetric = not args.graph.endswith((".h5", ".hdf5")) and _symmetric(args.graph)
            width, entries = _feature_sizes(args.features)
            classes = int(_read_labels(args.labels, n).max()) + 1
        except (InputError, OSError, KeyError, IndexError, ValueError):
            n = None
        # every rank must take the same branches below (one of them reads the graph)
        agree(comm, None, {"the sizes of --graph, --features and --labels":
                           None if n is None else (n, nnz, symmetric, width, entries, classes)})
        if n is not None:
            p = comm.Get_size()
            fewest, edges = edge_bounds(n, nnz, symmetric, not args.no_self_loops)

            def need(hidden: int) -> int:
                return gat_memory(n, edges, width, hidden, args.heads, classes, args.out_heads,
                                  args.layers, p, args.c, args.dtype, entries, args.algorithm,
                                  permute_name(args)).peak

            if need(args.hidden) > limit:
                most, edges = edges, fewest
                if need(args.hidden) <= limit:
                    # the header's most edges do not fit, its fewest do: count the stored
                    # self-loops (the graph is read for it, only this close to the limit)
                    edges = graph_edges(n, nnz, symmetric, _loops_stored(args.graph, comm),
                                        not args.no_self_loops)
                else:  # refused from the header: name a --hidden that fits the most edges
                    edges = most
            msg = partitioner_problem(
                gat_memory(n, edges, width, args.hidden, args.heads, classes, args.out_heads,
                           args.layers, p, args.c, args.dtype, entries, args.algorithm,
                           permute_name(args)), limit, p, saved=False)
            if msg is None and need(args.hidden) > limit:
                fits = [h for h in (args.hidden // 2**k for k in range(1, 40)) if h >= 1
                        and need(h) <= limit][:1]
                hint = (f"--hidden {fits[0]} fits" if fits else "no --hidden fits with "
                        f"--heads {args.heads}: use more ranks or a larger --memory-limit")
                msg = (f"GAT training with --hidden {args.hidden} --heads {args.heads} "
                       f"--layers {args.layers} on {p} ranks needs about "
                       f"{format_bytes(need(args.hidden))} per rank (graph of {n} nodes and "
                       f"{edges} edges, {width} input features, {classes} classes, "
                       f"{np.dtype(args.dtype)}), more than the memory limit of "
                       f"{format_bytes(limit)} per rank; {hint} (docs/memory.md)")
    agree(comm, msg)
