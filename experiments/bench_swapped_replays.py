"""Calls on new arrays and calls without ``out=``, with and without a replay feature, in one
process, taking turns.

``--toggle swaps`` (default): a loop that makes new operand arrays every call (a numpy loop
that builds its operands, and every ``distmm.torch`` function, which passes new numpy views
of its tensors) is traced once its operands are laid out as the last call's, and its next
calls replay the kept steps with their own arrays swapped in (distmm/algorithms/replay.py,
``_replay_alike``); off: no call on new operands is traced, as before swapped replays
existed. ``--toggle reuse``: a replayed call without ``out=`` writes its last result again
when the caller holds nothing of it (``_replay_into_new``); off: every such call makes a new
array, as before. ``--toggle widths``: calls of one operation at two widths in turns (the
layers of a model) each keep their replay, keyed by width (``_call_key``); off: one kind per
operation, as before, so that each call drops the other width's replay. Each feature is
patched in this process only. The two sides run in alternating
rounds, so that a shared machine's slow phases hit both alike; each side's 10th percentile of
the per-call seconds (the median over rounds) and the on/off ratio per round are reported.

Cases: ``distmm.torch`` SpMMA, SDDMM, FusedMMA (forward only) and FusedMMA forward plus
backward (tensors requiring gradients); numpy SpMMA and FusedMMA on new arrays each call
(four sets in turn) without ``out=``; numpy SpMMA and SDDMM on the same arrays without
``out=``; and, at widths r and r / 2 in turns (one time is the pair's), numpy SpMMA and
FusedMMA into ``out=`` buffers, and ``distmm.torch`` SpMMA and FusedMMA forward plus
backward. The matrix from ../shared/data (bench_end_to_end's names) or an Erdos-Renyi one.
Run under mpiexec for p > 1 (each rank its own blocks)::

    python experiments/bench_swapped_replays.py --matrix cora-adjacency --rs 16,64
    mpiexec -n 2 python experiments/bench_swapped_replays.py --matrix cora-adjacency --rs 16
    python experiments/bench_swapped_replays.py --toggle reuse --matrix metis-mdual --rs 16
    python experiments/bench_swapped_replays.py --toggle widths --matrix cora-adjacency --rs 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_end_to_end as e2e  # noqa: E402


def cases(S, r: int, dtype) -> dict:
    """name -> call, on this rank's blocks of width r."""
    import distmm.torch as dt
    from distmm.torch import torch

    rng = np.random.default_rng(S.rank)
    A, G = ((rng.standard_normal(S.local_shape("a", r)) * 0.1).astype(dtype) for _ in range(2))
    B = (rng.standard_normal(S.local_shape("b", r)) * 0.1).astype(dtype)
    At, Bt, Gt = map(torch.from_numpy, (A, B, G))
    Ag, Bg = At.clone().requires_grad_(), Bt.clone().requires_grad_()
    As, Bs = [A.copy() for _ in range(4)], [B.copy() for _ in range(4)]
    turn = [0]

    def forward_backward():
        Ag.grad = Bg.grad = None
        dt.fusedmm_a(S, Ag, Bg).backward(Gt)

    def numpy_spmm():
        turn[0] += 1
        return S.spmm_a(Bs[turn[0] % 4])

    def numpy_fused():
        turn[0] += 1
        return S.fusedmm_a(As[turn[0] % 4], Bs[turn[0] % 4])

    # a second layer's width: each pair of calls below is one step of a two-layer loop
    h = max(1, r // 2)
    A2, B2 = np.ascontiguousarray(A[:, :h]), np.ascontiguousarray(B[:, :h])
    out, out2 = S.dense("a", r), S.dense("a", h)
    At2, Bt2 = torch.from_numpy(A2), torch.from_numpy(B2)
    Ag2, Bg2 = At2.clone().requires_grad_(), Bt2.clone().requires_grad_()
    G2 = torch.from_numpy(np.ascontiguousarray(G[:, :h]))

    def widths_spmm():
        S.spmm_a(B, out=out)
        S.spmm_a(B2, out=out2)

    def widths_fused():
        S.fusedmm_a(A, B, out=out)
        S.fusedmm_a(A2, B2, out=out2)

    def widths_torch_spmm():
        return dt.spmm_a(S, Bt), dt.spmm_a(S, Bt2)

    def widths_forward_backward():
        forward_backward()
        Ag2.grad = Bg2.grad = None
        dt.fusedmm_a(S, Ag2, Bg2).backward(G2)

    return {"torch spmm_a": lambda: dt.spmm_a(S, Bt),
            "torch sddmm": lambda: dt.sddmm(S, At, Bt),
            "torch fusedmm_a": lambda: dt.fusedmm_a(S, At, Bt),
            "torch fusedmm_a forward+backward": forward_backward,
            "numpy spmm_a, new arrays": numpy_spmm,
            "numpy fusedmm_a, new arrays": numpy_fused,
            "numpy spmm_a, same arrays": lambda: S.spmm_a(B),
            "numpy sddmm, same arrays": lambda: S.sddmm(A, B),
            "numpy spmm_a, widths r and r/2 in turns, out=": widths_spmm,
            "numpy fusedmm_a, widths r and r/2 in turns, out=": widths_fused,
            "torch spmm_a, widths r and r/2 in turns": widths_torch_spmm,
            "torch fusedmm_a forward+backward, widths r and r/2 in turns":
                widths_forward_backward}


def toggle(S, feature: str, on: bool, real: tuple) -> None:
    """``feature`` on (distmm as it is) or off: "swaps" (no call on new operands traced),
    "reuse" (every replay without out= makes a new result) or "widths" (one call key per
    operation, whatever the width)."""
    from distmm.algorithms.base import DistributedMatrix
    from distmm.algorithms.calls import CallChecks
    from distmm.algorithms.replay import CallReplay

    if feature == "swaps":
        CallChecks._like_last = real[0] if on else (lambda self, *args: None)
        CallReplay._replay_alike = real[1] if on else (lambda self, *args: None)
    elif feature == "reuse":
        CallReplay.reuse_results = real[2] if on else False
    else:
        DistributedMatrix._call_key = real[3] if on else (lambda self, op, X: op)
    S.release_buffers()  # each side starts from no replay


def p10(comm, fn, calls: int) -> float:
    """The 10th percentile of ``calls`` calls' seconds (slowest rank's each), after five
    untimed ones. Collective."""
    from mpi4py import MPI

    for _ in range(5):
        fn()
    seconds = []
    for _ in range(calls):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        seconds.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return float(np.percentile(seconds, 10))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrix", default="cora-adjacency")
    ap.add_argument("--rs", type=e2e.csv_list(int), default=[16, 64])
    ap.add_argument("--dtypes", type=e2e.csv_list(str), default=["float32"])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=200, help="timed calls per case and round")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    ap.add_argument("--toggle", choices=("swaps", "reuse", "widths"), default="swaps",
                    help="the feature switched off in the off rounds")
    args = ap.parse_args(argv)
    import distmm

    # isort: split
    from mpi4py import MPI

    from distmm.algorithms.base import DistributedMatrix
    from distmm.algorithms.calls import CallChecks
    from distmm.algorithms.replay import CallReplay
    from distmm.core.coo import CooShare
    from distmm.torch import torch

    torch.set_num_threads(args.threads)
    comm = MPI.COMM_WORLD
    real = (CallChecks._like_last, CallReplay._replay_alike, CallReplay.reuse_results,
            DistributedMatrix._call_key)
    S_global = e2e.load_matrix(args.matrix) if comm.rank == 0 else None
    for dtype in args.dtypes:
        share = CooShare.from_scipy(S_global, comm, root=0)
        with distmm.distribute(share, comm, dtype=dtype) as S:
            for r in args.rs:
                calls = cases(S, r, dtype)
                times = {k: {"on": [], "off": []} for k in calls}
                for rnd in range(args.rounds):
                    for side in ("on", "off") if rnd % 2 == 0 else ("off", "on"):
                        toggle(S, args.toggle, side == "on", real)
                        for name, fn in calls.items():
                            n = max(10, args.calls // 4) if "backward" in name else args.calls
                            times[name][side].append(p10(comm, fn, n))
                toggle(S, args.toggle, True, real)
                if comm.rank == 0:
                    for name, t in times.items():
                        ratios = [a / b for a, b in zip(t["on"], t["off"], strict=True)]
                        print(json.dumps({
                            "matrix": args.matrix, "p": comm.size, "dtype": dtype, "r": r,
                            "toggle": args.toggle, "case": name,
                            "off_s": float(np.median(t["off"])),
                            "on_s": float(np.median(t["on"])),
                            "on_over_off_median": float(np.median(ratios)),
                            "on_over_off_min": min(ratios), "on_over_off_max": max(ratios),
                            "rounds": args.rounds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
