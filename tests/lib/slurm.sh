#!/usr/bin/env bash
# Start a throw-away one-host Slurm cluster (Debian's slurm-wlm 22.05) with
# its own munged, everything under DIR, nothing shared with the system.
#   slurm.sh start DIR   -> writes DIR/slurm.conf, DIR/gres.conf, DIR/env
#   slurm.sh stop DIR    -> cancels the jobs, stops every daemon started here
# Clients (sbatch, squeue, scontrol, scancel) need only `. DIR/env`, which
# sets SLURM_CONF; slurm.conf names the munge socket (AuthInfo).
# Cluster: slurmctld and two slurmd (nodes n1, n2) on 127.0.0.1, on ports
# picked now. Each node has all of this machine's CPUs; jobs go to the least
# loaded node, so two 1-CPU jobs run one on each. Partitions: debug (default,
# n1 and n2) and gpu (n2 only; it has gres gpu:2, backed by /dev/null and
# /dev/zero, so jobs get CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS).
# Started by root, the daemons run as root and anybody's jobs run as their
# owner; started by another user, they run as that user and can run only
# that user's jobs (others fail: slurmstepd cannot chown their files).
# DIR is made readable by all (other users' clients and munged need that);
# its parents must be searchable by those users.
# Finished jobs stay in squeue -t all / scontrol show job for 5 minutes (no
# sacct: there is no slurmdbd). A requeued job starts again after ~5 s.
# After IMGBUILD_SLURM_LIFETIME seconds (default 3 h) a watchdog runs `stop`
# by itself; each daemon also runs under `timeout` in case DIR is gone.
set -euo pipefail
cmd=$1 dir=$2
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
lifetime=${IMGBUILD_SLURM_LIFETIME:-10800}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Run a daemon in the foreground in a session of its own (so that `stop`
# can kill the whole process group), pid recorded in DIR/NAME.pid.
spawn() {
  local name=$1; shift
  setsid timeout "$((lifetime + 60))" "$@" >"$dir/$name.out" 2>&1 </dev/null &
  echo $! > "$dir/$name.pid"
}
# Is any of these processes, or of the process groups they lead, alive?
alive() {
  local p
  for p in "$@"; do { kill -0 "$p" || kill -0 -- "-$p"; } 2>/dev/null && return 0; done
  return 1
}
case "$cmd" in
start)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # A fresh cluster each time: slurmctld refuses old state of another
  # ClusterName.
  rm -rf "$dir/state" "$dir/spool-n1" "$dir/spool-n2"
  mkdir -p "$dir/state" "$dir/munge" "$dir/spool-n1" "$dir/spool-n2"
  chmod 755 "$dir"
  user=$(id -un)
  host=$(hostname -s)
  ctld_port=$(free_port) n1_port=$(free_port) n2_port=$(free_port)
  cat > "$dir/gres.conf" <<EOF
# Fake GPUs: slurmd wants character devices; nothing opens them.
AutoDetect=off
NodeName=n2 Name=gpu File=/dev/null
NodeName=n2 Name=gpu File=/dev/zero
EOF
  # Debian's slurmd takes -N NODE, so one host runs both nodes, told apart
  # by their ports. cred_expire is also how long a requeued job must wait
  # before it starts again (default 120 s; 5 is the least Slurm takes).
  cat > "$dir/slurm.conf" <<EOF
