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
