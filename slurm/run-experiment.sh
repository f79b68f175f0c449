#!/usr/bin/env bash
# Run one experiment script at the allocation's rank count (called by the slurm/*.sbatch
# templates inside a job; not an sbatch script itself).
#
#   slurm/run-experiment.sh SCRIPT.py [script arguments...]
#
# p = SLURM_NTASKS (nodes x ranks per node); each rank gets SLURM_CPUS_PER_TASK numba threads
# (default: all the cores of its node divided by the ranks per node) and is bound to them
# (srun --cpu-bind=cores). The script measures the preset's configurations at this p only and
# appends to its results file, so one job per node count fills one file.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
script="${1:?give the experiment script, e.g. weak_scaling.py}"; shift
[[ -f "experiments/$script" ]] || { echo "run-experiment.sh: no experiments/$script" >&2; exit 2; }
[[ -n "${SLURM_JOB_ID:-}" ]] || { echo "run-experiment.sh: run inside a Slurm job (sbatch)" >&2; exit 2; }
p="${SLURM_NTASKS:?the job needs --ntasks or --ntasks-per-node}"
per_node="${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-1}}"  # set by -n alone too
per_node="${per_node%%(*}"  # "2(x3)" -> 2
threads="${SLURM_CPUS_PER_TASK:-$(( ${SLURM_CPUS_ON_NODE:-$(nproc)} / per_node ))}"
(( threads >= 1 )) || threads=1
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
mkdir -p results
echo "distmm $script: p=$p (${SLURM_JOB_NUM_NODES:-1} nodes x $per_node), $threads threads per rank"
exec .venv/bin/python "experiments/$script" --launcher srun --p "$p" --threads "$threads" "$@"
