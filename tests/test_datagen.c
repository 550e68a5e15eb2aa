/*
 * test_datagen.c - runs the data generator (BUILD/tools/fleet-datagen, see
 * docs/datagen.md) in a temporary directory and checks: the same seed gives identical
 * bytes and another seed different ones, --files only changes where the lines are cut,
 * every line has the Criteo layout, the row and file counts, planted.json, the ceiling AUC,
 * stale part files, and the usage and I/O errors.
 */
#include "testhelp.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

static char DG[PATH_MAX];

typedef struct {
    char dir[64]; /* temporary directory */
    char *out;    /* the tool's stdout + stderr of the last run */
    int code;     /* its exit status, or -1 when it did not exit */
} env_t;

static void setup(env_t *e)
{
    char self[PATH_MAX - 64];
    th_tests_dir(self, sizeof self);
    snprintf(DG, sizeof DG, "%s/../tools/fleet-datagen", self);
    if (access(DG, X_OK)) TFAIL("%s is not built (make all)", DG);
    memset(e, 0, sizeof *e);
    th_mktemp(e->dir, sizeof e->dir, "dg_test.");
}

static void cleanup(env_t *e)
{
    free(e->out);
    th_rmtree(e->dir);
}

/* Reads a whole file; *len gets its size.  NULL when it cannot be opened. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *b = malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0)
        if ((n += k) + 1 == cap) b = realloc(b, cap *= 2);
    fclose(f);
    if (b) b[n] = 0;
    if (len) *len = n;
    return b;
}

/* Runs the tool with args (NULL-terminated; "@T" in an argument becomes the temporary
 * directory); keeps its output in e->out and returns its exit status. */
static int run(env_t *e, const char *const *args)
{
    char *argv[32], buf[32][PATH_MAX], outp[PATH_MAX];
    int n = 0;
    argv[n++] = DG;
    for (; *args && n < 31; args++, n++) {
        const char *t = strstr(*args, "@T");
        if (t) snprintf(buf[n], PATH_MAX, "%.*s%s%s", (int)(t - *args), *args, e->dir, t + 2);
        else snprintf(buf[n], PATH_MAX, "%s", *args);
        argv[n] = buf[n];
    }
    argv[n] = NULL;
    snprintf(outp, sizeof outp, "%s/out.txt", e->dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1), dup2(fd, 2);
        execv(DG, argv);
        _exit(127);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) TFAIL("fork/wait failed");
    free(e->out);
    e->out = slurp(outp, NULL);
    if (!e->out) e->out = calloc(1, 1);
    return e->code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

#define RUN_OK(e, ...)                                                   \
    do {                                                                 \
        static const char *const a_[] = {__VA_ARGS__, NULL};             \
        int c_ = run(e, a_);                                             \
        if (c_ != 0) TFAIL("fleet-datagen exited %d: %s", c_, (e)->out); \
    } while (0)

static char *file_of(env_t *e, const char *rel, size_t *len)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", e->dir, rel);
    char *s = slurp(p, len);
    if (!s) TFAIL("cannot read %s", p);
    return s;
}

static int same_file(env_t *e, const char *a, const char *b)
{
    size_t na, nb;
    char *x = file_of(e, a, &na), *y = file_of(e, b, &nb);
    int same = na == nb && !memcmp(x, y, na);
    free(x), free(y);
    return same;
}

static int exists(env_t *e, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", e->dir, rel);
    return access(p, F_OK) == 0;
}

/* Checks every line of a part file; returns its rows and adds its positives and empty
 * fields (dense, categorical) to the counters. */
static long check_part(env_t *e, const char *rel, long *pos, long *empty_i, long *empty_c)
{
    size_t len;
    char *s = file_of(e, rel, &len), *p = s;
    long rows = 0;
    if (len && s[len - 1] != '\n') TFAIL("%s does not end with a newline", rel);
    while (p < s + len) {
        char *nl = strchr(p, '\n');
        *nl = 0;
        rows++;
        int col = 0;
        for (char *f = p;; col++) {
            char *t = strchr(f, '\t');
            size_t fl = t ? (size_t)(t - f) : strlen(f);
            if (col == 0) {
                if (fl != 1 || (f[0] != '0' && f[0] != '1')) TFAIL("%s:%ld: bad label '%.*s'", rel, rows, (int)fl, f);
                *pos += f[0] == '1';
            } else if (col <= 13) {
                if (!fl) (*empty_i)++;
                size_t k = f[0] == '-' && col == 2 ? 1 : 0;
                if (fl && k == fl) TFAIL("%s:%ld: I%d is '-'", rel, rows, col);
                for (; k < fl; k++)
                    if (!isdigit((unsigned char)f[k]))
                        TFAIL("%s:%ld: I%d '%.*s' is not an integer", rel, rows, col, (int)fl, f);
                if (col == 2 && fl && atol(f) < -3) TFAIL("%s:%ld: I2 %ld < -3", rel, rows, atol(f));
            } else {
                if (!fl) (*empty_c)++;
                if (fl && fl != 8) TFAIL("%s:%ld: C%d '%.*s' is not 8 hex digits", rel, rows, col - 13, (int)fl, f);
                for (size_t k = 0; k < fl; k++)
                    if (!isxdigit((unsigned char)f[k]) || isupper((unsigned char)f[k]))
                        TFAIL("%s:%ld: C%d '%.*s' is not lowercase hex", rel, rows, col - 13, (int)fl, f);
            }
            if (!t) break;
            f = t + 1;
        }
        if (col + 1 != 40) TFAIL("%s:%ld: %d columns, expected 40", rel, rows, col + 1);
        p = nl + 1;
    }
    free(s);
    return rows;
}

