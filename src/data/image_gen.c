/*
 * image_gen.c - a JPEG data set with planted classes (`fleet-datagen images`; docs/datagen.md
 * "images").
 *
 * Class c is a (colour, shape, texture) triple: colour c % 8 of a saturated palette, shape
 * c % 5 (disc, square, triangle, ring, cross; 8 and 5 are coprime, so the first 40 classes are
 * 40 distinct pairs), texture c / 40 (plain, stripes, checks).  An image of class c is that
 * shape, at a random place, size, rotation and brightness, over a low-saturation background
 * of waves, with Gaussian pixel noise, compressed by libjpeg-turbo (tjCompress2, 4:2:0).  The
 * shape always lies inside the centre crop of the evaluation transform (the central square of
 * 7/8 of the shorter side), so the class is visible in every evaluated image.  The label is
 * the class, except for a share `label_noise` of images whose label is another class drawn
 * uniformly: the best reachable accuracy is then the share of images whose label is their
 * class (1 - label_noise in expectation), counted on the images written.
 *
 * Image i of a split draws from its own stream hash(seed, split, i): the same configuration
 * gives the same files.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_internal.h"

#ifdef FL_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

#define NCOLOURS 8
#define NSHAPES 5
#define NTEXTURES 3
#define MAX_CLASSES (NCOLOURS * NSHAPES * NTEXTURES)

static const char *const colour_names[NCOLOURS] = {"red", "green", "blue", "yellow", "magenta", "cyan", "orange", "purple"};
static const uint8_t palette[NCOLOURS][3] = {{220, 30, 30},  {30, 190, 40},  {40, 60, 220},  {230, 210, 30},
                                             {210, 40, 200}, {30, 200, 210}, {240, 130, 20}, {120, 40, 180}};
static const char *const shape_names[NSHAPES] = {"disc", "square", "triangle", "ring", "cross"};
static const char *const texture_names[NTEXTURES] = {"plain", "stripes", "checks"};

fl_data_image_datagen fl_data_image_datagen_default(void)
{
    fl_data_image_datagen g;
    memset(&g, 0, sizeof g);
    g.train = 1000;
    g.val = 200;
    g.classes = 10;
    g.min_size = 48;
    g.max_size = 64;
    g.quality = 90;
    g.noise = 8;
    g.label_noise = 0.1;
    g.seed = 1;
    return g;
}

static void class_name(int c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%03d_%s_%s_%s", c, colour_names[c % NCOLOURS], shape_names[c % NSHAPES],
             texture_names[c / (NCOLOURS * NSHAPES)]);
}

static double unif(fl_rng *g, double lo, double hi) { return lo + (hi - lo) * (double)(fl__rng_next(g) >> 11) * 0x1p-53; }

/* Whether (u, v), in the shape's frame (unit radius, rotated), is inside shape s. */
static int inside(int s, double u, double v)
{
    const double au = fabs(u), av = fabs(v), d2 = u * u + v * v;
    switch (s) {
    case 0: return d2 < 1.0;
    case 1: return au < 0.8 && av < 0.8;
    case 2: /* equilateral triangle of circumradius 1, apex up */
        return v > -0.5 && v < 1.0 - 1.7320508 * au + 1e-9 && v < 1.0;
    case 3: return d2 < 1.0 && d2 > 0.36;
    default: return (au < 0.3 && av < 1.0) || (av < 0.3 && au < 1.0);
    }
}

/* Draws an h x w image of class cls into px. */
static void draw(uint8_t *px, int h, int w, int cls, double noise, fl_rng *g)
{
    const int m = h < w ? h : w;
    /* the shape: centre within 0.15 m of the image centre, radius 0.15-0.28 m, so it stays in
     * the central 0.86 m (the eval crop keeps 7/8 = 0.875 of the shorter side) */
    const double cx = w / 2.0 + unif(g, -0.15, 0.15) * m, cy = h / 2.0 + unif(g, -0.15, 0.15) * m;
    const double r = unif(g, 0.15, 0.28) * m, rot = unif(g, 0, 6.283185307);
    const double cr = cos(rot), sr = sin(rot), bright = unif(g, 0.7, 1.0);
    const int shape = cls % NSHAPES, tex = cls / (NCOLOURS * NSHAPES);
    const uint8_t *col = palette[cls % NCOLOURS];
    const double tperiod = r / unif(g, 1.5, 2.5);
    /* the background: a grey level, a faint tint and a wave of random direction and period */
    const double base = unif(g, 60, 190), wa = unif(g, 0.0, 6.283185307), wp = unif(g, m / 8.0, m / 2.0);
    const double wamp = unif(g, 10, 30), wc = cos(wa), ws = sin(wa);
    double tint[3];
    for (int c = 0; c < 3; c++) tint[c] = unif(g, -12, 12);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
            const double u = (dx * cr + dy * sr) / r, v = (-dx * sr + dy * cr) / r;
            double rgb[3];
            if (inside(shape, u, v)) {
                double k = bright;
                if (tex == 1 && ((long)floor(u * r / tperiod) & 1)) k *= 0.45;
                if (tex == 2 && (((long)floor(u * r / tperiod) + (long)floor(v * r / tperiod)) & 1)) k *= 0.45;
                for (int c = 0; c < 3; c++) rgb[c] = col[c] * k;
            } else {
                const double wave = wamp * sin(6.283185307 * (x * wc + y * ws) / wp);
                for (int c = 0; c < 3; c++) rgb[c] = base + tint[c] + wave;
            }
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            for (int c = 0; c < 3; c++) {
                double val = rgb[c] + (noise > 0 ? noise * fl__rng_normal(g) : 0);
                p[c] = (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : lround(val));
            }
        }
}

