#!/usr/bin/env bash
# slurm.sh - a throw-away Slurm cluster on the bed of netns.sh, and its smoke job.
#
# Run alone, it installs what it needs (scripts/ensure-deps.sh cluster: slurmctld, slurmd,
# slurm-client, munge), makes its own bed, starts Slurm, runs the smoke job, stops
# everything it started and removes its files.  Sourced by run.sh, it only defines
# slurm_up, slurm_down and job_slurm_smoke.
#
# The cluster: munged, slurmctld (and its slurmscriptd) in h1; one slurmd per host, named
# h1..h3 (slurmd -N), 2 CPUs each, so `srun -N 3 -n 4` spreads over the three namespaces.
# Every file (slurm.conf, munge key and socket, state, spool, logs, pid files) is in one
# temporary directory; nothing in /etc, /run or /var is used.  The daemons listen inside
# the namespaces only, so their ports (6817, 6818) cannot collide with anything else on the
# machine.
#
#   slurm.conf: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none (no cgroups to set
#   up), SelectType=select/cons_tres with CR_CPU, SlurmdParameters=config_overrides (the
#   CPUs of the node lines are trusted, whatever the hardware), AuthType=auth/munge on the
#   private munge socket, SlurmUser=root, no accounting.
#
# slurmd runs under nsenter --net, not ip netns exec: ip netns exec remounts /sys, hiding
# /sys/fs/cgroup, and slurmd 22.05 refuses to start without its cgroup plugin even with the
# plugins above (it only reads the hierarchy; it creates nothing there).  It gets a private
# mount namespace (unshare -m) with the bed's /etc/hosts bound over /etc/hosts, as ip netns
# exec would, so that in a task the node names h1..h3 resolve to the bed's addresses, and
# its own host name (hK), as netns.sh exec gives.

# slurm_up: starts the cluster in SLURM_DIR (default WORK/slurm) and waits until sinfo shows
# the 3 nodes idle (at most 30 s).  Exports SLURM_CONF for srun, sbatch and sinfo.
slurm_up() {
  local d=${SLURM_DIR:-$WORK/slurm} k state _
  for k in slurmctld slurmd srun sbatch sinfo munged mungekey; do
    command -v "$k" >/dev/null || skip "$k is not installed (scripts/ensure-deps.sh cluster installs slurmctld slurmd slurm-client munge)"
  done
  mkdir -p "$d/state" "$d"/spool-h{1,2,3}
  chmod 0711 "$d" # munged wants its socket's directory searchable by all
  mungekey --create --keyfile="$d/munge.key"
  nsenter --net="/run/netns/$(host_ns h1)" munged --foreground --socket="$d/munge.sock" --key-file="$d/munge.key" \
    --pid-file="$d/munged.pid" --log-file="$d/munged.log" --seed-file="$d/munged.seed" --origin="$(host_ip h1)" \
    </dev/null >"$d/munged.out" 2>&1 &
  echo "munged $!" >>"$d/pids"
  cat >"$d/slurm.conf" <<EOF
ClusterName=flt
SlurmctldHost=$(hostname -s)($(host_ip h1))
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$d/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=h1 NodeAddr=$(host_ip h1) CPUs=2 State=UNKNOWN
NodeName=h2 NodeAddr=$(host_ip h2) CPUs=2 State=UNKNOWN
NodeName=h3 NodeAddr=$(host_ip h3) CPUs=2 State=UNKNOWN
PartitionName=flt Nodes=h[1-3] Default=YES MaxTime=10 State=UP
EOF
  export SLURM_CONF=$d/slurm.conf
  for _ in $(seq 50); do [ -S "$d/munge.sock" ] && break; sleep 0.1; done
  [ -S "$d/munge.sock" ] || { say "FAIL: munged did not start"; tail -n 5 "$d/munged.out" "$d/munged.log" 2>/dev/null; return 1; }
  nsenter --net="/run/netns/$(host_ns h1)" slurmctld -D -f "$SLURM_CONF" </dev/null >"$d/slurmctld.out" 2>&1 &
  echo "slurmctld $!" >>"$d/pids"
  for k in 1 2 3; do
    nsenter --net="/run/netns/$(host_ns h$k)" unshare --mount --propagation private --uts sh -c \
      'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"' "h$k" "/etc/netns/$(host_ns h$k)/hosts" \
      slurmd -D -N "h$k" -f "$SLURM_CONF" </dev/null >"$d/slurmd-h$k.out" 2>&1 &
    echo "slurmd $!" >>"$d/pids"
  done
  for _ in $(seq 300); do
    state=$(on h1 sinfo -h -o '%t %D' 2>/dev/null || true)
    [ "$state" = "idle 3" ] && return 0
    sleep 0.1
  done
  say "FAIL: the nodes are not idle after 30 s (sinfo: ${state:-no answer})"
  tail -n 5 "$d"/slurmctld.out "$d"/slurmd-h*.out 2>/dev/null | sed 's/^/    | /'
  return 1
}

