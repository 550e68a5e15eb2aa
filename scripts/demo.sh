#!/usr/bin/env bash
# demo.sh BUILD_DIR - the main job: the seed's CTR example (CTR-DNN on Criteo-format data)
# trained with 2 parameter servers and 2 workers started by fleetrun on this machine.
#   1. fleet-datagen writes a Criteo-format sample from a planted model (and the AUC a
#      perfect model reaches on it)
#   2. fleetrun --server_num 2 --worker_num 2 examples/ctr/train (async, 2 threads/worker)
#   3. the saved inference model is reloaded with no servers and scored on the test files
#   4. scripts/plot-metrics.sh draws the workers' loss and AUC (--metrics_dir) into a PNG
#      under BUILD (BUILD/demo-metrics.png)
# DEMO_ROWS (default 200000) and DEMO_EPOCHS (default 3) size the run; DEMO_DIR keeps the
# data, model and logs (default: a new directory under /tmp).
set -euo pipefail
build=${1:-build}
rows=${DEMO_ROWS:-200000}
epochs=${DEMO_EPOCHS:-3}
dir=${DEMO_DIR:-$(mktemp -d /tmp/fleet-demo.XXXXXX)}
mkdir -p "$dir"
data=$dir/data model=$dir/model logs=$dir/log metrics=$dir/metrics

echo "== 1. Data: $rows Criteo-format rows (label, I1..I13, C1..C26) from a planted model"
"$build"/tools/fleet-datagen criteo --rows "$rows" --files 4 --out "$data" --seed 1 \
  --vocab-scale 0.002 --dense-scale 0.1
ceiling=$(sed -n 's/.*"ceiling_auc_test":\([0-9.]*\).*/\1/p' "$data/planted.json")
echo
echo "== 2. CTR-DNN with parameter servers: fleetrun --server_num 2 --worker_num 2 (async)"
echo "   embedding [1000001, 10] on the servers, fc 400-400-400-2, Adam 0.002, batch 100, 2 threads per worker"
start=$(date +%s.%N)
"$build"/tools/fleetrun --server_num 2 --worker_num 2 --log_dir "$logs" \
  "$build"/examples/ctr/train --train_data "$data/train" --test_data "$data/test" \
  --epochs "$epochs" --thread_num 2 --batch_size 100 --optimizer adam --lr 0.002 \
  --sparse_feature_dim 1000001 --print_period 250 --model_dir "$model" --metrics_dir "$metrics" \
  --strategy a_sync_configs.send_queue_size=2 --strategy a_sync_configs.max_merge_var_num=2
end=$(date +%s.%N)
echo
echo "== 3. The saved model, reloaded with no servers, scores the test files"
"$build"/examples/ctr/infer --model_dir "$model" --test_data "$data/test" --sparse_feature_dim 1000001
echo
echo "== 4. Loss and AUC per worker: scripts/plot-metrics.sh"
png=$("$(dirname "$0")"/plot-metrics.sh "$metrics" "$(cd "$build" && pwd)/demo-metrics.png")
echo "   $png"
echo
echo "== Summary"
awk -v c="$ceiling" -v t0="$start" -v t1="$end" '
  /^epoch/ { n += $3; s[FILENAME] += $6 }
  /^test auc/ { auc = $3 }
  END {
    for (f in s) if (s[f] > secs) secs = s[f]
    printf "   trained %d examples in %.1f s of training (%.0f examples/s over 2 workers); job %.1f s\n", n, secs, n / secs, t1 - t0
    printf "   test AUC %s; the planted model (a perfect predictor) reaches %s\n", auc, c
  }' "$logs/workerlog.0" "$logs/workerlog.1"
echo "   model:  $model  (feeds dense_input, C1..C26; fetch the softmax prediction)"
echo "   logs:   $logs/serverlog.{0,1}, $logs/workerlog.{0,1}, $logs/endpoints.log"
echo "   metrics: $metrics  (CSV per worker; tensorboard --logdir $metrics)"
echo "   plot:   $png"
echo "   data:   $data  (planted.json has the model's ceiling AUC)"
