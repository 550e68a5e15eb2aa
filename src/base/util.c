/* util.c - aligned memory, strings, hashing, random normals, time, text buffers. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "base_internal.h"

/* Buffers from 32 MiB (embedding tables and their optimizer state) are aligned to 2 MiB
 * and advised for transparent huge pages: a sparse update touches a few rows at random
 * all over such a table, and with 4 KiB pages nearly every row costs a TLB miss (Adam
 * reads three such tables per row; measured in bench/adam_rows.sh).  The tables are
 * written whole when initialised, so huge pages hold no memory that 4 KiB pages would
 * not.  Where the kernel's THP setting is "never" the advice is a no-op. */
#define FL_HUGE_FROM ((size_t)32 << 20)
#define FL_HUGE_PAGE ((size_t)2 << 20)

void *fl__alloc_aligned(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes >= FL_HUGE_FROM) {
        size_t len = (bytes + FL_HUGE_PAGE - 1) & ~(FL_HUGE_PAGE - 1);
        if (posix_memalign(&p, FL_HUGE_PAGE, len) != 0) return NULL;
        (void)madvise(p, len, MADV_HUGEPAGE);
        return p;
    }
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}

void fl__free_aligned(void *p) { free(p); }

char *fl__strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

uint64_t fl__hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

double fl__rng_normal(fl_rng *r)
{
    /* Box-Muller; uses two uniforms per value (no cached state, keeps runs reproducible). */
    double u1 = ((double)(fl__rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(fl__rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t fl__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double fl__now(void) { return (double)fl__now_ns() * 1e-9; }

double fl__wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int buf_reserve(fl_buf *b, size_t extra)
{
    if (b->failed) return -1;
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->len + extra + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
        b->failed = 1;
        return -1;
    }
    b->p = np;
    b->cap = nc;
    return 0;
}

void fl__buf_put(fl_buf *b, const void *data, size_t n)
{
    if (buf_reserve(b, n)) return;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void fl__buf_printf(fl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void fl__buf_free(fl_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

uint64_t fl__nofile_want(uint64_t want, const char *who)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want) return rl.rlim_cur;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : (rlim_t)want;
    if (rl.rlim_cur > old && setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = old;
    static _Atomic uint64_t warned; /* the largest need warned about: a need no larger is not repeated */
    uint64_t w = atomic_load(&warned);
    while (rl.rlim_cur < want && w < want && !atomic_compare_exchange_weak(&warned, &w, want)) {
    }
    if (rl.rlim_cur < want && w < want)
        FL_WARN(FL_SUB_NET,
                "%s needs about %llu file descriptors, but RLIMIT_NOFILE allows %llu (hard limit %llu): connections "
                "beyond it wait, and their peers fail; raise it (ulimit -Hn, systemd LimitNOFILE, docker --ulimit nofile)",
                who, (unsigned long long)want, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    return rl.rlim_cur;
}

static _Atomic uint64_t nofile_held; /* descriptors the live clients and communicators will hold */

uint64_t fl__nofile_hold(int64_t n, const char *who)
{
    if (n <= 0) {
        atomic_fetch_sub(&nofile_held, (uint64_t)-n);
        return 0;
    }
    uint64_t sum = atomic_fetch_add(&nofile_held, (uint64_t)n) + (uint64_t)n;
    return fl__nofile_want(sum + FL__NOFILE_SPARE, who);
}
