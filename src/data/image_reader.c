/*
 * image_reader.c - the fl_data_image_reader handle: decode threads filling a ring of
 * `prefetch` batch slots that the consumer empties in order.
 *
 * A pass: the epoch's order of this rank's images is fixed at begin; image k of it goes to
 * batch k / batch_size, slot (k / batch_size) % prefetch.  A decode thread claims the next k
 * only when its slot is free (the consumer has taken the batch that held it before), decodes
 * and transforms outside the lock straight into the slot, then counts it; the consumer waits
 * for its batch's count, copies it out and frees the slot.  The first error stops the pass and
 * is handed to the consumer; under the policy "skip" a bad file's place in its slot is marked
 * empty instead (slot_ok), and the consumer copies out the good images only.  Stopping (begin of another pass, free) sets `stop` and joins.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "image_internal.h"

struct fl_data_image_reader {
    uint32_t magic;
    fl_data_image_options o;
    fl__image_set set;
    size_t chw; /* floats per image */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *th;
    int nth; /* threads started in this pass */
    int epoch, active;
    int64_t *order; /* this rank's images (indexes into set) in epoch order */
    int64_t count;  /* images read this pass (a dropped last partial batch left out) */
    int64_t next_img;
    int64_t nbatches, next_batch;
    float *slot_img; /* prefetch x batch_size x chw */
    int64_t *slot_lab;
    uint8_t *slot_ok; /* 0: the image at this place was skipped (policy skip) */
    int *filled;
    int64_t bad; /* images skipped this pass (atomic) */
    int stop, status;
    char err[1024];
};

void fl_data_image_options_init(fl_data_image_options *o)
{
    if (!o) return;
    static const fl_data_image_options d = {.batch_size = 32,
                                            .threads = 2,
                                            .prefetch = 0,
                                            .train = 0,
                                            .crop = 224,
                                            .resize = 256,
                                            .scale = {0.08f, 1.0f},
                                            .ratio = {3.0f / 4.0f, 4.0f / 3.0f},
                                            .flip = 0.5f,
                                            .mean = {0.485f, 0.456f, 0.406f},
                                            .std = {0.229f, 0.224f, 0.225f},
                                            .shuffle = 0,
                                            .drop_last = 0,
                                            .seed = 0,
                                            .rank = 0,
                                            .nranks = 1,
                                            .skip_bad = 0,
                                            .dct_scale = 1};
    *o = d;
}

/* Options with defaults filled in and checked. */
static int resolve(const char *fn, const fl_data_image_options *in, fl_data_image_options *o)
{
    if (in) *o = *in;
    else fl_data_image_options_init(o);
    if (o->prefetch == 0 && o->threads > 0 && o->threads <= 256) o->prefetch = 2 * o->threads;
    return fl__image_check_options(fn, o);
}

static int check(const fl_data_image_reader *r, const char *fn)
{
    if (!r || r->magic != FL_IMAGE_READER_MAGIC) return fl__err_handle(r, "%s: image reader is NULL or invalid", fn);
    return FL_OK;
}

static fl_rng image_rng(uint64_t seed, int epoch, int64_t idx)
{
    fl_rng g = {fl__hash_u64(seed ^ fl__hash_u64(((uint64_t)(uint32_t)epoch << 40) ^ (uint64_t)idx))};
    return g;
}

fl_data_image_reader *fl_data_image_reader_create(const char *path, const fl_data_image_options *o)
{
    const char *fn = "fl_data_image_reader_create";
    if (!path || !*path) {
        fl__err(FL_EINVAL, "%s: path is NULL or empty", fn);
        return NULL;
    }
    if (fl__image_supported(fn)) return NULL;
    fl_data_image_options opt;
    if (resolve(fn, o, &opt)) return NULL;
    fl_data_image_reader *r = calloc(1, sizeof *r);
    if (!r) {
        fl__err(FL_ENOMEM, "%s: out of memory", fn);
        return NULL;
    }
    r->o = opt;
    r->chw = (size_t)3 * opt.crop * opt.crop;
    if (fl__image_set_load(path, &r->set)) {
        free(r);
        return NULL;
    }
    const size_t nimg = (size_t)opt.prefetch * opt.batch_size;
    r->slot_img = fl__alloc_aligned(nimg * r->chw * sizeof(float));
    r->slot_lab = malloc(nimg * sizeof *r->slot_lab);
    r->slot_ok = malloc(nimg);
    r->filled = calloc((size_t)opt.prefetch, sizeof *r->filled);
    r->order = malloc(sizeof *r->order * (size_t)r->set.n);
    if (!r->slot_img || !r->slot_lab || !r->slot_ok || !r->filled || !r->order) {
        fl__err(FL_ENOMEM, "%s: out of memory for %d batches of %d images of %d x %d", fn, opt.prefetch, opt.batch_size,
                opt.crop, opt.crop);
        fl__free_aligned(r->slot_img);
        free(r->slot_lab);
        free(r->slot_ok);
        free(r->filled);
        free(r->order);
        fl__image_set_free(&r->set);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->magic = FL_IMAGE_READER_MAGIC;
    return r;
}

/* Logs the pass's total of skipped images once, at its end. */
static void log_skipped(fl_data_image_reader *r)
{
    const int64_t bad = __atomic_load_n(&r->bad, __ATOMIC_RELAXED);
    if (bad)
        FL_WARN(FL_SUB_DATA, "image reader, epoch %d: skipped %lld bad image%s (policy skip)", r->epoch, (long long)bad,
                bad == 1 ? "" : "s");
}

/* Stops the pass's threads and joins them; logs the skipped total of a pass left before its end. */
static void stop_pass(fl_data_image_reader *r)
{
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->nth; i++) pthread_join(r->th[i], NULL);
    if (r->active == 1) log_skipped(r);
    free(r->th);
    r->th = NULL;
    r->nth = 0;
    r->active = 0;
}

