/*
 * fleet-datagen - writes synthetic click logs in the Criteo layout that the ctr examples read
 * (reference section 7: label, I1..I13, C1..C26, tab-separated) from a planted logistic
 * model, and reports the ceiling AUC: the AUC of the model's true click probabilities
 * against the sampled labels, i.e. what a perfect model reaches on the same rows.
 *
 *   fleet-datagen criteo --rows N --out DIR [--files K] [--test-rows M] [--test-files J]
 *                        [--seed S]
 *
 * Output: DIR/train/part-00000.., DIR/test/part-00000.., DIR/planted.json.  Every byte
 * follows from the options: the model's weights are hashes of (seed, column, value), and
 * row i of a split draws from its own stream, hash(seed, split, i), so the same options give
 * identical files and --files only changes where the lines are cut.  Each file is written
 * to NAME.tmp and renamed, so a killed run never leaves a partial part file.
 * Exit status: 0 done, 1 I/O error (the path is named), 2 usage error.  See docs/datagen.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base_internal.h"

#define CLI_NAME "fleet-datagen"
#define CLI_HELP_HINT "(run 'fleet-datagen --help' for the options)"
#include "cli.h"

#define NI 13           /* dense columns I1..I13 */
#define NC 26           /* categorical columns C1..C26 */
#define ZIPF_S 1.1      /* frequency of the value of rank r is proportional to (r+1)^-ZIPF_S */
#define LOGIT_STD 1.3   /* std of the planted logit around its bias; sets the ceiling AUC */
#define CLICK_RATE 0.25 /* the bias is solved on a pilot sample to give this click rate */
#define PILOT_ROWS 65536
#define MAX_ROWS 10000000000LL
#define MAX_FILES 99999
#define OUT_BUF (1 << 20)
#define LINE_MAX_BYTES 1024 /* a line is at most 1 + 13*21 + 26*9 + 1 bytes */

/* Paddle's scaling of the dense columns: u = (x - min) / diff, empty -> 0, no clipping. */
static const double d_min[NI] = {0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
static const double d_diff[NI] = {20, 603, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50};
/* Counts are floor(exp(mu + sig*z)) - 1, clamped at 0 (medians roughly those of Criteo). */
static const double d_mu[NI] = {1.0, 1.8, 2.3, 1.8, 7.9, 3.6, 1.5, 2.3, 3.8, 0.5, 1.0, 0.2, 1.8};
static const double d_sig[NI] = {1.2, 1.8, 1.3, 0.9, 1.6, 1.5, 1.3, 0.9, 1.3, 0.6, 0.9, 1.0, 1.0};
static const double d_miss[NI] = {.40, 0, .20, .20, .03, .22, .04, .01, .04, .40, .04, .40, .20};
static const double d_share[NI] = {.5, .4, .3, .3, .4, .3, .5, .3, .4, .3, .5, .3, .4};
/* Vocabulary sizes (403,601 values in all), missing rates and relative logit shares. */
static const uint32_t c_vocab[NC] = {1000, 500,  200000, 20000, 300,  24,   4000, 600,   3,  10000, 3000,  60000, 2000,
                                     27,   5000, 40000,  10,    2500, 1500, 4,    30000, 18, 15,    15000, 100,   8000};
static const double c_miss[NC] = {0, 0, .03, .03, 0, .12, 0,   0,   0,   0, 0,   .03, 0,
                                  0, 0, .03, 0,   0, .40, .40, .03, .40, 0, .03, .40, .40};
static const double c_share[NC] = {.4, .3, .6, .5, .3, .4, .5, .3, .2, .5, .4, .5, .4,
                                   .3, .5, .5, .2, .4, .4, .2, .5, .3, .3, .5, .3, .4};

typedef struct {
    uint32_t n;            /* vocabulary size */
    uint32_t *thr, *alias; /* Vose alias table over the n values; rank 0 is the most frequent */
    double *w;             /* n + 1 logit terms; w[n] is the term of an empty field */
    uint32_t key0, key1;   /* keys of the bijection rank -> 8-hex-digit token */
} catcol;

typedef struct {
    catcol c[NC];
    double da[NI], db[NI], dc[NI]; /* dense term: da * u / (u + dc) + db */
    double bias;
} model;

typedef struct {
    uint64_t s;
} rng;

/* ---------------------------------------------------------------- errors */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) cli_die(1, "out of memory (%zu bytes)", n);
    return p;
}

