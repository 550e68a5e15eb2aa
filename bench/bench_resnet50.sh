#!/usr/bin/env bash
# bench/bench_resnet50.sh [BUILD_DIR] - ResNet-50 (v1.5) at 224 against torchvision's resnet50 as
# it is (PyPI PyTorch, float32): training and inference images/s on one synthetic in-memory batch, same
# batch, same threads, the two sides interleaved run by run, ROUNDS rounds, medians; then our
# convolution primitives alone (build/bench/bench_resnet50 --mode prims) as the limit.
#
# Environment: RN50_ROUNDS (3), RN50_BATCHES ("8 32"), RN50_THREADS ("1 2"), RN50_MODES
# ("train eval"), RN50_STEPS (3, after 1 warm-up), RN50_AMP (0; 1 adds our bf16 AMP runs),
# RN50_OURS (space-separated bench_resnet50 binaries, default BUILD_DIR/bench/bench_resnet50:
# several compare trees), RN50_TORCH (1; 0 leaves PyTorch out), RN50_V1 (0; 1 adds ResNet v1 runs
# on both sides: ours with --v1 1, keys ".v1", and torchvision's model with the strides moved to
# the first 1x1, keys "torchv1"), RN50_PRIMS (1),
# PEER_TORCH_VENV (bench/peer_venv.sh), RN50_VERBOSE (0; 1 prints each side's oneDNN kernels
# from ONEDNN_VERBOSE, once per configuration, from a batch-2 run at 64x64).
# Output: every run's R line, then "M<TAB>key<TAB>median<TAB>min<TAB>max" per key.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
rounds=${RN50_ROUNDS:-3}
ours=${RN50_OURS:-$build/bench/bench_resnet50}
steps=${RN50_STEPS:-3}
py=""
if [ "${RN50_TORCH:-1}" = 1 ]; then py=$(PEER_TORCH_VENV=${PEER_TORCH_VENV:-} "$here/peer_venv.sh" "$build" torch); fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u '+%F %T') UTC, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
if [ "${RN50_VERBOSE:-0}" = 1 ]; then
  for b in $ours; do
    echo "# ours ($b) kernels:"
    ONEDNN_VERBOSE=1 FLEET_NUM_THREADS=1 "$b" --size 64 --batch 2 --steps 1 --warmup 0 2>&1 |
      grep -E '^onednn_verbose,(info,cpu|exec)' | cut -d, -f2-6 | sort | uniq -c | sort -rn | sed 's/^/#   /'
  done
  if [ -n "$py" ]; then
    echo "# PyTorch kernels:"
    ONEDNN_VERBOSE=1 "$py" "$here/resnet50_torch.py" --size 64 --batch 2 --steps 1 --warmup 0 2>&1 |
      grep -E '^onednn_verbose,v1,(info,cpu|primitive,exec)' | cut -d, -f3-8 | sort | uniq -c | sort -rn | sed 's/^/#   /'
  fi
fi
for r in $(seq 1 "$rounds"); do
  for b in ${RN50_BATCHES:-8 32}; do
    for t in ${RN50_THREADS:-1 2}; do
      for mode in ${RN50_MODES:-train eval}; do
        i=0
        for bin in $ours; do
          i=$((i + 1))
          FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t "$bin" --mode "$mode" --batch "$b" --steps "$steps" |
            sed "s/resnet50\./ours$i.t$t.resnet50./" | tee -a "$out" | grep -v '^# gemm'
          if [ "${RN50_V1:-0}" = 1 ]; then
            FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t "$bin" --mode "$mode" --batch "$b" --steps "$steps" --v1 1 |
              sed "s/resnet50\./ours$i.t$t.resnet50./" | tee -a "$out" | grep -v '^# gemm'
          fi
          if [ "${RN50_AMP:-0}" = 1 ]; then
            FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t "$bin" --mode "$mode" --batch "$b" --steps "$steps" --amp 1 |
              sed "s/resnet50\./ours$i.t$t.resnet50./" | tee -a "$out" | grep -v '^# gemm'
          fi
        done
        if [ -n "$py" ]; then
          "$py" "$here/resnet50_torch.py" --mode "$mode" --batch "$b" --threads "$t" --steps "$steps" |
            sed "s/torch\.resnet50/torch.t$t.resnet50/" | tee -a "$out" | grep -v '^# torch '
          if [ "${RN50_V1:-0}" = 1 ]; then
            "$py" "$here/resnet50_torch.py" --mode "$mode" --batch "$b" --threads "$t" --steps "$steps" --v1 |
              sed "s/torch\.resnet50/torchv1.t$t.resnet50/" | tee -a "$out" | grep -v '^# torch '
          fi
        fi
        echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
      done
    done
  done
done
if [ "${RN50_PRIMS:-1}" = 1 ]; then
  first=${ours%% *}
  for b in ${RN50_BATCHES:-8 32}; do
    for t in ${RN50_THREADS:-1 2}; do
      FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t "$first" --mode prims --batch "$b" --steps 5 |
        sed "s/resnet50\./prims.t$t.resnet50./" | tee -a "$out" | grep -E '^R|GFLOP'
    done
  done
fi
python3 - "$out" <<'PY'
import sys, collections
v = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) == 4 and f[0] == "R":
        v.setdefault(f[1], []).append(float(f[2]))
for k, xs in v.items():
    s = sorted(xs)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    print("M\t%s\t%.3f\t%.3f\t%.3f" % (k, med, s[0], s[-1]))
PY
