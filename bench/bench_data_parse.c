/*
 * bench_data_parse.c - data-line parsing speed: MB/s and lines/s per thread.
 *
 *   bench_data_parse [--mb N] [--seconds S] [--threads T] [--only ctr|dense|criteo] [--no-ref]
 *
 * Generates text in memory (deterministic): "ctr" MultiSlot lines (26 sparse uint64 slots of
 * 1-3 hashed ids, 13 dense floats, a label; Paddle's CTR-DNN layout), "dense" MultiSlot lines
 * (one 64-wide float slot, float-heavy), and Criteo lines (label, 13 ints, 26 hex fields).
 * Each is parsed alone (src/data/parse.c, one record arena reset every 1024 lines, as a
 * batch) by 1, 2, 4.. up to T threads, each thread over the whole text; ours and the
 * reference alternate in 3 rounds and the medians are printed.  The reference, timed in the same
 * run on the same text, is a Paddle-style parser: strtol for counts, strtoull / strtof for
 * values on a NUL-terminated line (MultiSlotDataFeed::ParseOneInstanceFromPipe), and for
 * Criteo the same column split with strtod and the same hash.  Last, the whole reading path
 * (temp file -> QueueDataset -> batches, and load_into_memory) on the ctr text.
 * Target: >= 200 MB/s per thread for the parser alone.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet.h"
#include "data/data_internal.h"

#define CLI_NAME "bench_data_parse"
#define CLI_HELP_HINT "usage: bench_data_parse [--mb N] [--seconds S] [--threads T] [--only ctr|dense|criteo] [--no-ref]"
#include "bench_args.h"

static double secs_target = 1.0;

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 11;
}

typedef struct {
    char *p;
    size_t len, lines;
} text;

static void put(text *t, size_t cap, const char *s, size_t n)
{
    if (t->len + n < cap) {
        memcpy(t->p + t->len, s, n);
        t->len += n;
    }
}

static text gen_ctr(size_t bytes)
{
    text t = {malloc(bytes + 4096), 0, 0};
    uint64_t s = 1;
    char line[2048];
    while (t.len + sizeof line < bytes) {
        int o = 0;
        for (int k = 0; k < 26; k++) {
            int n = 1 + (int)(rng(&s) % 3);
            o += sprintf(line + o, "%d", n);
            for (int j = 0; j < n; j++) o += sprintf(line + o, " %llu", (unsigned long long)(rng(&s) % 100000000000ULL));
            line[o++] = ' ';
        }
        o += sprintf(line + o, "13");
        for (int j = 0; j < 13; j++) o += sprintf(line + o, " %.4f", (double)(rng(&s) % 100000) / 1e4);
        o += sprintf(line + o, " 1 %d\n", (int)(rng(&s) % 2));
        put(&t, bytes + 4096, line, (size_t)o);
        t.lines++;
    }
    return t;
}

static text gen_dense(size_t bytes)
{
    text t = {malloc(bytes + 4096), 0, 0};
    uint64_t s = 2;
    char line[2048];
    while (t.len + sizeof line < bytes) {
        int o = sprintf(line, "64");
        for (int j = 0; j < 64; j++) o += sprintf(line + o, " %.6g", ((double)(rng(&s) % 2000000) - 1e6) / 3e4);
        line[o++] = '\n';
        put(&t, bytes + 4096, line, (size_t)o);
        t.lines++;
    }
    return t;
}

static text gen_criteo(size_t bytes)
{
    text t = {malloc(bytes + 4096), 0, 0};
    uint64_t s = 3;
    char line[1024];
    while (t.len + sizeof line < bytes) {
        int o = sprintf(line, "%d", (int)(rng(&s) % 2));
        for (int j = 0; j < 13; j++) {
            if (rng(&s) % 5 == 0) o += sprintf(line + o, "\t");
            else o += sprintf(line + o, "\t%d", (int)(rng(&s) % 3000) - (j == 1 ? 3 : 0));
        }
        for (int j = 0; j < 26; j++) {
            if (rng(&s) % 8 == 0) o += sprintf(line + o, "\t");
            else o += sprintf(line + o, "\t%08x", (unsigned)rng(&s));
        }
        line[o++] = '\n';
        put(&t, bytes + 4096, line, (size_t)o);
        t.lines++;
    }
    return t;
}

/* ---- slot layouts ---- */
static fl__slot ctr_slots[28], dense_slots[1], criteo_slots[28];
static char names[28][16];
static void setup_slots(void)
{
    for (int k = 0; k < 26; k++) {
        snprintf(names[k], sizeof names[k], "C%d", k + 1);
        ctr_slots[k] = (fl__slot){names[k], FL_INT64, 0, 1, 8};
        criteo_slots[k + 1] = (fl__slot){names[k], FL_INT64, 0, 1, 8};
    }
    ctr_slots[26] = (fl__slot){"dense_input", FL_FLOAT32, 1, 13, 4};
    ctr_slots[27] = (fl__slot){"label", FL_INT64, 1, 1, 8};
    dense_slots[0] = (fl__slot){"x", FL_FLOAT32, 0, 1, 4};
    criteo_slots[0] = (fl__slot){"dense_input", FL_FLOAT32, 1, 13, 4};
    criteo_slots[27] = (fl__slot){"label", FL_INT64, 1, 1, 8};
}

