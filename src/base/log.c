/* log.c - one log sink with levels and a subsystem mask from the environment. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base_internal.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int log_level = FL_LOG_WARN;
static unsigned log_mask = FL_SUB_ALL;
static fl_log_fn log_sink;
static void *log_user;
static char log_role[16] = "local";
static int log_rank = 0;
static int log_identity_set;

static const char *const sub_names[] = {"base", "tensor", "graph", "exec", "io", "data", "net", "ps", "coll", "fleet"};

static void log_init(void)
{
    const char *lv, *sub;
    fl__env_str("FLEET_LOG_LEVEL", "warn", &lv);
    static const char *const lvn[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(lv, lvn[i])) log_level = i;
    fl__env_str("FLEET_LOG_SUBSYS", "all", &sub);
    if (strcmp(sub, "all") != 0) {
        int exclude = sub[0] == '^';
        unsigned m = 0;
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", sub + exclude);
        for (char *save, *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            for (int i = 0; i < 10; i++)
                if (!strcmp(tok, sub_names[i])) m |= 1u << i;
        log_mask = exclude ? (FL_SUB_ALL & ~m) : m;
    }
}

int fl__log_enabled(fl_log_level lvl, unsigned subsys)
{
    pthread_once(&log_once, log_init);
    return (int)lvl <= log_level && (subsys & log_mask);
}

void fl_log_set_sink(fl_log_fn fn, void *user)
{
    log_sink = fn;
    log_user = user;
}

void fl_log_set_identity(const char *role, int rank)
{
    snprintf(log_role, sizeof log_role, "%s", role ? role : "local");
    log_rank = rank;
    log_identity_set = 1;
}

int fl__log_rank(void) { return log_identity_set ? log_rank : -1; }

void fl__log(fl_log_level lvl, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    static const char lc[] = "EWIDT";
    char msg[1536];
    const char *sn = "?";
    for (int i = 0; i < 10; i++)
        if (subsys & (1u << i)) {
            sn = sub_names[i];
            break;
        }
    const char *base = strrchr(file, '/');
    int n = snprintf(msg, sizeof msg, "[fleet %c %s:%d pid %d %s %s:%d] ", lc[lvl], log_role, log_rank, (int)getpid(), sn,
                     base ? base + 1 : file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (log_sink) log_sink(lvl, msg, log_user);
    else fprintf(stderr, "%s\n", msg);
}
