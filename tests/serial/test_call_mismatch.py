"""Ranks in different calls after the agreed first calls (checks "once" and "off") never get a
result (docs/reliability.md, "Python API: ranks in different calls"): each call's
point-to-point messages carry its own tag and are checked for the size the call expects, and
the first collective of each call on each communicator compares the ranks' calls. So the job
either raises one clear InputError on every rank or hangs where the watchdog names the phase.
Every family at each c its grid allows at p = 2, at c = 1 and c = 3 at p = 3, and at p = 4 at
the c whose grid p = 2 and 3 do not already give (the 2D grid of the 2.5D families, 1.5D layers
of two ranks); ranks that differ in the operation, in FusedMM's strategy, or in the width r."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

import distmm
from distmm.perf import costmodel
from distmm.runtime.watchdog import EXIT_CODE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_env import mpi_env  # noqa: E402

HERE = Path(__file__).resolve().parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="the venv's mpiexec is missing")


def _cases():
    """(p, family, c, checks, case): at p = 2 every family at each c its grid allows, every
    case, the checks in turns (both policies skip the agreement after the first call, so
    they meet the same comparison: each case under one, each policy over the cases); at
    p = 3 every family at c = 3 (fiber collectives of three ranks) and, where its grid
    allows, at c = 1 (a ring of three): widths, and the operation or the strategy in turns,
    the checks in turns; at p = 4 every family at the c of the grid shape that p = 2 and 3 do
    not give (tests/mpi/families.py's rule: neither layers of one rank, c = p, nor one ring
    of every rank): one way to differ each, the ways and the checks in turns over the
    families. Each case that hangs costs a job of four ranks of its own."""
    out = []
    for f, (name, family) in enumerate(distmm.ALGORITHMS.items()):
        kinds = ["op", "width"] + (["strategy"] if len(family.strategies) > 1 else [])
        for j, c in enumerate(costmodel.valid_cs(name, 2)):
            out += [(2, name, c, ("once", "off")[(i + j) % 2], kind)
                    for i, kind in enumerate(kinds)]
        others = [kind for kind in kinds if kind != "width"]
        valid = costmodel.valid_cs(name, 3)
        for k, c in enumerate(sorted({1, valid[-1]} & set(valid))):
            out.append((3, name, c, ("once", "off")[(3 + k) % 2], "width"))
            out.append((3, name, c, ("off", "once")[(3 + k) % 2],
                        others[(3 + k + f) % len(others)]))
        ring = family.model.grid_allows(3, 1)  # c = 1 is one ring of every rank
        fresh = [c for c in costmodel.valid_cs(name, 4) if c != 4 and not (c == 1 and ring)]
        for k, c in enumerate(fresh):  # one way to differ each, in turns over the families
            out.append((4, name, c, ("once", "off")[(k + f) % 2], kinds[(k + f) % len(kinds)]))
    # a block gathered at two widths (a raw MPI gather, compared before it), every family
    out += [(p, name, costmodel.valid_cs(name, p)[0], ("once", "off")[p % 2], "gather")
            for p in (2, 3) for name in distmm.ALGORITHMS]
    return out


class Outcome(NamedTuple):
    """One case of a job: the exit status it ended with (0: every rank went on to the next
    case), its lines of the ranks' output, and the job's standard error."""

    returncode: int
    stdout: str
    stderr: str


@functools.cache
def _every_outcome() -> dict[int, dict[tuple, Outcome]]:
    """:func:`_outcomes` at every rank count, the counts' jobs side by side: most of a job's
    time is a hung case waiting for the watchdog's timeout, which leaves the cores idle."""
    counts = sorted({case[0] for case in _cases()})
    with ThreadPoolExecutor(len(counts)) as pool:
        return dict(zip(counts, pool.map(_outcomes, counts), strict=True))


def _outcomes(p: int) -> dict[tuple, Outcome]:
    """Every case at p ranks, several to a job (a job's start, MPI's and the interpreter's,
    costs more than most cases): a job runs its cases in turn until one hangs and the
    watchdog ends it; the next job starts at the case after that one."""
    todo = [case[1:] for case in _cases() if case[0] == p]
    out: dict[tuple, Outcome] = {}
    while todo:
        cmd = [str(MPIEXEC), "-n", str(p), sys.executable, str(HERE / "call_mismatch_driver.py"),
               *(":".join(map(str, case)) for case in todo)]
        proc = subprocess.run(cmd, env=mpi_env(), capture_output=True, text=True,
                              timeout=60 + 20 * len(todo))
        # the ranks' lines may run together in mpiexec's merged output
        lines = re.findall(r"case (\d+) (.*?)(?=case \d+ |\n|$)", proc.stdout)
        done = {int(i) for i, text in lines if text == "done"}
        for index, case in enumerate(todo):
            ended = index in done
            text = "\n".join(t for i, t in lines if int(i) == index and t != "done")
            out[case] = Outcome(0 if ended else proc.returncode or -1, text, proc.stderr)
            if not ended:  # the case the job ended in
                todo = todo[index + 1:]
                break
        else:
            todo = []
    return out


@pytest.mark.parametrize("p, algorithm, c, checks, case", _cases())
def test_different_later_calls_never_return(p, algorithm, c, checks, case):
    proc = _every_outcome()[p][algorithm, c, checks, case]
    assert "got a result" not in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    refused = re.findall(r"rank (\d+) refused: (.*?)(?=rank \d+ refused: |\n|$)", proc.stdout)
    for _, text in refused:
        assert ("the ranks are in different calls" in text
                or "calls of different widths" in text
                or "differ in width" in text), text
    if proc.returncode == 0:  # every rank raised the error
        assert sorted(int(k) for k, _ in refused) == list(range(p)), proc.stdout
        return
    assert proc.returncode == EXIT_CODE, (proc.returncode, proc.stdout, proc.stderr)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("distmm: watchdog")]
    assert len(ours) == 1, proc.stderr
    assert "a collective did not complete within --timeout 3 s (waiting in phase" in ours[0]
    assert " waiting in " in ours[0], ours[0]
