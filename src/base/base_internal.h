/*
 * base_internal.h - private helpers shared by every layer: error setting, check macros,
 * logging macros, environment getters, hashing, random numbers, time, aligned memory, text
 * buffers, a string map and the JSON layer over cJSON.
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
/* A handle argument that is NULL or invalid (FL_EINVAL).  A NULL handle is most often what a
 * failed constructor returned: if the thread has an error set, the message keeps it, as
 * "... (an earlier call failed: <that error>)", so the first error is the one the user reads. */
int fl__set_handle_error(const void *h, const char *file, int line, const char *fmt, ...) FL_PRINTF(4, 5);
#define fl__err_handle(h, ...) fl__set_handle_error((h), __FILE__, __LINE__, __VA_ARGS__)

#define FL_CHECK(call)                                     \
    do {                                                   \
        int fl__st_ = (call);                              \
        if (FL_UNLIKELY(fl__st_ != FL_OK)) return fl__st_; \
    } while (0)
#define FL_CHECK_GOTO(call, st, label)              \
    do {                                            \
        (st) = (call);                              \
        if (FL_UNLIKELY((st) != FL_OK)) goto label; \
    } while (0)

/* Logging. */
void fl__log(fl_log_level lvl, unsigned subsys, const char *file, int line, const char *fmt, ...) FL_PRINTF(5, 6);
int fl__log_enabled(fl_log_level lvl, unsigned subsys);
/* The rank given to fl_log_set_identity (fleet_init gives the role's), -1 if never set. */
int fl__log_rank(void);
#define FL_LOG(lvl, sub, ...)                                                                      \
    do {                                                                                           \
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
/* One of a NULL-terminated list of names: *out = its index (def when unset); FL_EINVAL
 * naming the variable and listing the choices otherwise. */
int fl__env_choice(const char *name, const char *const *choices, int def, int *out);

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
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Monotonic time in seconds / nanoseconds. */
double fl__now(void);
/* Seconds since 1970 (CLOCK_REALTIME), for time stamps in files. */
double fl__wall_time(void);
uint64_t fl__now_ns(void);
/* now - then, or 0 when then is later.  A time another thread stored (a heartbeat's answer,
 * the moment this process resumed) can be later than a clock this thread read just before
 * it: plain unsigned subtraction would wrap to ~584 years and turn "just heard from" into
 * "timed out". */
static inline uint64_t fl__ns_since(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

/* Growable byte buffer for building text. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} fl_buf;
void fl__buf_printf(fl_buf *b, const char *fmt, ...) FL_PRINTF(2, 3);
void fl__buf_put(fl_buf *b, const void *data, size_t n);
void fl__buf_free(fl_buf *b);

/* Raises this process's soft RLIMIT_NOFILE to `want` descriptors (never lowers it; at most
 * the hard limit): a server whose every worker holds a few connections needs more than the
 * usual soft default of 1024.  Below `want` even so, warns once, naming `who` and the hard
 * limit.  Returns the soft limit now in force. */
uint64_t fl__nofile_want(uint64_t want, const char *who);
/* The same for the connections a worker opens: n > 0 adds n descriptors to those this
 * process's live PS clients and collective communicators hold (each adds its own when
 * created) and raises the soft limit to that sum plus FL__NOFILE_SPARE (files, pipes,
 * listeners), warning as fl__nofile_want; n <= 0 gives -n back (at free; the limit stays). */
#define FL__NOFILE_SPARE 256
uint64_t fl__nofile_hold(int64_t n, const char *who);


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

/* ---- json.c: the one JSON module, over cJSON (<cjson/cJSON.h>, link -lcjson) --------------
 *
 * Reading: fl__json_parse builds a cJSON tree; walk it with cJSON's own API (child/next,
 * ->string for keys) and read values through the typed getters below, which check the
 * type and report "<src>: key '<name>' must be an integer" (or "is missing" when v is
 * NULL).  Numbers are doubles in cJSON: fl__json_int accepts only integral values of at
 * most 2^53 - 1 in magnitude (beyond that a double may not be what the text said).
 * Writing: build a tree with cJSON, with fl__json_int_node for exact integers, and print
 * it with cJSON_Print*; fl__json_quote appends one string.
 * Thread safety: every function is safe to call from any thread on its own document. */
struct cJSON;

/* A parsed document.  Set src and bad before parsing; root is NULL until a parse succeeds. */
typedef struct {
    struct cJSON *root;
    const char *src; /* names the input in every message ("'<file>'", "strategy JSON"); not copied */
    int bad;         /* the status for malformed input: FL_EINVAL or FL_ECORRUPT */
} fl_json;

/* Parses text[0, len) (no NUL needed) as exactly one JSON value with only whitespace
 * around it.  The text's size is checked against max_len and a cheap upper bound of its
 * number of values against max_values before cJSON allocates.  Rejects invalid UTF-8,
 * raw control bytes and \u0000.  Errors are j->bad with "<src>: <what> at byte B (line L)". */
int fl__json_parse(fl_json *j, const char *text, size_t len, size_t max_len, size_t max_values);
void fl__json_free(fl_json *j);
/* Sets "<src>: <message>" and returns j->bad. */
int fl__json_fail(const fl_json *j, const char *fmt, ...) FL_PRINTF(2, 3);
/* Member `key` of obj, or NULL when absent or obj is not an object. */
const struct cJSON *fl__json_find(const struct cJSON *obj, const char *key);
/* Typed reads of v (NULL = missing); name is the key's path for messages ("a.b", "t[1].name"). */
int fl__json_obj(const fl_json *j, const struct cJSON *v, const char *name);
/* An array of at most max_items entries; *n receives the count. */
int fl__json_arr(const fl_json *j, const struct cJSON *v, const char *name, int max_items, int *n);
/* *out points into the tree (valid until fl__json_free). */
int fl__json_str(const fl_json *j, const struct cJSON *v, const char *name, const char **out);
int fl__json_bool(const fl_json *j, const struct cJSON *v, const char *name, int *out);
/* A finite number. */
int fl__json_num(const fl_json *j, const struct cJSON *v, const char *name, double *out);
/* An integer in [lo, hi] (and within +-(2^53 - 1)). */
int fl__json_int(const fl_json *j, const struct cJSON *v, const char *name, int64_t lo, int64_t hi, int64_t *out);

/* A cJSON node that prints v exactly (a raw number), or NULL when out of memory. */
struct cJSON *fl__json_int_node(int64_t v);
/* Appends s as a JSON string literal (quotes included) to b.  FL_EINVAL if s is not valid
 * UTF-8 (the message names s and the byte). */
int fl__json_quote(fl_buf *b, const char *s);
/* Reads the JSON string literal at text[*pos] (which must be '"'), looking no further than
 * len; on success *out is the malloc'ed value and *pos is just past the closing quote.
 * Bytes up to len must be UTF-8 without control bytes or \u0000.  On failure returns
 * FL_ECORRUPT (FL_ENOMEM) with a short reason in why, without setting the thread's error:
 * the caller names the file and line. */
int fl__json_unquote(const char *text, size_t len, size_t *pos, char **out, char *why, size_t why_cap);
/* Offset of the first byte of s[0, n) that is not part of valid UTF-8, or n. */
size_t fl__utf8_check(const char *s, size_t n);
#endif