/* The number after "key": in a JSON text; NAN when absent or null. */
static double json_num(const char *j, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(j, k);
    if (!p) TFAIL("planted.json lacks %s: %s", key, j);
    p += strlen(k);
    if (!strncmp(p, "null", 4)) return NAN;
    return strtod(p, NULL);
}

TEST(same_seed_same_bytes)
{
    env_t e;
    setup(&e);
    RUN_OK(&e, "criteo", "--rows", "3000", "--files", "3", "--seed", "7", "--out", "@T/a");
    RUN_OK(&e, "criteo", "--rows=3000", "--files=3", "--seed=7", "--out=@T/b");
    RUN_OK(&e, "criteo", "--rows", "3000", "--files", "3", "--seed", "8", "--out", "@T/c");
    const char *parts[] = {"train/part-00000", "train/part-00001", "train/part-00002", "test/part-00000", "planted.json"};
    for (int i = 0; i < 5; i++) {
        char a[64], b[64], c[64];
        snprintf(a, sizeof a, "a/%s", parts[i]), snprintf(b, sizeof b, "b/%s", parts[i]);
        snprintf(c, sizeof c, "c/%s", parts[i]);
        if (!same_file(&e, a, b)) TFAIL("%s differs between two runs with seed 7", parts[i]);
        if (same_file(&e, a, c)) TFAIL("%s is the same with seeds 7 and 8", parts[i]);
    }
    cleanup(&e);
}

TEST(files_only_cut_the_rows)
{
    env_t e;
    setup(&e);
    RUN_OK(&e, "criteo", "--rows", "2000", "--out", "@T/one");
    RUN_OK(&e, "criteo", "--rows", "2000", "--files", "3", "--out", "@T/three");
    size_t n1, total = 0;
    char *one = file_of(&e, "one/train/part-00000", &n1);
    for (int f = 0; f < 3; f++) {
        char rel[64];
        size_t n;
        snprintf(rel, sizeof rel, "three/train/part-%05d", f);
        char *part = file_of(&e, rel, &n);
        if (total + n > n1 || memcmp(one + total, part, n)) TFAIL("%s is not the next piece of the 1-file output", rel);
        total += n;
        free(part);
    }
    CHECK_EQ_INT(total, n1);
    free(one);
    cleanup(&e);
}

TEST(line_format_and_counts)
{
    env_t e;
    setup(&e);
    RUN_OK(&e, "criteo", "--rows", "5001", "--files", "2", "--test-rows", "1000", "--test-files", "3", "--out", "@T/d");
    long pos = 0, ei = 0, ec = 0;
    CHECK_EQ_INT(check_part(&e, "d/train/part-00000", &pos, &ei, &ec), 2500);
    CHECK_EQ_INT(check_part(&e, "d/train/part-00001", &pos, &ei, &ec), 2501);
    CHECK_EQ_INT(check_part(&e, "d/test/part-00000", &pos, &ei, &ec), 333);
    CHECK_EQ_INT(check_part(&e, "d/test/part-00001", &pos, &ei, &ec), 333);
    CHECK_EQ_INT(check_part(&e, "d/test/part-00002", &pos, &ei, &ec), 334);
    CHECK(!exists(&e, "d/train/part-00002") && !exists(&e, "d/test/part-00003"));
    CHECK(!exists(&e, "d/train/part-00000.tmp") && !exists(&e, "d/planted.json.tmp"));
    /* Some fields are empty, most are not (the planted rates are 0-40% a column). */
    double fi = (double)ei / (6001.0 * 13), fc = (double)ec / (6001.0 * 26);
    if (!(fi > 0.05 && fi < 0.4) || !(fc > 0.02 && fc < 0.4)) TFAIL("empty fraction dense %.3f categorical %.3f", fi, fc);
    if (pos < 6001 * 0.15 || pos > 6001 * 0.35) TFAIL("%ld clicks in 6001 rows", pos);
    CHECK_STR_HAS(e.out, "5001 rows");
    cleanup(&e);
}

