#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the end-to-end check of the sbatch templates.
#
#   slurm/local-cluster.sh start     # write slurm.conf, start munged, slurmctld and slurmd
#   export SLURM_CONF=/tmp/distmm-slurm/slurm.conf     (printed by start)
#   sbatch -N 1 -n 2 slurm/experiment.sbatch count_check.py --preset laptop --p 2
#   slurm/local-cluster.sh status | stop
#
# Needs root and the OS packages: apt-get install -y slurm-wlm munge. The node is this host
# with all its CPUs (nproc); state, logs and the configuration live in $DISTMM_SLURM_DIR
# (default /tmp/distmm-slurm). Only the daemons this script started (their pid files) are
# stopped.
set -euo pipefail
dir="${DISTMM_SLURM_DIR:-/tmp/distmm-slurm}"
conf="$dir/slurm.conf"
host="$(hostname -s)"
cpus="$(nproc)"

need() {
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || {
      echo "local-cluster.sh: $cmd not found: apt-get install -y slurm-wlm munge" >&2; exit 2; }
  done
}

write_conf() {
  mkdir -p "$dir/ctld" "$dir/slurmd" "$dir/munge"
  cat > "$conf" <<EOF
ClusterName=distmm-local
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=pmi2
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  need munged slurmctld slurmd sbatch
  [[ $EUID -eq 0 ]] || { echo "local-cluster.sh: start needs root" >&2; exit 2; }
  write_conf
  if ! alive "$dir/munge/munged.pid"; then
    chown munge:munge "$dir/munge"
    runuser -u munge -- munged --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
      --seed-file="$dir/munge/seed"
  fi
  alive "$dir/slurmctld.pid" || SLURM_CONF="$conf" slurmctld -f "$conf"
  alive "$dir/slurmd.pid" || SLURM_CONF="$conf" slurmd -f "$conf"
  for _ in $(seq 60); do
    if SLURM_CONF="$conf" sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "local Slurm up: export SLURM_CONF=$conf"
      return 0
    fi
    sleep 1
  done
  echo "local-cluster.sh: the node did not become idle; logs in $dir" >&2
  SLURM_CONF="$conf" sinfo >&2 || true
  exit 1
}

stop() {
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if alive "$pidfile"; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile"
  done
  echo "local Slurm stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF="$conf" sinfo && SLURM_CONF="$conf" squeue ;;
  conf) write_conf; echo "$conf" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
