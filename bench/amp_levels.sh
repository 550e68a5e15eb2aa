#!/usr/bin/env bash
# bench/amp_levels.sh [BUILD_DIR] - CTR-DNN training (bench_ctr local) in float32,
# AMP level O1 (--amp 1) and level O2 (--amp 1 --amp-level 2), bfloat16, on fleet-datagen
# data.  Each round runs the three back to back, the order rotating every round (AMP_ROUNDS
# rounds); the summary gives medians (min-max) of examples/s and the ratios of medians, and
# each level's last loss (sum over the last batch of its last run: a sanity check that it
# trains, not a comparison, since the runs do different numbers of passes).
#
# Environment: AMP_ROUNDS (5), AMP_SECONDS (1.0) per run, AMP_ROWS (60000), AMP_BATCH (512),
# AMP_THREADS (1: Hogwild trainer threads; each reads its own of the 2 data files).
# Output: the summary on stdout; every line of every run in BUILD_DIR/bench/amp_levels.raw.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${AMP_ROUNDS:-5}
secs=${AMP_SECONDS:-1.0}
rows=${AMP_ROWS:-60000}
batch=${AMP_BATCH:-512}
threads=${AMP_THREADS:-1}
case $threads in 1|2) ;; *) echo "amp_levels.sh: AMP_THREADS must be 1 or 2, got '$threads'" >&2; exit 2 ;; esac
ctr="$build/bench/bench_ctr"
gen="$build/tools/fleet-datagen"
for f in "$ctr" "$gen"; do
  [ -x "$f" ] || { echo "amp_levels.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
mkdir -p "$build/bench"
raw="$build/bench/amp_levels.raw"
tmp=$(mktemp -d /tmp/bench_amp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1
"$gen" criteo --rows "$rows" --files 2 --test-rows 2048 --test-files 1 --out "$tmp/data" >"$raw" 2>&1
names=(f32 O1 O2)
flags=("--amp 0" "--amp 1" "--amp 1 --amp-level 2")
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');" \
     "load average $(cut -d' ' -f1 /proc/loadavg) at start; git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < 3; k++)); do
    i=$(((k + r) % 3))
    # shellcheck disable=SC2086
    out=$("$ctr" local --data "$tmp/data" --files "$threads" --batches "$batch" --threads "$threads" --seconds "$secs" ${flags[$i]})
    echo "$out" | sed "s/^/${names[$i]} r$r: /" >>"$raw"
    rate=$(echo "$out" | awk -F'\t' '$2 ~ /\.ex_per_s$/ {print $3}')
    loss=$(echo "$out" | sed -n 's/.*last loss (sum over the batch) \([0-9.]*\).*/\1/p')
    echo "${names[$i]} $rate $loss" >>"$tmp/rates"
  done
done
echo "# CTR-DNN, batch $batch, $threads thread(s), bfloat16 AMP, $rounds rounds of ${secs}s, examples/s"
awk '
  { v[$1] = v[$1] " " $2; l[$1] = $3 }
  function med(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    split("f32 O1 O2", k, " ")
    for (i = 1; i <= 3; i++) { m[k[i]] = med(v[k[i]]); printf "%s\t%.0f (%s-%s)\tlast loss %s\n", k[i], m[k[i]], lo, hi, l[k[i]] }
    printf "O2/f32\t%.2fx\nO1/f32\t%.2fx\nO2/O1\t%.2fx\n", m["O2"] / m["f32"], m["O1"] / m["f32"], m["O2"] / m["O1"]
  }' "$tmp/rates"
