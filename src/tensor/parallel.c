/*
 * parallel.c - the one team that splits our own work over FLEET_NUM_THREADS=2: large sgemm
 * calls and the parallel-for of the elementwise and per-channel kernels.
 *
 * Two ways to run it, one per build, chosen here and nowhere else:
 * - OpenMP (a build with oneDNN, whose primitives run on libgomp's team: this file is then
 *   compiled with -fopenmp).  Our jobs run as parallel regions of 2 threads on the same
 *   team, so the worker that waits after a convolution is the one that takes half of the
 *   next batch_norm: one set of threads for the whole step, and no second thread competing
 *   with a spinning OpenMP worker for the cores.
 * - A helper thread of our own (builds without OpenMP, and the TSan build, whose libgomp is
 *   not instrumented).  OpenBLAS's own threads cost about 30 us to wake on this kind of
 *   machine and split small matrices poorly; a training step of a small model is a chain of
 *   100-500 us GEMMs.  The helper spins for a short while after each job (so the next job of
 *   the step starts at once) and then sleeps on a condition variable.
 * Either way, a job is a range of indices cut into chunks that the threads claim one at a
 * time, so a thread that starts late, or that another process keeps off its core, takes
 * fewer chunks instead of holding the others up; each index is computed by one thread in the
 * same order whichever thread it is.  OpenBLAS is kept single-threaded.  When the team is
 * busy (another thread of the process is using it) a call simply runs on its own thread.
 * Default FLEET_NUM_THREADS=1: no team, OpenBLAS threads as configured by the user.
 *
 * The helper's spin after a parallel-for job is shorter than after a GEMM: in a convolution
 * network the next op is often a oneDNN primitive whose OpenMP team wants both cores.
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "tensor_internal.h"

#define SPIN_GEMM_NS 200000ull /* helper spins this long after a GEMM before sleeping */
#define SPIN_FOR_NS 20000ull   /* ... and this long after a parallel-for job */
#define MIN_WORK (1ll << 20)
#define PAR_CHUNKS 8 /* chunks of a parallel-for */

typedef struct {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_job;

/* A posted range: chunks of `chunk` indices of [0, n) claimed one at a time by whichever
 * thread asks first (the caller and the helper), so that a helper that wakes late, or that
 * another process keeps off its core, takes fewer chunks instead of holding the caller up. */
typedef struct {
    fl__range_fn fn;
    void *arg;
    int64_t n, chunk;
    atomic_llong next; /* start of the next unclaimed chunk */
} par_job;

static struct {
    pthread_once_t once;
    int enabled;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int omp;             /* the jobs run as OpenMP parallel regions (no helper thread) */
    atomic_int busy;     /* a caller owns the team */
    atomic_int state;    /* 0 idle, 1 job posted, 3 helper on it, 2 helper done with it */
    atomic_int sleeping; /* helper waits on cv */
    par_job *job;        /* the posted job */
    uint64_t spin_ns;    /* how long the helper spins after it */
} pool = {PTHREAD_ONCE_INIT, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, 0};

static void run_gemm(const gemm_job *j)
{
    cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)j->m, (int)j->n,
                (int)j->k, j->alpha, j->a, (int)j->lda, j->b, (int)j->ldb, j->beta, j->c, (int)j->ldc);
}

/* Rows [lo, hi) of C (rows of A, or columns of A when transposed). */
static void gemm_rows(void *arg, int64_t lo, int64_t hi)
{
    const gemm_job *j = arg;
    gemm_job r = *j;
    r.m = hi - lo;
    r.a = j->ta ? j->a + lo : j->a + lo * j->lda;
    r.c = j->c + lo * j->ldc;
    run_gemm(&r);
}

