#!/usr/bin/env bash
# bench/ps_scale.sh [BUILD_DIR] - parameter-server scaling on the multi-host test bed
# (tests/cluster/netns.sh: 3 hosts in network namespaces; needs root): CTR-DNN async
# examples/s per worker and bytes per example for 1, 2 and 4 workers with 1 and 2 servers,
# without a rate limit and with every host's link at SCALE_RATE (tc tbf), and a PNG of the
# curves (gnuplot).
#
# Placement: server i on host h(1+i) (h1, h2); worker j on h2 or h3 (j even / odd), one
# fleetrun per host given the whole job (--servers, --workers, --node_ip), as the bed's jobs.
# Program: examples/ctr/train, one thread per worker, SCALE_ROWS generated rows, one epoch,
# SCALE_TRAIN_ARGS (default: the example's model, Adam 0.003) and SCALE_STRATEGY (default:
# the default async strategy).  examples/s per worker: the mean over workers of the epoch's
# examples / seconds as train prints it; bytes per example: the mean of the workers'
# traffic lines (fleet_stop_worker).  The three hosts share this machine's cores: with 4
# workers they compete for them, so the per-worker figures fall for that reason too; the
# ratios limited / unlimited and the bytes per example are what carries over.
#
# Environment: SCALE_WORKERS ("1 2 4"), SCALE_SERVERS ("1 2"), SCALE_RATE (1gbit),
# SCALE_ROWS (100000), SCALE_TRAIN_ARGS, SCALE_STRATEGY, SCALE_OUT (BUILD_DIR/bench/ps_scale:
# results.tsv, ps_scale.png).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
cd "$(dirname "$0")/.."
root=$(pwd)
[ "$(id -u)" = 0 ] || { echo "ps_scale.sh: needs root (network namespaces)" >&2; exit 77; }
workers=${SCALE_WORKERS:-1 2 4}
servers=${SCALE_SERVERS:-1 2}
rate=${SCALE_RATE:-1gbit}
rows=${SCALE_ROWS:-100000}
train_args=${SCALE_TRAIN_ARGS:---optimizer adam --lr 0.003 --sparse_feature_dim 100003 --print_period 0}
strategy=${SCALE_STRATEGY:-}
out=${SCALE_OUT:-$build/bench/ps_scale}
mkdir -p "$out"
export CLUSTER_ID=${CLUSTER_ID:-scale$$}
netns="$root/tests/cluster/netns.sh"
net=${CLUSTER_NET:-10.213.7}
tmp=$(mktemp -d /tmp/fleet-psscale.XXXXXX)
cleanup() { "$netns" down >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1

"$build/tools/fleet-datagen" criteo --rows "$rows" --files 4 --out "$tmp/data" --seed 5 --vocab-scale 0.002 \
  --dense-scale 0.1 > "$tmp/gen.log" 2>&1
results="$out/results.tsv"
echo -e "servers\tworkers\trate\texamples_per_s_per_worker\tbytes_sent_per_example\tbytes_received_per_example\ttest_auc" > "$results"

run_job() { # ns nw rate-label
  local ns=$1 nw=$2 label=$3 dir="$tmp/run_${1}_${2}_$3" sl="" wl="" j h
  mkdir -p "$dir"
  for ((j = 0; j < ns; j++)); do sl+="${sl:+,}$net.$((1 + j)):6170"; done
  for ((j = 0; j < nw; j++)); do wl+="${wl:+,}$net.$((2 + j % 2)):$((6180 + j / 2))"; done
  FLEET_JOB_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  export FLEET_JOB_SECRET
  local pids=()
  for h in 1 2 3; do
    case ",$sl,$wl," in *",$net.$h:"*) ;; *) continue ;; esac # no process on this host
    # shellcheck disable=SC2086
    "$netns" exec "h$h" "$build/tools/fleetrun" --servers "$sl" --workers "$wl" --node_ip "$net.$h" \
      --log_level info --log_dir "$dir/log$h" "$build/examples/ctr/train" --thread_num 1 --epochs 1 \
      --train_data "$tmp/data/train" --test_data "$tmp/data/test" --model_dir "$dir/model" $train_args $strategy \
      > "$dir/h$h.out" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  [ $rc = 0 ] || { echo "ps_scale.sh: job $ns x $nw ($label) failed:" >&2; tail -20 "$dir"/h*.out >&2; exit 1; }
  cat "$dir"/log*/workerlog.* 2>/dev/null > "$dir/workers" || true
  awk -v ns="$ns" -v nw="$nw" -v r="$label" '
    /^epoch [0-9]+:/ { for (i = 1; i <= NF; i++) if ($i == "examples/s),") { v = $(i - 1); sub(/\(/, "", v); e += v; ne++ } }
    /traffic \(/ { for (i = 1; i < NF; i++) { if ($i == "sent" && $(i + 1) == "and") s += $(i - 1); if ($i == "received" && $(i + 1) == "per") q += $(i - 1) } nt++ }
    /test auc/ { for (i = 1; i < NF; i++) if ($i == "auc") auc = $(i + 1) }
    END { printf "%d\t%d\t%s\t%.0f\t%.0f\t%.0f\t%s\n", ns, nw, r, ne ? e / ne : 0, nt ? s / nt : 0, nt ? q / nt : 0, auc }
  ' "$dir/workers" "$dir"/h*.out >> "$results"
  tail -1 "$results"
}

for label in none "$rate"; do
  "$netns" down >/dev/null 2>&1 || true
  if [ "$label" = none ]; then "$netns" up; else RATE=$rate "$netns" up; fi
  for ns in $servers; do
    for nw in $workers; do run_job "$ns" "$nw" "$label"; done
  done
done
"$netns" down >/dev/null 2>&1 || true

if command -v gnuplot >/dev/null; then
  for ns in $servers; do
    for label in none "$rate"; do
      awk -F'\t' -v ns="$ns" -v r="$label" 'NR > 1 && $1 == ns && $3 == r { print $2, $4, $5 + $6 }' "$results" \
        > "$tmp/s${ns}_$label.dat"
    done
  done
  {
    echo "set terminal pngcairo size 900,420 font 'sans,10'"
    echo "set output '$out/ps_scale.png'"
    echo "set multiplot layout 1,2 title 'CTR-DNN async on 3 namespaced hosts (shared CPUs): per worker'"
    echo "set xlabel 'workers'; set xtics (1, 2, 4); set logscale x 2; set key bottom left; set grid"
    echo "set ylabel 'examples/s per worker'; set yrange [0:*]"
    p="plot"
    for ns in $servers; do for label in none "$rate"; do
      p+=" '$tmp/s${ns}_$label.dat' using 1:2 with linespoints title '$ns server(s), limit $label',"
    done; done
    echo "${p%,}"
    echo "set ylabel 'bytes per example (sent + received)'"
    p="plot"
    for ns in $servers; do for label in none "$rate"; do
      p+=" '$tmp/s${ns}_$label.dat' using 1:3 with linespoints title '$ns server(s), limit $label',"
    done; done
    echo "${p%,}"
    echo "unset multiplot"
  } > "$tmp/plot.gp"
  if ! gnuplot "$tmp/plot.gp" 2>/dev/null; then # a gnuplot without cairo
    sed -i "s/pngcairo size 900,420 font 'sans,10'/png size 900,420/" "$tmp/plot.gp"
    gnuplot "$tmp/plot.gp"
  fi
  echo "ps_scale.sh: $out/ps_scale.png"
else
  echo "ps_scale.sh: gnuplot is not installed (scripts/ensure-deps.sh bench); no PNG" >&2
fi
echo "ps_scale.sh: $results"
column -t -s $'\t' "$results"
