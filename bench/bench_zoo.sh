#!/usr/bin/env bash
# bench/bench_zoo.sh BUILD_DIR - fleet-lightning's models against the same models in PyTorch
# (bench/zoo_torch.py), trained the same way on the same data, one thread each side
# (fleet-lightning --thread 1; PyTorch OMP 1 / OpenBLAS 1).  Per model: test metric and training
# examples/s, BENCH_ROUNDS (default 3) interleaved rounds (ours then PyTorch, the order reversed
# every round), medians and the ratio of medians.
#
#   DeepFM, Wide&Deep: fleet-datagen criteo --rows 100000 --files 4 --test-rows 20000
#     --vocab-scale 0.01 --dense-scale 0.1 (ceiling AUC 0.79); sparse_feature_dim 10007, embedding 8,
#     hidden 64,64, batch 256, Adam lr 0.003, 1 epoch.
#   ResNet-20 width 8 on Fashion-MNIST (Debian's dataset-fashion-mnist, or FMNIST_DIR): Momentum
#     0.9, lr 0.05 halved every quarter of the run (staircase exponential decay; with a constant
#     rate the last steps leave batch_norm's moving statistics behind the weights and the test
#     accuracy of one run varies by 0.2), batch 64, 1 epoch of BENCH_RESNET_STEPS batches (300).
# Environment: BENCH_ROUNDS, BENCH_RESNET_STEPS, BENCH_PYTHON (the PyTorch peer's python; default the venv of bench/peer_venv.sh torch), ZOO_ONLY
# (space list of deepfm wide_deep resnet).  Output: BUILD_DIR/bench/zoo.raw and a table on stdout.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${BENCH_ROUNDS:-3}
steps=${BENCH_RESNET_STEPS:-300}
only=${ZOO_ONLY:-deepfm wide_deep resnet}
fmnist=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
lt="$build/tools/fleet-lightning"
work="$build/bench/zoo"
raw="$build/bench/zoo.raw"
[ -x "$lt" ] || { echo "bench_zoo.sh: $lt not built (make all)" >&2; exit 1; }
# shellcheck source=bench/peers.sh
. bench/peers.sh
py=$(torch_python "$build") || { echo "bench_zoo.sh: no PyTorch peer (reason above)" >&2; exit 1; }
mkdir -p "$work"
: >"$raw"
[ -f "$work/criteo/planted.json" ] || "$build/tools/fleet-datagen" criteo --rows 100000 --files 4 --test-rows 20000 \
  --vocab-scale 0.01 --dense-scale 0.1 --out "$work/criteo" >/dev/null
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

ours() { # MODEL
  local out
  if [ "$1" = resnet ]; then
    out=$("$lt" train --model resnet --mode local --train_data "$fmnist" --test_data "$fmnist" --depth 20 --width 8 \
      --batch_size 64 --lr 0.05 --momentum 0.9 --lr_decay exponential --decay_steps $((steps / 4)) --decay_rate 0.5 \
      --epochs 1 --max_steps "$steps" --model_dir "$work/m_$1")
  else
    out=$("$lt" train --model "$1" --mode local --thread 1 --train_data "$work/criteo/train" --test_data "$work/criteo/test" \
      --sparse_feature_dim 10007 --embedding_size 8 --hidden 64,64 --batch_size 256 --lr 0.003 --epochs 1 --model_dir "$work/m_$1")
  fi
  echo "$out" >>"$raw"
  echo "R	$1_ours_examples_per_s	$(echo "$out" | sed -n 's/.*(\([0-9.]*\) examples\/s).*/\1/p' | tail -1)" >>"$raw"
  echo "R	$1_ours_metric	$(echo "$out" | sed -n 's/.*: test [a-z]* \([0-9.]*\) on.*/\1/p' | tail -1)" >>"$raw"
}
theirs() { # MODEL
  local out
  if [ "$1" = resnet ]; then
    out=$("$py" bench/zoo_torch.py --model resnet --data "$fmnist" --depth 20 --width 8 --batch 64 --lr 0.05 --max_steps "$steps" \
      --decay_steps $((steps / 4)) --decay_rate 0.5)
  else
    out=$("$py" bench/zoo_torch.py --model "$1" --data "$work/criteo" --dim 10007 --emb 8 --hidden 64,64 --batch 256 --lr 0.003)
  fi
  echo "$out" | grep -v '^R' >>"$raw" || true
  echo "$out" | sed -e "s/_torch_test_[a-z]*/_torch_metric/" | grep '^R' >>"$raw"
}

for r in $(seq 1 "$rounds"); do
  for m in $only; do
    echo "## round $r $m (load average $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$raw"
    if [ $((r % 2)) = 1 ]; then ours "$m"; theirs "$m"; else theirs "$m"; ours "$m"; fi
  done
done

"$py" - "$raw" $only <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "R" and len(f) >= 3 and f[2]:
        vals.setdefault(f[1], []).append(float(f[2]))
med = lambda k: statistics.median(vals[k]) if k in vals else float("nan")
print("| model | metric ours | metric PyTorch | examples/s ours | examples/s PyTorch | ours / PyTorch |")
print("|---|---:|---:|---:|---:|---:|")
for m in sys.argv[2:]:
    o, t = med(m + "_ours_examples_per_s"), med(m + "_torch_examples_per_s")
    print("| %s | %.4f | %.4f | %.0f | %.0f | %.2fx |" % (m, med(m + "_ours_metric"), med(m + "_torch_metric"), o, t, o / t))
PY
