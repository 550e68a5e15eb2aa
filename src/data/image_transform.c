/*
 * image_transform.c - the ImageNet transforms on decoded RGB images.
 *
 * Resizing is Pillow's BILINEAR resampling (libImaging/Resample.c), which torchvision's
 * Resize and RandomResizedCrop call on PIL images: a triangle filter whose support widens
 * by the scale factor when shrinking (antialiasing), coefficients in 22-bit fixed point,
 * a horizontal pass then a vertical one, each rounded to uint8.  Done the same way here, the
 * result is the same bytes as Pillow's.  The crop draws follow torchvision's
 * RandomResizedCrop.get_params; Python's round (half to even) is nearbyint.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

#define PRECISION_BITS (32 - 8 - 2)

void fl__image_scratch_free(fl__image_scratch *s)
{
    if (!s) return;
    fl__image_free(&s->a);
    fl__image_free(&s->b);
}

int fl__image_check_options(const char *fn, const fl_data_image_options *o)
{
    if (o->batch_size < 1 || o->batch_size > 65536)
        return fl__err(FL_EINVAL, "%s: batch_size must be in [1, 65536], got %d", fn, o->batch_size);
    if (o->threads < 1 || o->threads > 256)
        return fl__err(FL_EINVAL, "%s: threads must be in [1, 256], got %d", fn, o->threads);
    if (o->prefetch < 1 || o->prefetch > 1024)
        return fl__err(FL_EINVAL, "%s: prefetch must be in [1, 1024], got %d", fn, o->prefetch);
    if (o->crop < 1 || o->crop > 8192) return fl__err(FL_EINVAL, "%s: crop must be in [1, 8192], got %d", fn, o->crop);
    if (!o->train && (o->resize < o->crop || o->resize > 65536))
        return fl__err(FL_EINVAL, "%s: resize must be in [crop (%d), 65536], got %d", fn, o->crop, o->resize);
    if (!(o->scale[0] > 0 && o->scale[0] <= o->scale[1] && o->scale[1] <= 1))
        return fl__err(FL_EINVAL, "%s: scale must satisfy 0 < scale[0] <= scale[1] <= 1, got [%g, %g]", fn,
                       (double)o->scale[0], (double)o->scale[1]);
    if (!(o->ratio[0] > 0 && o->ratio[0] <= o->ratio[1] && isfinite(o->ratio[1])))
        return fl__err(FL_EINVAL, "%s: ratio must satisfy 0 < ratio[0] <= ratio[1], got [%g, %g]", fn, (double)o->ratio[0],
                       (double)o->ratio[1]);
    if (!(o->flip >= 0 && o->flip <= 1))
        return fl__err(FL_EINVAL, "%s: flip must be a probability in [0, 1], got %g", fn, (double)o->flip);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(o->mean[c]) || !isfinite(o->std[c]) || o->std[c] == 0)
            return fl__err(FL_EINVAL, "%s: mean[%d] and std[%d] must be finite and std non-zero, got %g and %g", fn, c, c,
                           (double)o->mean[c], (double)o->std[c]);
    }
    if (o->nranks < 1 || o->rank < 0 || o->rank >= o->nranks)
        return fl__err(FL_EINVAL, "%s: need 0 <= rank < nranks, got rank %d of %d", fn, o->rank, o->nranks);
    return FL_OK;
}

fl__crop fl__image_random_crop(int height, int width, const fl_data_image_options *o, fl_rng *rng)
{
    fl__crop c = {0, 0, height, width, 0};
    const double area = (double)height * width;
    const double lr0 = log(o->ratio[0]), lr1 = log(o->ratio[1]);
    int found = 0;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        const double target = area * (o->scale[0] + (o->scale[1] - o->scale[0]) * (double)fl__rng_uniform(rng));
        const double ar = exp(lr0 + (lr1 - lr0) * (double)fl__rng_uniform(rng));
        const int w = (int)nearbyint(sqrt(target * ar)), h = (int)nearbyint(sqrt(target / ar));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            c.h = h;
            c.w = w;
            c.top = (int)(fl__rng_next(rng) % (uint64_t)(height - h + 1));
            c.left = (int)(fl__rng_next(rng) % (uint64_t)(width - w + 1));
            found = 1;
        }
    }
    if (!found) { /* torchvision's fallback: a centre crop clamped to the ratio range */
        const double in_ratio = (double)width / height;
        if (in_ratio < o->ratio[0]) {
            c.w = width;
            c.h = (int)nearbyint(width / (double)o->ratio[0]);
        } else if (in_ratio > o->ratio[1]) {
            c.h = height;
            c.w = (int)nearbyint(height * (double)o->ratio[1]);
        }
        if (c.h < 1) c.h = 1;
        if (c.w < 1) c.w = 1;
        if (c.h > height) c.h = height;
        if (c.w > width) c.w = width;
        c.top = (height - c.h) / 2;
        c.left = (width - c.w) / 2;
    }
    c.flip = o->flip > 0 && fl__rng_uniform(rng) < o->flip;
    return c;
}

