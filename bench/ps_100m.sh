#!/usr/bin/env bash
# bench/ps_100m.sh [BUILD_DIR] - the 100 M-key sparse table of issue 14 on this machine: two
# parameter servers (forked, on 127.0.0.1) share a dim-8 SGD table of PS100M_KEYS keys; one
# client creates every key (training pull + push in batches of 65536), then pulls and pushes
# random batches for 10 s.  Prints the fill and random-phase rows/s (pulls and pushes timed
# apart), the rows and bytes the servers' tables account for, and each server's peak
# resident memory (bench_ps_ssd --scale; its comment has the details).
#
# PS100M_BUDGET=0 (default) keeps the tables in memory: the script first checks that
# MemAvailable holds the tables with a margin (PS100M_BYTES_PER_KEY, default 80, x keys x
# 1.5) and refuses otherwise.  PS100M_BUDGET=MB uses SSD tables with MB MiB of memory per
# server instead, their RocksDB directories under PS100M_DIR (default /tmp; removed at the
# end; about 60 bytes per key of disk).
#
# Environment: PS100M_KEYS (100000000), PS100M_BUDGET (0), PS100M_DIR (/tmp),
# PS100M_BYTES_PER_KEY (80).
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
keys=${PS100M_KEYS:-100000000}
budget=${PS100M_BUDGET:-0}
dir=${PS100M_DIR:-/tmp}
per_key=${PS100M_BYTES_PER_KEY:-80}
bin="$build/bench/bench_ps_ssd"
[ -x "$bin" ] || { echo "ps_100m.sh: $bin not found: run make all first" >&2; exit 2; }
if [ "$budget" = 0 ]; then
  need_kb=$(( keys * per_key * 3 / 2 / 1024 ))
  avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if [ "$avail_kb" -lt "$need_kb" ]; then
    echo "ps_100m.sh: in-memory tables of $keys keys need about $((need_kb / 1024)) MiB with margin;" \
         "MemAvailable is $((avail_kb / 1024)) MiB: set PS100M_BUDGET=MB for SSD tables or fewer PS100M_KEYS" >&2
    exit 2
  fi
fi
echo "ps_100m.sh: $(date -u '+%F %T') UTC, tree $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
exec "$bin" --scale "$keys" --servers 2 --budget "$budget" --dir "$dir"