# slurm_down: stops the daemons slurm_up started, each by its pid (TERM, up to 10 s, KILL),
# and removes SLURM_DIR.  Idempotent; a pid that is no longer ours (its command line does
# not name SLURM_DIR) is left alone.
slurm_down() {
  local d=${SLURM_DIR:-$WORK/slurm} name pid alive _
  [ -d "$d" ] || return 0
  if [ -f "$d/pids" ]; then
    while read -r name pid; do
      grep -qF "$d" "/proc/$pid/cmdline" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
    done <"$d/pids"
    for _ in $(seq 100); do
      alive=0
      while read -r name pid; do grep -qF "$d" "/proc/$pid/cmdline" 2>/dev/null && alive=1; done <"$d/pids"
      [ $alive = 0 ] && break
      sleep 0.1
    done
    while read -r name pid; do
      grep -qF "$d" "/proc/$pid/cmdline" 2>/dev/null && { echo "slurm.sh: $name (pid $pid) ignored SIGTERM; SIGKILL" >&2; kill -KILL "$pid"; }
    done <"$d/pids"
  fi
  wait 2>/dev/null || true
  # each slurmstepd is a daemon (its parent is init); wait until init has reaped the last
  # ones, so that nothing named slurm is left, not even a zombie
  for _ in $(seq 100); do
    ps -eo ppid=,stat=,comm= | awk '$1 == 1 && $2 ~ /^Z/ && $3 == "slurmstepd" { f = 1 } END { exit !f }' || break
    sleep 0.1
  done
  rm -rf "$d"
  unset SLURM_CONF
}

# d. The smoke job: tasks spread over the 3 hosts, SLURM_PROCID 0..3, and a batch job.
job_slurm_smoke() {
  trap 'slurm_down' EXIT
  slurm_up
  local d=${SLURM_DIR:-$WORK/slurm} k ok=0
  on h1 timeout 60 srun -N 3 -n 4 sh -c \
    'echo "$SLURM_PROCID $SLURMD_NODENAME $(ip -4 -o addr show dev eth0 | awk "{print \$4}") $(getent hosts "$SLURMD_NODENAME" | cut -d" " -f1)"' \
    >"$JOBDIR/srun.out" 2>"$JOBDIR/srun.err" || { say "FAIL: srun -N 3 -n 4"; sed 's/^/    | /' "$JOBDIR/srun.err"; return 1; }
  sort -n "$JOBDIR/srun.out" | sed 's/^/    task /'
  for k in 1 2 3; do
    expect "a task ran on node h$k, inside its namespace ($(host_ip h$k)), where h$k resolves to it" \
      grep -q " h$k $(host_ip h$k)/24 $(host_ip h$k)\$" "$JOBDIR/srun.out" || ok=1
  done
  expect "no task ran outside its node's namespace" \
    awk '{ n = substr($2, 2); a = $3; sub(/.*\./, "", a); sub(/\/.*/, "", a); if (n != a) exit 1 }' "$JOBDIR/srun.out" || ok=1
  on h1 timeout 60 srun -n 4 env | grep '^SLURM_PROCID=' | sort >"$JOBDIR/procid.out" || true
  expect "srun -n 4 env: SLURM_PROCID 0..3, once each" \
    diff <(printf 'SLURM_PROCID=%d\n' 0 1 2 3) "$JOBDIR/procid.out" || ok=1
  cat >"$JOBDIR/batch.sh" <<'EOF'
#!/bin/sh
#SBATCH -N 2 -n 2
srun sh -c 'echo "task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME in job $SLURM_JOB_ID ($SLURM_JOB_NODELIST)"'
EOF
  expect "sbatch --wait of a 2-node script exits 0" \
    on h2 timeout 60 sbatch --wait -o "$JOBDIR/batch.out" "$JOBDIR/batch.sh" >"$JOBDIR/sbatch.out" 2>&1 || ok=1
  sed 's/^/    /' "$JOBDIR/batch.out" 2>/dev/null || true
  expect "the batch job's 2 tasks ran on 2 nodes" \
    [ "$(grep -c '^task [01] of 2 on h[123] ' "$JOBDIR/batch.out" 2>/dev/null)" = 2 ] || ok=1
  [ $ok = 0 ] || { tail -n 5 "$d"/slurmctld.log "$d"/slurmd-h*.log 2>/dev/null | sed 's/^/    | /'; return 1; }
  slurm_down
  trap - EXIT
}

