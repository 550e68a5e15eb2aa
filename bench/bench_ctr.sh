#!/usr/bin/env bash
# bench/bench_ctr.sh [BUILD_DIR] - CTR-DNN training throughput, Fleet against PyTorch, plus
# parameter-server async against local Hogwild and the data parser's MB/s.  See bench/README.md.
#
#   data     BUILD_DIR/tools/fleet-datagen criteo --rows CTR_ROWS --files CTR_FILES (+ 4096 test
#            rows in 2 files for warm-up) into a temp dir, once; PyTorch's copy is parsed (same
#            hash, same scaling) and cached before any timing
#   ours     BUILD_DIR/bench/bench_ctr local: InMemoryDataset of the first CTR_LOCAL_FILES files,
#            fl_exe_train_from_dataset, batch 32 and 512, 1 and 2 Hogwild threads
#            (OPENBLAS_NUM_THREADS=1: one core per trainer thread); in round 1 also one
#            QueueDataset pass at batch 512 (parse + batch + train, the full pipeline)
#   ps       BUILD_DIR/bench/bench_ctr ps: 1 server + 2 workers on 127.0.0.1 (async), each worker
#            with CTR_PS_THREADS threads on its share of the first CTR_PS_FILES files, with the
#            default DistributedStrategy (Paddle's a_sync_configs), and again with CTR_PS_EXTRA
#            (default: max_merge_var_num=8, min_send_grad_num_before_recv=8; context, tagged .tuned)
#   PyTorch  bench/ctr_torch.py: the same model, data, batches; --mode t1 (OMP 1, OpenBLAS 1) and,
#            for 2 threads, t2hog (2 Hogwild processes, OMP 1 / OpenBLAS 1 each), t2blas (OMP 1,
#            OpenBLAS 2), t2omp (OMP 2, OpenBLAS 1); ours with 2 threads is compared with the
#            fastest of the three (by median)
#   parser   BUILD_DIR/bench/bench_data_parse (its MB/s table, once, after the rounds)
# Runs are interleaved (ours local, PyTorch t1, ps, PyTorch 2-thread modes; the order reverses every
# round), CTR_ROUNDS rounds; the summary gives medians, ratios of medians and the targets (local
# >= 1.5x PyTorch; PS async >= 0.8x local Hogwild with the same total trainer threads; parser
# >= 200 MB/s per thread).  The OpenBLAS kernel set is whatever OPENBLAS_CORETYPE in the
# environment selects (unset: auto-detect), the same for both sides; both report the core name.
# Noise gauge: other_cpu (cores used by other processes during a timed run).
#
# Environment: CTR_ROUNDS (3), CTR_SECONDS (1.5) per timed configuration, CTR_ROWS (200000),
# CTR_FILES (8), CTR_LOCAL_FILES (2), CTR_PS_FILES (2), CTR_PS_THREADS (1), CTR_BATCHES (32,512),
# CTR_TORCH_MODES ("t2hog t2blas t2omp"), CTR_PS_EXTRA (strategy KEY=VALUE list; empty: off), CTR_PARSE (1: run bench_data_parse), BENCH_PYTHON
# (/usr/bin/python3).  About 3 minutes.
# Output: BUILD_DIR/bench/ctr.raw (every line of every run), BUILD_DIR/bench/ctr_summary.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${CTR_ROUNDS:-3}
secs=${CTR_SECONDS:-1.5}
rows=${CTR_ROWS:-200000}
nfiles=${CTR_FILES:-8}
lfiles=${CTR_LOCAL_FILES:-2}
pfiles=${CTR_PS_FILES:-2}
pthreads=${CTR_PS_THREADS:-1}
batches=${CTR_BATCHES:-32,512}
tmodes=${CTR_TORCH_MODES:-t2hog t2blas t2omp}
psextra=${CTR_PS_EXTRA-a_sync_configs.max_merge_var_num=8 a_sync_configs.min_send_grad_num_before_recv=8}
py=${BENCH_PYTHON:-/usr/bin/python3}
bin="$build/bench/bench_ctr"
gen="$build/tools/fleet-datagen"
parse="$build/bench/bench_data_parse"
outdir="$build/bench"
raw="$outdir/ctr.raw"
summary="$outdir/ctr_summary.md"
for f in "$bin" "$gen" "$parse"; do
  [ -x "$f" ] || { echo "bench_ctr.sh: $f not built (run: make BUILD=$build all)" >&2; exit 1; }
done
have_torch=1
"$py" -c 'import torch, numpy' >/dev/null 2>&1 || { have_torch=0; echo "bench_ctr.sh: $py cannot import torch" \
  "and numpy (apt-get install python3-torch); the PyTorch columns will be n/a" >&2; }