static void usage(void)
{
    puts("usage: fleet-datagen criteo --rows N --out DIR [options]   (--name VALUE or --name=VALUE)\n"
         "Writes Criteo-format click logs (label, I1..I13, C1..C26; tab-separated) drawn from a\n"
         "planted logistic model, and the ceiling AUC a perfect model reaches on them.\n"
         "  --rows N         training rows (1..10000000000)\n"
         "  --out DIR        output directory: DIR/train/part-NNNNN, DIR/test/part-NNNNN,\n"
         "                   DIR/planted.json (created like mkdir -p)\n"
         "  --files K        training files, rows split evenly (default 1, at most 99999)\n"
         "  --test-rows M    test rows (default N/5)\n"
         "  --test-files J   test files (default 1)\n"
         "  --seed S         seed of the model and the rows (default 1, 0..2^64-1)\n"
         "  --vocab-scale X  multiply every column's vocabulary by X in (0, 1] (at least 2\n"
         "                   values per column; default 1 = 403,601 values).  Small scales\n"
         "                   let a short run see every value often and approach the ceiling\n"
         "  --dense-scale X  multiply the dense columns' share of the logit by X in [0, 1]\n"
         "                   (default 1).  Their terms are sharp functions of small scaled\n"
         "                   values, which an MLP learns slowly; 0.1 makes the ceiling\n"
         "                   reachable in a short run\n"
         "  --version        print the version and exit\n"
         "The same options give byte-identical files.  Exit: 0 ok, 1 I/O error, 2 usage.\n"
         "Also: fleet-datagen simnet --rows N --out DIR (query/positive/negative triples),\n"
         "fleet-datagen word2vec --sentences N --out DIR (a corpus with planted clusters and\n"
         "analogies), fleet-datagen images --out DIR (JPEG files of planted classes, class\n"
         "folders and train.txt/val.txt lists), fleet-datagen translation --sentences N --out\n"
         "DIR (a parallel corpus with a planted transduction) and fleet-datagen bert --lines N\n"
         "--out DIR (BERT pre-training lines from planted topics and word chains); their options\n"
         "are in docs/datagen.md, tools/datagen_text.h, tools/datagen_images.h,\n"
         "tools/datagen_translation.h and tools/datagen_bert.h.");
}

/* ---------------------------------------------------------------- random numbers */

static uint64_t fmix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
#define GOLDEN 0x9e3779b97f4a7c15ULL

/* A hash of three words: the key of every stream and every planted weight. */
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return fmix64(fmix64(fmix64(a + GOLDEN) + b + GOLDEN) + c + GOLDEN);
}

