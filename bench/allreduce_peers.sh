#!/usr/bin/env bash
# bench/allreduce_peers.sh BUILD_DIR - 2-rank float32 sum allreduce on this machine: Fleet
# (shared memory and TCP paths, bench_allreduce forking its ranks; and the "mpi" backend,
# bench_allreduce --mode mpi under the same mpirun as the reference) against Open MPI over
# shared memory (mpirun --mca btl self,vader, bench/peers/mpi_allreduce_ref.c built here with
# mpicc) and torch.distributed gloo (bench/peers/gloo_allreduce_ref.py, the PyTorch of
# bench/peers.sh's torch_python: PyPI's, in the venv of bench/peer_venv.sh torch).
#
# The three run in the same invocation, interleaved (ours - forked shm and TCP, then the mpi
# backend -, MPI, gloo; the order rotates every round), BENCH_AR_ROUNDS times; the summary
# gives the median over rounds of each number, busbw ratios, and checks the targets: busbw
# at 64M >= Open MPI's and >= 1.5x gloo's; 4K time/op <= Open MPI's.  Each program checks
# every element of its result.  Our forked ranks are pinned one per core (--bind core), as
# mpirun pins its ranks by default; gloo's are not (torch does not).
#
# Environment: BENCH_AR_ROUNDS (default 5), BENCH_AR_SECONDS per size and program (default 0.3),
# BENCH_AR_SIZES (default "4K 16K 64K 256K 1M 4M 16M 64M"), BENCH_PYTHON (the PyTorch peer's python; default the venv of bench/peer_venv.sh torch).
# Open MPI missing: installed with apt-get when running as root, else the MPI column is n/a.
# Output: BUILD_DIR/bench/allreduce_peers.raw (every line), BUILD_DIR/bench/allreduce_peers.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${BENCH_AR_ROUNDS:-5}
export BENCH_AR_SECONDS=${BENCH_AR_SECONDS:-0.3}
sizes=${BENCH_AR_SIZES:-"4K 16K 64K 256K 1M 4M 16M 64M"}
ours="$build/bench/bench_allreduce"
raw="$build/bench/allreduce_peers.raw"
md="$build/bench/allreduce_peers.md"
[ -x "$ours" ] || { echo "allreduce_peers.sh: $ours not built (run: make BUILD=$build all)" >&2; exit 1; }
mkdir -p "$build/bench"

# --- Open MPI reference, built from this repository ---
mpi_bin="$build/bench/mpi_allreduce_ref"
if ! command -v mpicc >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "allreduce_peers.sh: installing openmpi-bin libopenmpi-dev (for the MPI reference only)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q openmpi-bin libopenmpi-dev >/dev/null 2>&1 || true
fi
have_mpi=0
if command -v mpicc >/dev/null 2>&1 && mpicc -O3 -o "$mpi_bin" bench/peers/mpi_allreduce_ref.c; then
  have_mpi=1
else
  echo "allreduce_peers.sh: no mpicc; the Open MPI column will be n/a" >&2
fi
mpirun_flags=(-np 2 --oversubscribe --mca btl self,vader)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)
# the "mpi" backend column: needs mpirun and a library built with Open MPI
have_fleet_mpi=0
if [ $have_mpi = 1 ] && timeout 60 mpirun "${mpirun_flags[@]}" "$ours" --mode mpi --seconds 0.01 4K >/dev/null 2>&1; then
  have_fleet_mpi=1
else
  echo "allreduce_peers.sh: bench_allreduce --mode mpi does not run (no mpirun, or built without MPI); its column is n/a" >&2
fi

# shellcheck source=bench/peers.sh
. bench/peers.sh
have_gloo=1
py=$(torch_python "$build") || { have_gloo=0; py=python3; echo "allreduce_peers.sh: no PyTorch (reason above); gloo is n/a" >&2; }

: >"$raw"
{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host: $(uname -srm); $(nproc) CPUs"
  echo "# rounds=$rounds, ${BENCH_AR_SECONDS}s per size; sizes: $sizes; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
} | tee -a "$raw"

