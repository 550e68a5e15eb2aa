#!/usr/bin/env bash
# run.sh [BUILD] - the multi-host jobs of tests/cluster on a bed of 3 network namespaces
# (netns.sh), each job in its own directory, and a summary line in the style of
# scripts/run-tests.sh: "N passed, N failed, N skipped".  Exit status 1 if a job failed.
# Needs root (namespaces, veth, a bridge) and the packages of scripts/ensure-deps.sh
# cluster; `make test-cluster` installs them, builds and runs this.
#
# Environment:
#   CLUSTER_JOBS       space-separated job names to run (default: all, in the order below)
#   CLUSTER_JOB_TIMEOUT_S  limit of each job (default 300)
#   CLUSTER_KEEP=1     keep the run's directory (data, logs) instead of removing it
#   RATE, CLUSTER_NET, CLUSTER_ID   passed to netns.sh (RATE=1gbit shapes each host's link)
#   CLUSTER_FAULT_BOUND_S  how fast the other hosts must notice a killed worker or server (default 10)
#   CLUSTER_MPI_STOP_BOUND_S  how fast mpirun must end a job with a stopped rank (default 15)
#   CLUSTER_ALLOW_SKIP=1   a job that cannot run here (no network namespaces in a sandbox
#                      or a container without CAP_SYS_ADMIN; a package or data set
#                      missing) is skipped; without it that is a failure, so a CI step
#                      never passes on jobs it did not run
#
# A job is a function job_NAME in one of the files sourced below, run in a subshell inside
# its own directory; it returns 0 (passed), 77 through `skip REASON` (cannot run here:
# a missing package or data set) or anything else (failed).  Whatever a job leaves running
# inside the bed fails it and is stopped.  To add one: write the function, add NAME to JOBS.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "run.sh: no build directory '${1:-build}' (make all first)" >&2; exit 2; }
for f in tools/fleetrun tools/fleet-datagen examples/ctr/train examples/fmnist/train_mlp tests/bin/ps_train; do
  [ -x "$BUILD/$f" ] || { echo "run.sh: $BUILD/$f is missing (make all first)" >&2; exit 2; }
done

JOBS=(ps_ctr_async ps_sync_params ps_server_only_host collective_fmnist ps_worker_killed ps_server_killed mpirun_smoke
  slurm_smoke master_collective master_ps_restart master_ps_server_restart mpirun_collective srun_collective srun_ps
  sbatch_ps_restart ps_ctr_rate mpirun_stopped_rank)
[ -n "${CLUSTER_JOBS:-}" ] && read -r -a JOBS <<<"$CLUSTER_JOBS"

# unique names: the CI job (if any) and this shell's pid
export CLUSTER_ID=${CLUSTER_ID:-${CI_JOB_ID:+ci$CI_JOB_ID-}$$}
export CLUSTER_NET=${CLUSTER_NET:-10.213.7}
NET=$CLUSTER_NET
WORK=$(mktemp -d /tmp/flt-cluster.XXXXXX)
chmod 0711 "$WORK" # munged (slurm.sh) wants every directory above its socket searchable
export HERE BUILD NET WORK

# shellcheck source=lib.sh
. "$HERE/lib.sh"
# shellcheck source=jobs_ps.sh
. "$HERE/jobs_ps.sh"
# shellcheck source=jobs_faults.sh
. "$HERE/jobs_faults.sh"
# shellcheck source=jobs_collective.sh
. "$HERE/jobs_collective.sh"
# shellcheck source=mpi.sh
. "$HERE/mpi.sh"
# shellcheck source=slurm.sh
. "$HERE/slurm.sh"

