/*
 * layout.c - the layouts a tensor's data can be in (layout.h) and the conversions between
 * them.  A conversion is a transpose of each [B, H*W] block of channels to [H*W, B] (or
 * back) into a new buffer of the same capacity, which then replaces the old one, so the
 * executor's buffer accounting (src/exec/eager.c) sees the same bytes.
 */
#include <stdatomic.h>
#include <string.h>

#include "layout.h"
#include "tensor_internal.h"

typedef struct {
    const char *name;
    int block; /* channels per block; 0: plain */
} layout_def;

static const layout_def layouts[FL_LAYOUT_COUNT] = {
    [FL_LAYOUT_PLAIN] = {"NCHW", 0},
    [FL_LAYOUT_NCHW16C] = {"nChw16c", 16},
    [FL_LAYOUT_NCHW8C] = {"nChw8c", 8},
};

static atomic_uint_fast64_t n_conv;

uint64_t fl__layout_conversions(void) { return atomic_load(&n_conv); }

int fl__layout_block(int lay) { return lay > 0 && lay < FL_LAYOUT_COUNT ? layouts[lay].block : 0; }

const char *fl__layout_name(int lay) { return lay >= 0 && lay < FL_LAYOUT_COUNT ? layouts[lay].name : "invalid"; }

int fl__layout_fits(int lay, int ndim, const int64_t *shape)
{
    if (lay == FL_LAYOUT_PLAIN) return 1;
    int b = fl__layout_block(lay);
    return b > 0 && ndim == 4 && shape[1] > 0 && shape[1] % b == 0;
}

/* The element types a blocked layout can hold: float32, and bfloat16 (AMP's casts). */
static int layout_dtype(fl_dtype dt) { return dt == FL_FLOAT32 || dt == FL_BFLOAT16; }

int fl__tensor_layout(const fl_tensor *t) { return t ? t->layout : FL_LAYOUT_PLAIN; }

int fl__tensor_set_layout(fl_tensor *t, int lay)
{
    if (lay != FL_LAYOUT_PLAIN && (!layout_dtype(t->dtype) || t->is_rows || !fl__layout_fits(lay, t->ndim, t->shape))) {
        char d[96];
        fl_tensor_describe(t, d, sizeof d);
        return fl__err(FL_EINVAL, "tensor layout: %s cannot be held as %s", d, fl__layout_name(lay));
    }
    t->layout = lay;
    fl__tensor_bump(t);
    return FL_OK;
}

/* dst = src moved between plain NCHW and blocks of B channels (to_blocked: plain ->
 * blocked), for elements of type T. */
#define CONVERT(name, T)                                                                               \
    static void name(void *dv, const void *sv, int64_t N, int64_t C, int64_t S, int B, int to_blocked) \
    {                                                                                                  \
        T *restrict dst = dv;                                                                          \
        const T *restrict src = sv;                                                                    \
        const int64_t CB = C / B;                                                                      \
        for (int64_t n = 0; n < N; n++)                                                                \
            for (int64_t cb = 0; cb < CB; cb++) {                                                      \
                const int64_t blk = (n * CB + cb) * S * B, pl = (n * C + cb * B) * S;                  \
                if (to_blocked)                                                                        \
                    for (int64_t s = 0; s < S; s++)                                                    \
                        for (int l = 0; l < B; l++) dst[blk + s * B + l] = src[pl + l * S + s];        \
                else                                                                                   \
                    for (int l = 0; l < B; l++)                                                        \
                        for (int64_t s = 0; s < S; s++) dst[pl + l * S + s] = src[blk + s * B + l];    \
            }                                                                                          \
    }
CONVERT(convert32, uint32_t)
CONVERT(convert16, uint16_t)

static void convert(void *dst, const void *src, fl_dtype dt, int64_t N, int64_t C, int64_t S, int B, int to_blocked)
{
    if (dt == FL_BFLOAT16) convert16(dst, src, N, C, S, B, to_blocked);
    else convert32(dst, src, N, C, S, B, to_blocked);
}

int fl__tensor_to_layout(fl_tensor *t, int lay)
{
    if (!t || t->layout == lay || !t->data || !t->numel) {
        if (t && !t->numel) t->layout = lay;
        return FL_OK;
    }
    if (lay != FL_LAYOUT_PLAIN && (!layout_dtype(t->dtype) || t->is_rows || !fl__layout_fits(lay, t->ndim, t->shape)))
        return fl__tensor_set_layout(t, lay); /* the error naming both */
    float *nd = fl__alloc_aligned(t->cap);
    if (!nd) return fl__err(FL_ENOMEM, "tensor layout: cannot allocate %zu bytes", t->cap);
    const int64_t N = t->shape[0], C = t->shape[1], S = t->shape[2] * t->shape[3];
    if (t->layout == FL_LAYOUT_PLAIN) {
        convert(nd, t->data, t->dtype, N, C, S, fl__layout_block(lay), 1);
    } else if (lay == FL_LAYOUT_PLAIN) {
        convert(nd, t->data, t->dtype, N, C, S, fl__layout_block(t->layout), 0);
    } else { /* blocked to another blocking: through plain */
        float *mid = fl__alloc_aligned(t->cap);
        if (!mid) {
            fl__free_aligned(nd);
            return fl__err(FL_ENOMEM, "tensor layout: cannot allocate %zu bytes", t->cap);
        }
        convert(mid, t->data, t->dtype, N, C, S, fl__layout_block(t->layout), 0);
        convert(nd, mid, t->dtype, N, C, S, fl__layout_block(lay), 1);
        fl__free_aligned(mid);
    }
    fl__free_aligned(t->data);
    t->data = nd;
    t->layout = lay;
    fl__tensor_bump(t);
    atomic_fetch_add(&n_conv, 1);
    return FL_OK;
}
