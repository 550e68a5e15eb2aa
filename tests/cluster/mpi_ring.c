/*
 * mpi_ring.c - the MPI smoke program of tests/cluster (built there with mpicc, not part of
 * the library): each rank prints its rank, the world size and the IPv4 address of its eth0
 * (in the bed, the address of the namespace it runs in), then the ranks sum their ranks
 * with MPI_Allreduce and pass a token around the ring, so data really crosses the hosts.
 *
 *   rank R of N on ADDR
 *   rank 0: allreduce sum 3, ring token 3      (N = 3: 0+1+2, one hop per rank)
 *
 * Exit status 0 when both results are right on every rank, 1 otherwise.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static void eth0_addr(char *out, size_t n)
{
    struct ifaddrs *ifa, *i;
    snprintf(out, n, "?");
    if (getifaddrs(&ifa) != 0) return;
    for (i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, "eth0"))
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, (socklen_t)n);
    freeifaddrs(ifa);
}

int main(int argc, char **argv)
{
    int rank, size, sum = 0, token = 0, ok;
    char addr[INET_ADDRSTRLEN];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    eth0_addr(addr, sizeof addr);
    printf("rank %d of %d on %s\n", rank, size, addr);
    fflush(stdout);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (size > 1) { /* rank 0 starts the token; each rank adds 1 and passes it on */
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token++;
            MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        }
    }
    ok = sum == size * (size - 1) / 2 && (rank != 0 || token == size);
    if (rank == 0) printf("rank 0: allreduce sum %d, ring token %d\n", sum, token);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
