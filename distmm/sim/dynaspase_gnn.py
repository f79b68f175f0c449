"""Two-layer GNN inference with every kernel on the simulated Dynaspase accelerator.

The four models of the paper's evaluation (section VIII-A), written as the Aggregate (A X) and
Update (X W) kernels of section III-A; element-wise work (ReLU, the sum of SAGE's two branches)
is applied by the ALUs as results are written back and is not charged extra cycles. No biases.

* GCN [Kipf & Welling]: H1 = ReLU(Â (H0 W1)), out = Â (H1 W2), Â = D^-1/2 (A + I) D^-1/2; the
  Update runs first, as in the paper ("the first Update(H0, W1) kernel of GCN").
* GraphSAGE (mean): H1 = ReLU(H0 Ws1 + (Am H0) Wn1), out = H1 Ws2 + (Am H1) Wn2, Am = D^-1 A.
* GIN (eps = 0): layer l is Z = (A + I) H, then the MLP ReLU(Z Wa) Wb; ReLU between layers.
* SGC (K = 2): out = Â Â H0 W.

Kernels run one after another (Algorithm 8 waits for a kernel's tasks before the next), all
with the one partition (N1, N2) that Algorithm 9 chooses for the model's kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from distmm.sim.dynaspase import DynaspaseConfig, KernelShape, choose_partition
from distmm.sim.dynaspase.kernel import simulate_kernel

MODELS = ("gcn", "sage", "gin", "sgc")


def weight_shapes(model: str, features: int, hidden: int, classes: int) -> dict[str, tuple]:
    """Names and shapes of a model's weight matrices, in the order they are used."""
    if model == "gcn":
        return {"W1": (features, hidden), "W2": (hidden, classes)}
    if model == "sage":
        return {"Ws1": (features, hidden), "Wn1": (features, hidden),
                "Ws2": (hidden, classes), "Wn2": (hidden, classes)}
    if model == "gin":
        return {"Wa1": (features, hidden), "Wb1": (hidden, hidden),
                "Wa2": (hidden, hidden), "Wb2": (hidden, classes)}
    if model == "sgc":
        return {"W": (features, classes)}
    raise ValueError(f"unknown GNN model {model!r}; choose one of {', '.join(MODELS)}")


def prune(W: np.ndarray, sparsity: float) -> np.ndarray:
    """Magnitude pruning: a copy of W with the floor(sparsity * size) entries of smallest |w|
    set to zero (ties broken by position, so the count is exact)."""
    if not 0.0 <= sparsity <= 1.0:
        raise ValueError(f"pruning sparsity must be in [0, 1], got {sparsity}")
    out = np.array(W, copy=True)
    drop = int(np.floor(sparsity * out.size))
    if drop:
        order = np.argsort(np.abs(out), axis=None, kind="stable")
        out.reshape(-1)[order[:drop]] = 0
    return out


