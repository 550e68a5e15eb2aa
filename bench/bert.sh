#!/usr/bin/env bash
# bert.sh [BUILD_DIR] - BERT-base pre-training examples/s and peak resident memory:
# bench_bert (this library; float32 and AMP bf16) next to bench/bert_torch.py (PyTorch float32
# from PyPI, the same model written op by op, the same batch).
#   Speed: BERT_ROUNDS rounds (3) at 1 and 2 threads of ours f32, PyTorch f32 and ours bf16
#   (BERT_AMP=0 leaves bf16 out; BERT_TORCH_AMP=1 adds PyTorch under bf16 autocast), the
#   order reversed every other round; each run a warm-up step then BERT_STEPS (2) timed
#   steps at BERT_BATCH (8) x BERT_SEQ (128).  Medians, and ratios of medians.
#   Memory (BERT_MEM=0 skips it): one step at BERT_MEM_BATCH (32) x 128, 2 threads, with and
#   without recompute (ours: a checkpoint at each encoder layer's output; PyTorch:
#   torch.utils.checkpoint around each layer): peak ru_maxrss, each in its own process.
# PEER_TORCH_VENV: the PyTorch venv (default BUILD_DIR/torch-venv, bench/peer_venv.sh).
# ARGS: extra options for both sides (e.g. "--layers 2" for a quick check).
# Output: the lines of every run in BERT_RAW (BUILD_DIR/bench/bert.raw), the summary on stdout.
# BERT_ROUNDS=0 BERT_RAW=... runs the memory part alone (e.g. next to a speed run with BERT_MEM=0).
set -euo pipefail
build=${1:-build}
venv=${PEER_TORCH_VENV:-$build/torch-venv}
rounds=${BERT_ROUNDS:-3}
steps=${BERT_STEPS:-2}
batch=${BERT_BATCH:-8}
seq=${BERT_SEQ:-128}
args=${ARGS:-}
ours="$build/bench/bench_bert"
raw=${BERT_RAW:-$build/bench/bert.raw}
[ -x "$ours" ] || { echo "bert.sh: $ours not built (run: make BUILD=$build all)" >&2; exit 1; }
[ -x "$venv/bin/python" ] || { echo "bert.sh: no PyTorch venv at $venv (PEER_TORCH_VENV, bench/peer_venv.sh)" >&2; exit 1; }
: >"$raw"
{
  echo "# ISA: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; uptime: $(uptime)"
  echo "# torch: $("$venv/bin/python" -c 'import sys, torch; sys.path.insert(0, "bench"); import torch_blas
print(torch.__version__, "|", torch_blas.blas_desc(torch), "| oneDNN", torch.backends.mkldnn.is_available())')"
} | tee -a "$raw"

run() { # run TAG THREADS CMD...: one run, its line tagged into the raw file
  local tag=$1 t=$2
  shift 2
  local line
  line=$(FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$@" | grep -E '^(fleet|torch)') ||
    { echo "bert.sh: $tag failed" >&2; exit 1; }
  echo "$tag t=$t $line" | tee -a "$raw"
}
common="--batch $batch --seq $seq --steps $steps --warmup 1 $args"
one_round() { # one_round REVERSED
  local sides="ours torch"
  [ "${BERT_AMP:-1}" = 1 ] && sides="$sides ours_bf16"
  [ "${BERT_TORCH_AMP:-0}" = 1 ] && sides="$sides torch_bf16"
  [ "$1" = 1 ] && sides=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in 1 2; do
    for s in $sides; do
      case $s in
      ours) run ours "$t" "$ours" $common ;;
      ours_bf16) run ours_bf16 "$t" "$ours" $common --amp 1 ;;
      torch) run torch "$t" "$venv/bin/python" bench/bert_torch.py --threads "$t" $common ;;
      torch_bf16) run torch_bf16 "$t" "$venv/bin/python" bench/bert_torch.py --threads "$t" $common --amp 1 ;;
      esac
    done
  done
}
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  one_round $(((r + 1) % 2))
done
if [ "${BERT_MEM:-1}" = 1 ]; then
  mb=${BERT_MEM_BATCH:-32}
  mem="--batch $mb --seq 128 --steps 1 --warmup 0 $args"
  echo "== memory: one step at $mb x 128"
  for rc in 0 1; do
    run "mem_ours_rc$rc" 2 "$ours" $mem --recompute $rc
    run "mem_torch_rc$rc" 2 "$venv/bin/python" bench/bert_torch.py --threads 2 $mem --recompute $rc
  done
fi
echo "# uptime at the end: $(uptime)" | tee -a "$raw"
python3 - "$raw" <<'EOF'
import re, statistics, sys
runs, cpu, mem = {}, {}, []
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) t=(\d) \S+ train: ([\d.]+) examples/s \((\d+) x \d+, \d+ masked each, (\d+) steps", line)
    if not m:
        continue
    c = float(re.search(r"cpu_s ([\d.]+)", line).group(1))
    if m.group(1).startswith("mem_"):
        mem.append((m.group(1), re.search(r"rss_startup_mib (\d+) rss_peak_mib (\d+)", line).groups(),
                    float(m.group(3))))
    else:
        k = (m.group(1), int(m.group(2)))
        runs.setdefault(k, []).append(float(m.group(3)))
        cpu.setdefault(k, []).append(int(m.group(4)) * int(m.group(5)) / c)
med = {k: statistics.median(v) for k, v in runs.items()}
mc = {k: statistics.median(v) for k, v in cpu.items()}
print("\n| threads | side | examples/s median (min-max, runs) | examples per CPU second, median |\n|---|---|---|---|")
for (side, t), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print("| %d | %s | %.3f (%.3f-%.3f, %d) | %.3f |" % (t, side, med[side, t], min(v), max(v), len(v), mc[side, t]))
for t in (1, 2):
    if ("ours", t) in med and ("torch", t) in med:
        print("%d thread(s): ours f32 / PyTorch f32 = %.2f wall, %.2f per CPU second (target >= 1.5)"
              % (t, med["ours", t] / med["torch", t], mc["ours", t] / mc["torch", t]))
    if ("ours", t) in med and ("ours_bf16", t) in med:
        print("%d thread(s): ours bf16 / ours f32 = %.2f wall, %.2f per CPU second (target >= 1.3 with AVX512-BF16)"
              % (t, med["ours_bf16", t] / med["ours", t], mc["ours_bf16", t] / mc["ours", t]))
if mem:
    print("\n| run | rss after startup MiB | peak rss MiB | examples/s |\n|---|---|---|---|")
    for tag, (s, p), ex in mem:
        print("| %s | %s | %s | %.3f |" % (tag, s, p, ex))
EOF
