#!/usr/bin/env bash
# bench/ps_net.sh [BUILD_DIR] - CTR-DNN with parameter servers on loopback, one run per mode:
# examples/s per worker, bytes sent and received per example (the workers' traffic counters,
# logged at fleet_stop_worker) and the test AUC, against local training of the same data.
#
#   data    BUILD_DIR/tools/fleet-datagen criteo --rows PSNET_ROWS --files 4 (once, temp dir)
#   local   examples/ctr/train --is_local 1 (one thread)
#   modes   fleetrun --server_num PSNET_SERVERS --worker_num PSNET_WORKERS examples/ctr/train
#           (one thread per worker) with the strategy of each mode:
#             sync          a_sync=false
#             async         the default strategy (a_sync, k_steps 0, merge 1, queue 1)
#             async_merge4  max_merge_var_num=4, send_queue_size=4, send_wait_times=2
#             async_bf16    async_merge4 + dense_wire_dtype=bf16
#             half_async    a_sync_configs.half_async=true
#             half_bf16     half_async + dense_wire_dtype=bf16
#             geo           k_steps=PSNET_GEO_K (workers keep Adam, deltas every k steps)
# examples/s per worker: the mean over workers of the last epoch's examples / seconds (the
# pass alone, as train prints it).  Rounds are interleaved (every mode once per round, the
# order reversed every other round); the table gives medians.  All processes share this
# machine's cores: examples/s are comparable between the rows of one table only; the bytes
# per example carry over to other machines.
#
# Environment: PSNET_ROUNDS (1), PSNET_ROWS (100000), PSNET_EPOCHS (1), PSNET_SERVERS (2),
# PSNET_WORKERS (2), PSNET_GEO_K (100), PSNET_MODES (all of the above), PSNET_OPT (adam),
# PSNET_LR (0.003).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${PSNET_ROUNDS:-1}
rows=${PSNET_ROWS:-100000}
epochs=${PSNET_EPOCHS:-1}
ns=${PSNET_SERVERS:-2}
nw=${PSNET_WORKERS:-2}
geok=${PSNET_GEO_K:-100}
modes=${PSNET_MODES:-sync async async_merge4 async_bf16 half_async half_bf16 geo}
opt=${PSNET_OPT:-adam}
lr=${PSNET_LR:-0.003}
train="$build/examples/ctr/train"
gen="$build/tools/fleet-datagen"
fleetrun="$build/tools/fleetrun"
for f in "$train" "$gen" "$fleetrun"; do
  [ -x "$f" ] || { echo "ps_net.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/fleet-psnet.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1

strategy() { # mode -> --strategy arguments
  local merge="--strategy a_sync_configs.max_merge_var_num=4 --strategy a_sync_configs.send_queue_size=4"
  merge="$merge --strategy a_sync_configs.send_wait_times=2"
  case $1 in
    sync) echo "--mode sync" ;;
    async) echo "" ;;
    async_merge4) echo "$merge" ;;
    async_bf16) echo "$merge --strategy a_sync_configs.dense_wire_dtype=bf16" ;;
    half_async) echo "--strategy a_sync_configs.half_async=true" ;;
    half_bf16) echo "--strategy a_sync_configs.half_async=true --strategy a_sync_configs.dense_wire_dtype=bf16" ;;
    geo) echo "--mode geo --strategy a_sync_configs.k_steps=$geok" ;;
    *) echo "ps_net.sh: unknown mode '$1'" >&2; exit 1 ;;
  esac
}

echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(getconf _NPROCESSORS_ONLN) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# CTR-DNN (examples/ctr/train defaults, --optimizer $opt --lr $lr), $rows rows, $epochs epoch(s)," \
     "$ns servers x $nw workers on 127.0.0.1, one thread per worker, $rounds round(s)"
"$gen" criteo --rows "$rows" --files 4 --out "$tmp/data" --seed 5 --vocab-scale 0.002 --dense-scale 0.1 > "$tmp/gen.log" 2>&1
common=(--epochs "$epochs" --optimizer "$opt" --lr "$lr" --sparse_feature_dim 100003 --print_period 0
        --train_data "$tmp/data/train" --test_data "$tmp/data/test")
raw="$tmp/raw"
: > "$raw"
one() { # mode round
  local m=$1 dir="$tmp/run_$1_$2"
  mkdir -p "$dir"
  if [ "$m" = local ]; then
    "$train" --is_local 1 --thread_num 1 --model_dir "$dir/model" "${common[@]}" > "$dir/out" 2>&1 \
      || { echo "ps_net.sh: local run failed:" >&2; tail -20 "$dir/out" >&2; exit 1; }
    cp "$dir/out" "$dir/worker.all"
  else
    # shellcheck disable=SC2046
    "$fleetrun" --server_num "$ns" --worker_num "$nw" --log_level info --log_dir "$dir/log" "$train" \
      --thread_num 1 --model_dir "$dir/model" "${common[@]}" $(strategy "$m") > "$dir/out" 2>&1 \
      || { echo "ps_net.sh: $m failed:" >&2; tail -30 "$dir/out" >&2; exit 1; }
    cat "$dir"/log/workerlog.* > "$dir/worker.all"
  fi
  # examples/s per worker (last epoch of each worker), traffic per example, test auc
  awk -v m="$m" -v nw="$nw" '
    /^epoch [0-9]+:/ { for (i = 1; i <= NF; i++) if ($i == "examples/s),") { v = $(i - 1); sub(/\(/, "", v); eps[++ne] = v } }
    /traffic \(/ {
      for (i = 1; i < NF; i++) {
        if ($i == "sent" && $(i + 1) == "and") s += $(i - 1)
        if ($i == "received" && $(i + 1) == "per") r += $(i - 1)
        if ($i == "(dense" && $(i + 1) == "values") { ds += $(i + 2); v = $(i + 4); sub(/\)/, "", v); dr += v }
      }
      nt++
    }
    /^test auc/ { auc = $3 }
    END {
      k = (m == "local") ? 1 : nw; tot = 0        # the last epoch line of each worker
      for (i = ne - k + 1; i <= ne; i++) tot += eps[i]
      printf "%s %.1f %.1f %.1f %.1f %.1f %s\n", m, tot / k, nt ? s / nt : 0, nt ? r / nt : 0, nt ? ds / nt : 0, nt ? dr / nt : 0, auc
    }' "$dir/worker.all" "$dir/out" >> "$raw"
}
all="local $modes"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 0 ]; then order=$(echo "$all" | tr ' ' '\n' | tac | tr '\n' ' '); else order=$all; fi
  for m in $order; do one "$m" "$r"; done
done
python3 - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) if x.replace('.', '', 1).isdigit() else float('nan') for x in f[1:]])
def med(k, i):
    return statistics.median(r[i] for r in rows[k])
base = med("local", 0)
print("| mode | examples/s per worker | vs local | bytes sent / example | bytes received / example | dense sent / example | dense received / example | test AUC |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for k in rows:
    if k == "local":
        print("| local (1 process) | %.0f | 1.00x | - | - | - | - | %.4f |" % (med(k, 0), med(k, 5)))
        continue
    print("| %s | %.0f | %.2fx | %.0f | %.0f | %.0f | %.0f | %.4f |" % (k, med(k, 0), med(k, 0) / base, med(k, 1), med(k, 2), med(k, 3), med(k, 4), med(k, 5)))
PY
