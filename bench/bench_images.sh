#!/usr/bin/env bash
# bench/bench_images.sh [BUILD_DIR] - the JPEG input pipeline against torchvision, with and
# without DCT scaling, on 1 and 2 decode threads, and its cost in a ResNet-50 training step:
#   data     BUILD_DIR/tools/fleet-datagen images --out IMAGES_DIR --train 1200 --val 0 --classes 10
#            --min-size 300 --max-size 500 (ImageNet-like sizes, about 56 MB; made once), and
#            IMAGES_LARGE_DIR the same with --train 400 --min-size 800 --max-size 1600 (photos of
#            today's cameras, scaled down: where DCT scaling pays; about 110 MB; made once)
#   decode   images/s of the training transform (decode, random resized crop 224, flip,
#            normalise) on one core: BUILD_DIR/bench/bench_images decode --threads 1 against
#            bench/images_torch.py --workers 1 (ImageFolder + DataLoader, Pillow's libjpeg-turbo)
#            on the same files, interleaved IMAGES_ROUNDS times (default 2)
#   dct      on the large images, one thread: the training and the eval transform (shorter side
#            to 256, centre crop 224) with --dct-scale 0 and 1, interleaved in the same rounds
#   threads  --threads 1 against --threads 2 (interleaved), on both sets
#   step     BUILD_DIR/bench/bench_images step: ResNet-50 at 224, batch 8, fed by the reader (one
#            decode thread) against fed from memory (target: within 5%); IMAGES_STEP=0 leaves it out
# Environment: IMAGES_DIR (default BUILD_DIR/bench-images), IMAGES_LARGE_DIR (default
# BUILD_DIR/bench-images-large), IMAGES_N (images per decode run, default 400; 200 on the large
# set), PEER_TORCH_VENV (PyPI torch + torchvision; bench/peer_venv.sh torch makes one).
set -euo pipefail
build=${1:-build}
dir=${IMAGES_DIR:-$build/bench-images}
large=${IMAGES_LARGE_DIR:-$build/bench-images-large}
n=${IMAGES_N:-400}
nl=$(( n / 2 ))
rounds=${IMAGES_ROUNDS:-2}
[ -f "$dir/train.txt" ] || "$build/tools/fleet-datagen" images --out "$dir" --train 1200 --val 0 --classes 10 \
  --min-size 300 --max-size 500
[ -f "$large/train.txt" ] || "$build/tools/fleet-datagen" images --out "$large" --train 400 --val 0 --classes 10 \
  --min-size 800 --max-size 1600
py=$(bench/peer_venv.sh "$build" torch)
"$py" -c "import torchvision" 2>/dev/null || { echo "bench_images.sh: $py lacks torchvision (install it: $py -m pip install torchvision)" >&2; exit 1; }
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "libjpeg-turbo $(pkg-config --modversion libturbojpeg 2>/dev/null || echo '?') (ours)"
dec() { "$build/bench/bench_images" decode "$@"; }
for r in $(seq "$rounds"); do
  echo "# round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  dec --data "$dir/train.txt" --threads 1 --images "$n"
  OMP_NUM_THREADS=1 "$py" bench/images_torch.py "$dir/train" --workers 1 --images "$n"
  for dct in 0 1; do
    dec --data "$large/train.txt" --threads 1 --images "$nl" --dct-scale "$dct"
    dec --data "$large/train.txt" --threads 1 --images "$nl" --dct-scale "$dct" --eval 1
  done
  OMP_NUM_THREADS=1 "$py" bench/images_torch.py "$large/train" --workers 1 --images "$nl"
  for t in 1 2; do
    dec --data "$dir/train.txt" --threads "$t" --images "$n"
    dec --data "$large/train.txt" --threads "$t" --images "$nl"
  done
done
[ "${IMAGES_STEP:-1}" = 0 ] || "$build/bench/bench_images" step --data "$dir/train.txt" --depth 50 --width 64 --batch 8 \
  --threads 1 --steps 3 --rounds 2
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