static int mkdir_one(const char *dir)
{
    if (mkdir(dir, 0777) && errno != EEXIST) return fl__err(FL_EIO, "cannot create directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return fl__err(FL_EIO, "%s exists and is not a directory", dir);
    return FL_OK;
}

/* mkdir -p */
static int mkdirs(const char *path)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return fl__err(FL_EINVAL, "image datagen: path is too long");
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            FL_CHECK(mkdir_one(p));
            *s = '/';
        }
    return mkdir_one(p);
}

/* Removes the .jpg files of an earlier run from split/<class>/ and the class directories
 * left empty, so the directory layout holds this run's images only. */
static void remove_stale(const char *split)
{
    DIR *d = opendir(split);
    if (!d) return;
    struct dirent *e;
    char sub[4400], f[4700];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (snprintf(sub, sizeof sub, "%s/%s", split, e->d_name) >= (int)sizeof sub) continue;
        DIR *s = opendir(sub);
        if (!s) continue;
        struct dirent *fe;
        while ((fe = readdir(s))) {
            const char *dot = strrchr(fe->d_name, '.');
            if (!dot || strcmp(dot, ".jpg")) continue;
            if (snprintf(f, sizeof f, "%s/%s", sub, fe->d_name) < (int)sizeof f) unlink(f);
        }
        closedir(s);
        rmdir(sub);
    }
    closedir(d);
}

