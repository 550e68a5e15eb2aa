#!/usr/bin/env bash
# bench/cnn_ddp.sh [BUILD_DIR] - training images/s of ResNet-50 or VGG-16 at 224, ours
# (BUILD_DIR/bench/bench_cnn_ddp; several processes through BUILD_DIR/tools/fleetrun) against
# torchvision's model in PyPI PyTorch (bench/cnn_torch.py; several processes: DDP over gloo), on
# the same synthetic global batch, the configurations interleaved run by run, ROUNDS rounds,
# medians.  ResNet-50 is v1.5 on both sides (torchvision's resnet50 as it is); CNN_V1=1 runs
# ResNet v1 on both (bench_cnn_ddp --v1 1, cnn_torch.py --v1).
#
# Environment: CNN_MODEL (resnet50; or vgg16), CNN_CONFIGS (processes:threads:global batch,
# space-separated; default "1:1:4 1:2:8 2:1:8" for resnet50 - the one-core baseline at the
# per-process batch, then 1 process x 2 threads and 2 processes x 1 thread on the same global
# batch - and "1:1:8 1:2:8" for vgg16), CNN_ROUNDS (2), CNN_STEPS (2, after 1 warm-up),
# CNN_SIZE (224), CNN_V1 (0), CNN_TORCH (1; 0 leaves PyTorch out), PEER_TORCH_VENV (bench/peer_venv.sh).
# Output: every run's '# ' and R lines, the load between runs, then
# "M<TAB>key<TAB>median<TAB>min<TAB>max" per key and, for resnet50, the scaling efficiency of each
# 2-core configuration: its images/s over twice the one-core baseline's.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
model=${CNN_MODEL:-resnet50}
case $model in
  resnet50) configs=${CNN_CONFIGS:-1:1:4 1:2:8 2:1:8} ;;
  vgg16) configs=${CNN_CONFIGS:-1:1:8 1:2:8} ;;
  *) echo "cnn_ddp.sh: CNN_MODEL must be resnet50 or vgg16, got '$model'" >&2; exit 2 ;;
esac
v1=''
ours_v1=()
if [ "${CNN_V1:-0}" = 1 ]; then
  [ "$model" = resnet50 ] || { echo "cnn_ddp.sh: CNN_V1 is for resnet50" >&2; exit 2; }
  v1=--v1
  ours_v1=(--v1 1)
fi
rounds=${CNN_ROUNDS:-2}
steps=${CNN_STEPS:-2}
size=${CNN_SIZE:-224}
ours=$build/bench/bench_cnn_ddp
for f in "$ours" "$build/tools/fleetrun"; do
  [ -x "$f" ] || { echo "cnn_ddp.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
py=""
if [ "${CNN_TORCH:-1}" = 1 ]; then py=$(PEER_TORCH_VENV=${PEER_TORCH_VENV:-} "$here/peer_venv.sh" "$build" torch); fi
out=$(mktemp)
tmp=$(mktemp -d)
trap 'rm -rf "$out" "$tmp"' EXIT
echo "# $(date -u '+%F %T') UTC, $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# $model at $size, configurations (processes:threads:global batch): $configs; $rounds rounds of $steps steps"
for _ in $(seq 1 "$rounds"); do
  for c in $configs; do
    IFS=: read -r np nt gb <<< "$c"
    if [ "$np" = 1 ]; then
      FLEET_NUM_THREADS=$nt OMP_NUM_THREADS=$nt timeout 1200 "$ours" --model "$model" --batch "$gb" --steps "$steps" --size "$size" \
        "${ours_v1[@]}"
    else
      FLEET_NUM_THREADS=$nt OMP_NUM_THREADS=$nt timeout 1200 "$build/tools/fleetrun" --nproc_per_node "$np" --log_dir "$tmp/log" \
        "$ours" --model "$model" --batch "$gb" --steps "$steps" --size "$size" "${ours_v1[@]}" 2>/dev/null
    fi | grep -E '^(R|# )' | sed "s/\.images_per_s/.t$nt.images_per_s/" | tee -a "$out"
    if [ -n "$py" ]; then
      # shellcheck disable=SC2086 # $v1 is empty or one flag
      timeout 1200 "$py" "$here/cnn_torch.py" --model "$model" --batch "$gb" --world "$np" --threads "$nt" --steps "$steps" \
        --size "$size" $v1 | sed "s/\.images_per_s/.t$nt.images_per_s/" | tee -a "$out"
    fi
    echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
python3 - "$out" "$model" "$size" "$configs" <<'PY'
import sys, collections
v = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if len(f) == 4 and f[0] == "R":
        v.setdefault(f[1], []).append(float(f[2]))
med = {}
for k, xs in v.items():
    s = sorted(xs)
    n = len(s)
    med[k] = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    print("M\t%s\t%.3f\t%.3f\t%.3f" % (k, med[k], s[0], s[-1]))
model, size, configs = sys.argv[2], sys.argv[3], sys.argv[4].split()
base = [c for c in configs if c.split(":")[:2] == ["1", "1"]]
for side in ("cnn", "torch"):
    for c in configs:
        np_, nt, gb = c.split(":")
        k = "%s.%s.s%s.b%s.p%s.t%s.images_per_s" % (side, model, size, gb, np_, nt)
        if k not in med:
            continue
        line = "%s %s x %s, global batch %s: %.3f images/s" % ("ours" if side == "cnn" else "torch", np_, nt, gb, med[k])
        if base and int(np_) * int(nt) == 2:
            b = base[0].split(":")
            kb = "%s.%s.s%s.b%s.p1.t1.images_per_s" % (side, model, size, b[2])
            if kb in med:
                line += ", scaling efficiency %.2f (over 2 x %.3f)" % (med[k] / (2 * med[kb]), med[kb])
        tk = k.replace("cnn.", "torch.", 1)
        if side == "cnn" and tk in med:
            line += ", %.2fx PyTorch" % (med[k] / med[tk])
        print("S\t" + line)
PY