/* splitmix64: one stream per row, per pilot, per weight. */
static uint64_t rng_next(rng *g) { return fmix64(g->s += GOLDEN); }
static double rng_unif(rng *g) /* [0, 1) */ { return (double)(rng_next(g) >> 11) * 0x1p-53; }
static double rng_normal(rng *g) /* Box-Muller; one value per call */
{
    double u1 = 1.0 - rng_unif(g), u2 = rng_unif(g);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A bijection on 32 bits (xor-multiply-xorshift steps are invertible), so distinct ranks
 * of a column get distinct tokens. */
static uint32_t perm32(uint32_t x, uint32_t k0, uint32_t k1)
{
    x ^= k0;
    x ^= x >> 16, x *= 0x7feb352dU;
    x ^= x >> 15, x *= 0x846ca68bU;
    x ^= x >> 16;
    return x ^ k1;
}

/* ---------------------------------------------------------------- the planted model */

/* Vose's alias method over probabilities p[0..n-1] (summing to 1). */
static void alias_build(catcol *c, const double *p)
{
    uint32_t n = c->n, *small = xmalloc(n * sizeof *small), *large = xmalloc(n * sizeof *large);
    double *q = xmalloc(n * sizeof *q);
    uint32_t ns = 0, nl = 0;
    c->thr = xmalloc(n * sizeof *c->thr);
    c->alias = xmalloc(n * sizeof *c->alias);
    for (uint32_t i = 0; i < n; i++) {
        q[i] = p[i] * n;
        c->alias[i] = i;
        if (q[i] < 1.0) small[ns++] = i;
        else large[nl++] = i;
    }
    while (ns && nl) {
        uint32_t s = small[--ns], l = large[nl - 1];
        c->thr[s] = (uint32_t)(q[s] * 4294967296.0);
        c->alias[s] = l;
        q[l] -= 1.0 - q[s];
        if (q[l] < 1.0) nl--, small[ns++] = l;
    }
    while (nl) c->thr[large[--nl]] = UINT32_MAX;
    while (ns) c->thr[small[--ns]] = UINT32_MAX; /* left over by rounding: keep itself */
    free(small), free(large), free(q);
}

static uint32_t alias_draw(const catcol *c, rng *g)
{
    uint64_t r = rng_next(g);
    uint32_t i = (uint32_t)(((r >> 32) * c->n) >> 32);
    return (uint32_t)r < c->thr[i] ? i : c->alias[i];
}

/* One I column: 0 for an empty field, else 1 and the integer value in *x. */
static int dense_draw(rng *g, int j, long long *x)
{
    if (rng_unif(g) < d_miss[j]) return 0;
    if (j == 1) { /* I2 may be negative, down to -3 */
        double u = rng_unif(g);
        if (u < 0.06) {
            *x = u < 0.05 ? -1 : u < 0.055 ? -2 : -3;
            return 1;
        }
    }
    double v = exp(d_mu[j] + d_sig[j] * rng_normal(g));
    *x = v > 1e12 ? 1000000000000LL : (long long)v - 1;
    if (*x < 0) *x = 0;
    return 1;
}

static char *put_int(char *w, long long x)
{
    char tmp[24];
    int n = 0;
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    if (x < 0) *w++ = '-';
    do tmp[n++] = (char)('0' + u % 10), u /= 10;
    while (u);
    while (n) *w++ = tmp[--n];
    return w;
}

/* Draws one row from g and returns its logit.  With o != NULL, writes the line from o[2]
 * on (o[0] is left for the label, o[1] is a tab) and sets *end past its newline. */
static double row_draw(const model *m, rng *g, char *o, char **end)
{
    static const char hex[] = "0123456789abcdef";
    double z = m->bias;
    char *w = o ? o + 1 : NULL;
    for (int j = 0; j < NI; j++) {
        long long x = 0;
        int has = dense_draw(g, j, &x);
        double u = has ? ((double)x - d_min[j]) / d_diff[j] : 0.0;
        z += m->da[j] * u / (u + m->dc[j]) + m->db[j];
        if (w) {
            *w++ = '\t';
            if (has) w = put_int(w, x);
        }
    }
    for (int k = 0; k < NC; k++) {
        const catcol *c = &m->c[k];
        int has = rng_unif(g) >= c_miss[k];
        uint32_t r = has ? alias_draw(c, g) : c->n;
        z += c->w[r];
        if (w) {
            *w++ = '\t';
            if (has) {
                uint32_t t = perm32(r, c->key0, c->key1);
                for (int s = 28; s >= 0; s -= 4) *w++ = hex[(t >> s) & 15];
            }
        }
    }
    if (w) *w++ = '\n', *end = w;
    return z;
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* Column k's vocabulary under --vocab-scale. */
static uint32_t vocab_of(int k, double vscale)
{
    double v = floor((double)c_vocab[k] * vscale + 0.5);
    uint32_t n = v < 2 ? 2 : (uint32_t)v;
    return n < c_vocab[k] ? n : c_vocab[k];
}

static void model_build(model *m, uint64_t seed, double vscale, double dscale)
{
    double rel = 0;
    for (int j = 0; j < NI; j++) rel += dscale * d_share[j] * dscale * d_share[j];
    for (int k = 0; k < NC; k++) rel += c_share[k] * c_share[k];
    double alpha = LOGIT_STD / sqrt(rel);
    memset(m, 0, sizeof *m);

    /* Categorical columns: Zipf frequencies, weights N(0,1) from hash(seed, column, rank),
     * then standardised so the column's term has mean 0 and std alpha*share under the data
     * distribution (empty fields included, with their own weight). */
    for (int k = 0; k < NC; k++) {
        catcol *c = &m->c[k];
        uint32_t n = c->n = vocab_of(k, vscale);
        double *p = xmalloc(n * sizeof *p), zs = 0;
        for (uint32_t r = 0; r < n; r++) zs += p[r] = pow((double)r + 1.0, -ZIPF_S);
        for (uint32_t r = 0; r < n; r++) p[r] /= zs;
        alias_build(c, p);
        c->w = xmalloc((n + 1) * sizeof *c->w);
        double mean = 0, sq = 0;
        for (uint32_t r = 0; r <= n; r++) {
            rng g = {hash3(seed, 1000 + (uint64_t)k, r)};
            double w = c->w[r] = rng_normal(&g), q = r < n ? (1.0 - c_miss[k]) * p[r] : c_miss[k];
            mean += q * w, sq += q * w * w;
        }
        double var = sq - mean * mean, scale = var > 1e-12 ? alpha * c_share[k] / sqrt(var) : 0.0;
        for (uint32_t r = 0; r <= n; r++) c->w[r] = (c->w[r] - mean) * scale;
        uint64_t kk = hash3(seed, 2000 + (uint64_t)k, 0);
        c->key0 = (uint32_t)kk, c->key1 = (uint32_t)(kk >> 32);
        free(p);
    }

    /* Dense columns: the term is a saturating function of the scaled value, h = u/(u+c) with
     * c the column's median scaled value, signed by the seed and standardised on a pilot. */
    for (int j = 0; j < NI; j++) {
        m->dc[j] = (exp(d_mu[j]) - 1.0 - d_min[j]) / d_diff[j];
        rng g = {hash3(seed, 3000 + (uint64_t)j, 0)};
        double s1 = 0, s2 = 0;
        for (int i = 0; i < PILOT_ROWS; i++) {
            long long x = 0;
            double u = dense_draw(&g, j, &x) ? ((double)x - d_min[j]) / d_diff[j] : 0.0;
            double h = u / (u + m->dc[j]);
            s1 += h, s2 += h * h;
        }
        double mean = s1 / PILOT_ROWS, var = s2 / PILOT_ROWS - mean * mean;
        double sign = (hash3(seed, 4000 + (uint64_t)j, 0) & 1) ? 1.0 : -1.0;
        m->da[j] = var > 1e-12 ? sign * alpha * dscale * d_share[j] / sqrt(var) : 0.0;
        m->db[j] = -m->da[j] * mean;
    }

    /* The bias: bisection on a pilot sample so that the mean click probability is CLICK_RATE. */
    double *z = xmalloc(PILOT_ROWS * sizeof *z), lo = -20, hi = 20;
    for (int i = 0; i < PILOT_ROWS; i++) {
        rng g = {hash3(seed, 2, (uint64_t)i)};
        z[i] = row_draw(m, &g, NULL, NULL);
    }
    for (int it = 0; it < 60; it++) {
        double b = 0.5 * (lo + hi), s = 0;
        for (int i = 0; i < PILOT_ROWS; i++) s += sigmoid(b + z[i]);
        if (s / PILOT_ROWS < CLICK_RATE) lo = b;
        else hi = b;
    }
    m->bias = 0.5 * (lo + hi);
    free(z);
}

static void model_free(model *m)
{
    for (int k = 0; k < NC; k++) free(m->c[k].thr), free(m->c[k].alias), free(m->c[k].w);
}

/* ---------------------------------------------------------------- exact AUC */

/* Keys are the bits of p (positive doubles order as integers) with the lowest bit replaced by
 * the label; keys >> 1 equal means a tie.  LSD radix sort, 16 bits a pass. */
static void keys_sort(uint64_t *a, int64_t n)
{
    uint64_t *b = xmalloc((size_t)n * sizeof *b);
    size_t *cnt = xmalloc(65536 * sizeof *cnt);
    for (int pass = 0; pass < 4; pass++) {
        int sh = 16 * pass;
        memset(cnt, 0, 65536 * sizeof *cnt);
        for (int64_t i = 0; i < n; i++) cnt[(a[i] >> sh) & 0xffff]++;
        if (n && cnt[(a[0] >> sh) & 0xffff] == (size_t)n) continue; /* one digit: in order */
        size_t sum = 0;
        for (int d = 0; d < 65536; d++) {
            size_t c = cnt[d];
            cnt[d] = sum, sum += c;
        }
        for (int64_t i = 0; i < n; i++) b[cnt[(a[i] >> sh) & 0xffff]++] = a[i];
        memcpy(a, b, (size_t)n * sizeof *a);
    }
    free(b), free(cnt);
}

/* The probability that a random positive scores above a random negative, ties counting
 * half; NAN when a class is absent. */
static double auc_exact(uint64_t *keys, int64_t n)
{
    keys_sort(keys, n);
    double neg_below = 0, num = 0, npos = 0, nneg = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        double pos = 0, neg = 0;
        for (; j < n && keys[j] >> 1 == keys[i] >> 1; j++) (keys[j] & 1) ? pos++ : neg++;
        num += pos * (neg_below + 0.5 * neg);
        neg_below += neg, npos += pos, nneg += neg;
        i = j;
    }
    return npos > 0 && nneg > 0 ? num / (npos * nneg) : NAN;
}

/* ---------------------------------------------------------------- files */

static void mkdirs(const char *path)
{
    char *p = strdup(path);
    if (!p) cli_die(1, "out of memory");
    for (char *s = p + 1;; s++) {
        int last = !*s;
        if (*s == '/' || last) {
            *s = 0;
            struct stat st;
            if (mkdir(p, 0755) && errno != EEXIST) cli_die(1, "cannot create directory %s: %s", p, strerror(errno));
            if (stat(p, &st) || !S_ISDIR(st.st_mode)) cli_die(1, "cannot create directory %s: not a directory", p);
            if (last) break;
            *s = '/';
        }
    }
    free(p);
}

static void write_all(int fd, const char *buf, size_t n, const char *path)
{
    while (n) {
        ssize_t k = write(fd, buf, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            unlink(path);
            cli_die(1, "cannot write %s: %s", path, strerror(e));
        }
        buf += k, n -= (size_t)k;
    }
}

static int open_tmp(const char *tmp)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) cli_die(1, "cannot create %s: %s", tmp, strerror(errno));
    return fd;
}

