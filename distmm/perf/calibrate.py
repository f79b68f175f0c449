"""Measure alpha, beta and gamma of this machine for the planner (``distmm calibrate``).

* alpha and beta: a ping-pong between world ranks 0 and 1 (half the round trip, messages of 1
  to 2^22 words), fitted as t = alpha + beta * words by least squares on the relative error,
  so small and large messages both count. The all-gather and reduce-scatter the algorithms use
  (the counting communicator's) are timed too (all ranks, blocks of 2^18 words), and reported
  as seconds per word received, for comparison.
* bulk betas, which the planner uses when present: seconds per word of a cyclic shift, an
  all-gather and a reduce-scatter of 2^21 words per rank into fresh buffers, all ranks at
  once, as the algorithms move their blocks (propagation, replication, reduction). On a
  shared-memory node these are several times the ping-pong beta.
* the local kernels: for each kernel the distributed loops call (fused, SDDMM, SpMMA, SpMMB),
  seconds per nonzero at dense widths 1 to 512, gathering from 2^13, 2^15 and 2^17 rows,
  with 2, 16 and 128 nonzeros per row (random blocks), on every rank at once (as in
  a real run), slowest rank; also the fixed cost of a call and of rebuilding or transposing a
  block that arrived as a packet. The planner interpolates these tables at each family's
  local widths (r, r/q, r/s, r/sqrt(pc)) and block shapes (Table III's local dimensions).
  gamma, delta and gamma_unfused (the older affine model) are derived from the tables.
"""

from __future__ import annotations

import platform
import time

import numpy as np
from mpi4py import MPI

from distmm.core.comm import CommStats, CountingComm, mpi_type, pairwise_setting
from distmm.core.sparse import CSRBlock
from distmm.errors import agree, require
from distmm.io.outputs import write_json_atomic
from distmm.kernels import make_node_model, threads
from distmm.kernels.numba_util import thread_count
from distmm.perf import costmodel
from distmm.runtime.cores import node_cpus


def _pingpong(comm: MPI.Comm, words: int, dtype, reps: int) -> float:
    buf = np.zeros(words, dtype=dtype)
    rank = comm.Get_rank()
    comm.Barrier()
    best = float("inf")
    for _ in range(reps):
        t0 = MPI.Wtime()
        if rank == 0:
            comm.Send(buf, dest=1, tag=3)
            comm.Recv(buf, source=1, tag=3)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=3)
            comm.Send(buf, dest=0, tag=3)
        best = min(best, (MPI.Wtime() - t0) / 2)
    return comm.bcast(best, root=0)