/* ---- reference: Paddle-style parsing with the C library ---- */
static int ref_multislot(const fl__slot *slots, int nslots, char *line, fl__arena *out)
{
    char *p = line, *end;
    for (int k = 0; k < nslots; k++) {
        long n = strtol(p, &end, 10);
        if (end == p || n <= 0) return -1;
        p = end;
        if (fl__arena_reserve(out, 4 + (size_t)n * 8)) return -1;
        char *w = out->p + out->len;
        if (!slots[k].dense) {
            uint32_t c = (uint32_t)n;
            memcpy(w, &c, 4);
            w += 4;
        }
        for (long j = 0; j < n; j++) {
            if (slots[k].dtype == FL_INT64) {
                uint64_t v = strtoull(p, &end, 10);
                memcpy(w, &v, 8);
                w += 8;
            } else {
                float v = strtof(p, &end);
                memcpy(w, &v, 4);
                w += 4;
            }
            if (end == p) return -1;
            p = end;
        }
        out->len = (size_t)(w - out->p);
    }
    return 0;
}

static int ref_criteo(char *line, fl__arena *out)
{
    char *col[40];
    int n = 0;
    for (char *p = line;;) {
        if (n < 40) col[n] = p;
        n++;
        char *q = strchr(p, '\t');
        if (!q) break;
        *q = 0;
        p = q + 1;
    }
    if (n != 40 || fl__arena_reserve(out, 13 * 4 + 26 * 12 + 8)) return -1;
    char *w = out->p + out->len;
    for (int i = 0; i < 13; i++) {
        float v = col[1 + i][0] ? (float)((strtod(col[1 + i], NULL) - fl__criteo_min[i]) / fl__criteo_diff[i]) : 0.0f;
        memcpy(w, &v, 4);
        w += 4;
    }
    for (int i = 0; i < 26; i++) {
        uint32_t one = 1;
        uint64_t id = fl_data_criteo_id(i + 1, col[14 + i], strlen(col[14 + i]), 1000001);
        memcpy(w, &one, 4);
        memcpy(w + 4, &id, 8);
        w += 12;
    }
    int64_t label = strtol(col[0], NULL, 10);
    memcpy(w, &label, 8);
    out->len = (size_t)(w + 8 - out->p);
    return 0;
}

