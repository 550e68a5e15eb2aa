#!/usr/bin/env bash
# bench/bench_ctr_dnn.sh [BUILD_DIR] - the matrix products of fc and mul_grad on oneDNN against
# OpenBLAS (FLEET_GEMM=dnnl|openblas, src/tensor/dnn.c), same binary, same process settings.
#
#   fc       BUILD_DIR/bench/bench_train fc --batch 32 and 512: x[273] -> fc400 relu x3 -> fc2
#            softmax -> cross-entropy, SGD (CTR-DNN's dense part), samples/s
#   fcfwd    BUILD_DIR/bench/bench_train fcfwd --batch 32 and 512: the same stack forward only, GFLOP/s
#   amp      the fc and fcfwd runs again with --amp 1 (bfloat16 products through fl_amp_decorate,
#            oneDNN only: tagged .amp, compared with oneDNN float32)
#   chain    BUILD_DIR/bench/bench_dnn_chain --batch 32 and 512: the fc stack forward through the
#            executor against the same chain of oneDNN matmul primitives called directly (plain
#            layouts; and weights in oneDNN's own layout as context), alternating slices in one
#            process (oneDNN rounds only); target ours >= 0.9x the plain chain
#   ctr      BUILD_DIR/bench/bench_ctr local --batches 32,512 --threads 1: CTR-DNN through
#            fl_exe_train_from_dataset on fleet-datagen data, examples/s
# Each round runs every configuration once per library, the two libraries back to back, the
# order reversing every round (DNN_ROUNDS rounds); the summary gives medians (min-max) and
# dnnl / openblas ratios of medians.  One thread (FLEET_NUM_THREADS=1, OMP_NUM_THREADS=1,
# OPENBLAS_NUM_THREADS=1).  The header names what each side ran on: oneDNN's version and the
# ISA it dispatches to, OpenBLAS's core type, and (one short run with ONEDNN_VERBOSE=1) the
# implementation oneDNN picked for each matmul shape.
#
# Environment: DNN_ROUNDS (3), DNN_SECONDS (1.0) per timed configuration, DNN_ROWS (60000),
# DNN_BATCHES (32,512).  About 2 minutes.
# Output: BUILD_DIR/bench/dnn.raw (every line of every run), BUILD_DIR/bench/dnn_summary.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${DNN_ROUNDS:-3}
secs=${DNN_SECONDS:-1.0}
rows=${DNN_ROWS:-60000}
batches=${DNN_BATCHES:-32,512}
train="$build/bench/bench_train"
chain="$build/bench/bench_dnn_chain"
ctr="$build/bench/bench_ctr"
gen="$build/tools/fleet-datagen"
outdir="$build/bench"
raw="$outdir/dnn.raw"
summary="$outdir/dnn_summary.md"
for f in "$train" "$ctr" "$gen" "$chain"; do
  [ -x "$f" ] || { echo "bench_ctr_dnn.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
if ! FLEET_GEMM=dnnl "$train" fcfwd --batch 8 --seconds 0.05 --warmup 1 --floor 0 >/dev/null 2>&1; then
  echo "bench_ctr_dnn.sh: skipped: FLEET_GEMM=dnnl does not run (a build without libdnnl-dev?), nothing to compare" >&2
  exit 0
fi
mkdir -p "$outdir"
tmp=$(mktemp -d /tmp/bench_dnn.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1
load() { cut -d' ' -f1 /proc/loadavg; }
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(uname -srm); $(getconf _NPROCESSORS_ONLN) CPUs;" \
       "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: auto-detect)}; rounds=$rounds, ${secs}s per configuration;" \
       "batches $batches; CTR data $rows rows; load average $(load) at start"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "# $(FLEET_GEMM=dnnl "$train" fcfwd --batch 8 --seconds 0.05 --warmup 1 --floor 0 | grep -m1 '^# gemm')"
  echo "# $(FLEET_GEMM=openblas "$train" fcfwd --batch 8 --seconds 0.05 --warmup 1 --floor 0 | grep -m1 '^# gemm')"
  for b in ${batches//,/ }; do
    for a in 0 1; do
      ONEDNN_VERBOSE=1 FLEET_GEMM=dnnl "$train" fc --batch "$b" --seconds 0.05 --warmup 1 --floor 0 --amp $a 2>&1 \
        | awk -F, '$1 == "onednn_verbose" && $2 == "exec" && $4 == "matmul" {
                     print "# oneDNN b'"$b"'" ('$a' ? " amp" : "") ": " $5 " " $(NF-1) }' | sort -u
    done
  done
} | tee "$raw"

"$gen" criteo --rows "$rows" --files 2 --test-rows 2048 --test-files 1 --out "$tmp/data" >>"$raw" 2>&1 \
  || { echo "bench_ctr_dnn.sh: fleet-datagen failed" >&2; exit 1; }