static void run_claims(par_job *j)
{
    for (;;) {
        const int64_t lo = (int64_t)atomic_fetch_add(&j->next, j->chunk);
        if (lo >= j->n) return;
        j->fn(j->arg, lo, lo + j->chunk < j->n ? lo + j->chunk : j->n);
    }
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

static void *helper_main(void *arg)
{
    (void)arg;
    uint64_t spin = SPIN_GEMM_NS;
    for (;;) {
        uint64_t t0 = fl__now_ns();
        while (atomic_load(&pool.state) != 1) {
            if (fl__now_ns() - t0 > spin) {
                pthread_mutex_lock(&pool.mu);
                atomic_store(&pool.sleeping, 1);
                while (atomic_load(&pool.state) != 1) pthread_cond_wait(&pool.cv, &pool.mu);
                atomic_store(&pool.sleeping, 0);
                pthread_mutex_unlock(&pool.mu);
                break;
            }
            cpu_relax();
        }
        int posted = 1;
        if (!atomic_compare_exchange_strong(&pool.state, &posted, 3)) continue; /* the caller took it back */
        spin = pool.spin_ns;
        run_claims(pool.job);
        atomic_store(&pool.state, 2);
    }
    return NULL;
}

static void pool_init(void)
{
    int64_t n = 1;
    if (fl__env_int("FLEET_NUM_THREADS", 1, 1, 2, &n) != FL_OK) {
        FL_WARN(FL_SUB_TENSOR, "%s; using 1", fl_last_error());
        n = 1;
    }
    if (n < 2) return;
#ifdef _OPENMP
    pool.omp = 1;
    openblas_set_num_threads(1);
    pool.enabled = 1;
    return;
#endif
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&pool.th, &at, helper_main, NULL) == 0) {
        openblas_set_num_threads(1);
        pool.enabled = 1;
    }
    pthread_attr_destroy(&at);
}

/* Takes the helper (1) or finds it absent or busy (0). */
static int helper_take(void)
{
    pthread_once(&pool.once, pool_init);
    if (!pool.enabled) return 0;
    int expected = 0;
    return atomic_compare_exchange_strong(&pool.busy, &expected, 1);
}

/* Runs j's chunks on the calling thread and the taken helper (or OpenMP's second thread),
 * and gives the team back. */
static void helper_run(par_job *j, uint64_t spin_ns)
{
#ifdef _OPENMP
    if (pool.omp) {
#pragma omp parallel num_threads(2)
        run_claims(j);
        atomic_store(&pool.busy, 0);
        return;
    }
#endif
    pool.job = j, pool.spin_ns = spin_ns;
    atomic_store(&pool.state, 1);
    if (atomic_load(&pool.sleeping)) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_signal(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
    }
    run_claims(j);
    /* every chunk is claimed: take the job back if the helper has not started it, else wait
     * for the chunk it is on */
    int posted = 1;
    if (!atomic_compare_exchange_strong(&pool.state, &posted, 0)) {
        while (atomic_load(&pool.state) != 2) cpu_relax();
        atomic_store(&pool.state, 0);
    }
    atomic_store(&pool.busy, 0);
}

int fl__sgemm_parallel(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m < 16 || m * n * k < MIN_WORK) return 0;
    if (!helper_take()) return 0;
    /* two halves of C's rows, the first a multiple of 8 */
    gemm_job g = {ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
    par_job j = {gemm_rows, &g, m, (m / 2 + 7) & ~(int64_t)7, 0};
    helper_run(&j, SPIN_GEMM_NS);
    return 1;
}

static atomic_int par_limit = 2; /* fl__parallel_limit */

int fl__parallel_threads(void)
{
    pthread_once(&pool.once, pool_init);
    return pool.enabled ? 2 : 1;
}

int fl__parallel_limit(int parts) { return atomic_exchange(&par_limit, parts < 2 ? 1 : 2); }

int fl__parallel_for(int64_t n, int64_t grain, int64_t cost, fl__range_fn fn, void *arg)
{
    if (n <= 0) return 1;
    if (grain < 1) grain = 1;
    /* about PAR_CHUNKS chunks, each a multiple of grain */
    int64_t chunk = (n + PAR_CHUNKS - 1) / PAR_CHUNKS;
    chunk = (chunk + grain - 1) / grain * grain;
    if (chunk >= n || n * (cost > 0 ? cost : 1) < FL_PAR_MIN_WORK || atomic_load(&par_limit) < 2 || !helper_take()) {
        fn(arg, 0, n);
        return 1;
    }
    par_job j = {fn, arg, n, chunk, 0};
    helper_run(&j, SPIN_FOR_NS);
    return 2;
}

int fl__blas_single_begin(void)
{
    fl__dnn_single(1);
    int prev = openblas_get_num_threads();
    if (prev > 1) openblas_set_num_threads(1);
    return prev;
}

void fl__blas_single_end(int prev)
{
    if (prev > 1) openblas_set_num_threads(prev);
    fl__dnn_single(0);
}
