# shellcheck shell=bash
# lib.sh - helpers for the jobs of tests/cluster, sourced by run.sh (and by slurm.sh when
# it runs alone).  Not executable on its own.
#
# Set before sourcing: BUILD (absolute build directory), HERE (this directory), WORK (the
# run's temporary directory), CLUSTER_ID and NET (see netns.sh).  Each job runs with JOBDIR,
# its own directory under WORK, as the current directory.
#
# Processes of a job are started inside a host with `start NAME HOST CMD...`; their stdout and
# stderr go to NAME.out and NAME.err in JOBDIR, and when they end NAME.rc holds "STATUS
# EPOCH_SECONDS".  `await SECS NAME...` waits for them.  Everything a job starts lives in the
# bed's namespaces, so run.sh can tell (and stop) whatever a job left behind.

now() { date +%s.%N; }
say() { printf '  %s\n' "$*"; }

# host -> namespace / address (h1.. or an address of the bed)
host_ns() { echo "flt-$CLUSTER_ID-h${1#h}"; }
host_ip() { echo "$NET.${1#h}"; }
# on HOST CMD...: run CMD inside HOST (its network, /etc/hosts and host name), in the foreground
on() { "$HERE/netns.sh" exec "$@"; }

# start NAME HOST CMD...: run CMD inside HOST in the background (stdin /dev/null)
start() {
  local name=$1 h=$2; shift 2
  rm -f "$JOBDIR/$name.rc"
  (rc=0
   on "$h" "$@" >"$JOBDIR/$name.out" 2>"$JOBDIR/$name.err" </dev/null || rc=$?
   echo "$rc $(now)" >"$JOBDIR/$name.rc") &
}

# await SECS NAME...: wait until every NAME has ended; 1 (naming the others) after SECS
await() {
  local secs=$1 t0 n; shift
  t0=$(now)
  while :; do
    local left=()
    for n in "$@"; do [ -f "$JOBDIR/$n.rc" ] || left+=("$n"); done
    [ ${#left[@]} -eq 0 ] && return 0
    if awk -v a="$(now)" -v b="$t0" -v s="$secs" 'BEGIN { exit !(a - b > s) }'; then
      say "FAIL: still running after $secs s: ${left[*]}"
      return 1
    fi
    sleep 0.1
  done
}
rc_of() { cut -d' ' -f1 "$JOBDIR/$1.rc"; }
end_of() { cut -d' ' -f2 "$JOBDIR/$1.rc"; }

# wait_for SECS FILE PATTERN: wait until FILE has a line matching the extended regex
wait_for() {
  local secs=$1 file=$2 pat=$3 _
  for _ in $(seq $((secs * 10))); do
    grep -qE -- "$pat" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  say "FAIL: no line matching '$pat' in $file after $secs s"
  return 1
}

# has_lines FILE REGEX...: FILE has a line matching each extended REGEX
has_lines() {
  local f=$1 r
  shift
  for r in "$@"; do grep -qE -- "$r" "$f" || return 1; done
}

# number_after KEY FILE: the number that follows the first KEY in FILE (empty if none)
number_after() { grep -o -- "$1[-0-9.e+]*" "$2" 2>/dev/null | head -1 | sed "s/^$1//"; }

# near A B TOL: |A - B| <= TOL (numbers as printed; false if one is empty)
near() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
# secs_between T0 T1: T1 - T0 with one decimal
secs_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# ms_between T0 T1: T1 - T0 in whole milliseconds
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 + 0.5 }'; }

# show NAME...: what a process said (for failures): its rc and the last lines of its output
show() {
  local n f
  for n in "$@"; do
    say "--- $n: status $(cat "$JOBDIR/$n.rc" 2>/dev/null || echo 'still running')"
    for f in "$JOBDIR/$n.out" "$JOBDIR/$n.err"; do
      [ -s "$f" ] && grep -v '^    |' "$f" | tail -n 15 | sed 's/^/    | /'
    done
  done
  return 0
}

# expect DESCRIPTION CMD...: run CMD (a test); print ok or FAIL with DESCRIPTION; status of CMD
expect() {
  local what=$1; shift
  if "$@"; then say "ok: $what"; return 0; fi
  say "FAIL: $what"
  return 1
}

# skip REASON: the job cannot run here (a missing package or data set), with the reason
skip() { say "SKIP: $*"; exit 77; }

# A fresh job secret for the processes of a multi-host job: every host must hold the same
# one (fleetrun refuses to invent one when the job spans machines).
new_secret() { FLEET_JOB_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n'); export FLEET_JOB_SECRET; }

# fleetrun_on NAME HOST FLEETRUN_ARGS...: fleetrun inside HOST, logs in JOBDIR/NAME.log
fleetrun_on() {
  local name=$1 h=$2; shift 2
  start "$name" "$h" "$BUILD/tools/fleetrun" --log_dir "$JOBDIR/$name.log" "$@"
}

# pid_in_host PID HOST: PID is a process inside HOST's namespace (so killing it is safe)
pid_in_host() { ip netns pids "$(host_ns "$2")" | grep -qx "$1"; }
