#!/usr/bin/env bash
# bench/zoo_text.sh [BUILD_DIR] - simnet-bow and word2vec, Fleet against PyTorch: the metric each
# reaches and the training throughput, on the same generated data, one thread each side.
#
#   data     fleet-datagen simnet --rows 20000 --seed 5 and fleet-datagen word2vec --sentences
#            8000 --seed 5 into a temp dir, once; word2vec's training pairs are written once by
#            the C reader (examples/word2vec/train --keep_samples 1) and read by both sides
#   ours     examples/simnet/train --is_local 1 (emb 32, hid 32, Adagrad 0.1, batch 64, 3
#            epochs) and examples/word2vec/train --is_local 1 (emb 16, SGD 1.0, batch 64, 2
#            epochs), --thread_num 1, OPENBLAS_NUM_THREADS=1; examples/s = all epochs' examples /
#            their seconds, reading and parsing the files included (QueueDataset)
#   PyTorch  bench/zoo_text_torch.py: the same networks, initial distributions, optimizers,
#            batches and order; examples/s of the training loop only (data parsed before)
# ZOO_ROUNDS rounds (3), interleaved (ours, PyTorch; the order reverses every round); the
# summary gives medians and the ratio of medians.  BENCH_PYTHON (the PyTorch peer's python; default the venv of bench/peer_venv.sh torch).
# Output: BUILD_DIR/bench/zoo_text.raw and BUILD_DIR/bench/zoo_text_summary.md.  About 2 minutes.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${ZOO_ROUNDS:-3}
gen="$build/tools/fleet-datagen"
sim="$build/examples/simnet/train"
w2v="$build/examples/word2vec/train"
for f in "$gen" "$sim" "$w2v"; do
  [ -x "$f" ] || { echo "zoo_text.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
# shellcheck source=bench/peers.sh
. bench/peers.sh
py=$(torch_python "$build") || { echo "zoo_text.sh: no PyTorch peer (reason above)" >&2; exit 1; }
outdir="$build/bench"
mkdir -p "$outdir"
raw="$outdir/zoo_text.raw"
summary="$outdir/zoo_text_summary.md"
tmp=$(mktemp -d /tmp/zoo_text.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
: >"$raw"
"$gen" simnet --rows 20000 --seed 5 --out "$tmp/s" >>"$raw"
"$gen" word2vec --sentences 8000 --seed 5 --out "$tmp/w" >>"$raw"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
simargs="--is_local 1 --train_data $tmp/s/train --test_data $tmp/s/test --dict_dim 1200 --emb_dim 32 --hid_dim 32
  --epochs 3 --batch_size 64 --optimizer adagrad --lr 0.1 --thread_num 1 --print_period 0"
w2vargs="--is_local 1 --data_dir $tmp/w --sample_dir $tmp --embedding_size 16 --epochs 2 --batch_size 64 --lr 1
  --thread_num 1 --print_period 0"
# the pairs both sides train on
"$w2v" $w2vargs --epochs 1 --keep_samples 1 >"$tmp/pairs.log"
pairs=$(sed -n 's/^training pairs kept in //p' "$tmp/pairs.log")
[ -f "$pairs" ] || { echo "zoo_text.sh: no training pairs kept:" >&2; cat "$tmp/pairs.log" >&2; exit 1; }

# all epochs' examples / their time; the time from each epoch's unrounded examples/s
# ("epoch 0: 20000 examples in 0.16 s (128707 examples/s), ...")
rate='/^epoch/ {n += $3; s += $3 / substr($8, 2)} END {printf "%.1f\n", n / s}'
# ours: one line 'R key value' per figure
ours() {
  local o
  o=$("$sim" $simargs)
  echo "$o" | awk "$rate" | sed 's/^/R\tsimnet_examples_per_s\t/'
  echo "$o" | awk '/test order rate/ {printf "R\tsimnet_order_rate\t%s\n", $4}'
  o=$("$w2v" $w2vargs --keep_samples 1 --sample_dir "$tmp/again")
  echo "$o" | awk "$rate" | sed 's/^/R\tword2vec_examples_per_s\t/'
  echo "$o" | awk '/cluster accuracy/ {printf "R\tword2vec_cluster_acc\t%s\nR\tword2vec_analogy_acc\t%s\n", $3, $9}'
}
torch_() {
  "$py" bench/zoo_text_torch.py simnet --data "$tmp/s"
  "$py" bench/zoo_text_torch.py word2vec --data "$tmp/w" --pairs "$pairs"
}
mkdir -p "$tmp/again"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    ours | sed "s/^R/ours/" >>"$raw"; torch_ | sed "s/^R/torch/" >>"$raw"
  else
    torch_ | sed "s/^R/torch/" >>"$raw"; ours | sed "s/^R/ours/" >>"$raw"
  fi
  rm -f "$tmp"/again/*
done
"$py" - "$raw" "$rounds" >"$summary" <<'PY'
import statistics, sys
vals = {}
for line in open(sys.argv[1]):
    f = line.split("\t")
    if len(f) == 3 and f[0] in ("ours", "torch"):
        vals.setdefault((f[0], f[1]), []).append(float(f[2]))
med = {k: statistics.median(v) for k, v in vals.items()}
print(f"| figure (median of {sys.argv[2]} rounds, 1 thread each) | Fleet in C | PyTorch | ratio |")
print("|---|---|---|---|")
for key in ("simnet_order_rate", "simnet_examples_per_s", "word2vec_cluster_acc", "word2vec_analogy_acc",
            "word2vec_examples_per_s"):
    a, b = med.get(("ours", key)), med.get(("torch", key))
    if a is None or b is None:
        print(f"| {key} | {a} | {b} | n/a |")
    elif key.endswith("per_s"):
        print(f"| {key} | {a:.0f} | {b:.0f} | {a / b:.2f}x |")
    else:
        print(f"| {key} | {a:.4f} | {b:.4f} | {a - b:+.4f} |")
PY
cat "$summary"
