/*
 * mpi_allreduce_ref.c - the Open MPI reference for bench/allreduce_peers.sh: MPI_Allreduce
 * (float32, MPI_SUM, out of place) time per op for a list of sizes, measured the same way
 * as bench/bench_allreduce.c.  Not part of the library build (bench/allreduce_peers.sh
 * compiles it with mpicc when Open MPI is installed).
 *
 *   mpirun -np 2 --oversubscribe --mca btl self,vader mpi_allreduce_ref [LABEL] [SIZE ...]
 *
 * Per size: 3 warm-up ops, one timed op to pick ITERS (~BENCH_AR_SECONDS, default 0.5 s,
 * 3..2000), a barrier, ITERS
 * ops; time/op = the slowest rank's elapsed time / ITERS; p50 from rank 0's individually
 * timed ops; every element checked.  Output: "R\t<label>.<SIZE>.us\t<v>\tus/op" (.p50us,
 * .algbw, .busbw), algbw = bytes / time, busbw = algbw * 2(n-1)/n.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long parse(const char *s)
{
    char *e;
    long v = strtol(s, &e, 10);
    if (*e == 'K' || *e == 'k') v <<= 10;
    if (*e == 'M' || *e == 'm') v <<= 20;
    return v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *label = argc > 1 ? argv[1] : "mpi";
    const char *secs_env = getenv("BENCH_AR_SECONDS");
    double secs = secs_env && atof(secs_env) > 0 ? atof(secs_env) : 0.5;
    static const char *def[] = {"4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"};
    int ns = argc > 2 ? argc - 2 : 8;
    for (int si = 0; si < ns; si++) {
        const char *ss = argc > 2 ? argv[2 + si] : def[si];
        long bytes = parse(ss), cnt = bytes / 4;
        float *s = malloc((size_t)cnt * 4 + 4), *r = malloc((size_t)cnt * 4 + 4);
        for (long i = 0; i < cnt; i++) s[i] = (float)(rank + 1 + (int)(i % 7));
        memset(r, 0, (size_t)cnt * 4);
        for (int w = 0; w < 3; w++) MPI_Allreduce(s, r, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allreduce(s, r, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        int iters = (int)(secs / (t > 1e-9 ? t : 1e-9));
        iters = iters < 3 ? 3 : iters > 2000 ? 2000 : iters;
        double *ts = malloc((size_t)iters * sizeof(double));
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), tp = t0;
        for (int i = 0; i < iters; i++) {
            MPI_Allreduce(s, r, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double tn = MPI_Wtime();
            ts[i] = tn - tp;
            tp = tn;
        }
        double el = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &el, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long wrong = 0;
        float base = (float)(np * (np + 1) / 2);
        for (long i = 0; i < cnt; i++) wrong += r[i] != base + (float)(np * (int)(i % 7));
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        qsort(ts, (size_t)iters, sizeof(double), cmpd);
        if (rank == 0) {
            double per = el / iters, alg = (double)bytes / per / 1e9;
            printf("R\t%s.%s.us\t%.2f\tus/op\n", label, ss, per * 1e6);
            printf("R\t%s.%s.p50us\t%.2f\tus/op\n", label, ss, ts[iters / 2] * 1e6);
            printf("R\t%s.%s.algbw\t%.3f\tGB/s\n", label, ss, alg);
            printf("R\t%s.%s.busbw\t%.3f\tGB/s\n", label, ss, alg * 2.0 * (np - 1) / np);
            if (wrong) printf("R\t%s.%s.wrong\t%ld\telements\n", label, ss, wrong);
            fflush(stdout);
        }
        free(s);
        free(r);
        free(ts);
    }
    MPI_Finalize();
    return 0;
}