static void close_rename(int fd, const char *tmp, const char *path)
{
    if (close(fd)) {
        int e = errno;
        unlink(tmp);
        cli_die(1, "cannot write %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        cli_die(1, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
}

/* Removes part files a previous run left in dir: part-NNNNN with N >= files, and *.tmp. */
static int remove_stale(const char *dir, int files)
{
    DIR *d = opendir(dir);
    if (!d) cli_die(1, "cannot read directory %s: %s", dir, strerror(errno));
    int removed = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (strncmp(s, "part-", 5)) continue;
        char *end;
        long idx = strtol(s + 5, &end, 10);
        if (end - (s + 5) < 5 || s[5] < '0' || s[5] > '9') continue;
        if (!strcmp(end, ".tmp") || (!*end && idx >= files)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", dir, s);
            if (unlink(path) && errno != ENOENT) cli_die(1, "cannot remove %s: %s", path, strerror(errno));
            removed++;
        }
    }
    closedir(d);
    return removed;
}

/* Writes rows [0, rows) of a split into files part files under dir; keys[i] gets row i's
 * AUC key.  Returns the number of positive labels. */
static int64_t split_write(const model *m, uint64_t seed, int split, const char *dir, int64_t rows, int files,
                           uint64_t *keys)
{
    char *buf = xmalloc(OUT_BUF), path[4096], tmp[4100];
    int64_t pos = 0;
    for (int f = 0; f < files; f++) {
        int64_t r0 = rows * f / files, r1 = rows * (f + 1) / files;
        snprintf(path, sizeof path, "%s/part-%05d", dir, f);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        int fd = open_tmp(tmp);
        size_t len = 0;
        uint64_t stream = hash3(seed, (uint64_t)split, 0);
        for (int64_t i = r0; i < r1; i++) {
            rng g = {fmix64(stream + (uint64_t)i * GOLDEN)};
            char *line = buf + len, *end = line;
            double p = sigmoid(row_draw(m, &g, line, &end));
            int label = rng_unif(&g) < p;
            line[0] = (char)('0' + label);
            pos += label;
            uint64_t bits;
            memcpy(&bits, &p, sizeof bits);
            keys[i] = (bits & ~1ULL) | (uint64_t)label;
            len = (size_t)(end - buf);
            if (len > OUT_BUF - LINE_MAX_BYTES) write_all(fd, buf, len, tmp), len = 0;
        }
        write_all(fd, buf, len, tmp);
        close_rename(fd, tmp, path);
    }
    free(buf);
    return pos;
}

/* ---------------------------------------------------------------- options, main */

static uint64_t parse_num(const char *opt, const char *v, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno || x < lo || x > hi)
        cli_die(2, "%s expects a whole number from %llu to %llu, got '%s'", opt, (unsigned long long)lo,
                (unsigned long long)hi, v);
    return x;
}

