#!/usr/bin/env bash
# bench/run.sh BUILD_DIR - the `make bench` benchmarks: Fleet's executor against PyTorch (PyPI's, in
# the venv of bench/peer_venv.sh torch, or BENCH_PYTHON's) and against bare OpenBLAS sgemm.  See bench/README.md.
#
#   1. quick-start MLP training, batch 128, steps/s: ours vs PyTorch (OMP_NUM_THREADS=1 with
#      OPENBLAS_NUM_THREADS=2, the fastest single-process PyTorch configuration on a quiet machine,
#      and also with OPENBLAS_NUM_THREADS=1; the ratio is taken against the faster of the two)
#   2. fc 273-400-400-400-2 training (relu, softmax CE, SGD), batch 512, samples/s: ours vs PyTorch
#   3. fc stack forward, batch 512, GFLOP/s: ours vs a bare cblas_sgemm chain of the same shapes in
#      the same process (and PyTorch's no_grad forward for context)
# Ours runs with 1 and 2 threads (each reported, labelled blas1 / blas2): 1 thread is
# OPENBLAS_NUM_THREADS=1; 2 threads is FLEET_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 for the
# training steps, where Fleet splits each large sgemm over two threads itself and keeps
# OpenBLAS single-threaded (src/tensor/parallel.c), and OPENBLAS_NUM_THREADS=2 alone for the
# forward-vs-bare-sgemm comparison (same threads on both sides).  Runs are interleaved
# (ours, PyTorch, ours, PyTorch; the order reverses every round) and repeated BENCH_ROUNDS times; the
# summary gives medians and ratios of medians.  The OpenBLAS kernel set is whatever
# OPENBLAS_CORETYPE in the environment selects (unset: auto-detect); it is the same for both sides,
# and each run prints the core name its OpenBLAS reports.
#
# Paddle 3.x (PyPI, in BUILD_DIR/peer-venv made by bench/peer_venv.sh) runs the same models
# (bench/paddle_ref.py: static and dynamic graph, 1 and 2 intra-op threads), interleaved with the
# others; the summary adds ours against Paddle's fastest configuration.
#
# Environment: BENCH_ROUNDS (default 5), BENCH_SECONDS per timed run (default 1.5),
# BENCH_PYTHON (the PyTorch peer's python; default the venv of bench/peer_venv.sh torch), BENCH_ONLY (space list of mlp fc fcfwd),
# BENCH_PEERS (paddle,torch: which peers run, bench/peers.sh), BENCH_FMNIST_MODELS (mlp; "mlp cnn"
# adds the Fashion-MNIST CNN), BENCH_ALLREDUCE=0 skips
# bench/allreduce_peers.sh.
# BENCH_FMNIST=0 / BENCH_CTR=0 / BENCH_DNN=0 / BENCH_ZOO=0 skip bench/bench_fmnist.sh /
# bench/bench_ctr.sh / bench/bench_ctr_dnn.sh / bench/bench_zoo.sh (run after these; bench_ctr_dnn.sh
# only in a build with oneDNN).
# Output: BUILD_DIR/bench/results.raw (every line of every run), BUILD_DIR/bench/summary.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${BENCH_ROUNDS:-5}
secs=${BENCH_SECONDS:-1.5}
only=${BENCH_ONLY:-mlp fc fcfwd}
bin="$build/bench/bench_train"
raw="$build/bench/results.raw"
[ -x "$bin" ] || { echo "bench/run.sh: $bin not built (run: make BUILD=$build all)" >&2; exit 1; }

# shellcheck source=bench/peers.sh
. bench/peers.sh
peers_init "$build"
have_torch=$want_torch
py=$py_any
sumpy=$py
"$sumpy" -c 'pass' 2>/dev/null || sumpy=python3

export OMP_NUM_THREADS=1   # our library does not use OpenMP; set the same for both sides
: >"$raw"
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "# host: $(uname -srm); $(getconf _NPROCESSORS_ONLN) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
       "family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: auto-detect)} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-(unset)}" \
       "OMP_NUM_THREADS=$OMP_NUM_THREADS; rounds=$rounds, ${secs}s per timed run"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "# peers: BENCH_PEERS=${BENCH_PEERS:-paddle,torch}; PyTorch $([ $have_torch = 1 ] && echo yes || echo n/a);" \
       "Paddle $([ -n "$paddle_py" ] && echo yes || echo n/a)"
  paddle_header
} | tee -a "$raw"