sumpy=$py
"$sumpy" -c 'pass' 2>/dev/null || sumpy=python3
mkdir -p "$outdir"
tmp=$(mktemp -d /tmp/bench_ctr.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 FLEET_NUM_THREADS=1

{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(uname -srm); $(getconf _NPROCESSORS_ONLN) CPUs;" \
       "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: auto-detect)}; rounds=$rounds, ${secs}s per timed configuration;" \
       "data: $rows rows in $nfiles files, local uses $lfiles file(s), ps $pfiles file(s), ps threads per worker $pthreads;" \
       "batches $batches"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
} | tee "$raw"
load() { cut -d' ' -f1 /proc/loadavg; }
if awk -v l="$(load)" 'BEGIN { exit !(l > 0.5) }'; then
  echo "# warning: 1-minute load average is $(load) before starting: other work is running, numbers will be noisy" | tee -a "$raw"
fi

t0=$(date +%s)
"$gen" criteo --rows "$rows" --files "$nfiles" --test-rows 4096 --test-files 2 --out "$tmp/data" >>"$raw" 2>&1 \
  || { echo "bench_ctr.sh: fleet-datagen failed" >&2; exit 1; }
if [ $have_torch = 1 ]; then
  for n in "$lfiles" "$pfiles"; do
    timeout 120 "$py" bench/ctr_torch.py --data "$tmp/data" --files "$n" --prepare >>"$raw" 2>&1 \
      || { echo "# FAILED: ctr_torch.py --prepare" | tee -a "$raw"; have_torch=0; }
  done
fi
echo "data ready ($(( $(date +%s) - t0 )) s)"

step() { # LABEL CMD...: runs CMD under a timeout, appending its output to the raw file
  local label=$1; shift
  echo "## $label (load average $(load))" >>"$raw"
  timeout 200 "$@" >>"$raw" 2>&1 || echo "# FAILED: $label" | tee -a "$raw"
}
ours_local() {
  local q=()
  [ "$1" = 1 ] && q=(--queue-batch 512)
  step "ours local" "$bin" local --data "$tmp/data" --files "$lfiles" --batches "$batches" --threads 1,2 --seconds "$secs" "${q[@]}"
}
ours_ps() {
  step "ours ps" "$bin" ps --data "$tmp/data" --files "$pfiles" --batches "$batches" --threads "$pthreads" --seconds "$secs"
  if [ -n "$psextra" ]; then
    local a=() kv
    for kv in $psextra; do a+=(--strategy "$kv"); done
    step "ours ps ($psextra)" "$bin" ps --data "$tmp/data" --files "$pfiles" --batches "$batches" --threads "$pthreads" \
      --seconds "$secs" --tag .tuned "${a[@]}"
  fi
}
torch_run() {
  [ $have_torch = 1 ] || return 0
  step "torch $1" "$py" bench/ctr_torch.py --data "$tmp/data" --files "$lfiles" --batches "$batches" --mode "$1" --seconds "$secs"
}

for r in $(seq 1 "$rounds"); do
  echo "# round $r" >>"$raw"
  if [ $((r % 2)) = 1 ]; then
    ours_local "$r"; torch_run t1; ours_ps; for m in $tmodes; do torch_run "$m"; done
  else
    for m in $tmodes; do torch_run "$m"; done; ours_ps; torch_run t1; ours_local "$r"
  fi
  echo "round $r/$rounds done ($(( $(date +%s) - t0 )) s)"
done
if [ "${CTR_PARSE:-1}" = 1 ]; then
  echo "# round parser" >>"$raw"
  echo "## bench_data_parse (load average $(load))" >>"$raw"
  timeout 120 "$parse" >"$tmp/parse.out" 2>&1 || echo "# FAILED: bench_data_parse" >>"$tmp/parse.out"
  cat "$tmp/parse.out" >>"$raw"
fi
grep -m1 '^# fleet bench_ctr local' "$raw" | sed 's/^# /ours:    /' || true
grep -m1 '^# torch' "$raw" | sed 's/^# /pytorch: /' || true
cores=$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | tr '\n' ' ')
echo "OpenBLAS kernel sets seen in all runs: ${cores:-none}"
[ "$(grep -o 'OpenBLAS core [A-Za-z0-9_]*' "$raw" | sort -u | wc -l)" -le 1 ] \
  || echo "WARNING: the two sides did not use the same OpenBLAS kernel set; the comparison is not like for like"
echo

"$sumpy" - "$raw" "$summary" "$batches" "$pthreads" "$tmodes" "$psextra" <<'EOF'
import statistics, sys
raw, out, batches, pthreads, tmodes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
psextra = sys.argv[6]
vals, rnd, parser = {}, 0, []
with open(raw) as f:
    for line in f:
        if line.startswith("# round "):
            rnd = line.split()[2]
            continue
        if rnd == "parser" and not line.startswith("## "):
            t = line.rstrip("\n")
            parser.extend(["", t[2:], ""] if t.startswith("# ") else [t])
        p = line.rstrip("\n").split("\t")
        if len(p) == 4 and p[0] == "R":
            try:
                vals.setdefault(p[1], []).append(float(p[2]))
            except ValueError:
                pass
