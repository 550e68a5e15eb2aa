/*
 * metrics.c - the metrics writer (include/fleet/metrics.h): the table of formats, the CSV
 * format, the rank and directory of a writer, and the executor's writer.
 *
 * A writer holds one sink per format listed in fl_metrics_opts.formats and hands every
 * scalar to each (the formats table below; tfevents.c is the TensorBoard row).  The first
 * write error of a writer is kept and returned by every later call and by close.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "exec_internal.h"
#include "metrics_internal.h"

#define FL_METRICS_MAGIC 0x4d455452u /* "METR" */
#define MAX_FORMATS 4

/* The formats, by the name fl_metrics_opts.formats uses (see metrics_internal.h to add one). */
static const fl__metrics_format *const formats[] = {&fl__metrics_csv, &fl__metrics_tfevents, NULL};

struct fl_metrics {
    uint32_t magic;
    char *dir;
    int rank;
    int n;
    const fl__metrics_format *fmt[MAX_FORMATS];
    void *sink[MAX_FORMATS];
    int err;
};

/* ---- the CSV format: <dir>/metrics.rank<R>.csv ------------------------------------------- */

typedef struct {
    FILE *f;
    char path[4096];
    int err;
} csvw;

static int csv_fail(csvw *w)
{
    if (!w->err) w->err = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
    return w->err;
}

static int csv_open(void **sink, const char *dir, int rank)
{
    csvw *w = calloc(1, sizeof *w);
    if (!w) return fl__err(FL_ENOMEM, "metrics: out of memory");
    if (snprintf(w->path, sizeof w->path, "%s/metrics.rank%d.csv", dir, rank) >= (int)sizeof w->path) {
        free(w);
        return fl__err(FL_EINVAL, "metrics: directory name too long: %.100s...", dir);
    }
    w->f = fopen(w->path, "a");
    if (!w->f) {
        int st = fl__err(FL_EIO, "metrics: cannot open %s: %s", w->path, strerror(errno));
        free(w);
        return st;
    }
    /* a file that exists goes on (a restarted job); a new one gets the header */
    if (ftell(w->f) == 0 && (fputs("wall_time,rank,epoch,step,tag,value\n", w->f) < 0 || fflush(w->f) != 0)) {
        int st = csv_fail(w);
        fclose(w->f);
        free(w);
        return st;
    }
    *sink = w;
    return FL_OK;
}

static int csv_write(void *sink, const fl__metric *m)
{
    csvw *w = sink;
    if (w->err) return w->err;
    if (fprintf(w->f, "%.3f,%d,%d,%lld,%s,%.9g\n", m->wall_time, m->rank, m->epoch, (long long)m->step, m->tag, m->value) <
        0)
        return csv_fail(w);
    return FL_OK;
}

static int csv_flush(void *sink)
{
    csvw *w = sink;
    if (fflush(w->f) != 0) return csv_fail(w);
    return w->err;
}

static int csv_close(void *sink)
{
    csvw *w = sink;
    int st = w->err;
    if (fclose(w->f) != 0 && !st) st = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
    free(w);
    return st;
}

static const char *csv_path(const void *sink) { return ((const csvw *)sink)->path; }

const fl__metrics_format fl__metrics_csv = {"csv", csv_open, csv_write, csv_flush, csv_close, csv_path};

/* ---- the writer ------------------------------------------------------------------------- */

fl_metrics_opts fl_metrics_opts_default(void) { return (fl_metrics_opts){-1, NULL}; }

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return fl__err(FL_EINVAL, "metrics: directory name too long");
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = 0;
        struct stat sb;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return fl__err(FL_EIO, "metrics: cannot create the directory %s: %s", p, strerror(errno));
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return fl__err(FL_EIO, "metrics: %s is not a directory (metrics directory %s)", p, dir);
        if (!keep) break;
        *c = keep;
    }
    return FL_OK;
}

static int pick_rank(const fl_metrics_opts *o, int *rank)
{
    if (o->rank >= 0) {
        *rank = o->rank;
        return FL_OK;
    }
    *rank = fl__log_rank();
    if (*rank >= 0) return FL_OK;
    int64_t r;
    FL_CHECK(fl__env_int("PADDLE_TRAINER_ID", 0, 0, INT_MAX, &r));
    *rank = (int)r;
    return FL_OK;
}

/* Fills m->fmt from the comma list (NULL: all). */
static int pick_formats(fl_metrics *m, const char *list)
{
    if (!list) {
        for (int i = 0; formats[i] && m->n < MAX_FORMATS; i++) m->fmt[m->n++] = formats[i];
        return FL_OK;
    }
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, ",");
        int found = 0;
        for (int i = 0; formats[i]; i++)
            if (strlen(formats[i]->name) == len && !strncmp(formats[i]->name, s, len)) {
                for (int j = 0; j < m->n; j++) found |= m->fmt[j] == formats[i];
                if (!found) m->fmt[m->n++] = formats[i];
                found = 1;
            }
        if (!found)
            return fl__err(FL_EINVAL, "fl_metrics_open: unknown format '%.*s' in formats '%s' (expected csv, tensorboard)",
                           (int)len, s, list);
        s += len + (s[len] == ',');
    }
    if (!m->n) return fl__err(FL_EINVAL, "fl_metrics_open: formats is empty (expected csv, tensorboard or both)");
    return FL_OK;
}

