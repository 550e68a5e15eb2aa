# shellcheck shell=bash
# jobs_ps.sh - parameter-server jobs over the bed (sourced by run.sh; see README.md).
#
# Layout of every PS job: 2 servers and 2 workers on 3 hosts, one fleetrun per host, each
# given the whole job with --servers/--workers and its own address with --node_ip:
#
#   h1: server 0            h2: server 1, worker 0            h3: worker 1
#
# Worker 0 (h2) is the first worker: it evaluates and prints the test AUC.

# Ports are fixed (several hosts) and any will do (the namespaces are ours alone), but each
# job takes its own: the servers' ports of a finished job linger in TIME_WAIT, and
# fleetrun's check of a fixed port (a bind without SO_REUSEADDR) refuses them for a minute.
PS_PORT=6170

ps_servers() { echo "$(host_ip h1):$PS_PORT,$(host_ip h2):$PS_PORT"; }
ps_workers() { echo "$(host_ip h2):$((PS_PORT + 1)),$(host_ip h3):$PS_PORT"; }

# ps_start PROGRAM ARGS...: one fleetrun per host (ps_h1, ps_h2, ps_h3) running the job
ps_start() {
  local h
  new_secret
  for h in h1 h2 h3; do
    fleetrun_on "ps_$h" "$h" --servers "$(ps_servers)" --workers "$(ps_workers)" --node_ip "$(host_ip "$h")" "$@"
  done
}

# Criteo-format data from a planted model, made once per run (the same as tests/test_ctr.c).
CTR_ROWS=${CLUSTER_CTR_ROWS:-200000}
# The tower of the CTR jobs: CI keeps it small; CLUSTER_CTR_HIDDEN=400,400,400 is the demo's
# (1.7 MB of dense parameters moved by every async step: what ps_ctr_rate is about).
CTR_HIDDEN=${CLUSTER_CTR_HIDDEN:-64,64}
ctr_data() {
  [ -f "$WORK/ctr-data/planted.json" ] && return 0
  "$BUILD/tools/fleet-datagen" criteo --rows "$CTR_ROWS" --files 4 --out "$WORK/ctr-data" --seed 5 \
    --vocab-scale 0.002 --dense-scale 0.1 >"$WORK/ctr-datagen.out"
}
ctr_args() {
  echo --train_data "$WORK/ctr-data/train" --test_data "$WORK/ctr-data/test" --optimizer adam --lr 0.003 \
    --hidden "$CTR_HIDDEN" --sparse_feature_dim 100003 --print_period 0 --thread_num 2
}

# ctr_local EPOCHS: the local run of the CTR program on the data (in h3), made once per run
# for each EPOCHS; prints the path of its output
ctr_local() {
  local JOBDIR=$WORK/ctr-local-$1 # seen by start/await (dynamic scope)
  if [ ! -f "$JOBDIR/local.rc" ]; then
    mkdir -p "$JOBDIR"
    # shellcheck disable=SC2046
    start local h3 "$BUILD/examples/ctr/train" --is_local 1 --epochs "$1" --model_dir "$JOBDIR/model" $(ctr_args)
    await 120 local >&2 && [ "$(rc_of local)" = 0 ] || { show local >&2; return 1; }
  fi
  echo "$JOBDIR/local.out"
}

# ctr_auc_check FILE EPOCHS: the test AUC printed in FILE is within 0.005 of the local run
# of the same program for EPOCHS epochs on the same data (tests/test_ctr.c's tolerance).
ctr_auc_check() {
  local ref a_local a_ps
  ref=$(ctr_local "$2")
  a_local=$(number_after "test auc " "$ref")
  a_ps=$(number_after "test auc " "$1")
  say "test auc: local $a_local, this job ${a_ps:-(none printed)}"
  expect "the local run learned (auc $a_local > 0.75)" awk -v a="$a_local" 'BEGIN { exit !(a > 0.75) }' &&
  expect "|auc of this job - auc local| <= 0.005" near "$a_ps" "$a_local" 0.005
}

