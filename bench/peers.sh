# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# bench/peers.sh - sourced by the benchmark scripts: which peers run (BENCH_PEERS) and with what.
#
#   peers_init BUILD_DIR   sets want_torch / want_paddle (0|1) from BENCH_PEERS (a comma list of
#                          paddle, torch; default "paddle,torch": all available; "none": ours
#                          only), and paddle_py to the Paddle venv's python (bench/peer_venv.sh
#                          makes BUILD_DIR/peer-venv once), empty when Paddle is not wanted or the
#                          venv cannot be made (its columns are then n/a, with the reason on stderr);
#                          and torch_py to the python that runs the PyTorch peer: BENCH_PYTHON when
#                          set (e.g. /usr/bin/python3 for Debian's python3-torch), else the
#                          PyPI venv that bench/peer_venv.sh makes in BUILD_DIR/torch-venv once;
#                          want_torch is 0 when that python cannot import torch (reason on stderr).
#                          py_any: a python with numpy for the scripts' data preparation and
#                          summaries (torch_py, else paddle_py, else Debian's /usr/bin/python3)
#   torch_python BUILD_DIR prints that python alone (for scripts whose only peer is PyTorch)
#   paddle_header          one line naming what Paddle runs on (version, MKL / oneDNN flags, the
#                          ISA oneDNN dispatches to, the CPU flags), for the raw file's header
peers_init() {
  local build=$1 p
  want_torch=0
  want_paddle=0
  paddle_py=
  torch_py=
  for p in $(echo "${BENCH_PEERS:-paddle,torch}" | tr ',' ' '); do
    case $p in
      paddle) want_paddle=1 ;;
      torch) want_torch=1 ;;
      none) ;;
      *) echo "BENCH_PEERS: unknown peer '$p' (expected a comma list of paddle, torch, or none)" >&2; return 2 ;;
    esac
  done
  if [ $want_torch = 1 ]; then
    torch_py=$(torch_python "$build") || {
      torch_py=
      want_torch=0
      echo "bench: no PyTorch peer (reason above); the PyTorch columns will be n/a" >&2
    }
  fi
  if [ $want_paddle = 1 ]; then
    paddle_py=$(bench/peer_venv.sh "$build") || {
      paddle_py=
      echo "bench: no Paddle peer (bench/peer_venv.sh failed, reason above); the Paddle columns will be n/a" >&2
    }
  fi
  py_any=${torch_py:-${paddle_py:-/usr/bin/python3}}
  return 0
}

# torch_python BUILD_DIR: prints the python of the PyTorch peer (BENCH_PYTHON when set, else the
# venv of bench/peer_venv.sh torch), or returns 1 with the reason on stderr.
torch_python() {
  if [ -n "${BENCH_PYTHON:-}" ]; then
    "$BENCH_PYTHON" -c 'import torch, numpy' >/dev/null 2>&1 || {
      echo "bench: BENCH_PYTHON=$BENCH_PYTHON cannot import torch and numpy" >&2
      return 1
    }
    echo "$BENCH_PYTHON"
  else
    bench/peer_venv.sh "$1" torch
  fi
}

paddle_header() {
  [ -n "$paddle_py" ] || return 0
  echo "# paddle: $(OMP_NUM_THREADS=1 GLOG_minloglevel=2 "$paddle_py" bench/paddle_info.py 2>/dev/null | tail -1);" \
       "MKL: $(MKL_VERBOSE=1 OMP_NUM_THREADS=1 GLOG_minloglevel=2 "$paddle_py" -W ignore -c \
         'import paddle; x = paddle.rand([64, 64]); paddle.matmul(x, x).numpy()' 2>&1 |
         grep -m1 -o 'Intel(R) .*processors\|MKL_VERBOSE Intel.*' | cut -c1-200)"
}
