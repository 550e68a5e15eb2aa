/*
 * refdump.h - reads the PyTorch reference dumps in tests/ref ("FLREF 1", written by
 * tests/ref/make_reference.py, make_resnet50_reference.py and make_bert_reference.py) with libc
 * only: a line "FLREF 1", then per tensor a line "NAME DTYPE NDIM D0 D1 ..." (DTYPE f32/f64/i64)
 * followed by the raw little-endian row-major data, and a closing line "end".  Used by
 * test_reference.c, test_resnet_ref.c, test_bert_ref.c and test_transformer_ref.c; failures end the test case (TFAIL).
 */
#ifndef FLEET_TESTS_REFDUMP_H
#define FLEET_TESTS_REFDUMP_H

#include <errno.h>

#include "testhelp.h"

typedef struct {
    char name[96];
    char dtype[4]; /* "f32", "f64", "i64" */
    int ndim;
    int64_t dims[8];
    int64_t numel;
    const void *data;
} ref_tensor;

typedef struct {
    char *buf;
    int n;
    ref_tensor t[256];
} ref_file;

static inline const char *ref_dir(void)
{
    const char *d = getenv("FLEET_REF_DIR");
    if (d && *d) return d;
    /* the test runner starts in the repository root; also work from BUILD/tests */
    return access("tests/ref/mlp.ref", R_OK) == 0 ? "tests/ref" : "../../tests/ref";
}

static inline void ref_load(ref_file *rf, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", ref_dir(), file);
    FILE *f = fopen(path, "rb");
    if (!f) TFAIL("cannot open reference dump %s: %s (set FLEET_REF_DIR to tests/ref)", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    rf->buf = malloc((size_t)size + 1);
    CHECK(rf->buf);
    CHECK(fread(rf->buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    rf->buf[size] = 0;
    rf->n = 0;
    char *p = rf->buf, *end = rf->buf + size;
    if (strncmp(p, "FLREF 1\n", 8) != 0) TFAIL("%s: not an FLREF 1 dump", path);
    p += 8;
    for (;;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) TFAIL("%s: truncated header", path);
        *nl = 0;
        if (!strcmp(p, "end")) break;
        if (rf->n == (int)(sizeof rf->t / sizeof rf->t[0])) TFAIL("%s: too many tensors", path);
        ref_tensor *t = &rf->t[rf->n++];
        int used = 0;
        if (sscanf(p, "%95s %3s %d%n", t->name, t->dtype, &t->ndim, &used) != 3 || t->ndim < 0 || t->ndim > 8)
            TFAIL("%s: bad header line '%s'", path, p);
        t->numel = 1;
        char *q = p + used;
        for (int i = 0; i < t->ndim; i++) {
            char *e;
            t->dims[i] = strtoll(q, &e, 10);
            if (e == q || t->dims[i] < 0) TFAIL("%s: bad dims in '%s'", path, p);
            t->numel *= t->dims[i];
            q = e;
        }
        size_t esz = !strcmp(t->dtype, "f32") ? 4 : (!strcmp(t->dtype, "f64") || !strcmp(t->dtype, "i64")) ? 8 : 0;
        if (!esz) TFAIL("%s: unknown dtype in '%s'", path, p);
        t->data = nl + 1;
        p = nl + 1 + (size_t)t->numel * esz;
        if (p > end) TFAIL("%s: tensor %s truncated", path, t->name);
    }
}

static inline const ref_tensor *ref_get(const ref_file *rf, const char *name, const char *dtype)
{
    for (int i = 0; i < rf->n; i++)
        if (!strcmp(rf->t[i].name, name)) {
            if (strcmp(rf->t[i].dtype, dtype) != 0) TFAIL("reference %s is %s, expected %s", name, rf->t[i].dtype, dtype);
            return &rf->t[i];
        }
    TFAIL("reference tensor %s missing from the dump", name);
    return NULL;
}

/* The dump's data is not aligned; copy element by element (the files are little-endian, as is
 * every machine this builds on: checked once below). */
static inline float ref_f32(const ref_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}
static inline double ref_f64(const ref_tensor *t, int64_t i)
{
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static inline int64_t ref_i64(const ref_tensor *t, int64_t i)
{
    int64_t v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}
static inline int64_t ref_scalar_i(const ref_file *rf, const char *name) { return ref_i64(ref_get(rf, name, "i64"), 0); }

/* prefix + name (e.g. "init." + a parameter's name), of any dtype; a missing one fails. */
static inline const ref_tensor *ref_at(const ref_file *rf, const char *prefix, const char *name)
{
    char key[160];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    for (int i = 0; i < rf->n; i++)
        if (!strcmp(rf->t[i].name, key)) return &rf->t[i];
    TFAIL("reference tensor %s missing from the dump", key);
    return NULL;
}

/* A new tensor holding an f32 or i64 dump tensor's values (a batch to feed). */
static inline fl_tensor *ref_tensor_new(const ref_tensor *t)
{
    int f32 = !strcmp(t->dtype, "f32");
    fl_tensor *o = fl_tensor_create(f32 ? FL_FLOAT32 : FL_INT64, t->ndim, t->dims);
    CHECK(o);
    memcpy(fl_tensor_data(o), t->data, (size_t)t->numel * (f32 ? 4 : 8));
    return o;
}

/* The check that came closest to its tolerance, as a fraction of it, for the summary line. */
typedef struct {
    double frac;
    char what[200];
} ref_worst;

/* elementwise |ours - ref| <= atol + rtol |ref|, failing with the first element that is not */
static inline void ref_close(ref_worst *w, const char *what, const char *name, const float *ours, const ref_tensor *ref,
                             double atol, double rtol)
{
    for (int64_t i = 0; i < ref->numel; i++) {
        double r = ref_f32(ref, i), e = fabs((double)ours[i] - r), lim = atol + rtol * fabs(r);
        if (!(e <= lim))
            TFAIL("%s %s[%lld]: ours %.9g, PyTorch %.9g, |diff| %.3g > %.3g", what, name, (long long)i, ours[i], r, e, lim);
        if (e / lim > w->frac) w->frac = e / lim, snprintf(w->what, sizeof w->what, "%s %s", what, name);
    }
}

/* The parameters of program p, which must be exactly the dump's init.* tensors: their names
 * into names (at most cap), their count returned. */
static inline int ref_params(fl_prog *p, const ref_file *rf, const char **names, int cap)
{
    int n = 0;
    for (int i = 0; i < fl_prog_num_vars(p); i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (!fl_var_is_param(v)) continue;
        ref_at(rf, "init.", fl_var_name(v));
        CHECK(n < cap);
        names[n++] = fl_var_name(v);
    }
    int dumped = 0;
    for (int i = 0; i < rf->n; i++) dumped += !strncmp(rf->t[i].name, "init.", 5);
    CHECK_EQ_INT(n, dumped);
    return n;
}

static inline void check_little_endian(void)
{
    uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    if (b != 1) TFAIL("the reference dumps are little-endian; this machine is not");
}

#endif