# Collective training as an srun step on h1 and h2: the Slurm role maker (fleet_init finds
# srun from SLURM_PROCID and SLURM_STEP_ID) derives every endpoint from the node list.
job_srun_collective() {
  trap 'slurm_down' EXIT
  fmnist_setup
  slurm_up
  start coll h1 srun -N 2 -n 2 "${FMNIST_CMD[@]}"
  fmnist_finish coll
  slurm_down
  trap - EXIT
}

# Parameter servers as an srun step: FLEET_SLURM_SERVERS=2 of 4 tasks on 3 nodes (block
# layout: h1 tasks 0, 1 = servers 0, 1; h2 task 2 = worker 0; h3 task 3 = worker 1), the
# test AUC within 0.005 of the local run, as ps_ctr_async.
job_srun_ps() {
  trap 'slurm_down' EXIT
  ctr_data
  slurm_up
  new_secret
  # shellcheck disable=SC2046
  start ps h1 env FLEET_SLURM_SERVERS=2 srun -N 3 -n 4 "$BUILD/examples/ctr/train" --epochs 2 \
    --model_dir "$JOBDIR/ps_model" $(ctr_args) --strategy a_sync_configs.send_queue_size=2 \
    --strategy a_sync_configs.max_merge_var_num=2
  await 180 ps || { show ps; return 1; }
  expect "srun exited 0" [ "$(rc_of ps)" = 0 ] || { show ps; return 1; }
  ctr_auc_check "$JOBDIR/ps.out" 2
  slurm_down
  trap - EXIT
}

# slurm_task_pid PROCID PROGRAM: "PID HOST" of the process PROGRAM (its command name) that
# runs as task PROCID of a step (SLURM_PROCID in its environment), in any host of the bed
slurm_task_pid() {
  local k p
  for k in 1 2 3; do
    for p in $(ip netns pids "$(host_ns h$k)" 2>/dev/null); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] &&
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=$1" && { echo "$p h$k"; return 0; }
    done
  done
  return 1
}

