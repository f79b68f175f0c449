"""Weak scaling on Erdos-Renyi matrices, setups 1 and 2 (paper section VI-B, Figures 4 and 5).

Setup 1 doubles p and the side of S together (side 2^16 p, 32 nonzeros per row, r = 256 in the
paper); setup 2 quadruples p while the side and the nonzeros per row both double (side
2^16 p^(1/2), 32 p^(1/2) per row). Every (algorithm, strategy, valid c) is run; the plots take
each algorithm at its best c with the per-phase breakdown. The laptop preset keeps the paper's
phi = nnz / (n r) = 1/8 at 1/4 of the side: side 2^14 p (setup 2: 2^14 p^(1/2)), 8 (8 p^(1/2))
per row, r = 64, p = 1, 2, 4 (setup 2: 1, 4).

    .venv/bin/python experiments/weak_scaling.py --setup 1 --preset laptop
    .venv/bin/python experiments/weak_scaling.py --setup 2 --project machines/cori-knl.json \
        --preset paper

Runs the MPI jobs itself (the venv's mpiexec, or srun with --launcher srun); see runner.py.
"""

from __future__ import annotations

import argparse
import math
import sys

import runner


def setup_configs(setup: int, side: int, d: int, r: int, ps: list[int], experiment: str,
                  cs=None, repeat: int = 3) -> list[dict]:
    """The configurations of one weak-scaling setup at rank counts ``ps``."""
    def matrix(p: int) -> list[dict]:
        grow = p if setup == 1 else math.isqrt(p)
        return [{"kind": "er", "m": side * grow, "n": side * grow,
                 "d": d * (1 if setup == 1 else grow)}]

    return runner.sweep(experiment, matrix, [r], ps, cs=cs, repeat=repeat)


def main(argv: list[str] | None = None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--setup", type=int, choices=(1, 2), default=1)
    known, rest = pre.parse_known_args(argv)
    setup = known.setup
    experiment = f"weak-scaling-{setup}"
    factor = 2 if setup == 1 else 4

    def laptop(args):
        return setup_configs(setup, 1 << 14, 8, 64, runner.pow2_upto(1, args.max_p or 4, factor),
                             experiment)

    def paper(args):
        return setup_configs(setup, 1 << 16, 32, 256,
                             runner.pow2_upto(1, args.max_p or 256, factor), experiment,
                             cs=range(1, 17))

    def add(ap):
        ap.add_argument("--setup", type=int, choices=(1, 2), default=1,
                        help="1: side grows with p; 2: side and nonzeros per row with sqrt(p)")

    return runner.main(experiment, {"laptop": laptop, "paper": paper},
                       __doc__.split("\n")[0], rest + ["--setup", str(setup)], add)


if __name__ == "__main__":
    sys.exit(main())
