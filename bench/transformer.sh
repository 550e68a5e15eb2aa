#!/usr/bin/env bash
# transformer.sh [BUILD_DIR] - Transformer-base training tokens/s and beam-search
# sentences/s: bench_transformer (this library; float32 and AMP bf16) next to
# bench/transformer_torch.py (PyTorch float32 from PyPI, the same model and batch).
#   Training: TR_ROUNDS rounds (3) at 1 and 2 threads of ours f32, PyTorch f32 and ours bf16
#   (TR_AMP=0 leaves bf16 out; TR_AMP_LEVEL=2 runs it at O2), the order reversed every other
#   round; each run a warm-up step then TR_STEPS (2) timed steps of TR_TOKENS (1024) target
#   tokens in sentences of TR_SEQ (32).  TR_FULL=1: the benchmark's full batch, 4096 tokens
#   (TR_TOKENS=4096).  Medians, and ratios of medians (wall and per CPU second).
#   Decoding (TR_DECODE sentences, 4; 0 skips it): beam 4 over TR_OUT_LEN (16) output words,
#   with the key / value cache and over the whole prefix (each side checks the same words),
#   once per thread count after the rounds.
# PEER_TORCH_VENV: the PyTorch venv (default BUILD_DIR/torch-venv, bench/peer_venv.sh).
# ARGS: extra options for both sides (e.g. "--layers 2" for a quick check).
# Output: the lines of every run in TR_RAW (BUILD_DIR/bench/transformer.raw), the summary on stdout.
set -euo pipefail
build=${1:-build}
venv=${PEER_TORCH_VENV:-$build/torch-venv}
rounds=${TR_ROUNDS:-3}
steps=${TR_STEPS:-2}
tokens=${TR_TOKENS:-1024}
[ "${TR_FULL:-0}" = 1 ] && tokens=4096
seq=${TR_SEQ:-32}
ndec=${TR_DECODE:-4}
args=${ARGS:-}
ours="$build/bench/bench_transformer"
raw=${TR_RAW:-$build/bench/transformer.raw}
[ -x "$ours" ] || { echo "transformer.sh: $ours not built (run: make BUILD=$build all)" >&2; exit 1; }
[ -x "$venv/bin/python" ] || { echo "transformer.sh: no PyTorch venv at $venv (PEER_TORCH_VENV, bench/peer_venv.sh)" >&2; exit 1; }
: >"$raw"
{
  echo "# ISA: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores; uptime: $(uptime)"
  echo "# torch: $("$venv/bin/python" -c 'import torch; print(torch.__version__, "| oneDNN", torch.backends.mkldnn.is_available())')"
  echo "# batch: $tokens target tokens in sentences of $seq, $steps timed steps after one warm-up"
} | tee -a "$raw"

run() { # run TAG THREADS CMD...: one run, its lines tagged into the raw file
  local tag=$1 t=$2
  shift 2
  local out
  out=$(FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$@" | grep -E '^(fleet|torch)') ||
    { echo "transformer.sh: $tag failed" >&2; exit 1; }
  echo "$out" | sed "s/^/$tag t=$t /" | tee -a "$raw"
}
common="--tokens $tokens --seq $seq --steps $steps $args"
one_round() { # one_round REVERSED
  local sides="ours torch"
  [ "${TR_AMP:-1}" = 1 ] && sides="$sides ours_bf16"
  [ "$1" = 1 ] && sides=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
  for t in 1 2; do
    for s in $sides; do
      case $s in
      ours) run ours "$t" "$ours" $common --decode 0 ;;
      ours_bf16) run ours_bf16 "$t" "$ours" $common --decode 0 --amp 1 --amp-level "${TR_AMP_LEVEL:-1}" ;;
      torch) run torch "$t" "$venv/bin/python" bench/transformer_torch.py --threads "$t" $common --decode 0 ;;
      esac
    done
  done
}
for r in $(seq 1 "$rounds"); do
  echo "== round $r"
  one_round $(((r + 1) % 2))
done
if [ "$ndec" != 0 ]; then
  dec="--tokens $((seq * ndec)) --seq $seq --steps 1 --decode $ndec --out_len ${TR_OUT_LEN:-16} $args"
  echo "== beam search"
  for t in 1 2; do
    run dec_ours "$t" "$ours" $dec
    run dec_torch "$t" "$venv/bin/python" bench/transformer_torch.py --threads "$t" $dec
  done
fi
echo "# uptime at the end: $(uptime)" | tee -a "$raw"
python3 - "$raw" <<'EOF'
import re, statistics, sys
runs, cpu, dec = {}, {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) t=(\d) \S+ train: ([\d.]+) tokens/s \((\d+) x (\d+) target tokens per batch, (\d+) steps", line)
    if m and not m.group(1).startswith("dec_"):
        k = (m.group(1), int(m.group(2)))
        runs.setdefault(k, []).append(float(m.group(3)))
        c = float(re.search(r"cpu_s ([\d.]+)", line).group(1))
        cpu.setdefault(k, []).append(int(m.group(4)) * int(m.group(5)) * int(m.group(6)) / c)
    m = re.match(r"dec_(\S+) t=(\d) \S+ beam search, (kv cache|full prefix): ([\d.]+) sentences/s", line)
    if m:
        dec[m.group(1), int(m.group(2)), m.group(3)] = float(m.group(4))
med = {k: statistics.median(v) for k, v in runs.items()}
mc = {k: statistics.median(v) for k, v in cpu.items()}
print("\n| threads | side | tokens/s median (min-max, runs) | tokens per CPU second, median |\n|---|---|---|---|")
for (side, t), v in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print("| %d | %s | %.1f (%.1f-%.1f, %d) | %.1f |" % (t, side, med[side, t], min(v), max(v), len(v), mc[side, t]))
for t in (1, 2):
    if ("ours", t) in med and ("torch", t) in med:
        print("%d thread(s): ours f32 / PyTorch f32 = %.2f wall, %.2f per CPU second (target >= 1.5)"
              % (t, med["ours", t] / med["torch", t], mc["ours", t] / mc["torch", t]))
    if ("ours", t) in med and ("ours_bf16", t) in med:
        print("%d thread(s): ours bf16 / ours f32 = %.2f wall, %.2f per CPU second (target >= 1.3 with AVX512-BF16)"
              % (t, med["ours_bf16", t] / med["ours", t], mc["ours_bf16", t] / mc["ours", t]))
if dec:
    print("\n| threads | ours kv cache | ours full prefix | PyTorch kv cache | PyTorch full prefix |\n|---|---|---|---|---|")
    for t in (1, 2):
        g = lambda s, w: "%.2f" % dec[s, t, w] if (s, t, w) in dec else "-"
        print("| %d | %s | %s | %s | %s |" % (t, g("ours", "kv cache"), g("ours", "full prefix"), g("torch", "kv cache"),
                                            g("torch", "full prefix")))
EOF