# The batch script of docs/clusters.md ("A batch script"), taken from there as it is, with
# CTR (a wrapper that adds this bed's CTR options: 3 epochs), DATA and CKPT set: sbatch
# --wait on the 3 nodes (2 servers, 2 workers).  Once the first checkpoint is committed,
# kill -9 of task 3 (worker 1): --kill-on-bad-exit ends the step, the script's loop starts
# a new one, which resumes from the checkpoint; sbatch exits 0 and the test AUC is within
# 0.005 of the local run.
job_sbatch_ps_restart() {
  trap 'slurm_down' EXIT
  local doc=$HERE/../../docs/clusters.md t_kill t_res='' _ pid host ok=0
  sed -n '/^<!-- tests\/cluster: sbatch_ps_restart runs this script -->$/,/^```$/p' "$doc" | sed '1,2d;$d' \
    >"$JOBDIR/ctr.sbatch"
  grep -q '^#SBATCH' "$JOBDIR/ctr.sbatch" || { say "FAIL: no batch script in $doc"; return 1; }
  ctr_data
  ctr_local 3 >/dev/null
  mkdir -p "$JOBDIR/home"
  # shellcheck disable=SC2046
  printf '#!/bin/sh\nexec %s "$@" %s --epochs 3 --model_dir %s\n' "$BUILD/examples/ctr/train" "$(ctr_args)" \
    "$JOBDIR/ps_model" >"$JOBDIR/ctr.sh"
  chmod +x "$JOBDIR/ctr.sh"
  slurm_up
  # not sbatch --wait: it polls the job's state at growing intervals (30 s late here)
  start batch h1 env -u FLEET_JOB_SECRET HOME="$JOBDIR/home" CTR="$JOBDIR/ctr.sh" DATA="$WORK/ctr-data" \
    CKPT="$JOBDIR/checkpoints" FLEET_LOG_LEVEL=info sbatch --parsable -D "$JOBDIR" -o "$JOBDIR/batch.log" "$JOBDIR/ctr.sbatch"
  await 30 batch && [ "$(rc_of batch)" = 0 ] || { show batch; return 1; }
  for _ in $(seq 900); do compgen -G "$JOBDIR/checkpoints/ckpt-*/checkpoint.json" >/dev/null && break; sleep 0.1; done
  compgen -G "$JOBDIR/checkpoints/ckpt-*/checkpoint.json" >/dev/null ||
    { say "FAIL: no checkpoint committed after 90 s"; tail -n 20 "$JOBDIR/batch.log"; return 1; }
  read -r pid host < <(slurm_task_pid 3 train) || { say "FAIL: no process of task 3"; return 1; }
  kill -KILL "$pid"
  t_kill=$(now)
  say "killed task 3 (worker 1, pid $pid on $host) with SIGKILL"
  for _ in $(seq 3000); do
    grep -q '] resumed from checkpoint ' "$JOBDIR/batch.log" 2>/dev/null && { t_res=$(now); break; }
    sleep 0.02
  done
  # the job's end: its state, polled every 0.2 s for at most 180 s
  local id state=''
  id=$(head -1 "$JOBDIR/batch.out")
  for _ in $(seq 900); do
    state=$(on h1 scontrol show job -o "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]* .*ExitCode=[0-9:]*' |
      sed 's/ .* / /') || true
    case $state in JobState=PENDING* | JobState=RUNNING* | JobState=COMPLETING* | '') sleep 0.2 ;; *) break ;; esac
  done
  expect "batch job $id ended with exit code 0, $(secs_between "$t_kill" "$(now)") s after the kill ($state)" \
    [ "$state" = "JobState=COMPLETED ExitCode=0:0" ] || ok=1
  expect "the script started a second step" grep -q '^step 0 failed; the next one resumes' "$JOBDIR/batch.log" || ok=1
  expect "both workers resumed from the checkpoint" [ "$(grep -c '^resumed after epoch [01] from' "$JOBDIR/batch.log")" = 2 ] || ok=1
  [ $ok = 0 ] || { grep -v '^\[fleet [IW]' "$JOBDIR/batch.log" | tail -n 30 | sed 's/^/    | /'; return 1; }
  say "kill -> first step of the new srun step: $(ms_between "$t_kill" "$t_res") ms"
  ctr_auc_check "$JOBDIR/batch.log" 3
  slurm_down
  trap - EXIT
}

# Run alone: own bed, own temporary directory, everything removed on exit.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  HERE=$(cd "$(dirname "$0")" && pwd)
  "$HERE/../../scripts/ensure-deps.sh" cluster
  export CLUSTER_ID=${CLUSTER_ID:-${CI_JOB_ID:+ci$CI_JOB_ID-}s$$} NET=${CLUSTER_NET:-10.213.7}
  export CLUSTER_NET=$NET
  WORK=$(mktemp -d /tmp/flt-slurm.XXXXXX)
  chmod 0711 "$WORK" # munged wants every directory above its socket searchable
  # shellcheck source=lib.sh
  . "$HERE/lib.sh"
  trap 'slurm_down; "$HERE/netns.sh" down; rm -rf "$WORK"' EXIT
  trap 'exit 130' INT TERM HUP
  "$HERE/netns.sh" up
  JOBDIR=$WORK/job
  mkdir -p "$JOBDIR"
  cd "$JOBDIR"
  t0=$(now)
  (job_slurm_smoke) & # not in a condition, so that errexit holds inside
  rc=0
  wait $! || rc=$?
  case $rc in
    0) echo "PASS slurm_smoke ($(secs_between "$t0" "$(now)") s)" ;;
    77) echo "SKIP slurm_smoke"; exit 77 ;;
    *) echo "FAIL slurm_smoke"; exit 1 ;;
  esac
fi
