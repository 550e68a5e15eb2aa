/*
 * image_transform.c - the ImageNet transforms on decoded RGB images.
 *
 * Resizing is Pillow's BILINEAR resampling (libImaging/Resample.c), which torchvision's
 * Resize and RandomResizedCrop call on PIL images: a triangle filter whose support widens
 * by the scale factor when shrinking (antialiasing), coefficients in 22-bit fixed point,
 * a horizontal pass then a vertical one, each rounded to uint8.  Done the same way here, the
 * result is the same bytes as Pillow's.  The crop draws follow torchvision's
 * RandomResizedCrop.get_params; Python's round (half to even) is nearbyint.
 *
 * DCT scaling (dct_scale): the crop (train) or the resized size (eval) is known from the
 * JPEG's header before decoding, so the decode can stop at 1/2, 1/4 or 1/8 of the size when
 * that still holds at least the pixels the resize outputs (Pillow's draft() rule).  Eval then
 * resizes the whole scaled image as Pillow does after draft(); train resizes the crop's box in
 * the scaled image's coordinates (fractional: a scaled pixel i covers the full-size pixels
 * [i * denom, (i + 1) * denom)), as Pillow's resize(box=...) does, its filter reaching past the
 * box into the image.  The random draws are made on the full size, so a seed gives the same
 * crops and flips with or without the scaling.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

#define PRECISION_BITS (32 - 8 - 2)

void fl__image_scratch_free(fl__image_scratch *s)
{
    if (!s) return;
    fl__image_free(&s->im);
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
    if (o->dct_scale != 0 && o->dct_scale != 1)
        return fl__err(FL_EINVAL, "%s: dct_scale must be 0 or 1, got %d", fn, o->dct_scale);
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

int fl__image_denom(int ch, int cw, int oh, int ow)
{
    const int q = ch / oh < cw / ow ? ch / oh : cw / ow;
    return q >= 8 ? 8 : q >= 4 ? 4 : q >= 2 ? 2 : 1;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis: out_size windows over the
 * box [in0, in1) of in_size samples (single precision, as Pillow's box); bounds[2 * i] = first
 * sample, bounds[2 * i + 1] = count; k[ksize * i ...]. */
static int coeffs(int in_size, float in0, float in1, int out_size, int **bounds_out, int32_t **k_out, int *ksize_out)
{
    const double scale = (double)(in1 - in0) / out_size;
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
        const double center = in0 + (xx + 0.5) * scale, ss = 1.0 / filterscale;
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

/* The horizontal pass: rows of `in` (stride bytes apart, their first pixel at in) to ow pixels. */
static void hpass(const uint8_t *in, size_t stride, int rows, const int *b, const int32_t *kk, int ksize, int ow,
                  uint8_t *out)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = in + (size_t)y * stride;
        uint8_t *o = out + (size_t)y * ow * 3;
        for (int x = 0; x < ow; x++) {
            const int32_t *k = kk + (size_t)x * ksize;
            const uint8_t *p = row + (size_t)b[2 * x] * 3;
            const int n = b[2 * x + 1];
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int j = 0; j < n; j++, p += 3) {
                s0 += p[0] * k[j];
                s1 += p[1] * k[j];
                s2 += p[2] * k[j];
            }
            o[3 * x] = clip8(s0);
            o[3 * x + 1] = clip8(s1);
            o[3 * x + 2] = clip8(s2);
        }
    }
}

/* The vertical pass: `cols` pixels of the rows of `in` (stride bytes apart) to oh rows, each
 * output row summed row by row into acc (cols * 3 sums: the same integers as Pillow's). */
static void vpass(const uint8_t *in, size_t stride, int cols, const int *b, const int32_t *kk, int ksize, int oh,
                  uint8_t *out, int32_t *acc)
{
    const int n3 = cols * 3;
    for (int y = 0; y < oh; y++) {
        const int32_t *k = kk + (size_t)y * ksize;
        for (int i = 0; i < n3; i++) acc[i] = 1 << (PRECISION_BITS - 1);
        for (int j = 0; j < b[2 * y + 1]; j++) {
            const uint8_t *row = in + (size_t)(b[2 * y] + j) * stride;
            const int32_t kj = k[j];
            for (int i = 0; i < n3; i++) acc[i] += row[i] * kj;
        }
        uint8_t *o = out + (size_t)y * n3;
        for (int i = 0; i < n3; i++) o[i] = clip8(acc[i]);
    }
}

