# shellcheck shell=bash
# mpi.sh - Open MPI across the bed (sourced by run.sh; see README.md).
#
# mpirun itself runs inside h1; for every other host it starts Open MPI's daemon (orted)
# through netns-rsh, which stands in for ssh by entering the namespace that owns the
# address.  All of Open MPI's traffic (its out-of-band channel and the TCP transport of the
# ranks) is held to the bed's /24, with the TCP and self transports only (no shared memory
# between "hosts").
#
# rtc ^hwloc: Open MPI 4.1.4's orted crashes in hwloc_shmem_topology_write when a second
# orted of the same machine maps the topology it shares (the "hosts" are one machine); the
# rtc/hwloc component only binds and places processes, which these jobs do not ask for.

mpi_args() {
  echo --allow-run-as-root --mca plm_rsh_agent "$HERE/netns-rsh" \
    --mca oob_tcp_if_include "$NET.0/24" --mca btl_tcp_if_include "$NET.0/24" --mca btl tcp,self --mca rtc ^hwloc
}

# mpi_start NAME HOSTS NP ARGS...: mpirun -np NP --host HOSTS ARGS... inside h1, in the
# background (see start in lib.sh)
mpi_start() {
  local name=$1 hosts=$2 np=$3; shift 3
  # shellcheck disable=SC2046
  start "$name" h1 mpirun $(mpi_args) -np "$np" --host "$hosts" "$@"
}

# e. mpirun -np 3 over the 3 hosts: every rank runs in the namespace of its host (it prints
#    that address), and an allreduce and a ring of sends cross the hosts.
job_mpirun_smoke() {
  command -v mpirun >/dev/null || skip "mpirun is not installed (Debian package openmpi-bin)"
  command -v mpicc >/dev/null || skip "mpicc is not installed (Debian package libopenmpi-dev)"
  mpicc -O1 -Wall -Wextra -Werror -o "$JOBDIR/mpi_ring" "$HERE/mpi_ring.c"
  local hosts k ok=0
  hosts=$(host_ip h1),$(host_ip h2),$(host_ip h3)
  mpi_start ring "$hosts" 3 "$JOBDIR/mpi_ring"
  await 60 ring || { show ring; return 1; }
  [ "$(rc_of ring)" = 0 ] || { show ring; return 1; }
  sed 's/^/    /' "$JOBDIR/ring.out"
  for k in 0 1 2; do
    expect "rank $k runs on $(host_ip h$((k + 1)))" grep -qx "rank $k of 3 on $(host_ip h$((k + 1)))" "$JOBDIR/ring.out" || ok=1
  done
  expect "allreduce and ring across the hosts" grep -qx "rank 0: allreduce sum 3, ring token 3" "$JOBDIR/ring.out" || ok=1
  return $ok
}

# Collective training started by mpirun on h1 and h2: the MPI role maker (fleet_init finds
# mpirun from OMPI_COMM_WORLD_SIZE) gives the ranks their endpoints; the secret goes with -x.
job_mpirun_collective() {
  command -v mpirun >/dev/null || skip "mpirun is not installed (Debian package openmpi-bin)"
  fmnist_setup
  mpi_start coll "$(host_ip h1),$(host_ip h2)" 2 -x FLEET_JOB_SECRET "${FMNIST_CMD[@]}"
  fmnist_finish coll
}

# A stopped rank under mpirun: ps_train's parameter-server job through the MPI role maker
# (even ranks serve, odd ranks work) on 4 ranks, h1 holding ranks 0 and 1, h2 rank 2, h3
# rank 3 (worker 1); SIGSTOP to rank 3 once it trains.  The servers name the stopped worker
# and exit 1, and their exit must end the MPI job (no MPI_Finalize, which waits for the
# stopped rank for ever): mpirun exits non-zero within CLUSTER_MPI_STOP_BOUND_S (15) of the
# stop, reporting the rank's non-zero exit, with the stopped worker named.  Measured: 9.1-9.2 s,
# the servers' 6 s of silence plus Open MPI's own teardown (each daemon sends SIGCONT and
# SIGTERM and waits about a second before SIGKILL); before the fix mpirun never ended.
job_mpirun_stopped_rank() {
  command -v mpirun >/dev/null || skip "mpirun is not installed (Debian package openmpi-bin)"
  local bound=${CLUSTER_MPI_STOP_BOUND_S:-15} pid="" p t ok=0 _
  new_secret
  mpi_start stopped "$(host_ip h1):2,$(host_ip h2),$(host_ip h3)" 4 -x FLEET_JOB_SECRET -x FLEET_LOG_LEVEL=info \
    "$BUILD/tests/bin/ps_train" mode=async steps=100000000 quiet=1
  wait_for 90 "$JOBDIR/stopped.err" 'worker 1 connected to 2 parameter servers' || { show stopped; return 1; }
  for _ in $(seq 50); do
    for p in $(ip netns pids "$(host_ns h3)"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=3 &&
        grep -q ps_train "/proc/$p/cmdline" 2>/dev/null && pid=$p
    done
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || { say "FAIL: no process of rank 3 in h3"; show stopped; return 1; }
  sleep 1
  kill -STOP "$pid"
  T_STOP=$(now)
  say "stopped rank 3 (worker 1, pid $pid on h3) with SIGSTOP"
  await 60 stopped || { kill -CONT "$pid"; show stopped; return 1; }
  t=$(secs_between "$T_STOP" "$(end_of stopped)")
  say "mpirun exited with status $(rc_of stopped) $t s after the stop"
  expect "mpirun exited non-zero" [ "$(rc_of stopped)" != 0 ] || ok=1
  expect "mpirun ended within $bound s of the stop ($t s)" awk -v a="$t" -v b="$bound" 'BEGIN { exit !(a <= b) }' || ok=1
  expect "mpirun reports the failed rank" grep -qE 'exited with non-zero status|non-zero exit code|exited on signal' \
    "$JOBDIR/stopped.out" "$JOBDIR/stopped.err" || ok=1
  expect "a server names worker 1 as stopped or hung" \
    grep -qE 'worker 1 \(.*\) sent nothing, not even a heartbeat, for [0-9.]+ s: it is stopped or hung' "$JOBDIR/stopped.err" \
      "$JOBDIR/stopped.out" || ok=1
  [ $ok = 0 ] || show stopped
  return $ok
}
