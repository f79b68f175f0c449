"""The sparsity-aware family's row exchange by four of MPI's mechanisms, same run, alternating:
``Ialltoallv`` on the layer, a
neighbourhood ``Ineighbor_alltoallv`` on a distributed-graph communicator made once from the
plan's peers, and persistent point-to-point requests (``Send_init``/``Recv_init``, started
together), on the plan of a real graph in the family's default order.

    mpiexec -n P .venv/bin/python experiments/bench_exchange.py GRAPH.mtx.gz --r 32
        [--repeat 200] [--c 1]

Each round times one exchange of B's needed rows (packing included, as a call does) by each
mechanism in turn ("point-to-point": plain ``Irecv``/``Isend`` per peer, what
:class:`distmm.core.exchange.RowExchange` uses, there with the whole blocks of
``RowExchange.whole`` sent unpacked, here packed like the rest); rank 0 prints one
JSON line per mechanism with the median seconds (the slowest rank of each exchange) and the
ratio to Ialltoallv. The received rows are checked equal across mechanisms first.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

import distmm
from distmm.core.comm import mpi_type

AWARE = "15d-sparse-aware"


def _displs(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=out[1:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graph")
    ap.add_argument("--r", type=int, default=32)
    ap.add_argument("--c", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    obj = distmm.distribute(args.graph, world, algorithm=AWARE, c=args.c, r=args.r)
    x = obj.exchange
    comm = obj.grid.layer_comm
    r, me = args.r, comm.Get_rank()
    B = obj.dense("b", r, lambda rows, cols: np.sin(rows[:, None] * 0.7 + cols[None, :]))
    t = mpi_type(B.dtype)
    sc, rc = x.sendcounts * r, x.recvcounts * r
    sd, rd = _displs(sc), _displs(rc)
    send = np.empty((x.nsend, r), B.dtype)
    recvs = {k: np.zeros((x.nrecv, r), B.dtype) for k in ("alltoallv", "neighbour",
                                                          "persistent", "point-to-point")}
    # own-rank counts are zero in the plan: the peers are the ranks with non-zero counts
    dests = [int(k) for k in np.flatnonzero(x.sendcounts) if k != me]
    sources = [int(k) for k in np.flatnonzero(x.recvcounts) if k != me]
    graph = comm.Create_dist_graph_adjacent(sources, dests, reorder=False)
    nsc, nsd = sc[dests], sd[dests]
    nrc, nrd = rc[sources], rd[sources]
    tag = 77
    send_flat = send.reshape(-1)
    persistent = [comm.Send_init([send_flat[int(sd[k]):int(sd[k] + sc[k])], t], k, tag)
                  for k in dests]
    recv_p = recvs["persistent"].reshape(-1)
    persistent += [comm.Recv_init([recv_p[int(rd[k]):int(rd[k] + rc[k])], t], k, tag)
                   for k in sources]

    def pack():
        np.take(B, x.send_rows, axis=0, out=send, mode="clip")

    def alltoallv():
        pack()
        comm.Ialltoallv([send, (sc, sd), t], [recvs["alltoallv"], (rc, rd), t]).Wait()

    def neighbour():
        pack()
        graph.Ineighbor_alltoallv([send, (nsc, nsd), t],
                                  [recvs["neighbour"], (nrc, nrd), t]).Wait()

    def started():
        pack()
        MPI.Prequest.Startall(persistent)
        MPI.Request.Waitall(persistent)

    recv_q = recvs["point-to-point"].reshape(-1)

    def point_to_point():
        pack()
        reqs = [comm.Irecv([recv_q[int(rd[k]):int(rd[k] + rc[k])], t], k, tag)
                for k in sources]
        reqs += [comm.Isend([send_flat[int(sd[k]):int(sd[k] + sc[k])], t], k, tag)
                 for k in dests]
        MPI.Request.Waitall(reqs)

    runs = {"alltoallv": alltoallv, "neighbour": neighbour, "persistent": started,
            "point-to-point": point_to_point}
    for run in runs.values():
        run()
    same = all(np.array_equal(recvs["alltoallv"], v) for v in recvs.values())
    assert world.allreduce(int(not same)) == 0, "the mechanisms received different rows"
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            world.Barrier()
            t0 = time.perf_counter()
            run()
            times[name].append(world.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    rows_max = world.allreduce(x.nsend, op=MPI.MAX)
    if world.rank == 0:
        base = float(np.median(times["alltoallv"]))
        for name, ts in times.items():
            med = float(np.median(ts))
            print(json.dumps({"graph": args.graph.rsplit("/", 1)[-1], "p": world.size,
                              "c": args.c, "r": r, "mechanism": name, "median_s": med,
                              "vs_alltoallv": med / base, "max_rows_sent": rows_max}),
                  flush=True)
    for req in persistent:
        req.Free()
    graph.Free()
    obj.close()


if __name__ == "__main__":
    main()
