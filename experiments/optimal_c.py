"""Optimal replication factor c, predicted and observed, for 1.5D dense shifting without
elision, with replication reuse and with local kernel fusion on weak-scaling setup 1's matrices
(paper section VI-C, Figure 7; Table IV predicts sqrt(p), sqrt(2p) and sqrt(p/2)).

Every valid c is run (the paper's weak-scaling runs stopped at c = 8; the paper preset goes to
16). Laptop preset: setup 1's laptop sizes (side 2^14 p, 8 per row, r = 64) at p = 2 and 4.

    .venv/bin/python experiments/optimal_c.py --preset laptop
"""

from __future__ import annotations

import sys

import runner
from weak_scaling import setup_configs

EXPERIMENT = "optimal-c"
DENSE_SHIFT = tuple(cfg for cfg in runner.costmodel.CONFIGS if cfg[0] == "15d-dense-shift")


def configs(side: int, d: int, r: int, ps: list[int], cs=None) -> list[dict]:
    keep = [cfg for cfg in setup_configs(1, side, d, r, ps, EXPERIMENT, cs)
            if (cfg["algorithm"], cfg["strategy"]) in DENSE_SHIFT]
    return keep


def main(argv: list[str] | None = None) -> int:
    presets = {
        "laptop": lambda args: configs(1 << 14, 8, 64, runner.pow2_upto(2, args.max_p or 4)),
        "paper": lambda args: configs(1 << 16, 32, 256, runner.pow2_upto(2, args.max_p or 256),
                                      range(1, 17)),
    }
    return runner.main(EXPERIMENT, presets, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
