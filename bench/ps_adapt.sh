#!/usr/bin/env bash
# bench/ps_adapt.sh [BUILD_DIR] - the async communicator's adaptive default against Paddle
# 2.x's fixed queue of 1 on loopback: CTR-DNN async (examples/ctr/train: fc 400-400-400,
# Adam 0.003, batch 100, ADAPT_THREADS trainer threads per worker), 2 servers x 2 workers on
# 127.0.0.1 under fleetrun, ADAPT_ROWS rows, ADAPT_EPOCHS epochs, for each strategy:
#   default   no strategy field set (send what queued up during a round, merged)
#   classic   a_sync_configs.max_merge_var_num=1 (a queue of 1, one gradient per push: the
#             default before the adaptive one)
# and a local run of the same program (the AUC reference).  Prints per run: examples/s per
# worker (mean of the workers' last epoch), bytes sent / received per example (worker 0),
# test AUC; rounds interleave the strategies.  The links of tests/cluster's ps_ctr_rate job
# are the other half of the comparison (1 Gbit/s).
#
# Environment: ADAPT_ROUNDS (2), ADAPT_ROWS (200000), ADAPT_EPOCHS (2), ADAPT_THREADS (2),
# ADAPT_RUNS ("default classic").
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${ADAPT_ROUNDS:-2}
rows=${ADAPT_ROWS:-200000}
epochs=${ADAPT_EPOCHS:-2}
threads=${ADAPT_THREADS:-2}
runs=${ADAPT_RUNS:-default classic}
train="$build/examples/ctr/train"
for f in "$train" "$build/tools/fleet-datagen" "$build/tools/fleetrun"; do
  [ -x "$f" ] || { echo "ps_adapt.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/fleet-adapt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

strategy() {
  case $1 in
    default) echo "" ;;
    classic) echo "--strategy a_sync_configs.max_merge_var_num=1" ;;
    *) echo "ps_adapt.sh: unknown strategy '$1'" >&2; exit 1 ;;
  esac
}

echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(getconf _NPROCESSORS_ONLN) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# CTR-DNN 400-400-400, Adam 0.003, $rows rows, $epochs epochs, 2 servers x 2 workers x $threads threads on 127.0.0.1"
"$build/tools/fleet-datagen" criteo --rows "$rows" --files 4 --out "$tmp/data" --seed 5 --vocab-scale 0.002 \
  --dense-scale 0.1 > "$tmp/gen.log" 2>&1
common=(--epochs "$epochs" --optimizer adam --lr 0.003 --sparse_feature_dim 100003 --print_period 0
        --thread_num "$threads" --train_data "$tmp/data/train" --test_data "$tmp/data/test")
"$train" --is_local 1 --model_dir "$tmp/local" "${common[@]}" > "$tmp/local.out" 2>&1
echo "local: test auc $(awk '/^test auc/ { print $3 }' "$tmp/local.out")"
for r in $(seq 1 "$rounds"); do
  order=$runs
  [ $((r % 2)) -eq 0 ] && order=$(echo "$runs" | tr ' ' '\n' | tac | tr '\n' ' ')
  for s in $order; do
    d="$tmp/$s-$r"
    mkdir -p "$d"
    # shellcheck disable=SC2046
    "$build/tools/fleetrun" --server_num 2 --worker_num 2 --log_level info --log_dir "$d/log" "$train" \
      --model_dir "$d/model" "${common[@]}" $(strategy "$s") > "$d/out" 2>&1 \
      || { echo "ps_adapt.sh: $s failed:" >&2; tail -30 "$d/out" >&2; exit 1; }
    eps=$(for f in "$d"/log/workerlog.*; do grep -o '([0-9]* examples/s)' "$f" | tail -1 | tr -d '('; done |
          awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n }')
    traffic=$(grep -h 'traffic (' "$d/log/workerlog.0" | grep -o '[0-9.]* sent and [0-9.]* received per example' || true)
    echo "round $r $s: $eps examples/s per worker; worker 0: ${traffic:-?}; test auc $(awk '/^test auc/ { print $3 }' "$d"/out "$d"/log/workerlog.0 | head -1)"
  done
done
