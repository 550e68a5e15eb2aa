#!/usr/bin/env bash
# bench/bench_ctr.sh [BUILD_DIR] - CTR-DNN training throughput, Fleet against PyTorch, plus
# parameter-server async against local Hogwild and the data parser's MB/s.  See bench/README.md.
#
#   data     BUILD_DIR/tools/fleet-datagen criteo --rows CTR_ROWS --files CTR_FILES (+ 4096 test
#            rows in 2 files for warm-up) into a temp dir, once; PyTorch's copy is parsed (same
#            hash, same scaling) and cached before any timing
#   ours     BUILD_DIR/bench/bench_ctr local: InMemoryDataset of the first CTR_LOCAL_FILES files,
#            fl_exe_train_from_dataset, batch 32 and 512, 1 and 2 Hogwild threads
#            (OPENBLAS_NUM_THREADS=1: one core per trainer thread); in round 1 also one
#            QueueDataset pass at batch 512 (parse + batch + train, the full pipeline)
#   ps       BUILD_DIR/bench/bench_ctr ps: 1 server + 2 workers on 127.0.0.1 (async), each worker
#            with CTR_PS_THREADS threads on its share of the first CTR_PS_FILES files, with the
#            default DistributedStrategy (Paddle's a_sync_configs), and again with CTR_PS_EXTRA
#            (default: max_merge_var_num=8, min_send_grad_num_before_recv=8; context, tagged .tuned)
#   PyTorch  bench/ctr_torch.py: the same model, data, batches; --mode t1 (OMP 1, OpenBLAS 1) and,
#            for 2 threads, t2hog (2 Hogwild processes, OMP 1 / OpenBLAS 1 each), t2blas (OMP 1,
#            OpenBLAS 2), t2omp (OMP 2, OpenBLAS 1); ours with 2 threads is compared with the
#            fastest of the three (by median)
#   Paddle   bench/ctr_paddle.py in BUILD_DIR/peer-venv (Paddle 3.x from PyPI, bench/peer_venv.sh):
#            the same model, data and batches in each of CTR_PADDLE_CONFIGS (GRAPH.DTYPE.THREADS
#            [.onednn]: static = legacy-IR Program + Executor, dynamic = eager; f32 or bf16 AMP;
#            1 or 2 intra-op threads); per batch and thread count the fastest is the peer
#   bf16     ours with --amp 1 (fl_amp_decorate) at 1 and 2 threads against ours f32 and the
#            peers' bf16: PyTorch autocast bf16 (CTR_TORCH_AMP_MODES) and Paddle's bf16 configs
#   parser   BUILD_DIR/bench/bench_data_parse (its MB/s table, once, after the rounds)
# Runs are interleaved (ours local, PyTorch t1, ps, PyTorch 2-thread modes; the order reverses every
# round), CTR_ROUNDS rounds; the summary gives medians, ratios of medians and the targets (local
# f32 >= 1.5x the fastest peer in f32; AMP bf16 >= 2x ours f32 at batch 512 and >= the fastest
# peer's bf16; PS async >= 0.8x local Hogwild with the same total trainer threads; parser
# >= 200 MB/s per thread).  The OpenBLAS kernel set is whatever OPENBLAS_CORETYPE in the
# environment selects (unset: auto-detect), the same for both sides; both report the core name.
# Noise gauge: other_cpu (cores used by other processes during a timed run).
#
# Environment: CTR_ROUNDS (3), CTR_SECONDS (1.5) per timed configuration, CTR_ROWS (200000),
# CTR_FILES (8), CTR_LOCAL_FILES (2), CTR_PS_FILES (2), CTR_PS_THREADS (1), CTR_BATCHES (32,512),
# CTR_TORCH_MODES ("t2hog t2blas t2omp"), CTR_TORCH_AMP_MODES ("t1 t2omp"), CTR_PADDLE_CONFIGS
# ("static.f32.1 static.f32.2 dynamic.f32.1.onednn static.bf16.1 static.bf16.2"),
# CTR_AMP (1: the bf16 runs), CTR_PS (1; 0 skips the parameter-server runs), BENCH_PEERS (paddle,torch: which peers; bench/peers.sh), CTR_PS_EXTRA (strategy KEY=VALUE list; empty: off), CTR_PARSE (1: run bench_data_parse), BENCH_PYTHON
# (the PyTorch peer's python; default the venv of bench/peer_venv.sh torch).  About 6 minutes with both peers (3 without).
# Output: BUILD_DIR/bench/ctr.raw (every line of every run), BUILD_DIR/bench/ctr_summary.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${CTR_ROUNDS:-3}
secs=${CTR_SECONDS:-1.5}
rows=${CTR_ROWS:-200000}
nfiles=${CTR_FILES:-8}
lfiles=${CTR_LOCAL_FILES:-2}
pfiles=${CTR_PS_FILES:-2}
pthreads=${CTR_PS_THREADS:-1}
batches=${CTR_BATCHES:-32,512}
tmodes=${CTR_TORCH_MODES:-t2hog t2blas t2omp}
amodes=${CTR_TORCH_AMP_MODES:-t1 t2omp}
pconfigs=${CTR_PADDLE_CONFIGS:-static.f32.1 static.f32.2 dynamic.f32.1.onednn static.bf16.1 static.bf16.2}
amp=${CTR_AMP:-1}
psextra=${CTR_PS_EXTRA-a_sync_configs.max_merge_var_num=8 a_sync_configs.min_send_grad_num_before_recv=8}
bin="$build/bench/bench_ctr"
gen="$build/tools/fleet-datagen"
parse="$build/bench/bench_data_parse"
outdir="$build/bench"
raw="$outdir/ctr.raw"
summary="$outdir/ctr_summary.md"
for f in "$bin" "$gen" "$parse"; do
  [ -x "$f" ] || { echo "bench_ctr.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
# shellcheck source=bench/peers.sh
. bench/peers.sh
peers_init "$build"
have_torch=$want_torch
py=$py_any
[ $have_torch = 1 ] || amodes=
[ -n "$paddle_py" ] || pconfigs=
[ "$amp" = 1 ] || { amodes=; pconfigs=$(echo "$pconfigs" | tr ' ' '\n' | grep -v '\.bf16\.' | tr '\n' ' ' || true); }
sumpy=$py
"$sumpy" -c 'pass' 2>/dev/null || sumpy=python3
mkdir -p "$outdir"
tmp=$(mktemp -d /tmp/bench_ctr.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1

{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(uname -srm); $(getconf _NPROCESSORS_ONLN) CPUs;" \
       "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: auto-detect)}; rounds=$rounds, ${secs}s per timed configuration;" \
       "data: $rows rows in $nfiles files, local uses $lfiles file(s), ps $pfiles file(s), ps threads per worker $pthreads;" \
       "batches $batches"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "# peers: BENCH_PEERS=${BENCH_PEERS:-paddle,torch}; PyTorch $([ $have_torch = 1 ] && echo "modes t1 $tmodes, bf16 ${amodes:-none}" || echo "n/a");" \
       "Paddle ${pconfigs:-n/a}"
  paddle_header
} | tee "$raw"
load() { cut -d' ' -f1 /proc/loadavg; }
if awk -v l="$(load)" 'BEGIN { exit !(l > 0.5) }'; then
  echo "# warning: 1-minute load average is $(load) before starting: other work is running, numbers will be noisy" | tee -a "$raw"
