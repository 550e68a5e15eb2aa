/*
 * app_image.c - the "images" reader of the model registry (resnet): Fashion-MNIST idx files
 * (app_data.c's "idx" reader) or JPEG images through the image reader of fleet/data.h (a
 * list file such as ImageNet's train.txt, or a directory of class folders), chosen by what
 * the path holds (fl__app_is_images).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app_internal.h"

int fl__app_is_images(const char *path)
{
    struct stat s;
    if (!path || !*path || stat(path, &s)) return 0;
    if (S_ISREG(s.st_mode)) return 1;
    if (!S_ISDIR(s.st_mode)) return 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    int sub = 0, idx = 0;
    struct dirent *e;
    char p[FL_APP_PATH + 300];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (strstr(e->d_name, "-ubyte")) idx = 1;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (!stat(p, &s) && S_ISDIR(s.st_mode)) sub = 1;
    }
    closedir(d);
    return sub && !idx;
}

int fl__app_image_classes(const char *what, const char *path, int *num_classes, int64_t *images)
{
    fl_data_image_reader *r = fl_data_image_reader_create(path, NULL);
    if (!r) return fl__err(fl_last_status(), "%s '%s': %s", what, path, fl_last_error());
    *num_classes = fl_data_image_reader_num_classes(r);
    if (images) *images = fl_data_image_reader_size(r);
    fl_data_image_reader_free(r);
    return FL_OK;
}

/* ---- JPEG images ------------------------------------------------------------------------------ */

typedef struct {
    fl_data_image_reader *r;
    int batch, crop, print_period, nranks;
    int64_t size, max_steps;
    char xname[128], yname[128];
    float *buf;
    int64_t *labels;
    fl_tensor *x, *y;
} jpeg_reader;

static void jpeg_close(void *p)
{
    jpeg_reader *r = p;
    if (!r) return;
    fl_data_image_reader_free(r->r);
    free(r->buf);
    free(r->labels);
    fl_tensor_free(r->x);
    fl_tensor_free(r->y);
    free(r);
}

static int jpeg_open(const fl_app_config *c, const char *path, int train, int rank, int nranks, fl_var *const *feeds,
                     int nfeeds, void **out)
{
    const char *what = train ? "train_data" : "test_data";
    if (nfeeds != 2)
        return fl__err(FL_EINVAL, "the image reader feeds an image and a label, the model has %d inputs", nfeeds);
    const int64_t *sh = fl_var_shape(feeds[0]);
    if (fl_var_ndim(feeds[0]) != 4 || sh[1] != 3 || sh[2] < 1 || sh[2] != sh[3])
        return fl__err(FL_EINVAL, "%s '%s' holds RGB images: the image reader feeds [N, 3, S, S]; input '%s' differs", what,
                       path, fl_var_name(feeds[0]));
    if (train && c->thread > 1)
        return fl__err(FL_EUNSUPPORTED,
                       "option thread: the image reader trains with one thread per process (decode_threads sets "
                       "its decoders), got thread %d; leave thread at 1, or train on several processes: fleetrun "
                       "--nproc_per_node N with mode collective",
                       c->thread);
    const int skip = !strcmp(c->bad_data, "skip");
    if (!skip && strcmp(c->bad_data, "stop"))
        return fl__err(FL_EINVAL, "option bad_data: expected stop or skip, got '%s'", c->bad_data);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.skip_bad = skip;
    o.batch_size = c->batch_size;
    o.threads = c->decode_threads;
    o.prefetch = 2 * c->decode_threads;
    o.train = train;
    o.crop = (int)sh[2];
    o.resize = c->resize ? c->resize : o.crop * 8 / 7;
    o.shuffle = train;
    o.seed = c->seed;
    o.rank = train ? rank : 0;
    o.nranks = train ? nranks : 1;
    jpeg_reader *r = calloc(1, sizeof *r);
    if (!r) return fl__err(FL_ENOMEM, "reader: out of memory");
    r->batch = c->batch_size;
    r->crop = o.crop;
    r->print_period = c->print_period;
    r->nranks = o.nranks;
    r->max_steps = train ? c->max_steps : 0;
    snprintf(r->xname, sizeof r->xname, "%s", fl_var_name(feeds[0]));
    snprintf(r->yname, sizeof r->yname, "%s", fl_var_name(feeds[1]));
    if (!(r->r = fl_data_image_reader_create(path, &o))) {
        int st = fl__err(fl_last_status(), "%s '%s': %s", what, path, fl_last_error());
        jpeg_close(r);
        return st;
    }
    r->size = fl_data_image_reader_size(r->r);
    size_t px = (size_t)3 * o.crop * o.crop;
    r->buf = malloc((size_t)r->batch * px * sizeof *r->buf);
    r->labels = malloc((size_t)r->batch * sizeof *r->labels);
    r->x = fl_tensor_create(FL_FLOAT32, 4, (const int64_t[]){r->batch, 3, o.crop, o.crop});
    r->y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){r->batch, 1});
    if (!r->buf || !r->labels || !r->x || !r->y) {
        jpeg_close(r);
        return fl__err(FL_ENOMEM, "reader: out of memory");
    }
    if (r->size < r->nranks) {
        int st = fl__err(FL_ENOTFOUND, "%s '%s' holds %lld image(s), fewer than the %d workers", what, path,
                         (long long)r->size, o.nranks);
        jpeg_close(r);
        return st;
    }
    *out = r;
    return FL_OK;
}

