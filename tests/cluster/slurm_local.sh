#!/usr/bin/env bash
# A throwaway single-node Slurm on this machine for the cluster tests (docs/CLUSTER.md).
#   slurm_local.sh start DIR   writes DIR/slurm.conf, starts munged (unless running),
#                              slurmctld and slurmd, waits until the node is idle; prints
#                              the line to eval: export SLURM_CONF=DIR/slurm.conf
#   slurm_local.sh stop DIR    stops what `start DIR` started (idempotent)
# Needs root and the Debian packages slurmctld slurmd slurm-client munge
# (tools/bootstrap.sh --cluster). Everything Slurm writes stays in DIR.
set -euo pipefail
cmd=${1:?usage: slurm_local.sh start|stop DIR}
dir=${2:?usage: slurm_local.sh start|stop DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export SLURM_CONF=$dir/slurm.conf

stop() {
  if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    timeout 10 scontrol shutdown >/dev/null 2>&1 || true
  fi
  for d in slurmd slurmctld; do
    f=$dir/$d.pid
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  # munged only if this script started it.
  if [ -f "$dir/munged.started" ]; then
    pid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    rm -f "$dir/munged.started"
  fi
}

case $cmd in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "slurm_local.sh: unknown command '$cmd' (start|stop)" >&2; exit 2 ;;
esac

for p in slurmctld slurmd sbatch munged munge; do
  command -v $p >/dev/null || [ -x /usr/sbin/$p ] || {
    echo "slurm_local.sh: $p not found; install slurmctld slurmd slurm-client munge (tools/bootstrap.sh --cluster)" >&2; exit 3; }
done
[ "$(id -u)" -eq 0 ] || { echo "slurm_local.sh: needs root (SlurmUser=root)" >&2; exit 3; }
stop  # leftovers of an earlier run in this directory

host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
mkdir -p "$dir/state" "$dir/spool" "$dir/log"
cat > "$SLURM_CONF" <<CONF
ClusterName=ablate-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ReturnToService=2
MinJobAge=600
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

# A munged that answers (not a process name: a dead daemon may linger as a zombie).
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged --force
  touch "$dir/munged.started"
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
/usr/sbin/slurmctld -f "$SLURM_CONF"
/usr/sbin/slurmd -f "$SLURM_CONF"
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "slurm_local.sh: the node did not become idle within 30 s (state '${state:-none}'); logs in $dir/log" >&2
stop
exit 1