def init_weights(model: str, features: int, hidden: int, classes: int, sparsity: float = 0.0,
                 seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """Glorot-uniform weights of a model (fixed seed), magnitude-pruned to ``sparsity``."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, (fi, fo) in weight_shapes(model, features, hidden, classes).items():
        bound = np.sqrt(6.0 / (fi + fo))
        weights[name] = prune(rng.uniform(-bound, bound, (fi, fo)).astype(dtype), sparsity)
    return weights


def adjacency_operators(A, dtype=np.float32) -> dict[str, sp.csr_matrix]:
    """The aggregation matrices: "gcn" (D^-1/2 (A+I) D^-1/2), "mean" (D^-1 A, empty rows stay
    zero) and "gin" (A + I), as CSR of ``dtype``. A must be square."""
    A = sp.csr_matrix(A, dtype=np.float64)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"the adjacency matrix must be square, got {A.shape}")
    eye = sp.identity(A.shape[0], format="csr")
    A_hat = A + eye
    d = np.asarray(A_hat.sum(axis=1)).ravel()
    dinv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    deg = np.asarray(A.sum(axis=1)).ravel()
    inv = np.where(deg != 0, 1.0 / np.where(deg != 0, deg, 1.0), 0.0)
    ops = {"gcn": sp.diags(dinv) @ A_hat @ sp.diags(dinv), "mean": sp.diags(inv) @ A,
           "gin": A_hat}
    return {k: sp.csr_matrix(v).astype(dtype) for k, v in ops.items()}


@dataclass
class GnnRun:
    """One simulated inference: the output, one record per kernel, the total latency."""

    model: str
    strategy: str
    output: np.ndarray
    partition: tuple[int, int]
    kernels: list[dict] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        """Modelled cycles of the whole inference (kernels run one after another)."""
        return int(sum(k["cycles"] for k in self.kernels))

    @property
    def seconds(self) -> float:
        """Modelled seconds of the whole inference."""
        return float(sum(k["seconds"] for k in self.kernels))

    def layer_seconds(self) -> dict[int, float]:
        """Modelled seconds of each layer (sum of its kernels)."""
        out: dict[int, float] = {}
        for k in self.kernels:
            out[k["layer"]] = out.get(k["layer"], 0.0) + k["seconds"]
        return out

    def summary(self) -> dict:
        """A JSON-ready record (no output matrix)."""
        return {"model": self.model, "strategy": self.strategy, "cycles": self.cycles,
                "seconds": self.seconds, "partition": list(self.partition),
                "layer_seconds": {str(k): v for k, v in self.layer_seconds().items()},
                "kernels": self.kernels}


def _plan(model: str, n: int, features: int, hidden: int, classes: int) -> list[tuple]:
    """The model's kernels as (layer, kind, inner size, output columns), in the order
    :func:`run_gnn` runs them (Algorithm 9's input)."""
    if model == "gcn":
        return [(1, "update", features, hidden), (1, "aggregate", n, hidden),
                (2, "update", hidden, classes), (2, "aggregate", n, classes)]
    if model == "sage":
        return [(1, "aggregate", n, features), (1, "update", features, hidden),
                (1, "update", features, hidden), (2, "aggregate", n, hidden),
                (2, "update", hidden, classes), (2, "update", hidden, classes)]
    if model == "gin":
        return [(1, "aggregate", n, features), (1, "update", features, hidden),
                (1, "update", hidden, hidden), (2, "aggregate", n, hidden),
                (2, "update", hidden, hidden), (2, "update", hidden, classes)]
    if model == "sgc":
        return [(1, "aggregate", n, features), (2, "aggregate", n, features),
                (2, "update", features, classes)]
    raise ValueError(f"unknown GNN model {model!r}; choose one of {', '.join(MODELS)}")


def kernel_shapes(model: str, n: int, features: int, hidden: int,
                  classes: int) -> list[KernelShape]:
    """The Aggregate/Update kernels of a model on an n-vertex graph (Algorithm 9's input)."""
    return [KernelShape(kind, n, k, out) for _, kind, k, out in
            _plan(model, n, features, hidden, classes)]


def _relu(H: np.ndarray) -> np.ndarray:
    return np.maximum(H, 0)


def run_gnn(A, X, model: str, weights: dict[str, np.ndarray],
            config: DynaspaseConfig | None = None) -> GnnRun:
    """Run one inference of ``model`` on graph A (n x n) and features X (n x f, sparse or dense)
    with ``weights`` (from :func:`init_weights`), every kernel on the simulator.

    Returns the output (n x classes, dtype of the weights) and, per kernel, its layer, kind,
    shape, modelled cycles/seconds and block pairs per primitive. Not collective.
    """
    config = config or DynaspaseConfig()
    shapes = weight_shapes(model, 0, 0, 0)  # validates the name
    missing = [k for k in shapes if k not in weights]
    if missing:
        raise ValueError(f"{model} needs weights {', '.join(shapes)}; missing {missing}")
    n = A.shape[0]
    if X.shape[0] != n:
        raise ValueError(f"X has {X.shape[0]} rows but the graph has {n} vertices")
    first = next(iter(weights.values()))
    dtype = first.dtype
    features = X.shape[1]
    if first.shape[0] != features:
        raise ValueError(f"the first weight has {first.shape[0]} rows but X has {features} "
                         "columns")
    hidden = first.shape[1] if model != "sgc" else 0
    classes = list(weights.values())[-1].shape[1]
    ops = adjacency_operators(A, dtype)
    X = sp.csr_matrix(X, dtype=dtype) if sp.issparse(X) else np.asarray(X, dtype=dtype)
    partition = choose_partition(kernel_shapes(model, n, features, hidden, classes), config)
    run = GnnRun(model, config.strategy, np.zeros((0, 0)), partition)

    def kernel(layer: int, name: str, kind: str, left, right) -> np.ndarray:
        res = simulate_kernel(left, right, kind, config, partition)
        run.kernels.append({"layer": layer, "name": name, "kind": kind,
                            "shape": [left.shape[0], left.shape[1], right.shape[1]],
                            **res.summary()})
        return res.result

    W = weights
    if model == "gcn":
        H = _relu(kernel(1, "A(H0 W1)", "aggregate", ops["gcn"],
                         kernel(1, "H0 W1", "update", X, W["W1"])))
        out = kernel(2, "A(H1 W2)", "aggregate", ops["gcn"],
                     kernel(2, "H1 W2", "update", H, W["W2"]))
    elif model == "sage":
        agg = kernel(1, "Am H0", "aggregate", ops["mean"], X)
        H = _relu(kernel(1, "H0 Ws1", "update", X, W["Ws1"])
                  + kernel(1, "(Am H0) Wn1", "update", agg, W["Wn1"]))
        agg = kernel(2, "Am H1", "aggregate", ops["mean"], H)
        out = (kernel(2, "H1 Ws2", "update", H, W["Ws2"])
               + kernel(2, "(Am H1) Wn2", "update", agg, W["Wn2"]))
    elif model == "gin":
        Z = kernel(1, "(A+I) H0", "aggregate", ops["gin"], X)
        H = _relu(kernel(1, "relu(Z Wa1) Wb1", "update",
                         _relu(kernel(1, "Z Wa1", "update", Z, W["Wa1"])), W["Wb1"]))
        Z = kernel(2, "(A+I) H1", "aggregate", ops["gin"], H)
        out = kernel(2, "relu(Z Wa2) Wb2", "update",
                     _relu(kernel(2, "Z Wa2", "update", Z, W["Wa2"])), W["Wb2"])
    else:
        Z = kernel(1, "A H0", "aggregate", ops["gcn"], X)
        Z = kernel(2, "A A H0", "aggregate", ops["gcn"], Z)
        out = kernel(2, "(A A H0) W", "update", Z, W["W"])
    run.output = out
    return run


def reference_forward(A, X, model: str, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The same inference in float64 with scipy/numpy only (the oracle for :func:`run_gnn`)."""
    A = sp.csr_matrix(A, dtype=np.float64)
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    X = X.astype(np.float64)
    W = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
    n = A.shape[0]
    deg = np.asarray(A.sum(axis=1)).ravel()
    A_self = A + sp.identity(n)
    d_self = deg + 1.0
    s = np.divide(1.0, np.sqrt(np.abs(d_self)), out=np.zeros(n), where=d_self > 0)
    A_gcn = A_self.multiply(s[:, None]).multiply(s[None, :]).tocsr()
    A_mean = A.multiply(np.divide(1.0, deg, out=np.zeros(n), where=deg != 0)[:, None]).tocsr()
    relu = _relu
    if model == "gcn":
        return A_gcn @ (relu(A_gcn @ (X @ W["W1"])) @ W["W2"])
    if model == "sage":
        H = relu(X @ W["Ws1"] + (A_mean @ X) @ W["Wn1"])
        return H @ W["Ws2"] + (A_mean @ H) @ W["Wn2"]
    if model == "gin":
        H = relu(relu((A_self @ X) @ W["Wa1"]) @ W["Wb1"])
        return relu((A_self @ H) @ W["Wa2"]) @ W["Wb2"]
    if model == "sgc":
        return (A_gcn @ (A_gcn @ X)) @ W["W"]
    raise ValueError(f"unknown GNN model {model!r}; choose one of {', '.join(MODELS)}")