TEST(planted_json_and_ceiling_auc)
{
    env_t e;
    setup(&e);
    RUN_OK(&e, "criteo", "--rows", "20000", "--files", "2", "--seed", "1", "--out", "@T/p");
    char *j = file_of(&e, "p/planted.json", NULL);
    CHECK_STR_HAS(j, "\"format\":\"criteo\"");
    CHECK_EQ_INT(json_num(j, "rows"), 20000);
    CHECK_EQ_INT(json_num(j, "test_rows"), 4000); /* default N/5 */
    CHECK_EQ_INT(json_num(j, "seed"), 1);
    double rate = json_num(j, "click_rate"), tr = json_num(j, "ceiling_auc_train"), te = json_num(j, "ceiling_auc_test");
    if (!(rate > 0.2 && rate < 0.3)) TFAIL("click_rate %g", rate);
    if (!(tr > 0.7 && tr < 0.9) || !(te > 0.7 && te < 0.9)) TFAIL("ceiling AUC train %g test %g", tr, te);
    /* click_rate is the labels' mean in the training files. */
    long pos = 0, ei = 0, ec = 0, rows = 0;
    rows += check_part(&e, "p/train/part-00000", &pos, &ei, &ec);
    rows += check_part(&e, "p/train/part-00001", &pos, &ei, &ec);
    CHECK_EQ_INT(rows, 20000);
    CHECK_NEAR(rate, (double)pos / 20000.0, 1e-6);
    CHECK_STR_HAS(e.out, "ceiling AUC");
    free(j);
    cleanup(&e);
}

TEST(stale_parts_removed)
{
    env_t e;
    setup(&e);
    RUN_OK(&e, "criteo", "--rows", "300", "--files", "3", "--out", "@T/s");
    CHECK(exists(&e, "s/train/part-00002"));
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/s/train/part-00007.tmp", e.dir);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
    RUN_OK(&e, "criteo", "--rows", "300", "--out", "@T/s");
    CHECK(exists(&e, "s/train/part-00000"));
    CHECK(!exists(&e, "s/train/part-00001") && !exists(&e, "s/train/part-00002"));
    CHECK(!exists(&e, "s/train/part-00007.tmp"));
    cleanup(&e);
}

static void expect_usage(env_t *e, const char *const *args, const char *sub)
{
    int c = run(e, args);
    if (c != 2) TFAIL("exit %d, expected 2 (%s): %s", c, sub, e->out);
    CHECK_STR_HAS(e->out, sub);
}

TEST(usage_errors)
{
    env_t e;
    setup(&e);
    static const char *const bogus[] = {"criteo", "--rows", "10", "--bogus", "3", "--out", "@T/x", NULL};
    static const char *const bad_rows[] = {"criteo", "--rows", "12x", "--out", "@T/x", NULL};
    static const char *const neg_rows[] = {"criteo", "--rows", "-5", "--out", "@T/x", NULL};
    static const char *const zero_files[] = {"criteo", "--rows", "10", "--files=0", "--out", "@T/x", NULL};
    static const char *const no_val[] = {"criteo", "--out", "@T/x", "--seed", NULL};
    static const char *const no_out[] = {"criteo", "--rows", "10", NULL};
    static const char *const no_rows[] = {"criteo", "--out", "@T/x", NULL};
    static const char *const sub[] = {"movielens", "--rows", "10", NULL};
    static const char *const none[] = {NULL};
    expect_usage(&e, bogus, "--bogus");
    expect_usage(&e, bad_rows, "--rows expects a whole number");
    CHECK_STR_HAS(e.out, "'12x'");
    expect_usage(&e, neg_rows, "--rows");
    expect_usage(&e, zero_files, "--files");
    expect_usage(&e, no_val, "--seed expects a value");
    expect_usage(&e, no_out, "--out");
    expect_usage(&e, no_rows, "--rows");
    expect_usage(&e, sub, "movielens");
    expect_usage(&e, none, "subcommand");
    CHECK(!exists(&e, "x"));
    static const char *const help[] = {"--help", NULL};
    CHECK_EQ_INT(run(&e, help), 0);
    CHECK_STR_HAS(e.out, "criteo --rows N --out DIR");
    cleanup(&e);
}

TEST(io_error_names_the_path)
{
    env_t e;
    setup(&e);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/afile", e.dir);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
    static const char *const args[] = {"criteo", "--rows", "10", "--out", "@T/afile/sub", NULL};
    int c = run(&e, args);
    if (c != 1) TFAIL("exit %d, expected 1: %s", c, e.out);
    CHECK_STR_HAS(e.out, "afile");
    cleanup(&e);
}

TEST_MAIN(T(same_seed_same_bytes), T(files_only_cut_the_rows), T(line_format_and_counts), T(planted_json_and_ceiling_auc),
          T(stale_parts_removed), T(usage_errors), T(io_error_names_the_path))