step() { # LABEL LIB CMD...: runs CMD with FLEET_GEMM=LIB under a timeout, appending to the raw file
  local label=$1 lib=$2; shift 2
  echo "## $label $lib (load average $(load))" >>"$raw"
  FLEET_GEMM=$lib timeout 200 "$@" >>"$raw" 2>&1 || echo "# FAILED: $label $lib" | tee -a "$raw"
}
one_lib() {
  local lib=$1 b
  for b in ${batches//,/ }; do
    step "fc b$b" "$lib" "$train" fc --batch "$b" --seconds "$secs" --floor 0 --tag ".$lib"
    step "fcfwd b$b" "$lib" "$train" fcfwd --batch "$b" --seconds "$secs" --tag ".$lib"
    if [ "$lib" = dnnl ]; then
      step "fc amp b$b" "$lib" "$train" fc --batch "$b" --seconds "$secs" --floor 0 --amp 1 --tag ".amp"
      step "fcfwd amp b$b" "$lib" "$train" fcfwd --batch "$b" --seconds "$secs" --amp 1 --tag ".amp"
      step "chain b$b" "$lib" "$chain" --batch "$b" --seconds "$secs"
    fi
  done
  step "ctr" "$lib" "$ctr" local --data "$tmp/data" --files 1 --batches "$batches" --threads 1 --seconds "$secs" \
    --tag ".$lib"
}
t0=$(date +%s)
for r in $(seq 1 "$rounds"); do
  echo "# round $r" >>"$raw"
  if [ $((r % 2)) = 1 ]; then one_lib dnnl; one_lib openblas; else one_lib openblas; one_lib dnnl; fi
  echo "round $r/$rounds done ($(( $(date +%s) - t0 )) s)"
done

python3 - "$raw" "$summary" <<'EOF'
import re, statistics, sys
raw, out = sys.argv[1], sys.argv[2]
vals, head = {}, []
for line in open(raw):
    if line.startswith("# date") or line.startswith("# gemm") or line.startswith("# oneDNN b") or line.startswith("# git"):
        if line[2:].rstrip() not in head:
            head.append(line[2:].rstrip())
    f = line.rstrip("\n").split("\t")
    if len(f) == 4 and f[0] == "R":
        vals.setdefault(f[1], []).append(float(f[2]))
rows, amp_rows = [], []
wanted = ("samples_per_s", "gflops", "ex_per_s")
for key in sorted(vals):
    if not key.startswith("ours.") or ".dnnl" not in key or not key.endswith(wanted):
        continue
    other = key.replace(".dnnl", ".openblas")
    if other not in vals:
        continue
    a, b = vals[key], vals[other]
    ma, mb = statistics.median(a), statistics.median(b)
    name = key.replace(".dnnl", "")
    rows.append(f"| {name} | {ma:.1f} ({min(a):.1f}-{max(a):.1f}) | {mb:.1f} ({min(b):.1f}-{max(b):.1f}) | {ma / mb:.2f}x |")
for key in sorted(vals):
    if not key.startswith("ours.") or ".amp" not in key or not key.endswith(wanted):
        continue
    other = key.replace(".amp", ".dnnl")
    if other not in vals:
        continue
    a, b = vals[key], vals[other]
    ma, mb = statistics.median(a), statistics.median(b)
    amp_rows.append(f"| {key.replace('.amp', '')} | {ma:.1f} ({min(a):.1f}-{max(a):.1f}) | {mb:.1f} ({min(b):.1f}-{max(b):.1f}) | {ma / mb:.2f}x |")
chain_rows = []
for key in sorted(vals):
    m = re.match(r"dnnchain\.ours\.(b\d+)\.gflops$", key)
    if not m:
        continue
    b = m.group(1)
    o, pl, an = (vals.get("dnnchain.%s.%s.gflops" % (s, b)) for s in ("ours", "plain", "any"))
    if not pl or not an:
        continue
    mo, mp, ma = statistics.median(o), statistics.median(pl), statistics.median(an)
    chain_rows.append(f"| fc stack forward {b} | {mo:.1f} ({min(o):.1f}-{max(o):.1f}) | {mp:.1f} ({min(pl):.1f}-{max(pl):.1f}) | "
                      f"{ma:.1f} | {mo / mp:.2f}x | {'yes' if mo / mp >= 0.9 else 'NO'} | {mo / ma:.2f}x |")
text = "\n".join(["# oneDNN vs OpenBLAS (FLEET_GEMM), medians (min-max) of %d runs" % max(len(v) for v in vals.values())]
                 + [""] + ["    " + h for h in head] + ["", "| configuration | oneDNN | OpenBLAS | oneDNN / OpenBLAS |",
                 "|---|---|---|---|"] + rows + ["", "| configuration | oneDNN AMP bf16 | oneDNN float32 | bf16 / float32 |",
                 "|---|---|---|---|"] + amp_rows + ["", "GFLOP/s of the matrix products; ours through the executor, the bare "
                 "chains call oneDNN matmul (+ bias, relu post-op) directly, alternating slices in one process", "",
                 "| configuration | ours | bare oneDNN chain, plain layouts | weights in oneDNN's layout | ours / plain |"
                 " >= 0.9x | ours / oneDNN layout |", "|---|---|---|---|---|---|---|"] + chain_rows) + "\n"
open(out, "w").write(text)
print(text)
EOF
