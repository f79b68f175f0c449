"""End to end through a real Slurm: every slurm/ template as a user's first job.

Each template is submitted with ``sbatch`` (the test then waits for the job to end) from a
fresh clone of this checkout (its committed files only, with this checkout's .venv: what the
README's install command leaves), with no other preparation, and the job's output must land
where the template and docs/experiments.md say (results/slurm-JOBNAME-JOBID.out).
count_check.sbatch and fusedmm_sweep.sbatch run real ranks through srun; the other
experiments' templates run their script with ``--list`` (the configurations at the job's p),
which checks the template, the wrapper slurm/run-experiment.sh and the script's arguments
without a sweep.

Runs where ``sbatch`` and ``srun`` are on PATH and a cluster answers ``sinfo``: an existing one
($SLURM_CONF), or the one-node cluster of slurm/local-cluster.sh, which the test starts (as
root) when neither is running, and stops afterwards. Skipped, saying why, otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

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


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this checkout's HEAD, with this checkout's .venv and numba cache."""
    where = tmp_path_factory.mktemp("clone") / "distmm"
    subprocess.run(["git", "clone", "--quiet", ROOT, str(where)], check=True, timeout=120)
    os.symlink(os.path.join(ROOT, ".venv"), where / ".venv")
    os.makedirs(os.path.join(ROOT, ".numba_cache"), exist_ok=True)
    os.symlink(os.path.join(ROOT, ".numba_cache"), where / ".numba_cache")
    copies = _share_compiled_kernels(os.path.join(ROOT, ".numba_cache"), ROOT, str(where))
    yield where
    for folder in copies:  # keyed by the clone's path: no later run would find them
        shutil.rmtree(folder, ignore_errors=True)


def _cache_subdir(directory: str) -> str:
    """The folder of numba's cache that holds the kernels of the modules in ``directory``,
    as numba's own cache locator names it."""
    from numba.core.caching import _CacheLocator
    return _CacheLocator.get_suitable_cache_subpath(os.path.join(directory, "module.py"))


def _share_compiled_kernels(cache: str, root: str, clone: str) -> list[str]:
    """Copy the kernels compiled for this checkout's modules to the clone's modules' folders.

    numba keys a module's kernels by its directory's absolute path, and checks each against
    the source's content, so without this a clone's ranks would compile every kernel again,
    which the README's install command, run in the clone, would have done beforehand. A module
    that differs from the clone's (uncommitted changes) is compiled anew: numba finds its
    content changed. Returns the folders made."""
    copies = []
    for directory, _, files in os.walk(clone):
        if ".git" in directory.split(os.sep) or not any(f.endswith(".py") for f in files):
            continue
        ours = os.path.join(cache, _cache_subdir(os.path.join(
            root, os.path.relpath(directory, clone))))
        if os.path.isdir(ours):
            copies.append(os.path.join(cache, _cache_subdir(directory)))
            shutil.copytree(ours, copies[-1], dirs_exist_ok=True)
    return copies


# the states of a job that has not ended (squeue's long names)
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED",
          "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}


def _wait(env, jobid: str, limit: float = 900) -> tuple[str, str]:
    """The job's final state and exit code (``COMPLETED``, ``0:0``), asked of slurmctld every
    0.2 s: ``sbatch --wait`` sleeps 2 s, then 8, then 32 between its own polls (while
    MinJobAge allows), so a job of a few seconds would hold the test for 10 s and one of 11 s
    for 42 s."""
    deadline = time.monotonic() + limit
    while True:
        show = subprocess.run(["scontrol", "show", "job", "-o", jobid], env=env,
                              capture_output=True, text=True, timeout=20)
        state = re.search(r"\bJobState=(\S+)", show.stdout)
        if state and state.group(1) not in ACTIVE:
            return state.group(1), re.search(r"\bExitCode=(\S+)", show.stdout).group(1)
        assert time.monotonic() < deadline, f"job {jobid} still not ended: {show.stdout}"
        time.sleep(0.2)


