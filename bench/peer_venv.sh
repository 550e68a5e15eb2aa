#!/usr/bin/env bash
# bench/peer_venv.sh [BUILD_DIR] [paddle|torch] - the virtual environments of the benchmarks'
# PyPI peers, made only by the benchmarks (bench_ctr.sh, run.sh, bench_fmnist.sh, ... through
# bench/peers.sh), never by `make test` or `make demo`; reused when they exist and import
# their package.  Prints the venv's python on stdout (everything else goes to stderr); exits 1
# with the reason when it cannot be made.
#   paddle (default)  BUILD_DIR/peer-venv: paddlepaddle 3.x (Paddle's CPU wheel: MKL + oneDNN)
#                     and numpy, about 870 MB
#   torch             BUILD_DIR/torch-venv: PyTorch 2.x and numpy from PyPI.  PyPI's Linux
#                     wheel is the CUDA build and pulls the CUDA libraries (about 5.4 GB in all,
#                     about a minute to install here); on a machine without a GPU it runs on the
#                     CPU with its own MKL and oneDNN.  Debian's python3-torch 1.13 (OpenBLAS)
#                     can be used instead with BENCH_PYTHON=/usr/bin/python3 (bench/peers.sh).
#
# Environment: PEER_VENV (paddle's venv, default BUILD_DIR/peer-venv), PEER_TORCH_VENV (default
# BUILD_DIR/torch-venv), PEER_PADDLE_SPEC ('paddlepaddle>=3,<4'), PEER_TORCH_SPEC ('torch>=2'),
# PEER_PYTHON (the interpreter that makes the venvs, default /usr/bin/python3).
set -euo pipefail
build=${1:-build}
kind=${2:-paddle}
case $kind in
  paddle) venv=${PEER_VENV:-$build/peer-venv}; spec=${PEER_PADDLE_SPEC:-paddlepaddle>=3,<4}; mod=paddle; size="about 870 MB" ;;
  torch) venv=${PEER_TORCH_VENV:-$build/torch-venv}; spec=${PEER_TORCH_SPEC:-torch>=2}; mod=torch; size="about 5.4 GB" ;;
  *) echo "peer_venv.sh: unknown peer '$kind' (expected paddle or torch)" >&2; exit 2 ;;
esac
base=${PEER_PYTHON:-/usr/bin/python3}
py="$venv/bin/python"
if [ -x "$py" ] && "$py" -c "import $mod, numpy" >/dev/null 2>&1; then
  echo "$py"
  exit 0
fi
command -v "$base" >/dev/null || { echo "peer_venv.sh: no $base (apt-get install python3)" >&2; exit 1; }
echo "peer_venv.sh: making $venv with $spec and numpy ($size, once)" >&2
if ! "$base" -m venv "$venv" >&2; then
  echo "peer_venv.sh: $base -m venv $venv failed (apt-get install python3-venv)" >&2
  exit 1
fi
if ! timeout 1800 "$venv/bin/pip" install --disable-pip-version-check --progress-bar off -q "$spec" numpy >&2; then
  echo "peer_venv.sh: pip install '$spec' numpy into $venv failed" >&2
  exit 1
fi
"$py" -c "import $mod, numpy" >/dev/null 2>&1 || { echo "peer_venv.sh: $py cannot import $mod after the install" >&2; exit 1; }
echo "$py"
