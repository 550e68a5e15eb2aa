#!/usr/bin/env bash
# transformer.sh [BUILD_DIR] - Transformer-base training tokens/s and beam-search
# sentences/s (with the key / value cache and over the whole prefix, each checked to give
# the same words): bench_transformer (this library, float32) next to bench/transformer_torch.py
# (PyTorch float32 from PyPI, the same model and batch) at 1 and 2 threads, with the CPU's
# ISA.  PEER_TORCH_VENV: the PyTorch venv (default BUILD_DIR/torch-venv, bench/peer_venv.sh).
# ARGS: extra options for both (default: Transformer-base, 2048 tokens of 32, 3 steps).
set -euo pipefail
build=${1:-build}
venv=${PEER_TORCH_VENV:-$build/torch-venv}
args=${ARGS:---tokens 2048 --seq 32 --steps 3 --decode 8 --out_len 32}
echo "ISA: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for t in 1 2; do
  echo "== $t thread(s)"
  FLEET_NUM_THREADS=$t OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t "$build/bench/bench_transformer" $args
  OMP_NUM_THREADS=$t "$venv/bin/python" bench/transformer_torch.py --threads "$t" $args
done
