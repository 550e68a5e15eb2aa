#!/usr/bin/env bash
# bench/bench_images.sh [BUILD_DIR] - the JPEG input pipeline against torchvision, and its cost in
# a ResNet-50 training step:
#   data     BUILD_DIR/tools/fleet-datagen images --out IMAGES_DIR --train 1200 --val 0 --classes 10
#            --min-size 300 --max-size 500 (ImageNet-like sizes, about 56 MB; made once)
#   decode   images/s of the training transform (decode, random resized crop 224, flip,
#            normalise) on one core: BUILD_DIR/bench/bench_images decode --threads 1 against
#            bench/images_torch.py --workers 1 (ImageFolder + DataLoader, Pillow's libjpeg-turbo)
#            on the same files, interleaved IMAGES_ROUNDS times (default 2)
#   step     BUILD_DIR/bench/bench_images step: ResNet-50 at 224, batch 8, fed by the reader (one
#            decode thread) against fed from memory (target: within 5%)
# Environment: IMAGES_DIR (default BUILD_DIR/bench-images), IMAGES_N (images per decode run,
# default 400), PEER_TORCH_VENV (PyPI torch + torchvision; bench/peer_venv.sh torch makes one).
set -euo pipefail
build=${1:-build}
dir=${IMAGES_DIR:-$build/bench-images}
n=${IMAGES_N:-400}
rounds=${IMAGES_ROUNDS:-2}
[ -f "$dir/train.txt" ] || "$build/tools/fleet-datagen" images --out "$dir" --train 1200 --val 0 --classes 10 \
  --min-size 300 --max-size 500
py=$(bench/peer_venv.sh "$build" torch)
"$py" -c "import torchvision" 2>/dev/null || { echo "bench_images.sh: $py lacks torchvision (install it: $py -m pip install torchvision)" >&2; exit 1; }
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "libjpeg-turbo $(pkg-config --modversion libturbojpeg 2>/dev/null || echo '?') (ours)"
for r in $(seq "$rounds"); do
  "$build/bench/bench_images" decode --data "$dir/train.txt" --threads 1 --images "$n"
  OMP_NUM_THREADS=1 "$py" bench/images_torch.py "$dir/train" --workers 1 --images "$n"
done
"$build/bench/bench_images" step --data "$dir/train.txt" --depth 50 --width 64 --batch 8 --threads 1 --steps 3 \
  --rounds 2
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
