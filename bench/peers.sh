# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# bench/peers.sh - sourced by the benchmark scripts: which peers run (BENCH_PEERS) and with what.
#
#   peers_init BUILD_DIR   sets want_torch / want_paddle (0|1) from BENCH_PEERS (a comma list of
#                          paddle, torch; default "paddle,torch": all available; "none": ours
#                          only), and paddle_py to the Paddle venv's python (bench/peer_venv.sh
#                          makes BUILD_DIR/peer-venv once), empty when Paddle is not wanted or the
#                          venv cannot be made (its columns are then n/a, with the reason on stderr)
#   paddle_header          one line naming what Paddle runs on (version, MKL / oneDNN flags, the
#                          ISA oneDNN dispatches to, the CPU flags), for the raw file's header
# PyTorch is Debian's python3-torch through BENCH_PYTHON (/usr/bin/python3): see peer_venv.sh.
peers_init() {
  local build=$1 p
  want_torch=0
  want_paddle=0
  paddle_py=
  for p in $(echo "${BENCH_PEERS:-paddle,torch}" | tr ',' ' '); do
    case $p in
      paddle) want_paddle=1 ;;
      torch) want_torch=1 ;;
      none) ;;
      *) echo "BENCH_PEERS: unknown peer '$p' (expected a comma list of paddle, torch, or none)" >&2; return 2 ;;
    esac
  done
  if [ $want_paddle = 1 ]; then
    paddle_py=$(bench/peer_venv.sh "$build") || {
      paddle_py=
      echo "bench: no Paddle peer (bench/peer_venv.sh failed, reason above); the Paddle columns will be n/a" >&2
    }
  fi
  return 0
}

paddle_header() {
  [ -n "$paddle_py" ] || return 0
  echo "# paddle: $(OMP_NUM_THREADS=1 GLOG_minloglevel=2 "$paddle_py" bench/paddle_info.py 2>/dev/null | tail -1);" \
       "MKL: $(MKL_VERBOSE=1 OMP_NUM_THREADS=1 GLOG_minloglevel=2 "$paddle_py" -W ignore -c \
         'import paddle; x = paddle.rand([64, 64]); paddle.matmul(x, x).numpy()' 2>&1 |
         grep -m1 -o 'Intel(R) .*processors\|MKL_VERBOSE Intel.*' | cut -c1-200)"
}