/* ---- timing ---- */
typedef struct {
    const text *t;
    const fl__parser *ps;
    int ref;
    double seconds;
    size_t bytes, lines;
    int failed;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    fl__arena a = {0};
    char *copy = j->ref ? malloc(1 << 16) : NULL;
    double t0 = fl__now(), t;
    do {
        const char *p = j->t->p, *e = p + j->t->len;
        int64_t ln = 0;
        while (p < e) {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            size_t len = (size_t)(nl - p);
            if ((++ln & 1023) == 0) a.len = 0;
            int st;
            if (!j->ref) {
                st = fl__parse_line(j->ps, p, len, ln, &a);
            } else {
                memcpy(copy, p, len); /* getline-style: the line as a C string */
                copy[len] = 0;
                st = j->ps->fmt == FL__FMT_CRITEO ? ref_criteo(copy, &a)
                                                  : ref_multislot(j->ps->slots, j->ps->nslots, copy, &a);
            }
            if (st) {
                j->failed = 1;
                fprintf(stderr, "parse failed: %s\n", fl_last_error());
                goto out;
            }
            p = nl + 1;
        }
        j->bytes += j->t->len;
        j->lines += j->t->lines;
        t = fl__now();
    } while (t - t0 < secs_target);
    j->seconds = t - t0;
out:
    free(copy);
    fl__arena_free(&a);
    return NULL;
}

/* Returns MB/s per thread (mean over threads), lines/s per thread in *lps. */
static double measure(const text *t, const fl__parser *ps, int ref, int nthreads, double *lps)
{
    pthread_t th[64];
    job j[64];
    for (int i = 0; i < nthreads; i++) {
        j[i] = (job){t, ps, ref, 0, 0, 0, 0};
        pthread_create(&th[i], NULL, run_job, &j[i]);
    }
    double mb = 0, l = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        if (j[i].failed) exit(1);
        mb += (double)j[i].bytes / 1e6 / j[i].seconds;
        l += (double)j[i].lines / j[i].seconds;
    }
    *lps = l / nthreads;
    return mb / nthreads;
}