load() { cut -d' ' -f1 /proc/loadavg; }
ours() { # MODE BLAS_THREADS
  echo "## ours $1 FLEET_NUM_THREADS=$([ "$1" = fcfwd ] && echo 1 || echo "$2") OPENBLAS_NUM_THREADS=$2 (load average $(load))" >>"$raw"
  # fcfwd compares with a bare cblas_sgemm chain at the same OpenBLAS threads: no Fleet split there
  local ft=$2
  [ "$1" = fcfwd ] && ft=1
  FLEET_NUM_THREADS=$ft OPENBLAS_NUM_THREADS=$2 timeout 120 "$bin" "$1" --seconds "$secs" >>"$raw" 2>&1 || echo "# FAILED: ours $1 blas$2" | tee -a "$raw"
}
torch() { # MODE BLAS_THREADS (OMP_NUM_THREADS=1 always: the fast configurations)
  [ $have_torch = 1 ] || return 0
  echo "## torch $1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=$2 (load average $(load))" >>"$raw"
  timeout 120 "$py" bench/torch_ref.py "$1" --seconds "$secs" --threads 1 --blas-threads "$2" >>"$raw" 2>&1 \
    || echo "# FAILED: torch $1 blas$2" | tee -a "$raw"
}

paddle() { # MODE THREADS: static and dynamic graph in one process
  [ -n "$paddle_py" ] || return 0
  echo "## paddle $1 threads $2 (load average $(load))" >>"$raw"
  timeout 120 "$paddle_py" bench/paddle_ref.py "$1" --seconds "$secs" --threads "$2" >>"$raw" 2>&1 \
    || echo "# FAILED: paddle $1 threads $2" | tee -a "$raw"
}

if awk -v l="$(load)" 'BEGIN { exit !(l > 0.5) }'; then
  echo "# warning: 1-minute load average is $(load) before starting: other work is running, numbers will be noisy" | tee -a "$raw"
fi
t0=$(date +%s)
for r in $(seq 1 "$rounds"); do
  echo "# round $r" >>"$raw"
  for m in $only; do
    if [ $((r % 2)) = 1 ]; then ours "$m" 1; torch "$m" 2; paddle "$m" 1; ours "$m" 2; torch "$m" 1; paddle "$m" 2
    else paddle "$m" 2; torch "$m" 1; ours "$m" 2; paddle "$m" 1; torch "$m" 2; ours "$m" 1; fi
  done
  echo "round $r/$rounds done ($(( $(date +%s) - t0 )) s)"
done
# the kernel set each side actually used (first report of each)
grep -m1 '^# fleet bench_train' "$raw" | sed 's/^# /ours:    /' || true
grep -m1 '^# gemm' "$raw" | sed 's/^# /ours:    /' || true   # oneDNN version and ISA, OpenBLAS core
grep -m1 '^# torch' "$raw" | sed 's/^# /pytorch: /' || true
grep -m1 '^# paddle bench' "$raw" | sed 's/^# /paddle:  /' || true
cores=$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | tr '\n' ' ')
echo "OpenBLAS kernel sets seen in all runs: ${cores:-none}"
[ "$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | wc -l)" -le 1 ] \
  || echo "WARNING: the two sides did not use the same OpenBLAS kernel set; the comparison is not like for like"
echo
"$sumpy" bench/summarize.py "$raw" --markdown "$build/bench/summary.md"
echo "raw results: $raw; summary: $build/bench/summary.md"
if [ "${BENCH_FMNIST:-1}" = 1 ]; then   # BENCH_FMNIST_MODELS: "mlp" (default), "mlp cnn"
  for m in ${BENCH_FMNIST_MODELS:-mlp}; do
    FMNIST_MODEL=$m bench/bench_fmnist.sh "$build" || echo "# FAILED: bench/bench_fmnist.sh ($m)"
  done
fi
[ "${BENCH_CTR:-1}" = 1 ] && { bench/bench_ctr.sh "$build" || echo "# FAILED: bench/bench_ctr.sh"; }   # CTR-DNN vs PyTorch, PS async, parser
[ "${BENCH_DNN:-1}" = 1 ] && { bench/bench_ctr_dnn.sh "$build" || echo "# FAILED: bench/bench_ctr_dnn.sh"; }   # oneDNN vs OpenBLAS, AMP bf16
[ "${BENCH_ZOO:-1}" = 1 ] && { bench/bench_zoo.sh "$build" || echo "# FAILED: bench/bench_zoo.sh"; }   # fleet-lightning's models vs PyTorch
if [ "${BENCH_ALLREDUCE:-1}" = 1 ]; then
  bench/allreduce_peers.sh "$build"   # Fleet vs Open MPI vader vs gloo allreduce (BENCH_AR_ROUNDS/BENCH_AR_SECONDS/BENCH_AR_SIZES)
fi
