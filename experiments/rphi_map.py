"""The r / phi map: predicted and observed best algorithm over dense widths r and nonzeros per
row (paper section VI-C, Figure 6: p = 32, m = 2^22).

The candidates are the paper's: the four configurations with communication elision (1.5D dense
shifting with replication reuse or local kernel fusion, 1.5D sparse shifting and 2.5D dense
replicating with replication reuse) and 2.5D sparse replicating, each at every valid c. The plot
marks, per (r, nonzeros per row), the observed winner at its best c beside the model's. Laptop
preset: p = 4, m = 2^15, r in {16, 64, 256}, 2, 8 or 32 nonzeros per row.

    .venv/bin/python experiments/rphi_map.py --preset laptop
"""

from __future__ import annotations

import sys

import runner

EXPERIMENT = "rphi-map"
CANDIDATES = (("15d-dense-shift", "reuse"), ("15d-dense-shift", "fusion"),
              ("15d-sparse-shift", "reuse"), ("25d-dense-replicate", "reuse"),
              ("25d-sparse-replicate", "none"))


def grid(side: int, ds: list[int], rs: list[int], p: int, repeat: int = 3) -> list[dict]:
    """Every candidate at every valid c for each (nonzeros per row, r) on p ranks."""
    matrices = [{"kind": "er", "m": side, "n": side, "d": d} for d in ds]
    return runner.sweep(EXPERIMENT, matrices, rs, [p], CANDIDATES, repeat=repeat)


def main(argv: list[str] | None = None) -> int:
    presets = {
        "laptop": lambda args: grid(1 << 15, [2, 8, 32], [16, 64, 256], 4, repeat=2),
        "paper": lambda args: grid(1 << 22, [4, 8, 16, 32, 64, 128], [32, 64, 128, 256, 512],
                                   32),
    }
    return runner.main(EXPERIMENT, presets, __doc__.split("\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