static void fmt_num(char *s, size_t n, double a, int digits, const char *none)
{
    if (isnan(a)) snprintf(s, n, "%s", none);
    else snprintf(s, n, "%.*f", digits, a);
}

/* One option of a subcommand: --name VALUE stored in dst, checked against [lo, hi] ('r',
 * or (lo, hi] with 'R'), a whole number for 'i' (int64_t), 'n' (int) and 'u' (uint64_t),
 * a non-empty directory for 's' (const char *). */
typedef struct {
    const char *name;
    char kind;
    void *dst;
    double lo, hi;
} dg_opt;

static double parse_real(const char *opt, const char *v, double lo, double hi, int open_lo)
{
    char *end = NULL;
    double x = strtod(v, &end);
    if (!*v || *end || !((open_lo ? x > lo : x >= lo) && x <= hi))
        cli_die(2, "%s expects a number in %c%g, %g], got '%s'", opt, open_lo ? '(' : '[', lo, hi, v);
    return x;
}

/* Reads argv[2..] against opts[0..n); an unknown option or argument names itself and the
 * subcommand's options (`list`). */
static void dg_parse(int argc, char **argv, const dg_opt *opts, int n, const char *list)
{
    struct option longopts[24];
    if (n >= (int)(sizeof longopts / sizeof longopts[0])) cli_die(1, "internal: too many options");
    for (int i = 0; i < n; i++) longopts[i] = (struct option){opts[i].name, required_argument, NULL, i};
    longopts[n] = (struct option){0};
    char name[64];
    const char *v;
    cli_begin(2);
    for (;;) {
        int k = cli_next(argc, argv, "", longopts, name, &v);
        if (k == -1 && !name[0] && optind >= argc) return; /* all read */
        /* "--" (name is "--") or an argument that is not an option: unknown too */
        if (k == -1 && !name[0]) snprintf(name, sizeof name, "%.63s", argv[optind]);
        if (k < 0 || k >= n) cli_die(2, "unknown option '%s' (%s)", name, list);
        const dg_opt *o = &opts[k];
        switch (o->kind) {
        case 'i': *(int64_t *)o->dst = (int64_t)parse_num(name, v, (uint64_t)o->lo, (uint64_t)o->hi); break;
        case 'n': *(int *)o->dst = (int)parse_num(name, v, (uint64_t)o->lo, (uint64_t)o->hi); break;
        case 'u': *(uint64_t *)o->dst = parse_num(name, v, 0, UINT64_MAX); break;
        case 's':
            if (!*v) cli_die(2, "%s expects a directory, got an empty string", name);
            *(const char **)o->dst = v;
            break;
        default: *(double *)o->dst = parse_real(name, v, o->lo, o->hi, o->kind == 'R'); break;
        }
    }
}