job_pid=
cleanup() {
  [ -n "$job_pid" ] && kill -TERM "$job_pid" 2>/dev/null
  slurm_down 2>/dev/null
  "$HERE/netns.sh" down
  if [ "${CLUSTER_KEEP:-0}" = 1 ]; then echo "run.sh: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT
trap 'echo "run.sh: terminated" >&2; exit 143' TERM
trap 'echo "run.sh: hung up" >&2; exit 129' HUP

pass=0 fail=0 skipped=0 failed_jobs=() times=()
t_all=$(now)
echo "== bed: 3 hosts in network namespaces flt-$CLUSTER_ID-h{1,2,3}, $NET.{1,2,3}/24${RATE:+, links shaped to $RATE}"
"$HERE/netns.sh" up >"$WORK/netns.out" 2>&1
rc=$?
sed 's/^/  /' "$WORK/netns.out"
if [ $rc = 77 ]; then
  if [ "${CLUSTER_ALLOW_SKIP:-0}" = 1 ]; then
    for j in "${JOBS[@]}"; do echo "SKIP $j: no network namespaces here (CLUSTER_ALLOW_SKIP=1)"; done
    echo "0 passed, 0 failed, ${#JOBS[@]} skipped"
    exit 0
  fi
  echo "FAIL bed: network namespaces cannot be made here, so none of the ${#JOBS[@]} jobs can run" \
    "(CLUSTER_ALLOW_SKIP=1 skips them instead)"
  echo "0 passed, 1 failed, ${#JOBS[@]} skipped"
  exit 1
fi
[ $rc = 0 ] || { echo "FAIL bed: netns.sh up exited with status $rc"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

# leftovers: processes still inside the bed after a job (its own, since jobs run one by one)
leftovers() {
  local k pids
  for k in 1 2 3; do
    pids=$(ip netns pids "$(host_ns h$k)" 2>/dev/null | paste -sd, -)
    [ -n "$pids" ] && echo "h$k: $(ps -o pid=,comm= -p "$pids" 2>/dev/null | tr -s ' \n' '  ')"
  done
}
stop_leftovers() {
  local k
  for k in 1 2 3; do
    # shellcheck disable=SC2046
    kill -KILL $(ip netns pids "$(host_ns h$k)" 2>/dev/null) 2>/dev/null
  done
  sleep 0.2
}

limit=${CLUSTER_JOB_TIMEOUT_S:-300}
for j in "${JOBS[@]}"; do
  declare -F "job_$j" >/dev/null || { echo "run.sh: no job named '$j'" >&2; fail=$((fail + 1)); failed_jobs+=("$j"); continue; }
  echo "== $j"
  JOBDIR=$WORK/$j
  mkdir -p "$JOBDIR"
  t0=$(now)
  (
    cd "$JOBDIR" || exit 1
    set -euo pipefail
    "job_$j"
  ) &
  job_pid=$!
  timed_out=0
  while kill -0 "$job_pid" 2>/dev/null; do
    if awk -v a="$(now)" -v b="$t0" -v s="$limit" 'BEGIN { exit !(a - b > s) }'; then
      timed_out=1
      echo "  FAIL: still running after $limit s (CLUSTER_JOB_TIMEOUT_S); stopping it"
      stop_leftovers
      kill -TERM "$job_pid" 2>/dev/null
      break
    fi
    sleep 0.2
  done
  wait "$job_pid"
  rc=$?
  job_pid=
  secs=$(secs_between "$t0" "$(now)")
  stray=$(leftovers)
  if [ -n "$stray" ]; then
    echo "  FAIL: the job left processes running in the bed (stopped now): $stray"
    stop_leftovers
    [ $rc = 0 ] && rc=1
  fi
  [ $timed_out = 1 ] && rc=1
  if [ $rc = 0 ]; then
    echo "PASS $j ($secs s)"; pass=$((pass + 1))
  elif [ $rc = 77 ] && [ "${CLUSTER_ALLOW_SKIP:-0}" = 1 ]; then
    echo "SKIP $j (its reason is on the SKIP: line above)"; skipped=$((skipped + 1))
  elif [ $rc = 77 ]; then
    echo "FAIL $j: it cannot run here (the SKIP: line above says why; CLUSTER_ALLOW_SKIP=1 skips it instead)"
    fail=$((fail + 1)); failed_jobs+=("$j")
  else
    echo "FAIL $j ($secs s, status $rc)"; fail=$((fail + 1)); failed_jobs+=("$j")
  fi
  times+=("$j $secs")
done
echo "== times (s): ${times[*]}; all $(secs_between "$t_all" "$(now)")"
[ ${#failed_jobs[@]} -gt 0 ] && echo "failed jobs: ${failed_jobs[*]}"
echo "$pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ]