ClusterName=imgbuild$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pidfile
SlurmdPidFile=$dir/slurmd-%n.pidfile
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU,CR_LLN
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
ReturnToService=2
JobRequeue=1
MinJobAge=300
KillWait=5
GresTypes=gpu
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$n1_port CPUs=$(nproc) RealMemory=1000
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$n2_port CPUs=$(nproc) RealMemory=1000 Gres=gpu:2
PartitionName=debug Nodes=n1,n2 Default=YES State=UP
PartitionName=gpu Nodes=n2 State=UP
EOF
  echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"
  mungekey -c -f -k "$dir/munge.key"
  # --force: munged wants every directory above its socket searchable by
  # all, which a mktemp -d parent is not.
  spawn munged munged -F --force --key-file="$dir/munge.key" -S "$dir/munge/munge.sock" \
    --pid-file="$dir/munged.pidfile" --seed-file="$dir/munged.seed"
  for _ in $(seq 1 50); do [ -S "$dir/munge/munge.sock" ] && break; sleep 0.1; done
  spawn slurmctld slurmctld -D -f "$dir/slurm.conf"
  spawn slurmd-n1 slurmd -D -N n1 -f "$dir/slurm.conf"
  spawn slurmd-n2 slurmd -D -N n2 -f "$dir/slurm.conf"
  setsid bash -c 'sleep "$1" && exec bash "$2" stop "$3"' watchdog "$lifetime" "$self" "$dir" \
    >/dev/null 2>&1 </dev/null &
  echo $! > "$dir/watchdog.pid"
  export SLURM_CONF=$dir/slurm.conf
  # Up when both nodes are idle; give up as soon as a daemon dies.
  for _ in $(seq 1 100); do
    [ "$(timeout 5 sinfo -h -N -p debug -o %t 2>/dev/null | grep -c -E '^(idle|mix|alloc)$')" = 2 ] && exit 0
    for p in $(cat "$dir"/munged.pid "$dir"/slurm*.pid); do alive "$p" || break 2; done
    sleep 0.2
  done
  echo "slurm.sh: cluster did not come up:" >&2
  tail -n 3 "$dir"/*.out >&2 || true
  bash "$self" stop "$dir"
  exit 1
  ;;
stop)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  export SLURM_CONF=$dir/slurm.conf
  # Cancel what is left, so that slurmstepd ends the jobs' processes
  # (proctrack/linuxproc) and exits by itself. `timeout`: a slurmctld on
  # its way out accepts connections and answers none.
  if [ -f "$dir/slurmctld.pid" ] && alive "$(cat "$dir/slurmctld.pid")"; then
    jobs=$(timeout 5 squeue -h -o %A 2>/dev/null || true)
    [ -z "$jobs" ] || timeout 5 scancel $jobs 2>/dev/null || true
    for _ in $(seq 1 50); do
      [ -z "$jobs" ] || [ -z "$(timeout 5 squeue -h -t R,CG,CF,S -o %A 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  # Every daemon leads its own process group; the watchdog may be the
  # one running this, and must not kill itself.
  pids=$(cat "$dir"/*.pid 2>/dev/null | grep -vx $$ || true)
  if [ -n "$pids" ]; then
    kill -TERM -- $(printf -- '-%s ' $pids) 2>/dev/null || true
    for _ in $(seq 1 100); do alive $pids || break; sleep 0.1; done
    kill -KILL -- $(printf -- '-%s ' $pids) 2>/dev/null || true
  fi
  # slurmstepd leaves slurmd's session and outlives it, on purpose, and it
  # ignores SIGTERM. It keeps our slurmd log open, which finds it; its
  # descendants are the jobs' processes.
  stepds=$( (find /proc/[0-9]*/fd -lname "$dir/slurmd-*.log" 2>/dev/null || true) | cut -d/ -f3 | sort -u)
  if [ -n "$stepds" ]; then
    stepds=$(ps -e -o pid=,ppid= | awk -v roots="$stepds" '
      BEGIN { n = split(roots, r); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
      { parent[$1] = $2 }
      END { do { more = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; more = 1 } } while (more)
            for (p in keep) print p }')
    kill -KILL $stepds 2>/dev/null || true
    for _ in $(seq 1 50); do alive $stepds || break; sleep 0.1; done
  fi
  rm -f "$dir"/*.pid
  ;;
*) echo "usage: slurm.sh start DIR | stop DIR" >&2; exit 2 ;;
esac
