#!/usr/bin/env bash
# Submit one job per node count of a node-count sweep (the loop form; Slurm array jobs cannot
# vary the node count), all appending to the experiment's one results file.
#
#   slurm/sweep.sh TEMPLATE "N1 N2 ..." [--ranks-per-node K] [--threads T] [--dry-run] \
#       [-- script arguments]
#   slurm/sweep.sh slurm/weak_scaling.sbatch "1 2 4 8 16" -- --setup 1 --preset paper
#
# Each job gets N nodes, K ranks per node (default 1) and T cores per rank (default: the whole
# node, --exclusive); p = N K must be a rank count of the preset. --dry-run prints the sbatch
# commands.
set -euo pipefail
template="${1:?give an sbatch template}"; nodes="${2:?give the node counts}"; shift 2
per_node=1; threads=""; dry=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks-per-node) per_node="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    *) echo "sweep.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -f "$template" ]] || { echo "sweep.sh: no template $template" >&2; exit 2; }
for n in $nodes; do
  cmd=(sbatch -N "$n" --ntasks-per-node="$per_node")
  if [[ -n "$threads" ]]; then cmd+=(--cpus-per-task="$threads"); else cmd+=(--exclusive); fi
  cmd+=("$template" "$@")
  if (( dry )); then printf '%q ' "${cmd[@]}"; echo; else "${cmd[@]}"; fi
done
