"""Print the case table of docs/reliability.md: every case of mpmd_cases.py run at p = 2 and 4
(one MPMD launch each, as test_mpmd.py does), with the message rank 0 printed and the slowest
rank's seconds from the start of the case to the error.

Usage: ``.venv/bin/python tests/serial/mpmd_table.py > /tmp/table.md`` (then paste it into
docs/reliability.md; test_mpmd checks that the table lists every case).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mpmd_cases  # noqa: E402
from launch_env import mpi_env as _env  # noqa: E402
from test_mpmd import _materialise, _mpmd  # noqa: E402


def run(p: int) -> dict[str, tuple[str, float]]:
    """case id -> (message on rank 0, slowest rank's seconds) at p ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = [root / f"rank{k}" for k in range(p)]
        for case in mpmd_cases.CASES:
            for k, d in enumerate(dirs):
                _materialise(d / case.id, case.files(k, p))
        (root / "results").mkdir()
        cmd = _mpmd(p, dirs, [sys.executable, str(HERE / "mpmd_driver.py"),
                              str(root / "results")] + [c.id for c in mpmd_cases.CASES])
        subprocess.run(cmd, env=_env(), check=True, timeout=300, capture_output=True)
        ranks = [json.loads((root / "results" / f"rank-{k}.json").read_text())
                 for k in range(p)]
    out = {}
    for i, rec in enumerate(ranks[0]):
        text = rec["error"] or [line for line in rec["stderr"].splitlines()
                                if line.startswith("distmm: error:")][0]
        out[rec["id"]] = (text, max(r[i]["seconds"] for r in ranks))
    return out


def left(case: mpmd_cases.Case) -> str:
    if case.api is not None:
        return "every input; the caller's arrays; nothing distributed further"
    return case.left


def main() -> None:
    two, four = run(2), run(4)
    print("| case | what is wrong | message (p = 4; rank 0 prints it, every rank exits 2) "
          "| s to error, p = 2 | p = 4 | left untouched |")
    print("|---|---|---|---|---|---|")
    for case in mpmd_cases.CASES:
        message = four[case.id][0].replace("|", "\\|")
        print(f"| `{case.id}` | {case.title} | `{message}` | {two[case.id][1]:.2f} "
              f"| {four[case.id][1]:.2f} | {left(case)} |")


if __name__ == "__main__":
    main()