run_ours() {
  echo "## fleet" >>"$raw"
  timeout 300 "$ours" --np 2 --mode both --bind core --seconds "$BENCH_AR_SECONDS" $sizes >>"$raw" 2>/dev/null || echo "# FAILED: fleet" | tee -a "$raw"
  [ $have_fleet_mpi = 1 ] || return 0
  echo "## fleet mpi backend" >>"$raw"
  timeout 300 mpirun "${mpirun_flags[@]}" "$ours" --mode mpi --seconds "$BENCH_AR_SECONDS" $sizes >>"$raw" 2>/dev/null \
    || echo "# FAILED: fleet mpi backend" | tee -a "$raw"
}
run_mpi() {
  [ $have_mpi = 1 ] || return 0
  echo "## mpi" >>"$raw"
  timeout 300 mpirun "${mpirun_flags[@]}" "$mpi_bin" mpi_vader $sizes >>"$raw" 2>/dev/null || echo "# FAILED: mpi" | tee -a "$raw"
}
run_gloo() {
  [ $have_gloo = 1 ] || return 0
  echo "## gloo" >>"$raw"
  OMP_NUM_THREADS=1 timeout 300 "$py" bench/peers/gloo_allreduce_ref.py --seconds "$BENCH_AR_SECONDS" $sizes >>"$raw" 2>/dev/null \
    || echo "# FAILED: gloo" | tee -a "$raw"
}

t0=$(date +%s)
for r in $(seq 1 "$rounds"); do
  case $((r % 3)) in
    1) run_ours; run_mpi; run_gloo ;;
    2) run_mpi; run_gloo; run_ours ;;
    0) run_gloo; run_ours; run_mpi ;;
  esac
  echo "# round $r done after $(( $(date +%s) - t0 )) s" | tee -a "$raw"
done

"$py" - "$raw" "$sizes" >"$md" <<'EOF'
import statistics, sys
raw, sizes = sys.argv[1], sys.argv[2].split()
vals = {}
for line in open(raw):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 3 and f[0] == "R":
        vals.setdefault(f[1], []).append(float(f[2]))
med = {k: statistics.median(v) for k, v in vals.items()}
n = {k: len(v) for k, v in vals.items()}
cols = [("fleet_shm", "Fleet shm"), ("fleet_tcp", "Fleet TCP"), ("fleet_mpi", "Fleet mpi backend"),
        ("mpi_vader", "Open MPI vader"), ("gloo", "gloo")]
def g(p, s, m):
    return med.get("%s.%s.%s" % (p, s, m))
def fmt(x, d=2):
    return "n/a" if x is None else ("%.*f" % (d, x))
print("# Allreduce, 2 ranks, float32 sum: medians of %d interleaved rounds\n" % max(n.values() or [0]))
print("time/op in us (busbw in GB/s, = algbw for 2 ranks)\n")
print("| size | " + " | ".join(c[1] for c in cols) + " | shm busbw / MPI | shm busbw / gloo |")
print("|---|" + "---:|" * (len(cols) + 2))
for s in sizes:
    cells = ["%s (%s)" % (fmt(g(p, s, "us")), fmt(g(p, s, "busbw"), 3)) for p, _ in cols]
    shm, mpi, gl = g("fleet_shm", s, "busbw"), g("mpi_vader", s, "busbw"), g("gloo", s, "busbw")
    r1 = fmt(shm / mpi) + "x" if shm and mpi else "n/a"
    r2 = fmt(shm / gl) + "x" if shm and gl else "n/a"
    print("| %s | %s | %s | %s |" % (s, " | ".join(cells), r1, r2))
wrong = [k for k in vals if k.endswith(".wrong")]
print("\nwrong results: %s" % (", ".join(wrong) if wrong else "none (every element checked)"))
print("\ntargets:")
def target(name, ok):
    print("- %s: %s" % (name, "n/a" if ok is None else ("met" if ok else "NOT met")))
big = sizes[-1]
shm, mpi, gl = g("fleet_shm", big, "busbw"), g("mpi_vader", big, "busbw"), g("gloo", big, "busbw")
target("busbw at %s >= Open MPI (%s vs %s GB/s)" % (big, fmt(shm, 3), fmt(mpi, 3)), None if not (shm and mpi) else shm >= mpi)
target("busbw at %s >= 1.5x gloo (%s vs %s GB/s)" % (big, fmt(shm, 3), fmt(gl, 3)), None if not (shm and gl) else shm >= 1.5 * gl)
a, b = g("fleet_shm", "4K", "us"), g("mpi_vader", "4K", "us")
target("4K time/op <= Open MPI (%s vs %s us)" % (fmt(a), fmt(b)), None if not (a and b) else a <= b)
EOF
cat "$md"
echo "allreduce_peers.sh: every line in $raw, summary in $md ($(( $(date +%s) - t0 )) s)"
