#!/usr/bin/env bash
# plot-metrics.sh DIR [OUT.png] [TAGS] - draws the metrics files a training run wrote
# (DIR/metrics.rank<R>.csv: --metrics_dir or FLEET_METRICS_DIR, docs/metrics.md) into one
# PNG with gnuplot (Debian gnuplot-nox): one panel per tag, against the global step, one
# curve per rank.  TAGS is a comma list (default loss,auc); a tag no file has is left out.
# OUT defaults to DIR/metrics.png.  Prints the PNG's path.
set -euo pipefail
dir=${1:?usage: plot-metrics.sh DIR [OUT.png] [TAGS]}
out=${2:-$dir/metrics.png}
tags=${3:-loss,auc}
command -v gnuplot >/dev/null ||
  { echo "plot-metrics.sh: gnuplot is not installed (Debian: apt-get install gnuplot-nox; scripts/ensure-deps.sh build)" >&2; exit 1; }
shopt -s nullglob
csvs=("$dir"/metrics.rank*.csv)
[ ${#csvs[@]} -gt 0 ] || { echo "plot-metrics.sh: no metrics.rank*.csv in $dir" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one data file per tag and rank: "step value", in step order
panels=()
IFS=, read -r -a want <<<"$tags"
for tag in "${want[@]}"; do
  found=0
  for f in "${csvs[@]}"; do
    r=${f##*metrics.rank}
    r=${r%.csv}
    awk -F, -v t="$tag" 'NR > 1 && $5 == t { print $4, $6 }' "$f" | sort -n -k1,1 >"$tmp/$tag.$r"
    if [ -s "$tmp/$tag.$r" ]; then found=1; else rm -f "$tmp/$tag.$r"; fi
  done
  [ $found = 1 ] && panels+=("$tag")
done
[ ${#panels[@]} -gt 0 ] || { echo "plot-metrics.sh: none of the tags $tags is in $dir/metrics.rank*.csv" >&2; exit 1; }

n=${#panels[@]}
{
  echo "set terminal pngcairo size 900,$((300 * n)) font 'sans,10'"
  echo "set output '$out'; set termoption noenhanced"
  echo "set multiplot layout $n,1 title 'Fleet training metrics: $dir'"
  echo "set grid; set key outside right; set xlabel 'step (batches of the process)'"
  for tag in "${panels[@]}"; do
    echo "set title '$tag'; set ylabel '$tag'"
    plot="plot"
    for d in "$tmp/$tag".*; do
      r=${d##*.}
      plot+=" '$d' using 1:2 with linespoints pt 7 ps 0.5 title 'rank $r',"
    done
    echo "${plot%,}"
  done
  echo "unset multiplot"
} >"$tmp/plot.gp"
gnuplot "$tmp/plot.gp"
echo "$out"