# a. CTR-DNN, async, 2 servers + 2 workers on 3 hosts: the test AUC is within 0.005 of a
#    local run of the same program on the same data.
job_ps_ctr_async() {
  PS_PORT=6170
  ctr_data
  ctr_local 2 >/dev/null
  # shellcheck disable=SC2046
  ps_start "$BUILD/examples/ctr/train" --epochs 2 --model_dir "$JOBDIR/ps_model" $(ctr_args) \
    --strategy a_sync_configs.send_queue_size=2 --strategy a_sync_configs.max_merge_var_num=2
  local t0 ok=0 h
  t0=$(now)
  await 180 ps_h1 ps_h2 ps_h3 || { show ps_h1 ps_h2 ps_h3; return 1; }
  for h in h1 h2 h3; do
    expect "fleetrun on $h exited 0 after $(secs_between "$t0" "$(end_of "ps_$h")") s" [ "$(rc_of "ps_$h")" = 0 ] || ok=1
  done
  [ $ok = 0 ] || { show ps_h1 ps_h2 ps_h3; return 1; }
  ctr_auc_check "$JOBDIR/ps_h2.out" 2
}

# PS sync mode on 3 hosts equals local training on the global batch: the parameters after 6
# steps (dense ones and the sparse table pulled from the servers) within 1e-5, as
# tests/test_ps_fleet.c checks on one machine.  The program is the test helper ps_train.
job_ps_sync_params() {
  local pt=$BUILD/tests/bin/ps_train h ok=0
  PS_PORT=6270
  [ -x "$pt" ] || { say "FAIL: $pt is not built"; return 1; }
  command -v python3 >/dev/null || skip "python3 is not installed (it compares the parameter dumps)"
  local common=(task=tiny mode=sync opt=adam lr=0.05 order=startup_first steps=6)
  ps_start "$pt" "${common[@]}" batch=8 "dump=$JOBDIR/ps.st" "dump_init=$JOBDIR/init.st"
  await 120 ps_h1 ps_h2 ps_h3 || { show ps_h1 ps_h2 ps_h3; return 1; }
  for h in h1 h2 h3; do expect "fleetrun on $h exited 0" [ "$(rc_of "ps_$h")" = 0 ] || ok=1; done
  [ $ok = 0 ] || { show ps_h1 ps_h2 ps_h3; return 1; }
  # the reference: one process, the global batch (2 x 8), the servers' initial table rows
  start local h3 "$pt" "${common[@]}" batch=16 "dump=$JOBDIR/local.st" "init_table=$JOBDIR/init.st"
  await 60 local || { show local; return 1; }
  [ "$(rc_of local)" = 0 ] || { show local; return 1; }
  expect "parameters after 6 sync steps on 3 hosts = local training within 1e-5" \
    python3 "$HERE/st_compare.py" "$JOBDIR/local.st" "$JOBDIR/ps.st" 1e-5
}

# h1 runs only servers: its fleetrun has no local workers to wait for, so it must not start
# the --server_grace_s countdown (as it once did, stopping its server while h2 and h3
# still trained); its servers end when every worker of the job stopped.  With
# --server_grace_s 2 and 4 epochs (about 8 s) a regression shows in seconds.
job_ps_server_only_host() {
  local h ok=0
  PS_PORT=6470
  ctr_data
  # shellcheck disable=SC2046
  ps_start --server_grace_s 2 "$BUILD/examples/ctr/train" --epochs 4 --model_dir "$JOBDIR/ps_model" $(ctr_args)
  await 180 ps_h1 ps_h2 ps_h3 || { show ps_h1 ps_h2 ps_h3; return 1; }
  for h in h1 h2 h3; do expect "fleetrun on $h exited 0" [ "$(rc_of "ps_$h")" = 0 ] || ok=1; done
  expect "h1 did not stop its server while the workers trained" \
    bash -c "! grep -q 'did not exit within --server_grace_s' '$JOBDIR/ps_h1.err'" || ok=1
  [ $ok = 0 ] || { show ps_h1 ps_h2 ps_h3; return 1; }
}

