#!/usr/bin/env bash
# bench/launch_peers.sh BUILD_DIR - launch to first training step of a 4-process collective
# job (bench/bench_launch.c: role from the launcher, model built and minimised - the ring
# rendezvous -, startup run, one step with its gradient allreduce), under fleetrun, under
# Open MPI's mpirun, and under Slurm's srun when a Slurm controller answers (`sinfo`), against
# Open MPI starting a trivial MPI program (bench/peers/mpi_launch_ref.c: MPI_Init and one
# barrier).  Also the restart time of `fleetrun --max_restart 1` when fleetrun has it: from a
# rank's SIGKILL after its first step to the phases of the restarted job's rank 0 (process
# started, role and model, connected, checkpoint loaded, first step), for a 2-rank collective
# job and a PS job (1 server, 2 workers, a checkpoint written before the kill and loaded after).
#
# Interleaved (the order rotates every round), BENCH_LAUNCH_ROUNDS times (default 7); the
# summary gives medians.  Times are wall-clock from just before the launcher starts
# (FLEET_BENCH_T0_NS) to rank 0's first step finishing.
# Output: BUILD_DIR/bench/launch.raw (every line), BUILD_DIR/bench/launch.md.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
rounds=${BENCH_LAUNCH_ROUNDS:-7}
np=${BENCH_LAUNCH_NP:-4}
probe="$build/bench/bench_launch"
raw="$build/bench/launch.raw"
md="$build/bench/launch.md"
[ -x "$probe" ] || { echo "launch_peers.sh: $probe not built (run: make BUILD=$build all)" >&2; exit 1; }
mkdir -p "$build/bench"
: >"$raw"
FLEET_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export FLEET_JOB_SECRET
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

ref=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  ref="$build/bench/mpi_launch_ref"
  mpicc -O2 bench/peers/mpi_launch_ref.c -o "$ref"
fi
mpi_flags=(--allow-run-as-root --oversubscribe --mca btl self,vader)
have_srun=0
if command -v srun >/dev/null && timeout 5 sinfo -h >/dev/null 2>&1; then have_srun=1; fi

t0() { date +%s%N; }
run_fleetrun() { FLEET_BENCH_T0_NS=$(t0) "$build/tools/fleetrun" --nproc_per_node "$np" --log_dir "$logs/fr" "$probe" fleetrun; }
run_mpirun() { FLEET_BENCH_T0_NS=$(t0) mpirun "${mpi_flags[@]}" -np "$np" -x FLEET_JOB_SECRET -x FLEET_BENCH_T0_NS "$probe" mpirun; }
run_ref() { FLEET_BENCH_T0_NS=$(t0) mpirun "${mpi_flags[@]}" -np "$np" "$ref" mpi_trivial; }
run_srun() { FLEET_BENCH_T0_NS=$(t0) srun -n "$np" "$probe" srun; }

cases=(fleetrun)
[ -n "$ref" ] && cases+=(mpirun ref)
[ "$have_srun" = 1 ] && cases+=(srun)
# BENCH_LAUNCH_RESTART_ONLY=1: the restart trials only
for ((r = 0; r < rounds && ${BENCH_LAUNCH_RESTART_ONLY:-0} == 0; r++)); do
  n=${#cases[@]}
  for ((k = 0; k < n; k++)); do
    c=${cases[$(((k + r) % n))]}
    "run_$c" 2>>"$logs/stderr" | grep '^R' >>"$raw" || echo "launch_peers.sh: $c failed (see below)" >&2
  done
done

# restart: rank 1 kills itself after its first step in the first attempt (the PS job after
# a checkpoint); rank 0 of the restarted attempt prints its phases ("R restarted.<job>.<phase>_ms",
# ms since FLEET_BENCH_T0_NS), here made relative to the kill
restart_job() { # JOB ROUND: one restart trial, "R restart.JOB.kill_to_PHASE_ms" lines into $raw
  local job=$1 r=$2 kf="$logs/kill.$1.$2" out="$logs/restart.$1.$2"
  local -a how=(--nproc_per_node 2)
  [ "$job" = ps ] && how=(--server_num 1 --worker_num 2)
  rm -rf "$logs/ck"
  FLEET_BENCH_CKPT="$logs/ck" FLEET_BENCH_KILL_FILE="$kf" FLEET_BENCH_T0_NS=$(t0) "$build/tools/fleetrun" "${how[@]}" \
    --max_restart 1 --log_dir "$logs/rs.$job.$r" "$probe" "$job" >"$out" 2>>"$logs/stderr" || true
  if [ -s "$kf" ] && grep -q '^R.restarted' "$out"; then
    awk -v k="$(cat "$kf")" -F'\t' '/^R\trestarted\./ {split($2, a, "."); sub(/_ms$/, "", a[3]);
      printf "R\trestart.%s.kill_to_%s_ms\t%.1f\tms\n", a[2], a[3], $3 - k}' "$out" >>"$raw"
  else
    echo "launch_peers.sh: restart trial $job $r failed (see $out)" >&2
  fi
}
if "$build/tools/fleetrun" --help 2>&1 | grep -q -- --max_restart; then
  for ((r = 0; r < rounds; r++)); do
    restart_job collective "$r"
    restart_job ps "$r"
  done
fi

python3 - "$raw" "$md" "$np" "$have_srun" <<'PY'
import statistics, sys
raw, md, np, have_srun = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
vals = {}
for line in open(raw):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 3:
        vals.setdefault(f[1], []).append(float(f[2]))
med = {k: statistics.median(v) for k, v in vals.items()}
def get(k):
    return med.get(k + ".first_step_ms")
rows = [("fleetrun (Fleet job)", get("fleetrun")), ("mpirun (Fleet job, MPI role maker)", get("mpirun")),
        ("srun (Fleet job, Slurm role maker)", get("srun") if have_srun else None),
        ("mpirun, trivial MPI program (reference)", get("mpi_trivial"))]
out = [f"| launcher ({np} processes) | launch to first step, ms (median of {max(len(v) for v in vals.values()) if vals else 0}) |", "|---|---|"]
for name, v in rows:
    out.append(f"| {name} | {'n/a' if v is None else f'{v:.1f}'} |")
if not have_srun:
    out.append("\nsrun: no Slurm controller answered `sinfo` on this machine.")
ref = get("mpi_trivial")
for k in ("fleetrun", "mpirun", "srun"):
    v = get(k)
    if v is not None and ref is not None:
        out.append(f"\n{k}: {v - ref:+.1f} ms against the trivial MPI program (target: at most +100 ms)")
for job, what in (("collective", "a 2-rank collective job"),
                  ("ps", "a PS job (1 server, 2 workers, a checkpoint to load)")):
    ph = [(p, med.get(f"restart.{job}.kill_to_{p}_ms")) for p in ("start", "init", "connect", "load", "first_step", "second_step")]
    ph = [(p, v) for p, v in ph if v is not None]
    if ph:
        n = len(vals[f"restart.{job}.kill_to_first_step_ms"]) if f"restart.{job}.kill_to_first_step_ms" in vals else 0
        out.append(f"\nfleetrun --max_restart 1, {what}: from a rank's SIGKILL to each phase of the restarted "
                   f"rank 0, ms (medians of {n}): " + ", ".join(f"{p} {v:.1f}" for p, v in ph))
text = "\n".join(out) + "\n"
open(md, "w").write(text)
print(text)
PY
