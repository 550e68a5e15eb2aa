#!/usr/bin/env bash
# bench/adam_rows.sh [BUILD_DIR] - CTR-DNN at batch 32 on one thread: Adam against SGD, and a
# sparse table of 10^5 rows against one of 10^7 (the issue's "a step whose cost does not
# depend on the table size").  BUILD_DIR/bench/bench_ctr local with --optimizer and
# --table-rows, the four configurations interleaved for ADAM_ROUNDS rounds (3), ADAM_SECONDS
# (3) each, on ADAM_ROWS (240000) rows from fleet-datagen criteo; prints every run and the
# medians, the ratios Adam/SGD and 10^7/10^5.  OPENBLAS_NUM_THREADS=1; the kernel set is
# whatever OPENBLAS_CORETYPE selects (bench_ctr prints it and oneDNN's ISA).
set -euo pipefail
B=${1:-build}
ROUNDS=${ADAM_ROUNDS:-3}
SECS=${ADAM_SECONDS:-3}
ROWS=${ADAM_ROWS:-240000}
D=$(mktemp -d /tmp/fl_adamrows.XXXXXX)
trap 'rm -rf "$D"' EXIT
"$B/tools/fleet-datagen" criteo --rows "$ROWS" --files 2 --out "$D/data" >/dev/null
run() { # optimizer rows -> examples/s
    OPENBLAS_NUM_THREADS=1 timeout 600 "$B/bench/bench_ctr" local --data "$D/data" --batches 32 --threads 1 \
        --seconds "$SECS" --optimizer "$1" --table-rows "$2" 2>&1 | tee -a "$D/log" |
        awk -F'\t' '$2 ~ /ex_per_s$/ {e=$3} $2 ~ /other_cpu/ {o=$3} END {print e, o}'
}
for r in $(seq "$ROUNDS"); do
    for opt in sgd adam; do
        for rows in 100001 10000001; do
            read -r ex oc < <(run "$opt" "$rows")
            echo "round $r $opt rows=$rows: $ex examples/s (other cpu $oc)"
            echo "$opt $rows $ex" >>"$D/res"
        done
    done
done
grep -m2 '^# ' "$D/log"
python3 - "$D/res" <<'PY'
import statistics, sys
r = {}
for line in open(sys.argv[1]):
    o, n, e = line.split(); r.setdefault((o, n), []).append(float(e))
m = {k: statistics.median(v) for k, v in r.items()}
for k in sorted(m): print(f"median {k[0]} rows={k[1]}: {m[k]:.0f} examples/s")
for n in ("100001", "10000001"):
    print(f"adam / sgd at {n} rows: {m[('adam', n)] / m[('sgd', n)]:.2f}x (target >= 0.7x)")
for o in ("sgd", "adam"):
    print(f"{o}: 10^7 rows / 10^5 rows: {m[(o, '10000001')] / m[(o, '100001')]:.2f}x")
PY