/* Batches of a training pass: the same on every worker (the smallest share's), so collective
 * trainers run the same number of steps; max_steps caps them. */
static int64_t jpeg_steps(void *p, int batch_size)
{
    jpeg_reader *r = p;
    int64_t steps = (r->size / r->nranks + batch_size - 1) / batch_size;
    return r->max_steps && steps > r->max_steps ? r->max_steps : steps;
}

static int jpeg_threads(void *p)
{
    (void)p;
    return 1;
}

/* Training: this worker's share, shuffled by (seed, epoch), train transform; evaluation:
 * every image in listing order, eval transform.  A decode error names the file. */
static int jpeg_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                     int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    jpeg_reader *r = p;
    memset(out, 0, sizeof *out);
    FL_CHECK(fl_data_image_reader_begin(r->r, epoch));
    int64_t steps = train ? jpeg_steps(r, r->batch) : INT64_MAX;
    size_t px = (size_t)3 * r->crop * r->crop;
    double t0 = fl__now(), loss = 0, metric = 0;
    for (int64_t s = 0; s < steps; s++) {
        int b = fl_data_image_reader_next(r->r, r->buf, r->labels);
        if (b < 0) return fl__err(fl_last_status(), "epoch %d: %s", epoch + 1, fl_last_error());
        if (b == 0) break;
        if (fl_tensor_dim(r->x, 0) != b) {
            FL_CHECK(fl_tensor_resize(r->x, FL_FLOAT32, 4, (const int64_t[]){b, 3, r->crop, r->crop}));
            FL_CHECK(fl_tensor_resize(r->y, FL_INT64, 2, (const int64_t[]){b, 1}));
        }
        memcpy(fl_tensor_f32(r->x), r->buf, (size_t)b * px * sizeof *r->buf);
        memcpy(fl_tensor_i64(r->y), r->labels, (size_t)b * sizeof *r->labels);
        fl_feed feed[2] = {{r->xname, r->x}, {r->yname, r->y}};
        fl_tensor *res[4];
        int st = fl_exe_run(e, prog, feed, 2, fetch, nfetch, res);
        if (st != FL_OK) return fl__err(st, "epoch %d batch %lld: %s", epoch + 1, (long long)s, fl_last_error());
        if (fn) FL_CHECK(fn(user, res, nfetch, b));
        if (train) {
            loss += fl_tensor_f32(res[0])[0];
            if (nfetch > 1) metric += fl_tensor_f32(res[1])[0];
            if (r->print_period && (s + 1) % r->print_period == 0)
                printf("epoch %d step %lld/%lld: loss %.4f metric %.4f (%.1f images/s)\n", epoch + 1, (long long)s + 1,
                       (long long)steps, loss / (double)(s + 1), metric / (double)(s + 1),
                       (double)(out->instances + b) / (fl__now() - t0));
        }
        out->instances += b;
        out->batches++;
    }
    out->seconds = fl__now() - t0;
    if (out->batches) {
        out->loss = loss / (double)out->batches;
        out->metric = metric / (double)out->batches;
    }
    (void)thread;
    return FL_OK;
}

static const app_reader jpeg = {"jpeg", jpeg_open, jpeg_pass, jpeg_close, jpeg_steps, jpeg_threads};

/* ---- the "images" reader: idx or JPEG by what the path holds -------------------------------------- */

typedef struct {
    const app_reader *rd;
    void *st;
} any_reader;

void fl__app_images_close(void *p)
{
    any_reader *a = p;
    if (!a) return;
    if (a->st) a->rd->close(a->st);
    free(a);
}

int fl__app_images_open(const fl_app_config *c, const char *path, int train, int rank, int nranks, fl_var *const *feeds,
                        int nfeeds, void **out)
{
    const app_reader *rd = fl__app_is_images(path) ? &jpeg : fl__app_reader("idx");
    if (!rd) return fl_last_status();
    any_reader *a = calloc(1, sizeof *a);
    if (!a) return fl__err(FL_ENOMEM, "reader: out of memory");
    a->rd = rd;
    int st = rd->open(c, path, train, rank, nranks, feeds, nfeeds, &a->st);
    if (st != FL_OK) {
        free(a);
        return st;
    }
    *out = a;
    return FL_OK;
}

int fl__app_images_pass(void *p, fl_exe *e, fl_prog *prog, int train, int thread, const char *const *fetch, int nfetch,
                        int epoch, app_pass *out, app_batch_fn fn, void *user)
{
    any_reader *a = p;
    return a->rd->pass(a->st, e, prog, train, thread, fetch, nfetch, epoch, out, fn, user);
}

int64_t fl__app_images_steps(void *p, int batch_size)
{
    any_reader *a = p;
    return a->rd->steps(a->st, batch_size);
}

int fl__app_images_threads(void *p)
{
    any_reader *a = p;
    return a->rd->threads(a->st);
}