void fl_data_image_reader_free(fl_data_image_reader *r)
{
    if (!r || r->magic != FL_IMAGE_READER_MAGIC) return;
    stop_pass(r);
    r->magic = 0;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    fl__free_aligned(r->slot_img);
    free(r->slot_lab);
    free(r->slot_ok);
    free(r->filled);
    free(r->order);
    fl__image_set_free(&r->set);
    free(r);
}

int64_t fl_data_image_reader_size(const fl_data_image_reader *r)
{
    if (check(r, "fl_data_image_reader_size")) return -1;
    return r->set.n;
}

int64_t fl_data_image_reader_bad_images(const fl_data_image_reader *r)
{
    if (check(r, "fl_data_image_reader_bad_images")) return -1;
    return __atomic_load_n(&r->bad, __ATOMIC_RELAXED);
}

int fl_data_image_reader_num_classes(const fl_data_image_reader *r)
{
    FL_CHECK(check(r, "fl_data_image_reader_num_classes"));
    return r->set.classes;
}

int fl_data_image_reader_item(const fl_data_image_reader *r, int64_t i, const char **path, int64_t *label)
{
    const char *fn = "fl_data_image_reader_item";
    FL_CHECK(check(r, fn));
    if (i < 0 || i >= r->set.n)
        return fl__err(FL_EINVAL, "%s: index %lld is outside [0, %lld)", fn, (long long)i, (long long)r->set.n);
    if (path) *path = r->set.paths[i];
    if (label) *label = r->set.labels[i];
    return FL_OK;
}

static void fail(fl_data_image_reader *r, int st)
{
    pthread_mutex_lock(&r->mu);
    if (!r->status) {
        r->status = st;
        snprintf(r->err, sizeof r->err, "%s", fl_last_error());
    }
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Under the policy skip, a file whose content is bad (not one that cannot be read) is counted
 * and its first few messages logged; returns 1 when st is such a skip. */
static int skip_bad(fl_data_image_reader *r, int st)
{
    if (!r->o.skip_bad || (st != FL_ECORRUPT && st != FL_EUNSUPPORTED)) return 0;
    const int64_t n = __atomic_fetch_add(&r->bad, 1, __ATOMIC_RELAXED);
    if (n < FL__DATA_LOG_FIRST)
        FL_WARN(FL_SUB_DATA, "skipping bad image (policy skip%s): %s",
                n == FL__DATA_LOG_FIRST - 1 ? "; further ones are only counted" : "", fl_last_error());
    return 1;
}

static void *decode_thread(void *arg)
{
    fl_data_image_reader *r = arg;
    const int B = r->o.batch_size, P = r->o.prefetch;
    fl__decoder *dec = NULL;
    fl__image_scratch scratch = {{0}, {0}, {0}};
    int st = fl__decoder_create(&dec);
    if (st) {
        fail(r, st);
        return NULL;
    }
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->stop || r->next_img >= r->count) break;
        const int64_t k = r->next_img, b = k / B;
        if (b >= r->next_batch + P) { /* its slot still holds a batch the consumer has not taken */
            pthread_cond_wait(&r->cv, &r->mu);
            continue;
        }
        r->next_img++;
        pthread_mutex_unlock(&r->mu);
        const int64_t idx = r->order[k];
        const size_t at = (size_t)(b % P) * B + (size_t)(k % B);
        fl_rng rng = image_rng(r->o.seed, r->epoch, idx);
        st = fl__image_process(dec, r->set.paths[idx], &r->o, &rng, &scratch, r->slot_img + at * r->chw);
        r->slot_ok[at] = 1;
        if (st && skip_bad(r, st)) r->slot_ok[at] = 0;
        if (st && r->slot_ok[at]) {
            fail(r, st);
            pthread_mutex_lock(&r->mu);
            break;
        }
        r->slot_lab[at] = r->set.labels[idx];
        pthread_mutex_lock(&r->mu);
        r->filled[b % P]++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    fl__image_scratch_free(&scratch);
    fl__decoder_free(dec);
    return NULL;
}