void fl__image_eval_size(int h, int w, int resize, int *rh, int *rw)
{
    if (h <= w) {
        *rh = resize;
        *rw = (int)((int64_t)resize * w / h);
    } else {
        *rw = resize;
        *rh = (int)((int64_t)resize * h / w);
    }
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis: out_size windows over
 * in_size samples; bounds[2 * i] = first sample, bounds[2 * i + 1] = count; k[ksize * i ...]. */
static int coeffs(int in_size, int out_size, int **bounds_out, int32_t **k_out, int *ksize_out)
{
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = malloc(sizeof *bounds * 2 * (size_t)out_size);
    int32_t *kk = calloc((size_t)out_size * (size_t)ksize, sizeof *kk);
    double *pre = malloc(sizeof *pre * (size_t)ksize);
    if (!bounds || !kk || !pre) {
        free(bounds);
        free(kk);
        free(pre);
        return fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d coefficients", out_size, ksize);
    }
    for (int xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            pre[x] = t < 1.0 ? 1.0 - t : 0.0;
            ww += pre[x];
        }
        for (int x = 0; x < xmax; x++) {
            const double v = ww != 0.0 ? pre[x] / ww : pre[x];
            kk[(size_t)xx * ksize + x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS)
                                                         : 0.5 + v * (1 << PRECISION_BITS));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(pre);
    *bounds_out = bounds;
    *k_out = kk;
    *ksize_out = ksize;
    return FL_OK;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass along x (horizontal) or y (vertical) of the region (top, left, h, w) of src into dst. */
static int pass(const fl__image *src, int top, int left, int h, int w, int horizontal, int out_size, fl__image *dst)
{
    int *b = NULL, ksize = 0;
    int32_t *kk = NULL;
    FL_CHECK(coeffs(horizontal ? w : h, out_size, &b, &kk, &ksize));
    const int oh = horizontal ? h : out_size, ow = horizontal ? out_size : w;
    if (fl__image_reserve(dst, oh, ow)) {
        free(b);
        free(kk);
        return fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d", oh, ow);
    }
    const size_t stride = (size_t)src->w * 3;
    for (int y = 0; y < oh; y++) {
        uint8_t *o = dst->px + (size_t)y * ow * 3;
        for (int x = 0; x < ow; x++) {
            const int i = horizontal ? x : y;
            const int32_t *k = kk + (size_t)i * ksize;
            const int lo = b[2 * i], n = b[2 * i + 1];
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int j = 0; j < n; j++) {
                const uint8_t *p = horizontal ? src->px + (size_t)(top + y) * stride + (size_t)(left + lo + j) * 3
                                              : src->px + (size_t)(top + lo + j) * stride + (size_t)(left + x) * 3;
                s0 += p[0] * k[j];
                s1 += p[1] * k[j];
                s2 += p[2] * k[j];
            }
            o[3 * x] = clip8(s0);
            o[3 * x + 1] = clip8(s1);
            o[3 * x + 2] = clip8(s2);
        }
    }
    free(b);
    free(kk);
    return FL_OK;
}

int fl__image_resize(const fl__image *src, int top, int left, int h, int w, int oh, int ow, fl__image *tmp, fl__image *dst)
{
    if (w != ow && h != oh) {
        FL_CHECK(pass(src, top, left, h, w, 1, ow, tmp));
        return pass(tmp, 0, 0, h, ow, 0, oh, dst);
    }
    if (w != ow) return pass(src, top, left, h, w, 1, ow, dst);
    if (h != oh) return pass(src, top, left, h, w, 0, oh, dst);
    if (fl__image_reserve(dst, h, w)) return fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d", h, w);
    for (int y = 0; y < h; y++)
        memcpy(dst->px + (size_t)y * w * 3, src->px + ((size_t)(top + y) * src->w + left) * 3, (size_t)w * 3);
    return FL_OK;
}

void fl__image_to_chw(const fl__image *src, int top, int left, int crop, int flip, const float mean[3], const float stdv[3],
                      float *out)
{
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) lut[c][v] = ((float)v / 255.0f - mean[c]) / stdv[c];
    const size_t plane = (size_t)crop * crop;
    for (int y = 0; y < crop; y++) {
        const uint8_t *row = src->px + ((size_t)(top + y) * src->w + left) * 3;
        for (int x = 0; x < crop; x++) {
            const uint8_t *p = row + (size_t)(flip ? crop - 1 - x : x) * 3;
            const size_t at = (size_t)y * crop + x;
            out[at] = lut[0][p[0]];
            out[plane + at] = lut[1][p[1]];
            out[2 * plane + at] = lut[2][p[2]];
        }
    }
}

int fl__image_transform(const fl__image *im, const fl_data_image_options *o, fl_rng *rng, fl__image_scratch *s, float *out)
{
    if (o->train) {
        const fl__crop c = fl__image_random_crop(im->h, im->w, o, rng);
        FL_CHECK(fl__image_resize(im, c.top, c.left, c.h, c.w, o->crop, o->crop, &s->a, &s->b));
        fl__image_to_chw(&s->b, 0, 0, o->crop, c.flip, o->mean, o->std, out);
        return FL_OK;
    }
    int rh = 0, rw = 0;
    fl__image_eval_size(im->h, im->w, o->resize, &rh, &rw);
    FL_CHECK(fl__image_resize(im, 0, 0, im->h, im->w, rh, rw, &s->a, &s->b));
    const int top = (int)nearbyint((rh - o->crop) / 2.0), left = (int)nearbyint((rw - o->crop) / 2.0);
    fl__image_to_chw(&s->b, top, left, o->crop, 0, o->mean, o->std, out);
    return FL_OK;
}
