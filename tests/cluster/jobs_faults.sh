# shellcheck shell=bash
# jobs_faults.sh - a process of a parameter-server job killed in the middle of a run
# (sourced by run.sh; see README.md).  Uses ps_start, ctr_data, ctr_args and ctr_auc_check
# of jobs_ps.sh.
#
#   without --max_restart (ps_killed): the 3-host CTR job of jobs_ps.sh, kill -9 of a worker
#     or a server; every host's fleetrun must exit non-zero within CLUSTER_FAULT_BOUND_S
#     (10) of the kill, the killed process's host naming it as the root cause and the other
#     hosts naming it (role, index and address) as the peer that vanished.
#   with --max_restart 1 (ps_restart): fleetrun --master on h1 and h2, the CTR example with
#     --checkpoint_dir (a checkpoint after every epoch); kill -9 of a worker or a server in
#     the middle of the epoch after the first committed checkpoint.  The job restarts on
#     both nodes from that checkpoint (the servers load its tables, the workers their state
#     and position), every fleetrun exits 0, and the test AUC is within 0.005 of the local
#     run.  The job prints the time from the kill to each worker's first step of the
#     restarted job and the training lost (what ran after the checkpoint's commit).

# kill_started NAME HOST ROLE INDEX: kill -9 of the process that fleetrun NAME (on HOST)
# started first as ROLE INDEX, after checking that this pid is inside HOST.  Sets KILLED
# (its pid) and T_KILL (the time of the kill).
kill_started() {
  KILLED=$(sed -n "s/.*started $3 $4 (pid \([0-9]*\)).*/\1/p" "$JOBDIR/$1.err" | head -1)
  if [ -z "$KILLED" ] || ! pid_in_host "$KILLED" "$2"; then
    say "FAIL: no pid of $3 $4 in $2's fleetrun output"
    show "$1"
    return 1
  fi
  kill -KILL "$KILLED"
  T_KILL=$(now)
  say "killed $3 $4 (pid $KILLED on $2) with SIGKILL"
}

# ps_killed ROLE INDEX HOST PORT: the 3-host layout of jobs_ps.sh (h1: server 0; h2: server
# 1, worker 0; h3: worker 1) on ports PORT.., 20 epochs of CTR; once worker 1 finished its
# first epoch, kill -9 of ROLE INDEX, which runs on HOST.
ps_killed() {
  local role=$1 idx=$2 host=$3 bound=${CLUSTER_FAULT_BOUND_S:-10} h ok=0 last=0 t
  # shellcheck disable=SC2034 # read by ps_servers and ps_workers (jobs_ps.sh)
  PS_PORT=$4
  ctr_data
  # shellcheck disable=SC2046
  ps_start "$BUILD/examples/ctr/train" --epochs 20 --model_dir "$JOBDIR/ps_model" $(ctr_args)
  # the middle: worker 1 finished its first epoch (the job would take 20)
  wait_for 90 "$JOBDIR/ps_h3.log/workerlog.1" '^epoch 0:' || { show ps_h1 ps_h2 ps_h3; return 1; }
  kill_started "ps_$host" "$host" "$role" "$idx" || return 1
  await 60 ps_h1 ps_h2 ps_h3 || { show ps_h1 ps_h2 ps_h3; return 1; }
  for h in h1 h2 h3; do
    t=$(secs_between "$T_KILL" "$(end_of "ps_$h")")
    say "$h: fleetrun exited with status $(rc_of "ps_$h") $t s after the kill"
    awk -v a="$t" -v b="$last" 'BEGIN { exit !(a > b) }' && last=$t
  done
  say "kill -> every fleetrun exited: $last s"
  expect "$host's fleetrun exited non-zero (128+9)" [ "$(rc_of "ps_$host")" = 137 ] || ok=1
  sed -n '/root cause/,/=====$/p' "$JOBDIR/ps_$host.err" >"$JOBDIR/root_cause_$host"
  expect "$host's root cause names $role $idx, host $(host_ip "$host"), pid $KILLED, SIGKILL" \
    has_lines "$JOBDIR/root_cause_$host" "role: +$role\$" "rank: +$idx\$" "host: +$(host_ip "$host")( |\$)" \
    "pid: +$KILLED\$" 'status: +killed by signal SIGKILL' || ok=1
  for h in h1 h2 h3; do
    [ "$h" = "$host" ] && continue
    expect "$h's fleetrun exited non-zero" [ "$(rc_of "ps_$h")" != 0 ] || ok=1
    expect "$h's fleetrun exited within ${bound} s of the kill" \
      awk -v a="$T_KILL" -v b="$(end_of "ps_$h")" -v s="$bound" 'BEGIN { exit !(b - a <= s) }' || ok=1
    expect "$h's report names the dead $role ($role $idx at $(host_ip "$host"))" \
      grep -q "$role $idx ($(host_ip "$host"):" "$JOBDIR/ps_$h.err" || ok=1
  done
  [ $ok = 0 ] || { show ps_h1 ps_h2 ps_h3; return 1; }
  # the last line of the first other host's report that names the process, shortened
  local name
  name="$role $idx ($(host_ip "$host"):"
  for h in h1 h2 h3; do [ "$h" = "$host" ] || grep -ah "$name" "$JOBDIR/ps_$h.err" | tail -1 || true; done |
    head -1 | sed 's/^fleetrun: *| *//' | cut -c1-240 | sed 's/^/    /' || true
  return 0
}

