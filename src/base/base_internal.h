/*
 * base_internal.h - private helpers shared by every layer: error setting, check macros,
 * logging macros, environment getters, hashing, random numbers, time, aligned memory.
 */
#ifndef FL_BASE_INTERNAL_H
#define FL_BASE_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "fleet/base.h"

#if defined(__GNUC__)
#define FL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define FL_LIKELY(x) __builtin_expect(!!(x), 1)
#define FL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define FL_PRINTF(a, b)
#define FL_LIKELY(x) (x)
#define FL_UNLIKELY(x) (x)
#endif

/* Records status + message for the calling thread, logs it at debug level with file and
 * line, and returns status (so `return fl__err(FL_EINVAL, ...)` reads naturally). */
int fl__set_error(int status, const char *file, int line, const char *fmt, ...) FL_PRINTF(4, 5);
#define fl__err(st, ...) fl__set_error((st), __FILE__, __LINE__, __VA_ARGS__)

#define FL_CHECK(call)                                                                     \
    do {                                                                                   \
        int fl__st_ = (call);                                                              \
        if (FL_UNLIKELY(fl__st_ != FL_OK)) return fl__st_;                                 \
    } while (0)
#define FL_CHECK_GOTO(call, st, label)                                                     \
    do {                                                                                   \
        (st) = (call);                                                                     \
        if (FL_UNLIKELY((st) != FL_OK)) goto label;                                        \
    } while (0)

/* Logging. */
void fl__log(fl_log_level lvl, unsigned subsys, const char *file, int line, const char *fmt, ...)
    FL_PRINTF(5, 6);
int fl__log_enabled(fl_log_level lvl, unsigned subsys);
#define FL_LOG(lvl, sub, ...)                                                              \
    do {                                                                                   \
        if (fl__log_enabled((lvl), (sub))) fl__log((lvl), (sub), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define FL_ERROR(sub, ...) FL_LOG(FL_LOG_ERROR, sub, __VA_ARGS__)
#define FL_WARN(sub, ...) FL_LOG(FL_LOG_WARN, sub, __VA_ARGS__)
#define FL_INFO(sub, ...) FL_LOG(FL_LOG_INFO, sub, __VA_ARGS__)
#define FL_DEBUG(sub, ...) FL_LOG(FL_LOG_DEBUG, sub, __VA_ARGS__)

/* Environment (src/base/env.c is the only file that calls getenv).  Each getter returns
 * the default when the variable is unset, and FL_EINVAL naming the variable and the
 * expected form when it is set but malformed. */
int fl__env_str(const char *name, const char *def, const char **out);
int fl__env_int(const char *name, int64_t def, int64_t lo, int64_t hi, int64_t *out);
int fl__env_double(const char *name, double def, double *out);

/* Memory: 64-byte aligned allocations (free with fl__free_aligned). */
void *fl__alloc_aligned(size_t bytes);
void fl__free_aligned(void *p);
char *fl__strdup(const char *s);

/* Deterministic random numbers: splitmix64 state; uniform in [0,1) and normal(0,1). */
typedef struct {
    uint64_t s;
} fl_rng;
static inline uint64_t fl__rng_next(fl_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline float fl__rng_uniform(fl_rng *r) { return (float)(fl__rng_next(r) >> 40) * (1.0f / 16777216.0f); }
double fl__rng_normal(fl_rng *r);

/* Stable 64-bit hashes (FNV-1a of bytes, and a 64-bit integer mixer). */
uint64_t fl__hash_bytes(const void *p, size_t n);
static inline uint64_t fl__hash_u64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

/* Monotonic time in seconds / nanoseconds. */
double fl__now(void);
uint64_t fl__now_ns(void);

/* Growable byte buffer for building text. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} fl_buf;
void fl__buf_printf(fl_buf *b, const char *fmt, ...) FL_PRINTF(2, 3);
void fl__buf_put(fl_buf *b, const void *data, size_t n);
void fl__buf_free(fl_buf *b);


/* String-keyed hash map (open addressing) holding int64 values; keys are copied. */
typedef struct {
    char **keys;
    int64_t *vals;
    size_t cap, len;
} fl_strmap;
int fl__strmap_put(fl_strmap *m, const char *key, int64_t val);
/* Returns 1 and sets *val if found, else 0. */
int fl__strmap_get(const fl_strmap *m, const char *key, int64_t *val);
int fl__strmap_del(fl_strmap *m, const char *key);
void fl__strmap_free(fl_strmap *m);
#endif