fl_metrics *fl_metrics_open(const char *dir, const fl_metrics_opts *opts)
{
    fl_metrics_opts o = opts ? *opts : fl_metrics_opts_default();
    if (!dir || !*dir) {
        fl__err(FL_EINVAL, "fl_metrics_open: dir is NULL or empty");
        return NULL;
    }
    fl_metrics *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = fl__strdup(dir))) {
        free(m);
        fl__err(FL_ENOMEM, "fl_metrics_open: out of memory");
        return NULL;
    }
    m->magic = FL_METRICS_MAGIC;
    int st = pick_rank(&o, &m->rank);
    if (st == FL_OK) st = pick_formats(m, o.formats);
    if (st == FL_OK) st = make_dirs(dir);
    for (int i = 0; st == FL_OK && i < m->n; i++) st = m->fmt[i]->open(&m->sink[i], dir, m->rank);
    if (st != FL_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", fl_last_error());
        fl_metrics_close(m);
        fl__err(st, "%s", msg);
        return NULL;
    }
    return m;
}

int fl_metrics_open_env(fl_metrics **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_metrics_open_env: out is NULL");
    *out = NULL;
    const char *dir;
    fl__env_str("FLEET_METRICS_DIR", NULL, &dir);
    if (!dir) return FL_OK;
    *out = fl_metrics_open(dir, NULL);
    if (!*out) return fl__err(fl_last_status(), "FLEET_METRICS_DIR='%s': %s", dir, fl_last_error());
    return FL_OK;
}

static int check(const fl_metrics *m, const char *fn)
{
    if (!m || m->magic != FL_METRICS_MAGIC) return fl__err_handle(m, "%s: metrics writer is NULL or invalid", fn);
    return FL_OK;
}

int fl_metrics_close(fl_metrics *m)
{
    if (!m || m->magic != FL_METRICS_MAGIC) return FL_OK;
    int st = m->err;
    for (int i = 0; i < m->n; i++) {
        int r = m->sink[i] ? m->fmt[i]->close(m->sink[i]) : FL_OK;
        if (r && !st) st = r;
    }
    m->magic = 0;
    free(m->dir);
    free(m);
    return st;
}

static int valid_tag(const char *t)
{
    size_t n = 0;
    for (; t[n]; n++)
        if (!((t[n] >= 'a' && t[n] <= 'z') || (t[n] >= 'A' && t[n] <= 'Z') || (t[n] >= '0' && t[n] <= '9') ||
              strchr("_-./", t[n])))
            return 0;
    return n > 0 && n <= 128;
}

int fl_metrics_scalar(fl_metrics *m, const char *tag, int64_t step, int epoch, double value)
{
    static const char fn[] = "fl_metrics_scalar";
    FL_CHECK(check(m, fn));
    if (!tag || !valid_tag(tag))
        return fl__err(FL_EINVAL, "%s: tag '%s' must be 1 to 128 letters, digits, '_', '-', '.' or '/'", fn,
                       tag ? tag : "(null)");
    if (step < 0 || epoch < -1)
        return fl__err(FL_EINVAL, "%s: step (%lld) and epoch (%d) must be >= 0", fn, (long long)step, epoch);
    if (m->err) return m->err;
    fl__metric r = {fl__wall_time(), m->rank, epoch, step, tag, value};
    for (int i = 0; i < m->n; i++) {
        int st = m->fmt[i]->write(m->sink[i], &r);
        if (st) return m->err = st;
    }
    return FL_OK;
}

int fl_metrics_flush(fl_metrics *m)
{
    FL_CHECK(check(m, "fl_metrics_flush"));
    for (int i = 0; i < m->n && !m->err; i++) m->err = m->fmt[i]->flush(m->sink[i]);
    return m->err;
}

int fl_metrics_rank(const fl_metrics *m) { return check(m, "fl_metrics_rank") ? -1 : m->rank; }

const char *fl_metrics_dir(const fl_metrics *m) { return check(m, "fl_metrics_dir") ? NULL : m->dir; }

/* ---- the executor's writer ------------------------------------------------------------- */

void fl__exe_metrics_free(fl__exe_metrics *x)
{
    int st = fl_metrics_close(x->m);
    if (st) FL_WARN(FL_SUB_EXEC, "metrics: %s", fl_last_error());
    x->m = NULL;
}

int fl_exe_set_metrics(fl_exe *e, const char *dir, const fl_metrics_opts *opts)
{
    if (!fl_exe_scope(e)) return fl__err_handle(e, "fl_exe_set_metrics: executor is NULL or invalid");
    fl__exe_metrics *x = fl__exe_metrics_of(e);
    fl__exe_metrics_free(x);
    x->decided = 1;
    if (!dir) return FL_OK;
    x->m = fl_metrics_open(dir, opts);
    return x->m ? FL_OK : fl_last_status();
}

int fl_exe_get_metrics(fl_exe *e, fl_metrics **out)
{
    if (!out) return fl__err(FL_EINVAL, "fl_exe_get_metrics: out is NULL");
    *out = NULL;
    if (!fl_exe_scope(e)) return fl__err_handle(e, "fl_exe_get_metrics: executor is NULL or invalid");
    fl__exe_metrics *x = fl__exe_metrics_of(e);
    if (!x->decided) {
        FL_CHECK(fl_metrics_open_env(&x->m));
        x->decided = 1;
    }
    *out = x->m;
    return FL_OK;
}
