"""End to end through a real Slurm: sbatch one of the slurm/ templates, wait, check its output.

Runs where ``sbatch`` and ``srun`` are on PATH and a cluster answers ``sinfo``: an existing one
($SLURM_CONF), or the one-node cluster of slurm/local-cluster.sh, which the test starts (as
root) when neither is running, and stops afterwards. Skipped, saying why, otherwise (CI does not
install Slurm). See docs/experiments.md for the transcript of a run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments"))

import count_check  # noqa: E402
import runner  # noqa: E402

from distmm.perf import costmodel  # noqa: E402

LOCAL = os.path.join(ROOT, "slurm", "local-cluster.sh")
LOCAL_CONF = os.path.join(os.environ.get("DISTMM_SLURM_DIR", "/tmp/distmm-slurm"), "slurm.conf")

pytestmark = pytest.mark.skipif(
    shutil.which("sbatch") is None or shutil.which("srun") is None,
    reason="Slurm is not installed (no sbatch/srun on PATH): apt-get install slurm-wlm munge, "
           "then slurm/local-cluster.sh start")


def _answers(env: dict) -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], env=env, capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="module")
def slurm_env():
    env = dict(os.environ)
    if "SLURM_CONF" not in env and os.path.exists(LOCAL_CONF):
        env["SLURM_CONF"] = LOCAL_CONF
    if _answers(env):
        yield env
        return
    if os.geteuid() != 0:
        pytest.skip("no Slurm cluster answers sinfo, and starting slurm/local-cluster.sh "
                    "needs root")
    started = subprocess.run([LOCAL, "start"], capture_output=True, text=True)
    if started.returncode != 0:
        pytest.skip(f"slurm/local-cluster.sh start failed: {started.stderr.strip()}")
    env["SLURM_CONF"] = LOCAL_CONF
    yield env
    subprocess.run([LOCAL, "stop"], capture_output=True)


def test_sbatch_count_check_template(slurm_env, tmp_path):
    """slurm/count_check.sbatch on 1 node x 2 ranks: the job runs every configuration of the
    laptop preset at p = 2 through srun --mpi=pmi2, and the counted words equal the model."""
    results = tmp_path / "cc.jsonl"
    out = tmp_path / "job.out"
    env = {**slurm_env, "NUMBA_CACHE_DIR": os.path.join(ROOT, ".numba_cache"),
           "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
    job = subprocess.run(
        ["sbatch", "--wait", "-N", "1", "--ntasks-per-node=2", "--cpus-per-task=1",
         "--time=10", f"--output={out}", "slurm/count_check.sbatch", "--preset", "laptop",
         "--results", str(results)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    text = out.read_text() if out.exists() else ""
    assert job.returncode == 0, f"{job.stdout}{job.stderr}{text}"
    assert job.stdout.startswith("Submitted batch job")
    assert "p=2 (1 nodes x 2), 1 threads per rank" in text
    recs = runner.read_records(str(results))
    assert f"{len(recs)} records appended" in text
    assert {rec["p"] for rec in recs} == {2}
    assert len(recs) == len(count_check.configs([2]))
    for rec in recs:
        assert rec["machine"]["numba_threads"] == 1
        for ph in costmodel.PHASES:
            assert rec["words_mean"][ph] == pytest.approx(rec["model"]["words"][ph])