static int write_file(const char *path, const void *p, size_t n, int atomic)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, atomic ? "%s.tmp" : "%s", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return fl__err(FL_EIO, "cannot create %s: %s", tmp, strerror(errno));
    int ok = fwrite(p, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (ok && atomic && rename(tmp, path)) ok = 0;
    if (!ok) {
        unlink(tmp);
        return fl__err(FL_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return FL_OK;
}

#ifdef FL_HAVE_TURBOJPEG
/* Writes split `name` (index s) of n images: the files, NAME.txt; counts the labels equal to
 * their class into *right and the labels into hist. */
static int write_split(const fl_data_image_datagen *g, const char *out, int s, const char *name, int64_t n, void *tj,
                       int64_t *right, int64_t *hist, int64_t *bytes)
{
    char dir[4200], path[4400], cname[64];
    snprintf(dir, sizeof dir, "%s/%s", out, name);
    remove_stale(dir);
    for (int c = 0; c < g->classes; c++) {
        class_name(c, cname, sizeof cname);
        snprintf(path, sizeof path, "%s/%s", dir, cname);
        FL_CHECK(mkdirs(path));
    }
    fl_buf list = {0};
    uint8_t *px = malloc((size_t)g->max_size * g->max_size * 3);
    if (!px) return fl__err(FL_ENOMEM, "image datagen: out of memory");
    int st = FL_OK;
    for (int64_t i = 0; i < n && st == FL_OK; i++) {
        fl_rng rng = {fl__hash_u64(g->seed ^ fl__hash_u64(((uint64_t)s << 56) ^ (uint64_t)i))};
        const int cls = (int)(fl__rng_next(&rng) % (uint64_t)g->classes);
        int label = cls;
        if (unif(&rng, 0, 1) < g->label_noise)
            label = (cls + 1 + (int)(fl__rng_next(&rng) % (uint64_t)(g->classes - 1))) % g->classes;
        const int h = g->min_size + (int)(fl__rng_next(&rng) % (uint64_t)(g->max_size - g->min_size + 1));
        const int w = g->min_size + (int)(fl__rng_next(&rng) % (uint64_t)(g->max_size - g->min_size + 1));
        draw(px, h, w, cls, g->noise, &rng);
        unsigned char *jpeg = NULL;
        unsigned long len = 0;
        if (tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, &len, TJSAMP_420, g->quality, 0)) {
            st = fl__err(FL_EIO, "image datagen: tjCompress2 failed: %s", tjGetErrorStr2(tj));
            break;
        }
        class_name(label, cname, sizeof cname);
        snprintf(path, sizeof path, "%s/%s/%06lld.jpg", dir, cname, (long long)i);
        st = write_file(path, jpeg, len, 0);
        tjFree(jpeg);
        fl__buf_printf(&list, "%s/%s/%06lld.jpg %d\n", name, cname, (long long)i, label);
        *right += label == cls;
        hist[label]++;
        *bytes += (int64_t)len;
    }
    free(px);
    if (st == FL_OK && list.failed) st = fl__err(FL_ENOMEM, "image datagen: out of memory");
    if (st == FL_OK) {
        snprintf(path, sizeof path, "%s/%s.txt", out, name);
        st = write_file(path, list.p ? list.p : "", list.len, 1);
    }
    fl__buf_free(&list);
    return st;
}
#endif

int fl_data_image_generate(const fl_data_image_datagen *g, const char *out, fl_data_image_datagen_info *info)
{
    const char *fn = "fl_data_image_generate";
    if (!g || !out || !*out) return fl__err(FL_EINVAL, "%s: configuration or out is NULL or empty", fn);
    if (info) memset(info, 0, sizeof *info);
    if (g->train < 1 || g->train > 100000000 || g->val < 0 || g->val > 100000000)
        return fl__err(FL_EINVAL, "image datagen: train must be in [1, 1e8] and val in [0, 1e8], got %lld and %lld",
                       (long long)g->train, (long long)g->val);
    if (g->classes < 2 || g->classes > MAX_CLASSES)
        return fl__err(FL_EINVAL, "image datagen: classes must be in [2, %d], got %d", MAX_CLASSES, g->classes);
    if (g->min_size < 8 || g->max_size < g->min_size || g->max_size > 4096)
        return fl__err(FL_EINVAL, "image datagen: need 8 <= min_size <= max_size <= 4096, got %d and %d", g->min_size,
                       g->max_size);
    if (g->quality < 1 || g->quality > 100)
        return fl__err(FL_EINVAL, "image datagen: quality must be in [1, 100], got %d", g->quality);
    if (!(g->noise >= 0 && g->noise <= 128))
        return fl__err(FL_EINVAL, "image datagen: noise must be in [0, 128], got %g", g->noise);
    if (!(g->label_noise >= 0 && g->label_noise <= 0.5))
        return fl__err(FL_EINVAL, "image datagen: label_noise must be in [0, 0.5], got %g", g->label_noise);
    if (strlen(out) > 3900) return fl__err(FL_EINVAL, "image datagen: output path is too long");
    FL_CHECK(fl__image_supported(fn));
#ifdef FL_HAVE_TURBOJPEG
    FL_CHECK(mkdirs(out));
    void *tj = tjInitCompress();
    if (!tj) return fl__err(FL_ENOMEM, "image datagen: tjInitCompress failed: %s", tjGetErrorStr2(NULL));
    int64_t right[2] = {0, 0}, bytes = 0;
    int64_t *hist = calloc((size_t)g->classes * 2, sizeof *hist);
    int st = hist ? FL_OK : fl__err(FL_ENOMEM, "image datagen: out of memory");
    if (st == FL_OK) st = write_split(g, out, 0, "train", g->train, tj, &right[0], hist, &bytes);
    if (st == FL_OK) st = write_split(g, out, 1, "val", g->val, tj, &right[1], hist + g->classes, &bytes);
    tjDestroy(tj);
    fl_data_image_datagen_info inf;
    memset(&inf, 0, sizeof inf);
    inf.ceiling_train = (double)right[0] / (double)g->train;
    inf.ceiling_val = g->val ? (double)right[1] / (double)g->val : NAN;
    int64_t top = 0;
    for (int c = 0; st == FL_OK && c < g->classes; c++)
        if (hist[g->classes + c] > top) top = hist[g->classes + c];
    inf.chance_val = g->val ? (double)top / (double)g->val : NAN;
    inf.bytes = bytes;
    free(hist);
    if (st == FL_OK) {
        fl_buf j = {0};
        char cname[64];
        fl__buf_printf(&j,
                       "{\"format\": \"jpeg\", \"train\": %lld, \"val\": %lld, \"classes\": %d, \"min_size\": %d, "
                       "\"max_size\": %d, \"quality\": %d, \"noise\": %g, \"label_noise\": %g, \"seed\": %llu,\n"
                       " \"ceiling_accuracy_train\": %.6f, ",
                       (long long)g->train, (long long)g->val, g->classes, g->min_size, g->max_size, g->quality, g->noise,
                       g->label_noise, (unsigned long long)g->seed, inf.ceiling_train);
        if (g->val)
            fl__buf_printf(&j, "\"ceiling_accuracy_val\": %.6f, \"chance_val\": %.6f,\n", inf.ceiling_val, inf.chance_val);
        else fl__buf_printf(&j, "\"ceiling_accuracy_val\": null, \"chance_val\": null,\n");
        fl__buf_printf(&j, " \"class_names\": [");
        for (int c = 0; c < g->classes; c++) {
            class_name(c, cname, sizeof cname);
            fl__buf_printf(&j, "%s\"%s\"", c ? ", " : "", cname);
        }
        fl__buf_printf(&j, "]}\n");
        char path[4200];
        snprintf(path, sizeof path, "%s/planted.json", out);
        st = j.failed ? fl__err(FL_ENOMEM, "image datagen: out of memory") : write_file(path, j.p, j.len, 1);
        fl__buf_free(&j);
    }
    if (st == FL_OK && info) *info = inf;
    return st;
#else
    (void)info;
    return FL_EUNSUPPORTED;
#endif
}
