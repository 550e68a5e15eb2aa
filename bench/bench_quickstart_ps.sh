#!/usr/bin/env bash
# bench_quickstart_ps.sh BUILD_DIR - the quick-start MLP (batch 128) trained with parameter
# servers on loopback against the same program trained locally, in steps/s, interleaved.
#   local   examples/quick_start/local_train STEPS
#   ps 1x1  fleetrun --server_num 1 --worker_num 1 distributed_train STEPS MODE
#   ps 2x2  fleetrun --server_num 2 --worker_num 2 distributed_train STEPS MODE (steps of
#           both workers together)
# Wall time of each whole run (process start, startup, STEPS steps, shutdown), so STEPS is
# large enough for the fixed costs (about 0.1 s) to matter little.  BENCH_ROUNDS (3),
# BENCH_STEPS (3001), BENCH_MODES ("async sync").
set -euo pipefail
build=${1:-build}
rounds=${BENCH_ROUNDS:-3}
steps=${BENCH_STEPS:-3001}
modes=${BENCH_MODES:-async sync}
log=$(mktemp -d /tmp/fleet-bench-qs.XXXXXX)
trap 'rm -rf "$log"' EXIT
now() { date +%s.%N; }
run() { # name cmd... -> prints "name seconds"
  local name=$1; shift
  local t0 t1
  t0=$(now)
  "$@" > "$log/out" 2>&1 || { echo "bench_quickstart_ps: $name failed:" >&2; tail -20 "$log/out" >&2; exit 1; }
  t1=$(now)
  echo "$name $(echo "$t1 - $t0" | bc -l)"
}
: > "$log/raw"
for r in $(seq 1 "$rounds"); do
  run local "$build/examples/quick_start/local_train" "$steps" >> "$log/raw"
  for m in $modes; do
    run "ps1x1_$m" "$build/tools/fleetrun" --server_num 1 --worker_num 1 --log_dir "$log/l" \
      "$build/examples/quick_start/distributed_train" "$steps" "$m" >> "$log/raw"
    run "ps2x2_$m" "$build/tools/fleetrun" --server_num 2 --worker_num 2 --log_dir "$log/l" \
      "$build/examples/quick_start/distributed_train" "$steps" "$m" >> "$log/raw"
  done
done
python3 - "$log/raw" "$steps" <<'PY'
import sys, statistics
raw, steps = sys.argv[1], int(sys.argv[2])
t = {}
for line in open(raw):
    k, v = line.split()
    t.setdefault(k, []).append(float(v))
def sps(k):
    n = steps * (2 if k.startswith("ps2x2") else 1)
    return statistics.median(n / x for x in t[k])
base = sps("local")
print("quick-start MLP, batch 128, %d steps a run, medians of %d rounds (whole-run wall time)" % (steps, len(t["local"])))
print("| run | steps/s | vs local |")
print("|---|---:|---:|")
for k in t:
    print("| %s | %.0f | %.2fx |" % (k, sps(k), sps(k) / base))
PY