#include "datagen_text.h"        /* the simnet and word2vec subcommands */
#include "datagen_images.h"      /* the images subcommand */
#include "datagen_translation.h" /* the translation subcommand */
#include "datagen_bert.h"        /* the bert subcommand */

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(), 0;
        if (!strcmp(argv[i], "--version")) return printf("fleet-datagen %s\n", fl_version()), 0;
    }
    if (argc < 2) cli_die(2, "missing the subcommand (fleet-datagen criteo --rows N --out DIR ...)");
    if (!strcmp(argv[1], "simnet")) return datagen_simnet(argc, argv);
    if (!strcmp(argv[1], "word2vec")) return datagen_word2vec(argc, argv);
    if (!strcmp(argv[1], "images")) return datagen_images(argc, argv);
    if (!strcmp(argv[1], "translation")) return datagen_translation(argc, argv);
    if (!strcmp(argv[1], "bert")) return datagen_bert(argc, argv);
    if (strcmp(argv[1], "criteo"))
        cli_die(2, "unknown subcommand '%s' (expected: criteo, simnet, word2vec, images, translation or bert)", argv[1]);

    int64_t rows = -1, test_rows = -1;
    int files = 1, test_files = 1;
    uint64_t seed = 1;
    double vscale = 1.0, dscale = 1.0;
    const char *out = NULL;
    const dg_opt opts[] = {{"rows", 'i', &rows, 1, MAX_ROWS},
                           {"files", 'n', &files, 1, MAX_FILES},
                           {"out", 's', &out, 0, 0},
                           {"test-rows", 'i', &test_rows, 0, MAX_ROWS},
                           {"test-files", 'n', &test_files, 1, MAX_FILES},
                           {"seed", 'u', &seed, 0, 0},
                           {"vocab-scale", 'R', &vscale, 0, 1},
                           {"dense-scale", 'r', &dscale, 0, 1}};
    dg_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]),
             "options: --rows N --out DIR --files K --test-rows M --test-files J --seed S --vocab-scale X "
             "--dense-scale X");
    if (rows < 0) cli_die(2, "--rows N is required (the number of training rows)");
    if (!out) cli_die(2, "--out DIR is required (the output directory)");
    if (test_rows < 0) test_rows = rows / 5;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t olen = strlen(out) + 32;
    char *train_dir = xmalloc(olen), *test_dir = xmalloc(olen), *json = xmalloc(olen), *json_tmp = xmalloc(olen);
    snprintf(train_dir, olen, "%s/train", out);
    snprintf(test_dir, olen, "%s/test", out);
    snprintf(json, olen, "%s/planted.json", out);
    snprintf(json_tmp, olen, "%s/planted.json.tmp", out);
    mkdirs(train_dir);
    mkdirs(test_dir);

    model m;
    model_build(&m, seed, vscale, dscale);
    uint64_t vocab = 0;
    for (int k = 0; k < NC; k++) vocab += m.c[k].n;

    uint64_t *keys = xmalloc((size_t)(rows > test_rows ? rows : test_rows) * sizeof *keys);
    int64_t pos = split_write(&m, seed, 0, train_dir, rows, files, keys);
    double auc_train = auc_exact(keys, rows);
    int64_t tpos = split_write(&m, seed, 1, test_dir, test_rows, test_files, keys);
    double auc_test = auc_exact(keys, test_rows);
    free(keys);
    int stale = remove_stale(train_dir, files) + remove_stale(test_dir, test_files);

    double rate = (double)pos / (double)rows, trate = test_rows ? (double)tpos / (double)test_rows : NAN;
    char a_tr[32], a_te[32], r_te[32];
    fmt_num(a_tr, sizeof a_tr, auc_train, 6, "null");
    fmt_num(a_te, sizeof a_te, auc_test, 6, "null");
    fmt_num(r_te, sizeof r_te, trate, 6, "null");
    char j[1024];
    int jn = snprintf(j, sizeof j,
                      "{\"format\":\"criteo\",\"rows\":%lld,\"test_rows\":%lld,\"files\":%d,\"test_files\":%d,"
                      "\"seed\":%llu,\"click_rate\":%.6f,\"click_rate_test\":%s,\"ceiling_auc_train\":%s,"
                      "\"ceiling_auc_test\":%s,\"bias\":%.6f,\"logit_std\":%g,\"zipf_exponent\":%g,"
                      "\"categorical_values\":%llu,\"vocab_scale\":%g,\"dense_scale\":%g}\n",
                      (long long)rows, (long long)test_rows, files, test_files, (unsigned long long)seed, rate, r_te, a_tr,
                      a_te, m.bias, LOGIT_STD, ZIPF_S, (unsigned long long)vocab, vscale, dscale);
    int fd = open_tmp(json_tmp);
    write_all(fd, j, (size_t)jn, json_tmp);
    close_rename(fd, json_tmp, json);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    fmt_num(a_tr, sizeof a_tr, auc_train, 4, "n/a");
    fmt_num(a_te, sizeof a_te, auc_test, 4, "n/a");
    fmt_num(r_te, sizeof r_te, trate, 4, "n/a");
    printf("fleet-datagen criteo: seed %llu, %llu categorical values, bias %.4f\n", (unsigned long long)seed,
           (unsigned long long)vocab, m.bias);
    printf("  train %10lld rows %5d file%s  click rate %.4f  ceiling AUC %s  -> %s\n", (long long)rows, files,
           files == 1 ? " " : "s", rate, a_tr, train_dir);
    printf("  test  %10lld rows %5d file%s  click rate %s  ceiling AUC %s  -> %s\n", (long long)test_rows, test_files,
           test_files == 1 ? " " : "s", r_te, a_te, test_dir);
    printf("  model %s%s (%.2f s)\n", json, stale ? ", stale part files removed" : "",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    model_free(&m);
    free(train_dir), free(test_dir), free(json), free(json_tmp);
    return 0;
}