def _collective(comm: MPI.Comm, words: int, dtype, reps: int, which: str) -> float:
    """Seconds per word received of distmm's all-gather or reduce-scatter (the counting
    communicator's, which exchanges large blocks pairwise) of ``words`` words per rank."""
    p = comm.Get_size()
    cc = CountingComm(comm, CommStats())
    send = np.ones(words * (p if which == "reduce_scatter" else 1), dtype=dtype)
    recv = np.empty(words * (p if which == "allgather" else 1), dtype=dtype)
    best = float("inf")
    for _ in range(reps):
        comm.Barrier()
        t0 = MPI.Wtime()
        if which == "allgather":
            cc.allgatherv(send, recv, [words] * p)
        else:
            cc.reduce_scatter(send, recv, [words] * p)
        best = min(best, comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
    return best / (words * (p - 1))


def measure_bulk_betas(comm: MPI.Comm, dtype, words: int = 1 << 21, reps: int = 3
                       ) -> dict[str, float]:
    """Seconds per word of the three kinds of transfer the algorithms make, as they make them
    (collective): a cyclic shift (every rank sends to its successor and receives from its
    predecessor at once, ``Sendrecv``), and the counting communicator's all-gather and
    reduce-scatter, with ``words`` words per rank and a freshly allocated receive buffer each
    time (the algorithms allocate their buffers per call, so the first touch of those pages
    is part of the cost). Slowest rank, best of ``reps``; per word sent by one rank."""
    p, rank = comm.Get_size(), comm.Get_rank()
    t = mpi_type(np.dtype(dtype))
    cc = CountingComm(comm, CommStats())
    send = np.ones(words, dtype=dtype)
    big = np.ones(words * p, dtype=dtype)
    out = {}
    for name in ("shift", "allgather", "reduce_scatter"):
        best = float("inf")
        for _ in range(reps):
            comm.Barrier()
            t0 = MPI.Wtime()
            if name == "shift":
                recv = np.empty(words, dtype=dtype)
                comm.Sendrecv([send, t], dest=(rank + 1) % p, sendtag=5, recvbuf=[recv, t],
                              source=(rank - 1) % p, recvtag=5)
            elif name == "allgather":
                recv = np.empty(words * p, dtype=dtype)
                cc.allgatherv(send, recv, [words] * p)
            else:
                recv = np.empty(words, dtype=dtype)
                cc.reduce_scatter(big, recv, [words] * p)
            best = min(best, comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
        sent = words if name == "shift" else words * (p - 1)
        out[name] = best / sent
    return out


def fit_alpha_beta(sizes: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of t = alpha + beta * size, weighting each point by 1 / t."""
    X = np.stack([np.ones_like(sizes, dtype=float), sizes.astype(float)], axis=1) / times[:, None]
    coef, *_ = np.linalg.lstsq(X, np.ones_like(times), rcond=None)
    return max(float(coef[0]), 0.0), max(float(coef[1]), 0.0)


def _er_block(rng: np.random.Generator, rows: int, n: int, d: int, dtype) -> CSRBlock:
    """A rows x n block with d uniformly random columns in every row."""
    r_ids = np.repeat(np.arange(rows), d)
    cols = rng.integers(0, n, size=rows * d)
    return CSRBlock.from_coo(r_ids, cols, rng.random(rows * d), (rows, n), dtype)


def _best(comm: MPI.Comm, fn, reps: int) -> float:
    """Best of ``reps`` timed calls of ``fn`` after one untimed one, slowest rank (collective).

    Every rank runs at once, as in a real run, so ranks that share cores or memory bandwidth
    are measured sharing them."""
    fn()
    best = float("inf")
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return comm.allreduce(best, op=MPI.MAX)


def _solve_rows_nonzeros(t_lo: float, t_hi: float, n: int, z_lo: int, z_hi: int,
                         fixed: float = 0.0) -> tuple[float, float]:
    """(per row, per nonzero) from two timings on n rows with z_lo and z_hi nonzeros.

    t = fixed + n * row + z * nonzero; both clamped at zero (noise can make one negative)."""
    nonzero = max((t_hi - t_lo) / (z_hi - z_lo), 0.0)
    row = max((t_lo - fixed - z_lo * nonzero) / n, 0.0)
    return row, nonzero


def measure_kernels(comm: MPI.Comm, node_model: str, dtype,
                    sizes: tuple[int, ...] = (1 << 13, 1 << 15, 1 << 17),
                    densities: tuple[int, ...] = (2, 16, 128),
                    widths: tuple[int, ...] = (1, 4, 16, 32, 64, 128, 256, 512),
                    max_nnz: int = 1 << 20, reps: int = 3) -> dict:
    """Tables of the node model's local kernels by gathered size, density and width
    (collective).

    For every kernel kind of :data:`costmodel.KERNEL_KINDS`, every size n, density d and
    width w, the kernel is timed on a block of d uniformly random nonzeros per row in n
    columns (min(n, max_nnz / d) rows), on every rank at once (slowest rank, best of
    ``reps`` after one untimed call), and the time is divided by the block's nonzeros. The
    size matters because the kernels gather rows of an n x w dense operand at random: whether
    those rows stay in cache decides the cost of a nonzero as much as w does; the density
    because a row's own dense row is read or updated once for all its nonzeros. (The tables
    need not be monotone: the reference kernels switch to column panels and prefetching at
    sizes they choose, and can be faster per column at a larger width.) Also measured: the
    fixed cost of one call (a 1 x 1 block), and the costs of rebuilding a block from a COO
    packet (what the shifting-S families do every step) and of building a fresh block's
    transpose. Returns the fields of :class:`distmm.perf.planner.Machine` they fill
    (``kernels``, ``per_call``, ``unpack_nonzero``, ``unpack_row``, ``transpose_nonzero``)
    and ``kernel_block``, the measurement's parameters."""
    rng = np.random.default_rng(comm.Get_rank())
    model = make_node_model(node_model)
    tiny = CSRBlock.from_coo(np.zeros(1, int), np.zeros(1, int), np.ones(1), (1, 1), dtype)
    one = np.ones((1, 1), dtype=dtype)
    per_call = _best(comm, lambda: model.fusedmm_a(tiny, tiny.data, one, one, one), 5 * reps)

    def kernel(kind: str, S: CSRBlock, X, Y, R):
        # X has the block's rows, Y its columns (the gathered operand).
        if kind == "fusedmm":
            out = np.zeros_like(X)
            return lambda: model.fusedmm_a(S, S.data, X, Y, out)
        if kind == "sddmm":
            return lambda: model.sddmm(S, S.data, X, Y, R)
        if kind == "spmm_a":
            out = np.zeros_like(X)
            return lambda: model.spmm_a(S, S.data, Y, out)
        # spmm_b (out += S^T X) walks S's transpose and gathers rows of X; it is timed on
        # the transposed block (kernel("spmm_b", St, X=the n-row operand, Y=the output's
        # shape)), so that it too gathers from n rows and walks rows of d nonzeros.
        out = np.zeros_like(Y)
        return lambda: model.spmm_b(S, S.data, X, out)

    tables = {kind: {"sizes": list(sizes), "densities": list(densities),
                     "widths": list(widths), "per_nonzero": []}
              for kind in costmodel.KERNEL_KINDS}
    for n in sizes:
        blocks = {}
        for d in densities:
            rows = max(1, min(n, max_nnz // d))
            S = _er_block(rng, rows, n, d, dtype)
            # spmm_b's block: the transpose of S, built here as its own CSR block (n rows,
            # rows columns), with its cached transpose (S itself) built once, as for a
            # stored block.
            indptr_t, indices_t, perm = S.transpose()
            St = CSRBlock((n, rows), indptr_t, indices_t, S.data[perm])
            St.transpose()
            blocks[d] = (S, St)
        for kind in costmodel.KERNEL_KINDS:
            tables[kind]["per_nonzero"].append([[] for _ in densities])
        for w in widths:
            Y = rng.standard_normal((n, w)).astype(dtype)
            for k, d in enumerate(densities):
                S, St = blocks[d]
                X = rng.standard_normal((S.shape[0], w)).astype(dtype)
                R = np.zeros(S.nnz, dtype=dtype)
                for kind in costmodel.KERNEL_KINDS:
                    fn = kernel(kind, St, Y, X, R) if kind == "spmm_b" else kernel(
                        kind, S, X, Y, R)
                    seconds = _best(comm, fn, reps)
                    tables[kind]["per_nonzero"][-1][k].append(
                        max(seconds - per_call, 0.0) / S.nnz)
    middle = sizes[len(sizes) // 2]
    kept = {d: _er_block(rng, middle, middle, d, dtype) for d in (2, 16)}

    def unpack(S: CSRBlock):
        # What the shifting-S families do with every received packet
        # (distmm.algorithms.packets.packet_block): rebuild indptr by a bincount of the rows.
        rows = S.row_ids().astype(S.indices.dtype)

        def fn():
            indptr = np.zeros(S.shape[0] + 1, dtype=S.indptr.dtype)
            np.cumsum(np.bincount(rows, minlength=S.shape[0]), out=indptr[1:])
            S.indices.astype(S.indices.dtype, copy=False)
        return fn

    def transpose(S: CSRBlock):
        def fn():
            CSRBlock(S.shape, S.indptr, S.indices, S.data).transpose()
        return fn

    t_un = {d: _best(comm, unpack(S), reps) for d, S in kept.items()}
    t_tr = {d: _best(comm, transpose(S), reps) for d, S in kept.items()}
    z_lo, z_hi = kept[2].nnz, kept[16].nnz
    unpack_row, unpack_nonzero = _solve_rows_nonzeros(t_un[2], t_un[16], middle, z_lo, z_hi)
    _, transpose_nonzero = _solve_rows_nonzeros(t_tr[2], t_tr[16], middle, z_lo, z_hi)
    return {"kernels": tables, "per_call": per_call, "unpack_nonzero": unpack_nonzero,
            "unpack_row": unpack_row, "transpose_nonzero": transpose_nonzero,
            "kernel_block": {"sizes": list(sizes), "densities": list(densities),
                             "max_nnz": max_nnz, "reps": reps}}


def affine_from_tables(tables: dict, r: int = 64) -> tuple[float, float, float]:
    """gamma, delta and gamma_unfused of the affine model (what machine files without tables
    hold) from the tables at their middle size and density: the fused kernel's cost per
    nonzero at widths w0 (the narrowest) and r is delta + 4 gamma w; SDDMM plus SpMMA at
    width r is 2 delta + 4 gamma_unfused r."""
    def at(kind: str) -> list[float]:
        planes = tables[kind]["per_nonzero"]
        plane = planes[len(planes) // 2]
        return plane[len(plane) // 2]

    ws = tables["fusedmm"]["widths"]
    r = max(w for w in ws if w <= max(r, ws[0]))
    k = ws.index(r)
    fused = at("fusedmm")
    if k == 0:
        return 0.0, fused[0], 0.0
    gamma = max((fused[k] - fused[0]) / (4.0 * (r - ws[0])), 0.0)
    delta = max(fused[0] - 4.0 * gamma * ws[0], 0.0)
    sep = at("sddmm")[k] + at("spmm_a")[k]
    gamma_unfused = max((sep - 2 * delta) / (4.0 * r), 0.0)
    return gamma, delta, gamma_unfused


def oversubscription(ranks_on_node: int, threads: int, cores: int) -> str | None:
    """A warning when the ranks on a node run more numba threads than it has cores, else None.

    The kernel tables time every rank at once; a thread that waits for a core makes a kernel
    of a few microseconds take a time slice, and the table then measures the wait (a fixed
    cost per call of a time slice, and no rise in cost with the width). Not collective."""
    if ranks_on_node * threads <= cores:
        return None
    return (f"calibrating with {ranks_on_node} ranks x {threads} numba threads on the "
            f"{cores} cores of a node: the kernel timings will include waiting for a core; "
            f"set NUMBA_NUM_THREADS={max(1, cores // ranks_on_node)} (or fewer ranks) to "
            "measure the machine, and use the same in the runs it plans")


def calibrate(comm: MPI.Comm, node_model: str = "reference", dtype=np.float32,
              quick: bool = False) -> dict:
    """Measure the machine (collective); returns the dict ``distmm calibrate`` saves, with
    ``"warning"`` (str or None): :func:`oversubscription` on the first rank that has one."""
    p = comm.Get_size()
    require(p >= 2, "calibrate needs at least 2 ranks to measure messages "
                    "(run it as mpiexec -n 2 distmm calibrate ...)")
    agree(comm, *pairwise_setting())  # how the collectives it times move
    # the thread count that distmm.distribute gives the runs it plans
    placed = threads.settle(comm)
    mine = oversubscription(placed["ranks_on_node"], thread_count(), node_cpus())
    warning = next((w for w in comm.allgather(mine) if w), None)
    sizes = np.array([1, 16, 256, 4096, 65536] + ([] if quick else [1 << 20, 1 << 22]))
    reps = 5 if quick else 20
    times = np.array([_pingpong(comm, int(s), dtype, reps) for s in sizes])
    alpha, beta = fit_alpha_beta(sizes, times)
    words = 1 << (14 if quick else 18)
    if quick:
        local = measure_kernels(comm, node_model, dtype, sizes=(1 << 10, 1 << 12),
                                densities=(2, 8), widths=(1, 8, 64), max_nnz=1 << 14, reps=2)
    else:
        local = measure_kernels(comm, node_model, dtype)
    gamma, delta, gamma_unfused = affine_from_tables(local["kernels"])
    bulk = measure_bulk_betas(comm, dtype, words=1 << (16 if quick else 21), reps=reps)
    return {
        "alpha": alpha,
        "beta": beta,
        "beta_shift": bulk["shift"],
        "beta_replication": bulk["allgather"],
        "beta_reduction": bulk["reduce_scatter"],
        "gamma": gamma,
        "gamma_unfused": gamma_unfused,
        "delta": delta,
        **local,
        "beta_allgather": _collective(comm, words, dtype, reps, "allgather"),
        "beta_reduce_scatter": _collective(comm, words, dtype, reps, "reduce_scatter"),
        "pingpong": {"words": sizes.tolist(), "seconds": times.tolist()},
        "p": p, "node_model": node_model, "dtype": str(np.dtype(dtype)),
        "numba_threads": thread_count(),
        "warning": warning,
        "host": platform.node(), "processor": platform.processor() or platform.machine(),
        "mpi": MPI.Get_library_version().split("\n")[0].strip(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def save(path: str, data: dict) -> None:
    """Write the calibration as JSON, atomically (call on one rank; nothing is left behind on
    a failure, see :func:`distmm.io.outputs.atomic_output`)."""
    write_json_atomic(path, data)