# c. kill -9 of worker 1 (h3): h3's fleetrun exits 137 naming it; the servers of h1 and h2
#    see worker 1 vanish ("worker 1 (10.213.7.3:...) lost its connections ...").
job_ps_worker_killed() { ps_killed worker 1 h3 6370; }

# kill -9 of server 0 (h1): h1's fleetrun exits 137 naming it; the workers of h2 and h3
#    fail once their retries of server 0 give up ("push_dense on server 0 (10.213.7.1:...)").
job_ps_server_killed() { ps_killed server 0 h1 6670; }

# newest_commit DIR: the modification time (s.ms) of the newest checkpoint.json under DIR
newest_commit() {
  local f t best=
  for f in "$1"/ckpt-*/checkpoint.json; do
    t=$(stat -c '%.3Y' "$f" 2>/dev/null) || continue
    [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a > b) }' && best=$t
  done
  echo "$best"
}

# ps_restart ROLE INDEX HOST PORT: fleetrun --master HOST1:PORT --nnodes 2 --max_restart 1
# on h1 and h2, each with 1 server and 1 worker (nodes ranked by address: h1 runs server 0
# and worker 0, h2 server 1 and worker 1), CTR for 3 epochs with --checkpoint_dir; kill -9
# of ROLE INDEX (on HOST) half an epoch after the first checkpoint is committed.
ps_restart() {
  local role=$1 idx=$2 host=$3 h w ok=0 t_ep n_ex t_commit ckpt=$JOBDIR/checkpoints
  local logs=("$JOBDIR/ps_h1.log/workerlog.0" "$JOBDIR/ps_h2.log/workerlog.1") t_res=("" "")
  ctr_data
  ctr_local 3 >/dev/null
  new_secret
  for h in h1 h2; do
    # shellcheck disable=SC2046
    fleetrun_on "ps_$h" "$h" --master "$(host_ip h1):$4" --nnodes 2 --max_restart 1 --server_num 1 --worker_num 1 \
      --log_level info --node_ip "$(host_ip "$h")" "$BUILD/examples/ctr/train" --epochs 3 --model_dir "$JOBDIR/ps_model" \
      --checkpoint_dir "$ckpt" $(ctr_args)
  done
  # the checkpoint of epoch 0 is committed once its checkpoint.json exists
  local _
  for _ in $(seq 900); do compgen -G "$ckpt/ckpt-*/checkpoint.json" >/dev/null && break; sleep 0.1; done
  compgen -G "$ckpt/ckpt-*/checkpoint.json" >/dev/null ||
    { say "FAIL: no checkpoint committed after 90 s"; show ps_h1 ps_h2; return 1; }
  # epoch 0's time and size on worker 1: "epoch 0: 100000 examples in 2.82 s (...)"
  t_ep=$(sed -n 's/^epoch 0: [0-9]* examples in \([0-9.]*\) s.*/\1/p' "${logs[1]}" | head -1)
  n_ex=$(sed -n 's/^epoch 0: \([0-9]*\) examples in .*/\1/p' "${logs[1]}" | head -1)
  [ -n "$t_ep" ] && [ -n "$n_ex" ] || { say "FAIL: no epoch 0 line in ${logs[1]}"; show ps_h1 ps_h2; return 1; }
  sleep "$(awk -v t="$t_ep" 'BEGIN { printf "%.2f", t / 2 }')"
  kill_started "ps_$host" "$host" "$role" "$idx" || return 1
  t_commit=$(newest_commit "$ckpt")
  # the restarted job's first step: each worker logs "resumed from checkpoint DIR: epoch E,
  # ..." (at info level, on stderr, unbuffered) right before it (the program's own "resumed
  # after epoch" line on stdout is buffered until the epoch ends); polled every 20 ms
  for _ in $(seq 3000); do
    for w in 0 1; do
      [ -z "${t_res[$w]}" ] && grep -q '] resumed from checkpoint ' "${logs[$w]}" 2>/dev/null && t_res[w]=$(now)
    done
    [ -n "${t_res[0]}" ] && [ -n "${t_res[1]}" ] && break
    [ -f "$JOBDIR/ps_h1.rc" ] && [ -f "$JOBDIR/ps_h2.rc" ] && break
    sleep 0.02
  done
  await 180 ps_h1 ps_h2 || { show ps_h1 ps_h2; return 1; }
  for h in h1 h2; do
    expect "fleetrun on $h exited 0, $(secs_between "$T_KILL" "$(end_of "ps_$h")") s after the kill" \
      [ "$(rc_of "ps_$h")" = 0 ] || ok=1
  done
  sed -n '/the job restarts/,/=====$/p' "$JOBDIR/ps_$host.err" >"$JOBDIR/restart_$host"
  expect "$host restarted the job, naming $role $idx, pid $KILLED, SIGKILL" has_lines "$JOBDIR/restart_$host" \
    'restart 1 of 1' "role: +$role\$" "rank: +$idx\$" "pid: +$KILLED\$" 'status: +killed by signal SIGKILL' || ok=1
  local resumed=() done_before=()
  for w in 0 1; do
    resumed[w]=$(sed -n 's/^resumed after epoch \([0-9]*\) from .*/\1/p' "${logs[$w]}" | head -1)
    # epochs worker w completed in the first run (its log before fleetrun's restart line)
    done_before[w]=$(awk '/fleetrun: restart 1 of/ { exit } /^epoch [0-9]+:/ { n++ } END { print n + 0 }' "${logs[$w]}")
    expect "worker $w resumed from a checkpoint (its log and its output say so)" \
      test -n "${resumed[$w]}" -a -n "${t_res[$w]}" || ok=1
  done
  for w in 0 1; do
    expect "server $w of the restarted job loaded the checkpoint's tables" \
      grep -q "] server $w .*: loaded checkpoint of step " "$JOBDIR/ps_h$((w + 1)).log/serverlog.$w" || ok=1
  done
  [ $ok = 0 ] || { show ps_h1 ps_h2; return 1; }
  say "kill -> first step of the restarted job: worker 0 $(ms_between "$T_KILL" "${t_res[0]}") ms," \
    "worker 1 $(ms_between "$T_KILL" "${t_res[1]}") ms; kill -> every fleetrun exited:" \
    "$(secs_between "$T_KILL" "$(printf '%s\n' "$(end_of ps_h1)" "$(end_of ps_h2)" | sort -n | tail -1)") s"
  # steps: the examples of an epoch / the CTR example's --batch_size (100 by default)
  local lost steps
  lost=$(secs_between "$t_commit" "$T_KILL")
  steps=$(awk -v l="$lost" -v t="$t_ep" -v n="$n_ex" 'BEGIN { printf "%d of the %d", l / t * n / 100, n / 100 }')
  say "lost: $lost s of training since the checkpoint after epoch ${resumed[0]} was committed, about $steps" \
    "steps of an epoch per worker (the checkpoint interval); epochs completed before the kill:" \
    "${done_before[0]}, ${done_before[1]}; resumed after epoch ${resumed[0]}, ${resumed[1]}"
  expect "both workers resumed after the last epoch completed before the kill (less than 1 epoch lost)" \
    awk -v a="${resumed[0]}" -v b="${resumed[1]}" -v c="${done_before[0]}" -v d="${done_before[1]}" \
      'BEGIN { exit !(a == b && a + 1 >= c && a + 1 >= d) }' || { show ps_h1 ps_h2; return 1; }
  ctr_auc_check "$JOBDIR/ps_h1.out" 3
}

# kill -9 of worker 1 (h2) with --max_restart 1: h2 reports the failure, the master
# restarts the job on both nodes.
job_master_ps_restart() { ps_restart worker 1 h2 6570; }

# kill -9 of server 0 (h1, the master's node) with --max_restart 1: the restarted servers
# load the tables of the checkpoint (fleet_checkpoint_latest + fleet_init_server).
job_master_ps_server_restart() { ps_restart server 0 h1 6770; }
