#!/usr/bin/env bash
# A real one-node Slurm on this machine, for the Slurm tests (tests/test_slurm.py) and for trying
# docs/cluster.md's Slurm section by hand: Debian's slurm-wlm and munge, installed where missing.
#   bash scripts/slurm_local.sh start   # install if needed, write the config, start munged,
#                                       # slurmctld and slurmd; returns once the node is idle
#   bash scripts/slurm_local.sh stop    # stop the three daemons
# Settings (issue 53, tried on 2026-11-28): a generated munge key, proctrack/linuxproc, task/none,
# jobacct_gather/none, select/cons_tres, one node with this machine's CPUs; every job may be
# requeued (JobRequeue=1). Runs as root (CI does); the state lives under /var/lib/cliffsweep-slurm.
set -euo pipefail
STATE=/var/lib/cliffsweep-slurm
CONF=/etc/slurm/slurm.conf
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

install() {
  if command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v sbatch >/dev/null; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null \
    || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null; }
}

configure() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  $SUDO mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" /var/log/slurm /run/munge /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  $SUDO chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
  $SUDO chmod 0700 /etc/munge && $SUDO chmod 0400 /etc/munge/munge.key
  $SUDO tee "$CONF" >/dev/null <<CONF
ClusterName=cliffsweep
SlurmctldHost=$host
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  install
  configure
  pgrep -x munged >/dev/null || $SUDO -u munge munged 2>/dev/null || $SUDO munged --force
  pgrep -x slurmctld >/dev/null || $SUDO slurmctld
  pgrep -x slurmd >/dev/null || $SUDO slurmd
  for _ in $(seq 1 60); do
    if sinfo -h -o '%t' 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; then
      sinfo
      return 0
    fi
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  echo "slurm did not come up: see /var/log/slurm/" >&2
  exit 1
}

stop() {
  for d in slurmd slurmctld munged; do
    $SUDO pkill -x "$d" 2>/dev/null || true
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
