#!/usr/bin/env bash
# ensure-deps.sh [build|test|bench|cluster] - makes sure the Debian packages Fleet needs are
# installed.  As root it installs the missing ones with apt-get; otherwise it prints the
# exact command to run and exits 1.  Nothing is downloaded from anywhere but Debian.
#   build: compiler, make, OpenBLAS, OpenSSL (libcrypto, used by the network layer), cJSON
#          (the one JSON reader and writer: strategies, checkpoint manifests, safetensors headers),
#          gnuplot-nox (scripts/plot-metrics.sh: the demo's and the tests' metrics plots),
#          oneDNN (libdnnl-dev: the matmul primitives of fc and mul_grad, bf16 for AMP; the
#          build works without it, on OpenBLAS alone),
#          RocksDB (the disk tier of SSD sparse tables),
#          libjpeg-turbo (libturbojpeg0-dev: the image reader's JPEG decoding; optional at build
#          time, then an image reader is refused), libpng (libpng-dev: PNG files in an image
#          directory; optional at build time, then a PNG file is refused by name)
#   test:  build + python3-numpy (reads our safetensors files back in a test), clang with
#          libFuzzer (the frame and data-parser fuzz harnesses run briefly in the tests),
#          Open MPI (the MPI role maker is built in and tested under mpirun), cmake (an
#          outside project finds the installed library with find_package(Fleet)) and
#          python3-venv (the Python package is tested in a virtual environment with NumPy
#          and pytest from PyPI), clang-format (make format-check, the first step of .ci/run)
#   bench: build + python3-venv, python3-numpy (the PyTorch and Paddle peers live in virtual
#          environments the benchmarks make from PyPI), Open MPI (the reference runs) and
#          dataset-fashion-mnist (the data-parallel benchmark), gnuplot-nox (bench/ps_scale.sh)
#   cluster: build + what tests/cluster needs: iproute2 (namespaces, veth, bridge, tc),
#          Slurm (slurmctld, slurmd, slurm-client) with munge, Open MPI (mpirun, mpicc) and
#          dataset-fashion-mnist (the collective job), python3 (compares parameter dumps)
set -euo pipefail
profile=${1:-test}
pkgs=(gcc make libc6-dev libopenblas-dev libssl-dev libcjson-dev zlib1g-dev libdnnl-dev librocksdb-dev libturbojpeg0-dev libpng-dev pkg-config gnuplot-nox)
case "$profile" in
  build) ;;
  test) pkgs+=(python3 python3-numpy python3-venv clang libclang-rt-dev openmpi-bin libopenmpi-dev cmake clang-format) ;;
  bench) pkgs+=(python3 python3-numpy python3-venv openmpi-bin libopenmpi-dev dataset-fashion-mnist gnuplot-nox) ;;
  cluster) pkgs+=(python3 iproute2 procps slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev dataset-fashion-mnist) ;;
  *) echo "ensure-deps.sh: unknown profile '$profile' (expected build, test, bench or cluster)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Fleet needs these Debian packages: ${missing[*]}" >&2
  echo "Run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "ensure-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/fleet-apt.log 2>&1; then
  apt-get update >>/tmp/fleet-apt.log 2>&1 || true
  apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/fleet-apt.log 2>&1 || {
    echo "ensure-deps: apt-get failed; see /tmp/fleet-apt.log" >&2; tail -20 /tmp/fleet-apt.log >&2; exit 1; }
fi
