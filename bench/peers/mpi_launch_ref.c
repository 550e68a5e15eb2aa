/*
 * mpi_launch_ref.c - the Open MPI reference of bench/launch_peers.sh: a trivial MPI program
 * (MPI_Init, one MPI_Barrier); rank 0 prints the time since FLEET_BENCH_T0_NS as
 * "R\t<label>.first_step_ms\t<ms>\tms".  Not part of the library build
 * (launch_peers.sh compiles it with mpicc).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    const char *t0 = getenv("FLEET_BENCH_T0_NS");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 - (t0 ? (double)strtoll(t0, NULL, 10) / 1e6 : 0);
    if (rank == 0) printf("R\t%s.first_step_ms\t%.1f\tms\n", argc > 1 ? argv[1] : "mpi_trivial", ms);
    MPI_Finalize();
    return 0;
}
