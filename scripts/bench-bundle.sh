#!/usr/bin/env bash
# scripts/bench-bundle.sh [BUILD_DIR] [OUT.tar.xz] - packs the CPU benchmarks into one archive
# that runs on another x86-64 Linux host which has neither this project's Debian packages
# nor a package index (a machine with another CPU, AMX for instance), so that ours and that
# host's PyTorch are measured there side by side.
#
# The archive holds fleet-bench/ with:
#   build/bench/{bench_ctr,bench_data_parse,bench_dnn_chain}, build/tools/fleet-datagen
#   lib/        the shared libraries they load (oneDNN, OpenBLAS, OpenSSL's libcrypto, cJSON,
#               Open MPI, RocksDB and theirs), copied from this machine; the C and C++
#               runtimes (libc, libm, libpthread, libstdc++, libgcc_s) are the host's own
#   bench/      amp_levels.sh, bench_ctr.sh and what they read (peers.sh, ctr_*.py, ...)
#   run.sh      sets LD_LIBRARY_PATH and runs its arguments, e.g.
#                 ./run.sh bench/amp_levels.sh build
#                 BENCH_PEERS=torch BENCH_PYTHON=python3 CTR_PS=0 ./run.sh bench/bench_ctr.sh build
# The host needs a glibc at least as new as this machine's (Debian 12: 2.36), bash, awk and,
# for the PyTorch columns, a python with torch and numpy (BENCH_PYTHON).
set -euo pipefail
build=${1:-build}
out=${2:-$build/fleet-bench.tar.xz}
cd "$(dirname "$0")/.."
bins=("$build/bench/bench_ctr" "$build/bench/bench_data_parse" "$build/bench/bench_dnn_chain" "$build/tools/fleet-datagen")
for f in "${bins[@]}"; do
  [ -x "$f" ] || { echo "bench-bundle.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
command -v xz >/dev/null || { echo "bench-bundle.sh: no xz (apt-get install xz-utils)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/fleet-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
b="$tmp/fleet-bench"
mkdir -p "$b/build/bench" "$b/build/tools" "$b/lib" "$b/bench"
cp "${bins[@]:0:3}" "$b/build/bench/"
cp "${bins[3]}" "$b/build/tools/"
ldd "${bins[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$b/lib/" ;;
  esac
done
cp bench/amp_levels.sh bench/bench_ctr.sh bench/peers.sh bench/peer_venv.sh bench/ctr_torch.py bench/ctr_data.py \
  bench/ctr_paddle.py bench/ctr_summary.py bench/torch_blas.py bench/paddle_info.py "$b/bench/"
cat >"$b/run.sh" <<'EOF'
#!/usr/bin/env bash
# run.sh CMD [ARGS...] - runs CMD with this bundle's libraries (see scripts/bench-bundle.sh)
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$here" || exit 1
missing=$(ldd build/bench/bench_ctr | grep 'not found' || true)
[ -z "$missing" ] || { echo "run.sh: libraries not found on this host: $missing" >&2; exit 1; }
exec "$@"
EOF
chmod +x "$b/run.sh"
echo "git $(git rev-parse --short HEAD 2>/dev/null || echo '?'); built on $(uname -srm), $(ldd --version | head -1)" >"$b/BUILT"
tar -C "$tmp" -cJf "$out" fleet-bench
echo "bench-bundle.sh: $out ($(du -h "$out" | cut -f1)); on the host: tar -xJf $(basename "$out") && fleet-bench/run.sh bench/amp_levels.sh build"
