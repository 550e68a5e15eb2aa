/*
 * profile.c - time per op type, for finding where a training step goes.
 *
 * FLEET_PROFILE_OPS=1: the executor times every kernel it runs (two clock reads per op) and
 * adds the time to its op type's row; at process exit the rows go to stderr, most time
 * first: "profile: TYPE calls N ms T share%".  Off (the default) it costs one load and
 * branch per op.  Rows of all executors and threads of the process add up (atomics).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_internal.h"

#define ROWS 256

static struct {
    pthread_once_t once;
    int on;
    pthread_mutex_t mu; /* guards adding a row */
    atomic_int n;
    const char *type[ROWS];
    atomic_uint_fast64_t ns[ROWS], calls[ROWS];
} prof = {PTHREAD_ONCE_INIT, 0, PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}, {0}};

static int by_time(const void *a, const void *b)
{
    uint64_t x = atomic_load(&prof.ns[*(const int *)a]), y = atomic_load(&prof.ns[*(const int *)b]);
    return (x < y) - (x > y);
}

static void prof_report(void)
{
    int n = atomic_load(&prof.n), idx[ROWS];
    double total = 0;
    for (int i = 0; i < n; i++) idx[i] = i, total += (double)atomic_load(&prof.ns[i]);
    qsort(idx, (size_t)n, sizeof idx[0], by_time);
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        double ms = (double)atomic_load(&prof.ns[i]) / 1e6;
        fprintf(stderr, "profile: %-28s calls %8llu ms %10.1f %5.1f%%\n", prof.type[i],
                (unsigned long long)atomic_load(&prof.calls[i]), ms, total > 0 ? 100.0 * ms * 1e6 / total : 0.0);
    }
    fprintf(stderr, "profile: %-28s ms %10.1f\n", "all ops", total / 1e6);
}

static void prof_init(void)
{
    int64_t on = 0;
    if (fl__env_int("FLEET_PROFILE_OPS", 0, 0, 1, &on) != FL_OK) {
        FL_WARN(FL_SUB_EXEC, "%s; profiling off", fl_last_error());
        on = 0;
    }
    prof.on = (int)on;
    if (on) atexit(prof_report);
}

int fl__prof_on(void)
{
    pthread_once(&prof.once, prof_init);
    return prof.on;
}

void fl__prof_add(const char *type, uint64_t ns)
{
    int n = atomic_load(&prof.n);
    for (int i = 0; i < n; i++)
        if (prof.type[i] == type || !strcmp(prof.type[i], type)) {
            atomic_fetch_add(&prof.ns[i], ns);
            atomic_fetch_add(&prof.calls[i], 1);
            return;
        }
    pthread_mutex_lock(&prof.mu);
    n = atomic_load(&prof.n);
    int i = 0;
    while (i < n && strcmp(prof.type[i], type) != 0) i++;
    if (i == n && n < ROWS) {
        prof.type[n] = type; /* op type names are static strings of the op table */
        atomic_store(&prof.n, n + 1);
    }
    pthread_mutex_unlock(&prof.mu);
    if (i < ROWS) {
        atomic_fetch_add(&prof.ns[i], ns);
        atomic_fetch_add(&prof.calls[i], 1);
    }
}