fi

t0=$(date +%s)
"$gen" criteo --rows "$rows" --files "$nfiles" --test-rows 4096 --test-files 2 --out "$tmp/data" >>"$raw" 2>&1 \
  || { echo "bench_ctr.sh: fleet-datagen failed" >&2; exit 1; }
if [ $have_torch = 1 ] || [ -n "$pconfigs" ]; then
  for n in "$lfiles" "$pfiles"; do
    timeout 120 "$py" bench/ctr_torch.py --data "$tmp/data" --files "$n" --prepare >>"$raw" 2>&1 \
      || { echo "# FAILED: ctr_data.py (ctr_torch.py --prepare)" | tee -a "$raw"; have_torch=0; amodes=; pconfigs=; }
  done
fi
echo "data ready ($(( $(date +%s) - t0 )) s)"

step() { # LABEL CMD...: runs CMD under a timeout, appending its output to the raw file
  local label=$1; shift
  echo "## $label (load average $(load))" >>"$raw"
  timeout 200 "$@" >>"$raw" 2>&1 || echo "# FAILED: $label" | tee -a "$raw"
}
ours_local() {
  local q=()
  [ "$1" = 1 ] && q=(--queue-batch 512)
  step "ours local" "$bin" local --data "$tmp/data" --files "$lfiles" --batches "$batches" --threads 1,2 --seconds "$secs" "${q[@]}"
}
ours_ps() {
  [ "${CTR_PS:-1}" = 1 ] || return 0
  step "ours ps" "$bin" ps --data "$tmp/data" --files "$pfiles" --batches "$batches" --threads "$pthreads" --seconds "$secs"
  if [ -n "$psextra" ]; then
    local a=() kv
    for kv in $psextra; do a+=(--strategy "$kv"); done
    step "ours ps ($psextra)" "$bin" ps --data "$tmp/data" --files "$pfiles" --batches "$batches" --threads "$pthreads" \
      --seconds "$secs" --tag .tuned "${a[@]}"
  fi
}
torch_run() { # MODE [AMP]
  [ $have_torch = 1 ] || return 0
  step "torch $1${2:+ bf16}" "$py" bench/ctr_torch.py --data "$tmp/data" --files "$lfiles" --batches "$batches" --mode "$1" \
    --seconds "$secs" --amp "${2:-0}"
}
paddle_run() { # GRAPH.DTYPE.THREADS[.onednn]
  local g d t o
  IFS=. read -r g d t o <<<"$1"
  step "paddle $1" "$paddle_py" bench/ctr_paddle.py --data "$tmp/data" --files "$lfiles" --batches "$batches" \
    --graph "$g" --dtype "$d" --threads "$t" --onednn "$([ "$o" = onednn ] && echo 1 || echo 0)" --seconds "$secs"
}
ours_amp() {
  [ "$amp" = 1 ] || return 0
  step "ours local amp" "$bin" local --data "$tmp/data" --files "$lfiles" --batches "$batches" --threads 1,2 --seconds "$secs" \
    --amp 1 --tag .amp
}
peers_f32() { local c; for c in $pconfigs; do [[ $c == *.f32.* ]] && paddle_run "$c"; done; return 0; }
peers_bf16() {
  local m c
  for m in $amodes; do torch_run "$m" 1; done
  for c in $pconfigs; do [[ $c == *.bf16.* ]] && paddle_run "$c"; done
  return 0
}