int fl_data_image_reader_begin(fl_data_image_reader *r, int epoch)
{
    const char *fn = "fl_data_image_reader_begin";
    FL_CHECK(check(r, fn));
    if (epoch < 0) return fl__err(FL_EINVAL, "%s: epoch must be >= 0, got %d", fn, epoch);
    stop_pass(r);
    const fl_data_image_options *o = &r->o;
    /* The epoch's order of the whole set, then this rank's positions. */
    int64_t *all = malloc(sizeof *all * (size_t)r->set.n);
    if (!all) return fl__err(FL_ENOMEM, "%s: out of memory", fn);
    for (int64_t i = 0; i < r->set.n; i++) all[i] = i;
    if (o->shuffle) {
        fl_rng g = image_rng(o->seed ^ 0x53485546464c45ULL, epoch, -1);
        for (int64_t i = r->set.n - 1; i > 0; i--) {
            const int64_t j = (int64_t)(fl__rng_next(&g) % (uint64_t)(i + 1));
            const int64_t t = all[i];
            all[i] = all[j];
            all[j] = t;
        }
    }
    int64_t n = 0;
    for (int64_t p = o->rank; p < r->set.n; p += o->nranks) r->order[n++] = all[p];
    free(all);
    r->nbatches = o->drop_last ? n / o->batch_size : (n + o->batch_size - 1) / o->batch_size;
    r->count = o->drop_last ? r->nbatches * o->batch_size : n;
    r->next_img = r->next_batch = 0;
    memset(r->filled, 0, sizeof *r->filled * (size_t)o->prefetch);
    r->stop = r->status = 0;
    r->err[0] = 0;
    __atomic_store_n(&r->bad, 0, __ATOMIC_RELAXED);
    r->epoch = epoch;
    const int64_t want = r->count < o->threads ? r->count : o->threads;
    r->th = calloc((size_t)(want ? want : 1), sizeof *r->th);
    if (!r->th) return fl__err(FL_ENOMEM, "%s: out of memory", fn);
    r->active = 1;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&r->th[i], NULL, decode_thread, r)) {
            stop_pass(r);
            return fl__err(FL_EIO, "%s: cannot start decode thread %d", fn, i);
        }
        r->nth++;
    }
    return FL_OK;
}

int fl_data_image_reader_next(fl_data_image_reader *r, float *images, int64_t *labels)
{
    const char *fn = "fl_data_image_reader_next";
    FL_CHECK(check(r, fn));
    if (!images || !labels) return fl__err(FL_EINVAL, "%s: images and labels must not be NULL", fn);
    if (!r->active) return fl__err(FL_ESTATE, "%s: no pass (call fl_data_image_reader_begin)", fn);
    const int B = r->o.batch_size, P = r->o.prefetch;
    for (;;) { /* until a batch with a good image, the end or an error */
        pthread_mutex_lock(&r->mu);
        const int64_t b = r->next_batch;
        if (b >= r->nbatches && !r->status) {
            const int ended = r->active == 1;
            r->active = 2; /* the end was seen: log the skipped total once */
            pthread_mutex_unlock(&r->mu);
            if (ended) log_skipped(r);
            return 0;
        }
        const int64_t first = b * B;
        const int len = (int)(r->count - first < B ? r->count - first : B);
        while (!r->status && r->filled[b % P] < len) pthread_cond_wait(&r->cv, &r->mu);
        if (r->status) {
            const int st = r->status;
            char msg[sizeof r->err];
            memcpy(msg, r->err, sizeof msg);
            r->nbatches = r->next_batch; /* the pass is over */
            pthread_mutex_unlock(&r->mu);
            return fl__err(st, "%s", msg);
        }
        pthread_mutex_unlock(&r->mu);
        /* The slot is ours until next_batch moves on: copy its good images outside the lock. */
        const size_t at = (size_t)(b % P) * B;
        int n = 0;
        for (int i = 0; i < len; i++) {
            if (!r->slot_ok[at + i]) continue;
            memcpy(images + (size_t)n * r->chw, r->slot_img + (at + i) * r->chw, sizeof(float) * r->chw);
            labels[n++] = r->slot_lab[at + i];
        }
        pthread_mutex_lock(&r->mu);
        r->filled[b % P] = 0;
        r->next_batch++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (n) return n;
    }
}

int fl_data_image_load(const char *file, const fl_data_image_options *o, uint64_t seed, float *out)
{
    const char *fn = "fl_data_image_load";
    if (!file || !out) return fl__err(FL_EINVAL, "%s: file and out must not be NULL", fn);
    FL_CHECK(fl__image_supported(fn));
    fl_data_image_options opt;
    FL_CHECK(resolve(fn, o, &opt));
    fl__decoder *dec = NULL;
    FL_CHECK(fl__decoder_create(&dec));
    fl__image_scratch s = {{0}, {0}, {0}};
    fl_rng rng = {fl__hash_u64(seed)};
    const int st = fl__image_process(dec, file, &opt, &rng, &s, out);
    fl__image_scratch_free(&s);
    fl__decoder_free(dec);
    return st;
}