def submit(env, clone, template: str, *args: str, ranks: int = 2) -> tuple[str, str]:
    """sbatch the template from the clone as a user would, and wait for the job to end; (job
    id, job output)."""
    if ranks > os.cpu_count():  # rphi_map's laptop preset runs at p = 4: overcommit
        shape = ["-n", str(ranks), "--overcommit"]
    else:
        shape = [f"--ntasks-per-node={ranks}", "--cpus-per-task=1"]
    job = subprocess.run(
        ["sbatch", "-N", "1", *shape, "--time=10", f"slurm/{template}", *args],
        cwd=clone, env={**env, "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}, capture_output=True,
        text=True, timeout=60)
    match = re.match(r"Submitted batch job (\d+)", job.stdout)
    assert job.returncode == 0 and match, f"{job.stdout}{job.stderr}"
    jobid = match.group(1)
    state, code = _wait(env, jobid)
    name = re.search(r"^#SBATCH --job-name=(\S+)$",
                     (clone / "slurm" / template).read_text(), re.M).group(1)
    out = clone / "results" / f"slurm-{name}-{jobid}.out"
    text = out.read_text() if out.exists() else ""
    assert (state, code) == ("COMPLETED", "0:0"), f"{state} {code}\n{job.stdout}{job.stderr}{text}"
    assert out.exists(), f"no {out.relative_to(clone)}: {sorted(os.listdir(clone / 'results'))}"
    return jobid, text


RUNNER_TEMPLATES = ["weak_scaling", "strong_scaling", "rphi_map", "optimal_c", "app_breakdown"]


def test_every_template_is_tested():
    templates = {f[:-len(".sbatch")] for f in os.listdir(os.path.join(ROOT, "slurm"))
                 if f.endswith(".sbatch")}
    assert templates == {*RUNNER_TEMPLATES, "count_check", "fusedmm_sweep"}


def tiny_matrices(where, names) -> str:
    """Small stand-ins for the real matrices a preset names (the tests use no real data)."""
    import gzip

    import scipy.io
    import scipy.sparse

    where.mkdir(exist_ok=True)
    for name in names:
        with gzip.open(where / name, "wb") as fh:
            scipy.io.mmwrite(fh, scipy.sparse.random(40, 30, density=0.1, random_state=0))
    return str(where)


@pytest.mark.parametrize("name", RUNNER_TEMPLATES)
def test_experiment_template_lists_its_configurations(slurm_env, clone, name, tmp_path):
    extra = []
    if name == "strong_scaling":  # the laptop preset runs the development matrices
        import strong_scaling

        extra = ["--data-dir", tiny_matrices(tmp_path / "data", strong_scaling.LAPTOP)]
    p = 4 if name == "rphi_map" else 2  # the rank counts of the laptop presets
    _, text = submit(slurm_env, clone, f"{name}.sbatch", "--list", *extra, ranks=p)
    lines = text.splitlines()
    assert re.fullmatch(rf"distmm {name}\.py: p={p} \(1 nodes x {p}\), \d+ threads per rank",
                        lines[0]), text
    configs = [json.loads(x) for x in lines[1:] if x.startswith("{")]
    assert configs and {cfg["p"] for cfg in configs} == {p}, text


def test_sbatch_fusedmm_sweep_template(slurm_env, clone):
    """slurm/fusedmm_sweep.sbatch on 1 node x 2 ranks: srun --mpi=pmi2 starts the ranks, and
    the sweep's tables land in results/ beside the job's output."""
    _, text = submit(slurm_env, clone, "fusedmm_sweep.sbatch", "--n", "256", "--r", "4",
                     "--d", "2", "--algorithms", "15d-dense-shift", "--strategies", "none",
                     "--repeat", "1")
    assert "Erdos-Renyi n=256, 2 per row r=4 15d-dense-shift none c=1" in text
    assert (clone / "results" / "fusedmm-p2.md").exists()
    recs = [json.loads(x) for x in (clone / "results" / "fusedmm-p2.jsonl").read_text()
            .splitlines()]
    assert recs and all(rec.get("p", 2) == 2 for rec in recs)


def test_sbatch_count_check_template(slurm_env, clone):
    """slurm/count_check.sbatch on 1 node x 2 ranks: the job runs every configuration of the
    laptop preset at p = 2 through srun --mpi=pmi2, the records land in the script's default
    results file, and the counted words equal the model."""
    _, text = submit(slurm_env, clone, "count_check.sbatch", "--preset", "laptop")
    assert "p=2 (1 nodes x 2), 1 threads per rank" in text
    results = clone / "results" / "count-check-laptop.jsonl"
    assert results.exists(), sorted(os.listdir(clone / "results"))
    recs = runner.read_records(str(results))
    assert f"{len(recs)} records appended" in text
    assert {rec["p"] for rec in recs} == {2}
    assert len(recs) == len(count_check.configs([2]))
    for rec in recs:
        assert rec["machine"]["numba_threads"] == 1
        for ph in costmodel.PHASES:
            assert rec["words_mean"][ph] == pytest.approx(rec["model"]["words"][ph])