int fl__image_resize(const fl__image *src, int top, int left, int h, int w, const float *box, int oh, int ow,
                     fl__image *tmp, fl__image *dst)
{
    const float whole[4] = {0.0f, 0.0f, (float)w, (float)h};
    if (!box) box = whole;
    /* Pillow's need_horizontal / need_vertical */
    const int need_h = ow != w || box[0] != 0.0f || box[2] != (float)w;
    const int need_v = oh != h || box[1] != 0.0f || box[3] != (float)h;
    const size_t stride = (size_t)src->w * 3;
    const uint8_t *at = src->px + (size_t)top * stride + (size_t)left * 3;
    if (!need_h && !need_v) {
        if (fl__image_reserve(dst, h, w)) return fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d", h, w);
        for (int y = 0; y < h; y++) memcpy(dst->px + (size_t)y * w * 3, at + (size_t)y * stride, (size_t)w * 3);
        return FL_OK;
    }
    int *bh = NULL, *bv = NULL, kh = 0, kv = 0;
    int32_t *kkh = NULL, *kkv = NULL, *acc = NULL;
    int st = coeffs(w, box[0], box[2], ow, &bh, &kkh, &kh);
    if (!st) st = coeffs(h, box[1], box[3], oh, &bv, &kkv, &kv);
    if (st) goto out;
    /* the rows the vertical pass reads: the only ones the horizontal pass makes */
    const int first = bv[0], last = bv[2 * oh - 2] + bv[2 * oh - 1];
    if (need_h) {
        const int rows = need_v ? last - first : h;
        if (fl__image_reserve(need_v ? tmp : dst, rows, ow)) {
            st = fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d", rows, ow);
            goto out;
        }
        hpass(at + (need_v ? (size_t)first * stride : 0), stride, rows, bh, kkh, kh, ow, (need_v ? tmp : dst)->px);
        if (!need_v) goto out;
        for (int y = 0; y < oh; y++) bv[2 * y] -= first;
    }
    const int cols = need_h ? ow : w;
    acc = malloc(sizeof *acc * 3 * (size_t)cols);
    if (!acc || fl__image_reserve(dst, oh, cols)) {
        st = fl__err(FL_ENOMEM, "image resize: out of memory for %d x %d", oh, cols);
        goto out;
    }
    if (need_h) vpass(tmp->px, (size_t)ow * 3, cols, bv, kkv, kv, oh, dst->px, acc);
    else vpass(at, stride, cols, bv, kkv, kv, oh, dst->px, acc);
out:
    free(bh);
    free(bv);
    free(kkh);
    free(kkv);
    free(acc);
    return st;
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

int fl__image_process(fl__decoder *d, const char *file, const fl_data_image_options *o, fl_rng *rng, fl__image_scratch *s,
                      float *out)
{
    int h = 0, w = 0, scalable = 0;
    FL_CHECK(fl__image_open(d, file, &h, &w, &scalable));
    if (o->train) {
        const fl__crop c = fl__image_random_crop(h, w, o, rng);
        const int den = scalable && o->dct_scale ? fl__image_denom(c.h, c.w, o->crop, o->crop) : 1;
        FL_CHECK(fl__image_decode(d, file, den, &s->im));
        if (den == 1) {
            FL_CHECK(fl__image_resize(&s->im, c.top, c.left, c.h, c.w, NULL, o->crop, o->crop, &s->a, &s->b));
        } else {
            const float box[4] = {(float)c.left / (float)den, (float)c.top / (float)den, (float)(c.left + c.w) / (float)den,
                                  (float)(c.top + c.h) / (float)den};
            FL_CHECK(fl__image_resize(&s->im, 0, 0, s->im.h, s->im.w, box, o->crop, o->crop, &s->a, &s->b));
        }
        fl__image_to_chw(&s->b, 0, 0, o->crop, c.flip, o->mean, o->std, out);
        return FL_OK;
    }
    int rh = 0, rw = 0;
    fl__image_eval_size(h, w, o->resize, &rh, &rw);
    const int den = scalable && o->dct_scale ? fl__image_denom(h, w, rh, rw) : 1;
    FL_CHECK(fl__image_decode(d, file, den, &s->im));
    FL_CHECK(fl__image_resize(&s->im, 0, 0, s->im.h, s->im.w, NULL, rh, rw, &s->a, &s->b));
    const int top = (int)nearbyint((rh - o->crop) / 2.0), left = (int)nearbyint((rw - o->crop) / 2.0);
    fl__image_to_chw(&s->b, top, left, o->crop, 0, o->mean, o->std, out);
    return FL_OK;
}