for r in $(seq 1 "$rounds"); do
  echo "# round $r" >>"$raw"
  if [ $((r % 2)) = 1 ]; then
    ours_local "$r"; torch_run t1; peers_f32; ours_ps; for m in $tmodes; do torch_run "$m"; done; ours_amp; peers_bf16
  else
    peers_bf16; ours_amp; for m in $tmodes; do torch_run "$m"; done; ours_ps; peers_f32; torch_run t1; ours_local "$r"
  fi
  echo "round $r/$rounds done ($(( $(date +%s) - t0 )) s)"
done
if [ "${CTR_PARSE:-1}" = 1 ]; then
  echo "# round parser" >>"$raw"
  echo "## bench_data_parse (load average $(load))" >>"$raw"
  timeout 120 "$parse" >"$tmp/parse.out" 2>&1 || echo "# FAILED: bench_data_parse" >>"$tmp/parse.out"
  cat "$tmp/parse.out" >>"$raw"
fi
grep -m1 '^# fleet bench_ctr local' "$raw" | sed 's/^# /ours:    /' || true
grep -m1 '^# gemm' "$raw" | sed 's/^# /ours:    /' || true   # oneDNN version and ISA, OpenBLAS core
grep -m1 '^# torch' "$raw" | sed 's/^# /pytorch: /' || true
grep -m1 '^# paddle ctr' "$raw" | sed 's/^# /paddle:  /' || true
cores=$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | tr '\n' ' ')
echo "OpenBLAS kernel sets seen in all runs: ${cores:-none}"
[ "$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | wc -l)" -le 1 ] \
  || echo "WARNING: the two sides did not use the same OpenBLAS kernel set; the comparison is not like for like"
echo

"$sumpy" bench/ctr_summary.py "$raw" "$summary" "$batches" "$pthreads" "$tmodes" "$psextra" "$amodes" "$pconfigs"
echo "raw results: $raw; summary: $summary"