# CTR-DNN async on 3 hosts, without a rate limit and then with each host's link held to
# 1 Gbit/s (tc tbf, as netns.sh's RATE, added and removed by this job), for the strategies
# of CLUSTER_RATE_RUNS (default "default merged_bf16"): "default" (no strategy field set:
# the async communicator merges what queues up while the link is busy), "classic" (Paddle
# 2.x's fixed queue of 1: max_merge_var_num=1 set, the default before the adaptive one),
# "merge2" (as ps_ctr_async: merge 2, float32) and "merged_bf16" (max_merge_var_num 4,
# send_wait_times 2, dense values as bf16 on the wire).  Prints examples/s per worker of
# each run (mean of the workers' last epoch), the ratio limited / unlimited (target: >= 0.8)
# and the bytes per example the workers logged; checks only that every run succeeds and
# keeps the AUC within 0.005 of local (speed is reported, not asserted: the hosts share
# this machine's cores).
PS_RATE=${CLUSTER_PS_RATE:-1gbit}
ps_rate() { # add|del: the tbf qdisc on every host's eth0
  local h
  for h in h1 h2 h3; do
    if [ "$1" = add ]; then
      tc -n "$(host_ns "$h")" qdisc replace dev eth0 root tbf rate "$PS_RATE" burst 1250000 latency 50ms || return 1
    else
      tc -n "$(host_ns "$h")" qdisc del dev eth0 root 2>/dev/null || true
    fi
  done
}
# ps_ctr_run NAME PORT STRATEGY...: one CTR job; prints "examples/s per worker" and the
# traffic lines; leaves its logs under JOBDIR/NAME
ps_ctr_run() {
  local name=$1 h ok=0 eps
  PS_PORT=$2
  shift 2
  local JOBDIR=$JOBDIR/$name
  mkdir -p "$JOBDIR"
  # shellcheck disable=SC2046
  ps_start --log_level info "$BUILD/examples/ctr/train" --epochs 2 --model_dir "$JOBDIR/ps_model" $(ctr_args) "$@"
  await 300 ps_h1 ps_h2 ps_h3 || { show ps_h1 ps_h2 ps_h3; return 1; }
  for h in h1 h2 h3; do expect "$name: fleetrun on $h exited 0" [ "$(rc_of "ps_$h")" = 0 ] || ok=1; done
  [ $ok = 0 ] || { show ps_h1 ps_h2 ps_h3; return 1; }
  ctr_auc_check "$JOBDIR/ps_h2.out" 2 || return 1
  eps=$(for f in "$JOBDIR"/ps_h*.log/workerlog.*; do grep -o '([0-9]* examples/s)' "$f" | tail -1 | tr -d '(';
        done | awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
  say "$name: ${eps:-?} examples/s per worker"
  grep -h 'traffic (' "$JOBDIR"/ps_h*.log/workerlog.* | sed 's/.*\] /  /' >&2 || true
  echo "$eps" >"$JOBDIR/eps"
}
job_ps_ctr_rate() {
  command -v tc >/dev/null || skip "tc (iproute2) is not installed"
  ctr_data
  ctr_local 2 >/dev/null
  local -A strat=([default]="" [classic]="--strategy a_sync_configs.max_merge_var_num=1"
    [merge2]="--strategy a_sync_configs.send_queue_size=2 --strategy a_sync_configs.max_merge_var_num=2"
    [merged_bf16]="--strategy a_sync_configs.max_merge_var_num=4 --strategy a_sync_configs.send_queue_size=4
      --strategy a_sync_configs.send_wait_times=2 --strategy a_sync_configs.dense_wire_dtype=bf16")
  local runs=${CLUSTER_RATE_RUNS:-default merged_bf16} s port=6570 st=0
  for s in $runs; do [ -n "${strat[$s]+x}" ] || { say "FAIL: unknown strategy '$s' in CLUSTER_RATE_RUNS"; return 1; }; done
  ps_rate del
  # shellcheck disable=SC2086
  for s in $runs; do ps_ctr_run "${s}_free" $port ${strat[$s]} || return 1; port=$((port + 10)); done
  ps_rate add || { say "FAIL: cannot add the tbf qdisc"; return 1; }
  say "tbf rate $PS_RATE on every host's eth0"
  # shellcheck disable=SC2086
  for s in $runs; do
    [ $st = 0 ] && { ps_ctr_run "${s}_limited" $port ${strat[$s]} || st=1; }
    port=$((port + 10))
  done
  ps_rate del
  [ $st = 0 ] || return 1
  for s in $runs; do
    say "$s: limited / unlimited examples/s per worker = $(awk -v a="$(cat "$JOBDIR/${s}_limited/eps")" \
      -v b="$(cat "$JOBDIR/${s}_free/eps")" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }') (target >= 0.8)"
  done
}
