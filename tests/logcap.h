/*
 * logcap.h - the library's log lines captured in a test (test_dataset, test_trainer):
 * after fl_log_set_sink(log_sink, NULL) each line is appended to log_text as "L line\n" (L:
 * E, W, I, D or T), up to 16 KiB; `log_text[0] = 0` empties it.  Include after testhelp.h.
 */
#ifndef FLEET_TESTS_LOGCAP_H
#define FLEET_TESTS_LOGCAP_H

#include <pthread.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

static void log_sink(fl_log_level lvl, const char *line, void *user)
{
    (void)user;
    pthread_mutex_lock(&log_mu);
    size_t o = strlen(log_text);
    snprintf(log_text + o, sizeof log_text - o, "%c %s\n", "EWIDT"[lvl], line);
    pthread_mutex_unlock(&log_mu);
}

/* How many times sub occurs in the captured lines. */
static int count_in_log(const char *sub) { return th_count(log_text, sub); }

#endif