med = lambda k: statistics.median(vals[k]) if vals.get(k) else None
rng = lambda k: "%.0f-%.0f" % (min(vals[k]), max(vals[k])) if vals.get(k) else ""
fmt = lambda x, s="%.0f": "n/a" if x is None else s % x
L = []
L.append("### CTR-DNN training, examples/s, medians of %d rounds (min-max)\n" % max(len(v) for v in vals.values()))
L.append("| config | ours | PyTorch | ours / PyTorch | target | met | other_cpu ours / PyTorch |")
L.append("|---|---:|---:|---:|---:|---|---|")
for b in [int(x) for x in batches.split(",")]:
    for t in (1, 2):
        ok = "ours.ctr.b%d.t%d" % (b, t)
        o = med(ok + ".ex_per_s")
        cands = ["t1"] if t == 1 else tmodes
        tm = {m: med("torch.ctr.b%d.%s.ex_per_s" % (b, m)) for m in cands}
        tm = {m: v for m, v in tm.items() if v is not None}
        best = max(tm, key=tm.get) if tm else None
        ref = tm.get(best)
        ratio = o / ref if o and ref else None
        oc = med(ok + ".other_cpu")
        toc = med("torch.ctr.b%d.%s.other_cpu" % (b, best)) if best else None
        L.append("| batch %d, %d thread%s (ours Hogwild; PyTorch %s) | %s (%s) | %s (%s) | %s | >= 1.50x | %s | %s / %s |" % (
            b, t, "s" if t > 1 else "", best or "n/a", fmt(o), rng(ok + ".ex_per_s"), fmt(ref),
            rng("torch.ctr.b%d.%s.ex_per_s" % (b, best)) if best else "", fmt(ratio, "%.2fx"),
            "n/a" if ratio is None else ("yes" if ratio >= 1.5 else "NO"), fmt(oc, "%.2f"), fmt(toc, "%.2f")))
        if t == 2:
            for m in tmodes:
                v = med("torch.ctr.b%d.%s.ex_per_s" % (b, m))
                if v is not None:
                    L.append("| &nbsp;&nbsp; PyTorch %s, batch %d | | %s (%s) | %s | | | |" % (
                        m, b, fmt(v), rng("torch.ctr.b%d.%s.ex_per_s" % (b, m)), fmt(o / v if o else None, "%.2fx")))
    L.append("| batch %d, per thread: ours t1 / t2 | %s / %s | %s / %s | | | | |" % (
        b, fmt(med("ours.ctr.b%d.t1.ex_per_s_per_thread" % b)), fmt(med("ours.ctr.b%d.t2.ex_per_s_per_thread" % b)),
        fmt(med("torch.ctr.b%d.t1.ex_per_s_per_thread" % b)),
        fmt(max([v for v in (med("torch.ctr.b%d.%s.ex_per_s_per_thread" % (b, m)) for m in tmodes) if v is not None] or [0]))))
L.append("")
L.append("### Parameter server async (1 server + 2 workers x %d thread(s), 127.0.0.1) vs local Hogwild with %d threads\n" % (
    pthreads, 2 * pthreads))
L.append("| batch | strategy | PS total examples/s | local Hogwild examples/s | PS / local | target | met |")
L.append("|---|---|---:|---:|---:|---:|---|")
for b in [int(x) for x in batches.split(",")]:
    for tag, label in (("", "default a_sync_configs"), (".tuned", psextra + " (context)")):
        pk = "ours.ctrps.b%d.w2t%d%s.ex_per_s" % (b, pthreads, tag)
        p = med(pk)
        if p is None and tag:
            continue
        loc = med("ours.ctr.b%d.t%d.ex_per_s" % (b, 2 * pthreads))
        r = p / loc if p and loc else None
        L.append("| %d | %s | %s (%s) | %s | %s | %s | %s |" % (b, label, fmt(p), rng(pk), fmt(loc), fmt(r, "%.2fx"),
                 ">= 0.80x" if not tag else "", ("n/a" if r is None else ("yes" if r >= 0.8 else "NO")) if not tag else ""))
L.append("")
qs = sorted(k for k in vals if k.startswith("ours.ctrqueue.") and k.endswith(".ex_per_s"))
if qs:
    L.append("### Full pipeline: one QueueDataset pass (parse + batch + train), round 1 only\n")
    L.append("| config | examples/s | InMemoryDataset, same config (median) |")
    L.append("|---|---:|---:|")
    for k in qs:
        cfg = k.split(".")[2] + "." + k.split(".")[3]
        L.append("| %s | %s | %s |" % (cfg, fmt(med(k)), fmt(med("ours.ctr.%s.ex_per_s" % cfg))))
    L.append("")
if parser:
    L.append("### Parser (bench_data_parse)\n")
    L.extend(parser)
    L.append("")
text = "\n".join(L) + "\n"
print(text, end="")
open(out, "w").write(text)
EOF
echo "raw results: $raw; summary: $summary"
