"""The shared runner of the section VI experiments: configurations in, JSON Lines records out.

Every figure script (weak_scaling.py, rphi_map.py, optimal_c.py, strong_scaling.py,
count_check.py, app_breakdown.py) builds a list of configurations and hands it to :func:`main`,
which

* measures them: for each rank count p, one ``mpiexec -n p`` (the venv's own, next to
  ``sys.executable``; ``--launcher srun`` inside a Slurm allocation) running this file as
  ``--worker``, which distributes each configuration's matrix, times FusedMM and appends one
  record per configuration to the results file as soon as it is measured;
* or projects them (``--project MACHINE.json``): the cost model alone, at the experiment's exact
  sizes, one record each, marked ``"predicted": true``.

A record holds the configuration, the slowest rank's seconds per phase, the words counted per
phase (max and mean over ranks), the model's prediction for the same configuration
(:func:`~distmm.perf.planner.predict` and the exact words of
:func:`~distmm.perf.costmodel.exact`), the
machine and software versions, the git commit and the date. A configuration's key is the JSON
of its fields (sorted); a sweep skips every key already in the results file, so an interrupted
sweep resumes where it stopped. A results file belongs to one experiment: appending another
experiment's records is refused.

The runner itself is not run under mpiexec: it starts the MPI jobs (only ``--worker`` runs
under MPI).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:  # run from a checkout without installing: import distmm from it
    sys.path.insert(0, ROOT)

import petsc_baseline  # noqa: E402

from distmm.errors import InputError, require  # noqa: E402
from distmm.perf import costmodel  # noqa: E402

# Fields of a configuration; the key of a record is these, as sorted JSON.
CONFIG_FIELDS = ("experiment", "matrix", "r", "p", "algorithm", "strategy", "c", "calls",
                 "repeat", "seed", "dtype")


def _data_dir() -> str:
    """$DISTMM_DATA, else the first of ../shared/data and ../../shared/data (a checkout or a
    worktree beside the project's shared folder) that exists."""
    if os.environ.get("DISTMM_DATA"):
        return os.environ["DISTMM_DATA"]
    candidates = [os.path.join(ROOT, *[".."] * up, "shared", "data") for up in (1, 2)]
    return os.path.normpath(next((d for d in candidates if os.path.isdir(d)), candidates[0]))


DATA_DIR = _data_dir()


def config(experiment: str, matrix: dict, r: int, p: int, algorithm: str, strategy: str,
           c: int, calls: int = 1, repeat: int = 3, seed: int = 0,
           dtype: str = "float32") -> dict:
    """One configuration: FusedMM (``calls`` back-to-back FusedMMA per timing) of ``matrix`` at
    width r on p ranks with one (algorithm, strategy, c). Not collective.

    ``matrix`` is ``{"kind": "er", "m", "n", "d"}`` (Erdos-Renyi, d entries per row),
    ``{"kind": "mtx", "path"}`` (a Matrix Market file) or ``{"kind": "sizes", "name", "m",
    "n", "nnz"}`` (known sizes only: projections of matrices not at hand)."""
    return {"experiment": experiment, "matrix": matrix, "r": int(r), "p": int(p),
            "algorithm": algorithm, "strategy": strategy, "c": int(c), "calls": int(calls),
            "repeat": int(repeat), "seed": int(seed), "dtype": dtype}


def key(cfg: dict) -> str:
    """The stable key of a configuration (its fields as sorted JSON; an application
    experiment's ``workload`` field and a repeated measurement's ``round`` too)."""
    return json.dumps({k: cfg[k] for k in CONFIG_FIELDS + ("workload", "round") if k in cfg},
                      sort_keys=True)


def matrix_label(matrix: dict) -> str:
    """A short name for plots and tables."""
    if matrix["kind"] == "er":
        return f"ER {matrix['m']}x{matrix['n']}, {matrix['d']}/row"
    if matrix["kind"] == "mtx":
        return os.path.basename(matrix["path"]).split(".")[0]
    return matrix["name"]


def sweep(experiment: str, matrices: Iterable[dict], rs: Iterable[int], ps: Iterable[int],
          configs: Iterable[tuple[str, str]] = costmodel.CONFIGS, cs: Iterable[int] | None = None,
          **kw) -> list[dict]:
    """Every (matrix, r, p, algorithm, strategy, valid c) configuration. ``matrices`` may be
    a function of p (weak scaling grows the matrix with p). ``cs`` restricts c."""
    out = []
    for p in ps:
        for matrix in (matrices(p) if callable(matrices) else matrices):
            for r in rs:
                for algorithm, strategy in configs:
                    for c in costmodel.valid_cs(algorithm, p, r):
                        if cs is None or c in cs:
                            out.append(config(experiment, matrix, r, p, algorithm, strategy, c,
                                              **kw))
    return out


# ---------------------------------------------------------------------------------------------
# Results files


def read_records(path: str) -> list[dict]:
    """Every record of a JSON Lines results file ([] if it does not exist). Not collective."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{i}: not a JSON Lines results file ({exc})") from None
    return out


def table_main(prog: str, description: str, table: Callable[[list[str]], str],
               argv: list[str] | None = None) -> int:
    """The command line of a script that reads results files and prints one table
    (``table(paths)``): exit status 0, or 2 with ``prog: message`` for an InputError."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("results", nargs="+")
    args = ap.parse_args(argv)
    try:
        print(table(args.results))
    except InputError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    return 0


def recorded_keys(path: str, experiment: str) -> set[str]:
    """Keys already in ``path``; InputError if it holds another experiment's records."""
    keys = set()
    for rec in read_records(path):
        other = rec.get("experiment")
        require(other == experiment,
                f"{path} holds results of experiment {other!r}, not {experiment!r}: "
                "give this experiment its own --results file")
        keys.add(rec["key"])
    return keys


def append(path: str, rec: dict) -> None:
    """Append one record as a line (one write, so concurrent appenders do not interleave)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------------------
# Machine, software and model


def machine_info() -> dict:
    """Host, cores, MPI library and package versions, git commit and date (not collective)."""
    import numba
    import numpy
    from mpi4py import MPI

    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"hostname": platform.node(), "cores": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "mpi": MPI.Get_library_version().split("\n")[0].strip(),
            "numpy": numpy.__version__, "numba": numba.__version__,
            "python": platform.python_version(),
            "numba_threads": int(os.environ.get("NUMBA_NUM_THREADS", "0")) or None,
            "git_commit": commit,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def model(cfg: dict, m: int, n: int, nnz: int, machine) -> dict:
    """The cost model's prediction for one configuration of an m x n matrix with nnz entries:
    seconds (total, communication, computation) of ``calls`` FusedMM and exact words and
    messages per rank per phase of one FusedMM. Not collective."""
    from distmm.perf.planner import predict

    pred = predict(cfg["algorithm"], cfg["strategy"], m, n, nnz, cfg["r"], cfg["p"], cfg["c"],
                   machine)
    phases = costmodel.exact(cfg["algorithm"], "fusedmm_a", m, n, cfg["r"], cfg["p"], cfg["c"],
                             cfg["strategy"], nnz=nnz)
    calls = cfg["calls"]
    return {"seconds": pred["time_s"] * calls, "comm_s": pred["comm_s"] * calls,
            "compute_s": pred["compute_s"] * calls,
            "words": {ph: v["words"] for ph, v in phases.items()},
            "messages": {ph: v["messages"] for ph, v in phases.items()},
            "machine": machine.source}


def matrix_sizes(matrix: dict) -> tuple[int, int, int]:
    """(m, n, nnz) of a matrix spec without reading its entries (ER: m d, duplicates counted;
    a symmetric Matrix Market file: twice the stored entries)."""
    if matrix["kind"] == "er":
        return matrix["m"], matrix["n"], matrix["m"] * matrix["d"]
    if matrix["kind"] == "sizes":
        return matrix["m"], matrix["n"], matrix["nnz"]
    from distmm.io.matrix_market import matrix_market_size

    m, n, stored, symmetry = matrix_market_size(check_matrix(matrix["path"]))
    # A symmetric file stores one triangle; its diagonal is not known from the header.
    return m, n, stored * (2 if symmetry != "general" else 1)


def check_matrix(path: str) -> str:
    """``path`` if it is a readable file, else InputError naming it."""
    require(os.path.isfile(path), f"matrix file {path} does not exist (download it, or give "
                                  "--data-dir the folder that holds it)")
    return path


# ---------------------------------------------------------------------------------------------
# Measuring (the --worker side runs under MPI)


def _load(matrix: dict, comm):
    from distmm.io.generate import erdos_renyi
    from distmm.io.matrix_market import read_matrix_market

    if matrix["kind"] == "er":
        return erdos_renyi(matrix["m"], matrix["n"], matrix["d"], 0, comm)
    require(matrix["kind"] == "mtx", f"cannot measure {matrix_label(matrix)}: only its sizes "
                                     "are known (use --project)")
    return read_matrix_market(check_matrix(matrix["path"]), comm)


def measure_one(cfg: dict, source, comm, machine) -> dict:
    """Distribute ``source`` and time ``cfg["calls"]`` FusedMMA calls ``cfg["repeat"]`` times
    after a warm-up (collective); returns the record on rank 0 (None elsewhere)."""
    import numpy as np

    import distmm
    from distmm.perf.bench import phase_summary, random_blocks, timed

    require(comm.Get_size() == cfg["p"], f"worker runs on {comm.Get_size()} ranks, the "
                                         f"configuration needs {cfg['p']}")
    if cfg["algorithm"] == petsc_baseline.ALGORITHM or "workload" in cfg:
        if "workload" in cfg:  # an application around FusedMM (Figure 9)
            import app_breakdown

            rec = app_breakdown.measure_app(cfg, source, comm, machine)
        else:
            rec = petsc_baseline.measure_petsc(cfg, source, comm)
        return None if rec is None else {"key": key(cfg), **cfg,
                                         "label": matrix_label(cfg["matrix"]),
                                         "predicted": False, **rec, "machine": machine_info()}
    obj = distmm.distribute(source, comm, algorithm=cfg["algorithm"], c=cfg["c"], r=cfg["r"],
                            dtype=np.dtype(cfg["dtype"]), seed=cfg["seed"])
    A_loc, B_loc = random_blocks(obj, cfg["r"], cfg["seed"])
    strategy = None if cfg["strategy"] in (None, "-") else cfg["strategy"]  # None: default
    # one output block for every call, as a training loop keeps it (PETSc's baseline reuses
    # its product matrix likewise)
    out = obj.dense("a", cfg["r"])

    def calls():
        for _ in range(cfg["calls"]):
            obj.fusedmm_a(A_loc, B_loc, strategy=strategy, out=out)

    calls()  # warm-up: JIT, S^T construction
    times, reports = [], []
    for _ in range(cfg["repeat"]):
        obj.stats.reset()
        _, seconds = timed(comm, calls)
        times.append(seconds)
        reports.append(obj.stats.report())
    nnz = int(comm.allreduce(obj.values.size))
    m, n = source.shape
    if comm.rank != 0:
        return None
    best = min(times)
    report = reports[times.index(best)]
    phases = phase_summary(report)
    mean_words = {ph: report["phases"][ph]["words_sent"]["mean"] / cfg["calls"]
                  for ph in costmodel.PHASES if ph in report["phases"]}
    return {"key": key(cfg), **cfg, "label": matrix_label(cfg["matrix"]), "predicted": False,
            "m": m, "n": n, "nnz": nnz, "times": times, "seconds": best,
            "phase_seconds": {ph: v.get("seconds", 0.0) for ph, v in phases.items()},
            "words_max": {ph: phases.get(ph, {}).get("words_sent", 0.0) / cfg["calls"]
                          for ph in costmodel.PHASES},
            "words_mean": {ph: mean_words.get(ph, 0.0) for ph in costmodel.PHASES},
            "model": model(cfg, m, n, nnz, machine), "machine": machine_info()}


def worker(config_file: str, results: str, machine_file: str | None) -> None:
    """Measure every configuration in ``config_file`` (all for this p); collective."""
    from mpi4py import MPI

    from distmm.perf.planner import Machine

    comm = MPI.COMM_WORLD
    with open(config_file) as fh:
        cfgs = json.load(fh)
    machine = Machine.load(machine_file) if machine_file else Machine()
    cache_key, source = None, None
    for cfg in cfgs:
        if cfg["matrix"] != cache_key:
            cache_key, source = cfg["matrix"], _load(cfg["matrix"], comm)
        rec = measure_one(cfg, source, comm, machine)
        if rec is not None:
            append(results, rec)
            if rec["seconds"] is None:
                outcome = f"not run: {rec['unsupported'].split(':')[0]}"
            else:
                model = (rec["model"] or {}).get("seconds")
                model_s = "none" if model is None else f"{model:.4f} s"
                outcome = f"{rec['seconds']:.4f} s (model {model_s})"
            what = "".join(f"{v} " for k, v in cfg.get("workload", {}).items()
                           if k in ("app", "pass"))
            print(f"p={cfg['p']} {rec['label']} {what}r={cfg['r']} {cfg['algorithm']} "
                  f"{cfg['strategy']} c={cfg['c']}: {outcome}", flush=True)


def launcher_command(launcher: str, p: int, mpi_args: list[str], threads: int | None = None,
                     bind: str = "core") -> list[str]:
    """The command that starts p ranks of this file (``--worker``) with this Python, through
    launch/distmm-launch: the venv's mpiexec or ``srun --mpi=pmi2``, ``threads`` numba threads
    per rank (default: the wrapper's, an exported NUMBA_NUM_THREADS or cores / ranks), CPU
    binding ``bind`` ("core" or "none"), ``mpi_args`` passed to the launcher. Not collective."""
    require(launcher in ("mpiexec", "srun"), f"unknown launcher {launcher!r}")
    if launcher == "srun":
        require(shutil.which("srun") is not None, "--launcher srun: srun is not on PATH "
                                                  "(run inside a Slurm allocation)")
    else:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        require(os.path.exists(mpiexec), f"no mpiexec next to {sys.executable}: install "
                                         "distmm with its MPI (pip install distmm[mpich])")
    cmd = [os.path.join(ROOT, "launch", "distmm-launch"), "--launcher", launcher, "-n", str(p),
           "--bind", bind]
    if threads:
        cmd += ["--threads", str(threads)]
    for arg in mpi_args:
        cmd += ["--mpi-opt", arg]
    return cmd + ["--script", os.path.abspath(__file__), "--"]


def measure(cfgs: list[dict], results: str, launcher: str = "mpiexec",
            mpi_args: list[str] | None = None, machine_file: str | None = None,
            threads: int | None = None, bind: str = "core") -> int:
    """Measure the configurations not yet in ``results``: one MPI job per (round, p,
    library), in the order their first configurations appear in ``cfgs`` (so a preset that
    alternates distmm and PETSc jobs gets them in turns, and neither library shares a
    process with the other). Returns how many were measured; raises InputError when a job
    fails."""
    done = recorded_keys(results, cfgs[0]["experiment"]) if cfgs else set()
    todo = [cfg for cfg in cfgs if key(cfg) not in done]
    print(f"{len(cfgs) - len(todo)} of {len(cfgs)} configurations already in {results}",
          flush=True)
    jobs: dict[tuple, list[dict]] = {}
    for cfg in todo:
        job = (cfg.get("round"), cfg["p"], cfg["algorithm"] == petsc_baseline.ALGORITHM)
        jobs.setdefault(job, []).append(cfg)
    for (_, p, _), batch in jobs.items():
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(batch, fh)
        cmd = launcher_command(launcher, p, mpi_args or [], threads, bind) + [
            "--worker", fh.name, "--results", results]
        if machine_file:
            cmd += ["--machine", machine_file]
        try:
            rc = subprocess.run(cmd, env={**os.environ, "DISTMM_PYTHON": sys.executable}).returncode
        finally:
            os.unlink(fh.name)
        require(rc == 0, f"the MPI job for p={p} failed (exit {rc}): {' '.join(cmd)}")
    return len(todo)


def project(cfgs: list[dict], results: str, machine_file: str) -> int:
    """Write the model's records (``"predicted": true``) for the configurations not yet in
    ``results``. Not collective, no MPI job."""
    from distmm.perf.planner import Machine

    machine = Machine.load(machine_file)
    done = recorded_keys(results, cfgs[0]["experiment"]) if cfgs else set()
    info = machine_info()
    count = 0
    for cfg in cfgs:
        if key(cfg) in done or cfg["algorithm"] == petsc_baseline.ALGORITHM:
            continue  # the model has no PETSc
        m, n, nnz = matrix_sizes(cfg["matrix"])
        pred = model(cfg, m, n, nnz, machine)
        append(results, {"key": key(cfg), **cfg, "label": matrix_label(cfg["matrix"]),
                         "predicted": True, "m": m, "n": n, "nnz": nnz,
                         "seconds": pred["seconds"], "model": pred, "machine": info})
        count += 1
    return count


# ---------------------------------------------------------------------------------------------
# The command line every figure script shares


def pow2_upto(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo*factor, ... up to hi."""
    out, p = [], lo
    while p <= hi:
        out.append(p)
        p *= factor
    return out


def main(experiment: str, presets: dict[str, Callable[[argparse.Namespace], list[dict]]],
         description: str, argv: list[str] | None = None,
         extra: Callable[[argparse.ArgumentParser], None] | None = None,
         no_projection: str | None = None,
         instead: Callable[[argparse.Namespace], int | None] | None = None) -> int:
    """Parse the shared options, build the preset's configurations and measure or project them.

    ``presets`` maps a preset name ("laptop", "paper") to a function of the parsed arguments
    returning configurations; ``extra`` adds an experiment's own options; ``no_projection``,
    when given, is why ``--project`` is refused; ``instead``, when given, is called with the
    parsed arguments first, and a status it returns ends the run there (a mode of the
    experiment that measures nothing). Returns the exit status (2 with a message on bad
    input)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--preset", default="laptop",
                    help=f"sizes to run: {', '.join(presets)} (default laptop)")
    ap.add_argument("--results", help="JSON Lines file to append to (default "
                                      f"results/{experiment}-PRESET[-projected].jsonl)")
    ap.add_argument("--p", type=int, action="append",
                    help="only these rank counts (repeat the option); e.g. one per Slurm job")
    ap.add_argument("--project", metavar="MACHINE.json",
                    help="write the cost model's predictions with this machine file instead "
                         "of measuring (distmm calibrate, or machines/cori-knl.json)")
    ap.add_argument("--max-p", type=int, help="with --project: rank counts up to this")
    ap.add_argument("--max-c", type=int, help="only replication factors up to this (the "
                                               "paper's weak-scaling runs stopped at 8)")
    ap.add_argument("--launcher", choices=("mpiexec", "srun"), default="mpiexec")
    ap.add_argument("--mpi-arg", action="append", default=[],
                    help="passed to mpiexec/srun before the program (repeat the option)")
    ap.add_argument("--threads", type=int,
                    help="numba threads per rank (default: NUMBA_NUM_THREADS, else cores / p)")
    ap.add_argument("--bind", choices=("core", "none"), default="core",
                    help="CPU binding of the ranks (launch/distmm-launch --bind)")
    ap.add_argument("--machine", help="machine file for the model column of measured records")
    ap.add_argument("--data-dir", default=DATA_DIR, help="folder of the Matrix Market files")
    ap.add_argument("--list", action="store_true", help="print the configurations and exit")
    if extra:
        extra(ap)
    args = ap.parse_args(argv)
    try:
        if instead is not None and (status := instead(args)) is not None:
            return status
        require(args.preset in presets, f"unknown preset {args.preset!r}: choose one of "
                                        f"{', '.join(presets)}")
        require(args.max_p is None or args.project, "--max-p only applies with --project")
        require(not (args.project and no_projection), f"--project: {no_projection}")
        cfgs = presets[args.preset](args)
        if args.p:
            usable = sorted({cfg["p"] for cfg in cfgs})
            bad = sorted(set(args.p) - set(usable))
            require(not bad, f"{experiment} --preset {args.preset} cannot use p = "
                             f"{', '.join(map(str, bad))}: its rank counts are "
                             f"{', '.join(map(str, usable))}")
            cfgs = [cfg for cfg in cfgs if cfg["p"] in args.p]
        if args.max_c:
            cfgs = [cfg for cfg in cfgs if cfg["c"] <= args.max_c]
        results = args.results or os.path.join(
            "results", f"{experiment}-{args.preset}{'-projected' if args.project else ''}.jsonl")
        if args.list:
            for cfg in cfgs:
                print(key(cfg))
            return 0
        if args.project:
            count = project(cfgs, results, args.project)
        else:
            count = measure(cfgs, results, args.launcher, args.mpi_arg, args.machine,
                            args.threads, args.bind)
    except InputError as exc:
        print(f"{experiment}: {exc}", file=sys.stderr)
        return 2
    print(f"{count} records appended to {results}")
    return 0


def _worker_main() -> None:
    ap = argparse.ArgumentParser(description="internal: measure configurations under MPI")
    ap.add_argument("--worker", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--machine")
    args = ap.parse_args()
    worker(args.worker, args.results, args.machine)


if __name__ == "__main__":
    _worker_main()
