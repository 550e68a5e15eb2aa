#!/usr/bin/env bash
# bench/ps_accuracy.sh [BUILD_DIR] - how far each parameter-server mode's test AUC is from
# local training, and how much it varies between identical runs: the same CTR-DNN job
# (examples/ctr/train, Adam) ACC_RUNS times per mode, local and 2 servers x 2 workers on
# 127.0.0.1 under fleetrun, then per mode the mean, min, max and spread (max - min) of the
# test AUC, and the mean distance to local.
#
#   data    fleet-datagen criteo --rows ACC_ROWS --files 4 (once, the same data every run)
#   local   examples/ctr/train --is_local 1 --thread_num ACC_THREADS
#   modes   fleetrun --server_num 2 --worker_num 2 examples/ctr/train --thread_num ACC_THREADS
#           with the strategy of each mode:
#             sync         --mode sync
#             async        the default strategy (the communicator's adaptive default)
#             half_async   a_sync_configs.half_async=true
#             geo          --mode geo, a_sync_configs.k_steps=ACC_GEO_K
#           ACC_EXTRA="name:ARGS;name2:ARGS2" adds runs of the PS job with those arguments
#           (e.g. ACC_EXTRA="classic:--strategy a_sync_configs.max_merge_var_num=1")
# Runs are interleaved (every mode once per round, the order reversed every other round),
# so the machine's load falls on all modes alike.  Prints one line per run (mode, test AUC,
# seconds, and for async and half-async the gradients per push of worker 0's communicator)
# and a Markdown table.
#
# Environment: ACC_RUNS (5), ACC_ROWS (100000), ACC_EPOCHS (2), ACC_THREADS (2), ACC_HIDDEN
# (400,400,400), ACC_LR (0.003), ACC_GEO_K (100), ACC_MODES ("local sync async half_async
# geo"), ACC_EXTRA ("").
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
runs=${ACC_RUNS:-5}
rows=${ACC_ROWS:-100000}
epochs=${ACC_EPOCHS:-2}
threads=${ACC_THREADS:-2}
hidden=${ACC_HIDDEN:-400,400,400}
lr=${ACC_LR:-0.003}
geok=${ACC_GEO_K:-100}
modes=${ACC_MODES:-local sync async half_async geo}
extra=${ACC_EXTRA:-}
train="$build/examples/ctr/train"
gen="$build/tools/fleet-datagen"
fleetrun="$build/tools/fleetrun"
for f in "$train" "$gen" "$fleetrun"; do
  [ -x "$f" ] || { echo "ps_accuracy.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/fleet-psacc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1

declare -A extra_args=()
if [ -n "$extra" ]; then
  IFS=';' read -ra items <<< "$extra"
  for it in "${items[@]}"; do
    extra_args[${it%%:*}]=${it#*:}
    modes="$modes ${it%%:*}"
  done
fi

strategy() { # mode -> arguments of train
  case $1 in
    sync) echo "--mode sync" ;;
    async) echo "" ;;
    half_async) echo "--strategy a_sync_configs.half_async=true" ;;
    geo) echo "--mode geo --strategy a_sync_configs.k_steps=$geok" ;;
    *)
      [ -n "${extra_args[$1]+x}" ] || { echo "ps_accuracy.sh: unknown mode '$1'" >&2; exit 1; }
      echo "${extra_args[$1]}" ;;
  esac
}

echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(getconf _NPROCESSORS_ONLN) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# CTR-DNN fc $hidden, Adam $lr, batch 100, $rows rows, $epochs epochs, $threads thread(s) per process;" \
     "PS: 2 servers x 2 workers on 127.0.0.1; $runs runs per mode, interleaved"
"$gen" criteo --rows "$rows" --files 4 --out "$tmp/data" --seed 5 --vocab-scale 0.002 --dense-scale 0.1 > "$tmp/gen.log" 2>&1
common=(--epochs "$epochs" --optimizer adam --lr "$lr" --hidden "$hidden" --sparse_feature_dim 100003
        --print_period 0 --thread_num "$threads" --train_data "$tmp/data/train" --test_data "$tmp/data/test")
raw="$tmp/raw"
: > "$raw"
one() { # mode run
  local m=$1 dir="$tmp/run_$1_$2" t0 t1 auc merge
  mkdir -p "$dir"
  t0=$(date +%s.%N)
  if [ "$m" = local ]; then
    "$train" --is_local 1 --model_dir "$dir/model" "${common[@]}" > "$dir/out" 2>&1 \
      || { echo "ps_accuracy.sh: local run failed:" >&2; tail -20 "$dir/out" >&2; exit 1; }
  else
    # shellcheck disable=SC2046
    "$fleetrun" --server_num 2 --worker_num 2 --log_level info --log_dir "$dir/log" "$train" \
      --model_dir "$dir/model" "${common[@]}" $(strategy "$m") > "$dir/out" 2>&1 \
      || { echo "ps_accuracy.sh: $m failed:" >&2; tail -30 "$dir/out" >&2; exit 1; }
  fi
  t1=$(date +%s.%N)
  auc=$(awk '/^test auc/ { print $3; exit }' "$dir/out" "$dir"/log/workerlog.0 2>/dev/null || true)
  # gradients per push (async): the communicator's pushes against the trainer's sends, if logged
  merge=$(grep -ho "gradients per push [0-9.]*" "$dir"/log/workerlog.0 2>/dev/null | tail -1 | awk '{ print $4 }' || true)
  printf '%s %s %.1f %s\n' "$m" "${auc:-nan}" "$(echo "$t1 - $t0" | bc)" "${merge:--}" | tee -a "$raw"
}
for r in $(seq 1 "$runs"); do
  if [ $((r % 2)) -eq 0 ]; then order=$(echo "$modes" | tr ' ' '\n' | tac | tr '\n' ' '); else order=$modes; fi
  for m in $order; do one "$m" "$r"; done
done
echo "# end: $(date -u '+%H:%M:%S UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append((float(f[1]), float(f[2]), f[3]))
local = statistics.mean(r[0] for r in rows["local"]) if "local" in rows else float("nan")
print("| mode | runs | mean test AUC | min | max | spread | mean - local | seconds per run (mean) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for k, v in rows.items():
    a = [r[0] for r in v]
    print("| %s | %d | %.4f | %.4f | %.4f | %.4f | %+.4f | %.1f |" % (
        k, len(a), statistics.mean(a), min(a), max(a), max(a) - min(a), statistics.mean(a) - local,
        statistics.mean(r[1] for r in v)))
PY