static double median3(const double *v)
{
    double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* ---- the whole reading path on a temp file ---- */
static void end_to_end(const text *t, int nthreads)
{
    char dir[] = "/tmp/fl_bench_dataXXXXXX";
    if (!mkdtemp(dir)) return;
    char path[4][128];
    const char *files[4];
    for (int f = 0; f < 4; f++) { /* 4 files, a quarter of the lines each */
        snprintf(path[f], sizeof path[f], "%s/part-%d", dir, f);
        files[f] = path[f];
        FILE *fp = fopen(path[f], "w");
        size_t q = t->len / 4, from = f * q, to = f == 3 ? t->len : (f + 1) * q;
        while (from > 0 && from < t->len && t->p[from - 1] != '\n') from++;
        while (to < t->len && t->p[to - 1] != '\n') to++;
        fwrite(t->p + from, 1, to - from, fp);
        fclose(fp);
    }
    fl_prog *prog = fl_prog_create();
    fl_var *v[28];
    int64_t one = 1, thirteen = 13;
    for (int k = 0; k < 26; k++) v[k] = fl_layer_data(prog, names[k], 1, &one, FL_INT64, 1);
    v[26] = fl_layer_data(prog, "dense_input", 1, &thirteen, FL_FLOAT32, 0);
    v[27] = fl_layer_data(prog, "label", 1, &one, FL_INT64, 0);
    for (int kind = 0; kind < 2; kind++) {
        fl_dataset *ds = fl_dataset_create(kind ? "InMemoryDataset" : "QueueDataset");
        fl_dataset_set_use_var(ds, v, 28);
        fl_dataset_set_filelist(ds, files, 4);
        fl_dataset_set_batch_size(ds, 512);
        fl_dataset_set_thread(ds, nthreads);
        double t0 = fl__now(), tl = 0;
        if (kind) {
            if (fl_dataset_load_into_memory(ds)) {
                fprintf(stderr, "load failed: %s\n", fl_last_error());
                exit(1);
            }
            tl = fl__now() - t0;
        }
        fl_data_batch *b = fl_data_batch_create(ds);
        int64_t inst = 0;
        fl_dataset_begin(ds);
        for (int th = 0; th < fl_dataset_thread_num(ds); th++) /* one OS thread: per-thread rate */
            while (fl_dataset_next(ds, th, b) > 0) inst += fl_data_batch_size(b);
        if (fl_dataset_end(ds)) {
            fprintf(stderr, "pass failed: %s\n", fl_last_error());
            exit(1);
        }
        double dt = fl__now() - t0;
        if (kind)
            printf("| InMemoryDataset load_into_memory, %d threads | %.0f total, %.0f per thread | %.2f total | "
                   "then batches from memory at %.2f M instances/s |\n",
                   fl_dataset_thread_num(ds), (double)t->len / 1e6 / tl,
                   (double)t->len / 1e6 / tl / fl_dataset_thread_num(ds), (double)inst / 1e6 / tl,
                   (double)inst / 1e6 / (dt - tl));
        else
            printf("| QueueDataset file -> batches of 512, 1 thread | %.0f | %.2f | |\n", (double)t->len / 1e6 / dt,
                   (double)inst / 1e6 / dt);
        if (inst != (int64_t)t->lines) {
            fprintf(stderr, "read %lld instances, expected %zu\n", (long long)inst, t->lines);
            exit(1);
        }
        fl_data_batch_free(b);
        fl_dataset_free(ds);
    }
    fl_prog_free(prog);
    for (int f = 0; f < 4; f++) unlink(path[f]);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    size_t mb = 32;
    int maxt = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (maxt > 4) maxt = 4;
    const char *only = NULL;
    int noref = 0;
    int mb_arg = (int)mb;
    const bench_opt opts[] = {{"mb", BA_INT, &mb_arg},
                              {"seconds", BA_DOUBLE, &secs_target},
                              {"threads", BA_INT, &maxt},
                              {"only", BA_STR, &only},
                              {"no-ref", BA_FLAG, &noref}};
    bench_args(argc, argv, 1, opts, BA_COUNT(opts), NULL, NULL);
    if (mb_arg < 1 || !(secs_target > 0)) cli_die(2, "--mb and --seconds must be positive");
    mb = (size_t)mb_arg;
    if (maxt < 1) maxt = 1;
    if (maxt > 64) maxt = 64;
    setup_slots();
    text tx[3] = {gen_ctr(mb << 20), gen_dense(mb << 20), gen_criteo(mb << 20)};
    fl__parser ps[3] = {{ctr_slots, 28, FL__FMT_MULTISLOT, 0, "ctr"},
                        {dense_slots, 1, FL__FMT_MULTISLOT, 0, "dense"},
                        {criteo_slots, 28, FL__FMT_CRITEO, 1000001, "criteo"}};
    const char *label[3] = {"MultiSlot ctr (26 sparse + 13 dense)", "MultiSlot dense (64 floats)", "Criteo (40 columns)"};
    printf("# data-line parsing, %zu MB of text per format, %.1f s per measurement, ours vs Paddle-style strto*\n", mb,
           secs_target);
    printf(
        "| format | bytes/line | threads | ours MB/s/thread | ours M lines/s/thread | strto* MB/s/thread | ratio | target 200 MB/s |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    static const char *const keys[3] = {"ctr", "dense", "criteo"};
    for (int f = 0; f < 3; f++) {
        if (only && strcmp(only, keys[f])) continue;
        for (int t = 1; t <= maxt; t *= 2) {
            /* 3 interleaved rounds (ours, reference, ours, ...); medians */
            double o[3], ol[3], r[3] = {0}, rl[3] = {0}, keep = secs_target;
            secs_target = keep / 3;
            for (int k = 0; k < 3; k++) {
                o[k] = measure(&tx[f], &ps[f], 0, t, &ol[k]);
                if (!noref) r[k] = measure(&tx[f], &ps[f], 1, t, &rl[k]);
            }
            secs_target = keep;
            double lo = median3(ol), ours = median3(o), ref = median3(r);
            printf("| %s | %.0f | %d | %.0f | %.2f | %.0f | %.2fx | %s |\n", label[f],
                   (double)tx[f].len / (double)tx[f].lines, t, ours, lo / 1e6, ref, ours / ref,
                   ours >= 200 ? "met" : "MISSED");
            fflush(stdout);
        }
    }
    if (!only) {
        printf("\n# whole reading path on the ctr text in 4 temp files\n");
        printf("| path | MB/s | M lines/s | |\n|---|---|---|---|\n");
        end_to_end(&tx[0], maxt);
    }
    for (int f = 0; f < 3; f++) free(tx[f].p);
    return 0;
}
