#!/usr/bin/env bash
# demo_quickstart.sh BUILD_DIR - `make demo-quickstart`: the seed's quick-start MLP trained locally, then the
# same program made distributed (collective_train.c: + 5 lines) on two processes started
# by fleetrun on this machine, then with two parameter servers and two workers
# (distributed_train.c).
set -euo pipefail
build=${1:-build}
steps=${DEMO_STEPS:-1001}
echo "== 1. Local training: x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax, SGD 0.01, batch 128"
"$build"/examples/quick_start/local_train "$steps"
echo
echo "== 2. The same model, data-parallel on 2 trainers: fleetrun --nproc_per_node 2"
logdir=$(mktemp -d /tmp/fleet-demo-log.XXXXXX)
"$build"/tools/fleetrun --nproc_per_node 2 --log_dir "$logdir" "$build"/examples/quick_start/collective_train "$steps"
echo "(trainer 1's output: $logdir/workerlog.1)"
tail -n 3 "$logdir/workerlog.1"
echo
echo "== 3. The same model with parameter servers: fleetrun --server_num 2 --worker_num 2 (async)"
logdir=$(mktemp -d /tmp/fleet-demo-log.XXXXXX)
"$build"/tools/fleetrun --server_num 2 --worker_num 2 --log_dir "$logdir" \
  "$build"/examples/quick_start/distributed_train "$steps" 2>&1 | awk '/step[0-9]* cost/ { split($3, a, "step"); if (a[2] % 100 == 0 || a[2] == '"$steps"' - 1) print; next } { print }'
echo "(servers' and worker 1's logs: $logdir)"
