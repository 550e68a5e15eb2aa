#!/usr/bin/env bash
# bench/peer_venv.sh [BUILD_DIR] - the virtual environment of the benchmarks' PyPI peers:
# BUILD_DIR/peer-venv with paddlepaddle 3.x (Paddle's CPU wheel: MKL + oneDNN) and numpy.  Made
# only by the benchmarks (bench_ctr.sh, run.sh, bench_fmnist.sh through BENCH_PEERS), never by
# `make test` or `make demo`; reused when it exists and imports paddle.  Prints the venv's python
# on stdout (everything else goes to stderr); exits 1 with the reason when it cannot be made.
#
# PyTorch stays Debian's python3-torch (/usr/bin/python3): PyPI's Linux torch wheel is built for
# CUDA and pulls the CUDA stack (torch 2.15: a 539 MB wheel plus about 2.2 GB of nvidia-* / triton
# wheels); the CPU-only wheels are not on PyPI.  See BENCHMARKS.md.
#
# Environment: PEER_VENV (default BUILD_DIR/peer-venv), PEER_PADDLE_SPEC ('paddlepaddle>=3,<4'),
# PEER_PYTHON (the interpreter that makes the venv, default /usr/bin/python3).
set -euo pipefail
build=${1:-build}
venv=${PEER_VENV:-$build/peer-venv}
spec=${PEER_PADDLE_SPEC:-paddlepaddle>=3,<4}
base=${PEER_PYTHON:-/usr/bin/python3}
py="$venv/bin/python"
if [ -x "$py" ] && "$py" -c 'import paddle, numpy' >/dev/null 2>&1; then
  echo "$py"
  exit 0
fi
command -v "$base" >/dev/null || { echo "peer_venv.sh: no $base (apt-get install python3)" >&2; exit 1; }
echo "peer_venv.sh: making $venv with $spec and numpy (about 870 MB, once)" >&2
if ! "$base" -m venv "$venv" >&2; then
  echo "peer_venv.sh: $base -m venv $venv failed (apt-get install python3-venv)" >&2
  exit 1
fi
if ! timeout 900 "$venv/bin/pip" install --disable-pip-version-check --progress-bar off -q "$spec" numpy >&2; then
  echo "peer_venv.sh: pip install '$spec' numpy into $venv failed" >&2
  exit 1
fi
"$py" -c 'import paddle, numpy' >/dev/null 2>&1 || { echo "peer_venv.sh: $py cannot import paddle after the install" >&2; exit 1; }
echo "$py"
