/*
 * image_png.c - a PNG file (its bytes in memory) to interleaved RGB uint8 through libpng,
 * as Pillow's Image.convert("RGB") gives it: grey replicated, a palette looked up, alpha (an
 * alpha channel or a palette's tRNS) dropped, not composited; 1, 2 and 4-bit grey scaled to
 * 0..255; 16-bit samples to their high byte (Pillow's RGB;16B).  No gamma or colour-profile
 * correction (Pillow applies none).  One difference: Pillow opens 16-bit grey as mode I;16
 * and its RGB conversion clips the 16-bit value to 255 (an image of white); here it is the
 * high byte, as for 16-bit colour.  libpng's errors (a bad CRC in a critical chunk, corrupt
 * compressed data, a file cut short) fail with FL_ECORRUPT naming the file; its warnings
 * (an unknown sRGB profile, a bad ancillary chunk) are ignored, as Pillow ignores them.
 * Built without libpng, a PNG file fails with FL_EUNSUPPORTED naming it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"

#ifdef FL_HAVE_PNG
#include <png.h>
#include <setjmp.h>

/* The largest side accepted before decoding (the pixel count is checked by the caller too). */
#define MAX_SIDE (1u << 20)

typedef struct {
    const uint8_t *p;
    size_t len, at;
    png_bytep *rows;
    char msg[256];
} src_t;

static void on_read(png_structp png, png_bytep out, size_t n)
{
    src_t *s = png_get_io_ptr(png);
    if (n > s->len - s->at) png_error(png, "the file ends early (truncated)");
    memcpy(out, s->p + s->at, n);
    s->at += n;
}

static void on_error(png_structp png, png_const_charp msg)
{
    src_t *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* The libpng calls between setjmp and the end: nothing here is changed after the setjmp and
 * read after a longjmp but through s.  Returns FL_OK, 1 after a libpng error (s->msg), or a
 * status set with its message. */
static int run(png_structp png, png_infop info, src_t *s, const char *file, fl__image *im)
{
    if (setjmp(png_jmpbuf(png))) return 1;
    png_set_read_fn(png, s, on_read);
    png_set_user_limits(png, MAX_SIDE, MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 w = 0, h = 0;
    int depth = 0, ctype = 0;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, NULL, NULL, NULL);
    if ((int64_t)w * h > FL__IMAGE_MAX_PIXELS)
        return fl__err(FL_ECORRUPT, "%s: PNG of %u x %u pixels is outside the limit of %lld pixels", file, (unsigned)w,
                       (unsigned)h, (long long)FL__IMAGE_MAX_PIXELS);
    if (depth == 16) png_set_strip_16(png);
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    /* after the palette's expansion, which adds alpha from tRNS */
    png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3)
        return fl__err(FL_ECORRUPT, "%s: PNG of colour type %d, depth %d: rows of %zu bytes, not RGB", file, ctype, depth,
                       (size_t)png_get_rowbytes(png, info));
    if (fl__image_reserve(im, (int)h, (int)w))
        return fl__err(FL_ENOMEM, "%s: out of memory for a %u x %u image", file, (unsigned)w, (unsigned)h);
    s->rows = malloc(sizeof *s->rows * h);
    if (!s->rows) return fl__err(FL_ENOMEM, "%s: out of memory", file);
    for (png_uint_32 y = 0; y < h; y++) s->rows[y] = im->px + (size_t)y * w * 3;
    png_read_image(png, s->rows);
    return FL_OK;
}
#endif

int fl__png_header(const char *file, const uint8_t *p, size_t len, int *h, int *w)
{
#ifdef FL_HAVE_PNG
    /* the signature, then the IHDR chunk: length 13, "IHDR", width, height (big-endian) */
    if (len < 24 || memcmp(p + 12, "IHDR", 4))
        return fl__err(FL_ECORRUPT, "%s: corrupt PNG: no IHDR chunk after the signature", file);
    const uint32_t pw = (uint32_t)p[16] << 24 | (uint32_t)p[17] << 16 | (uint32_t)p[18] << 8 | p[19];
    const uint32_t ph = (uint32_t)p[20] << 24 | (uint32_t)p[21] << 16 | (uint32_t)p[22] << 8 | p[23];
    if (pw == 0 || ph == 0 || pw > MAX_SIDE || ph > MAX_SIDE)
        return fl__err(FL_ECORRUPT, "%s: PNG of %u x %u pixels is outside the limit of %u a side", file, (unsigned)pw,
                       (unsigned)ph, MAX_SIDE);
    *w = (int)pw;
    *h = (int)ph;
    return FL_OK;
#else
    (void)p;
    (void)len;
    (void)h;
    (void)w;
    return fl__err(FL_EUNSUPPORTED, "%s: a PNG image and this build has no libpng (install libpng-dev, then rebuild)",
                   file);
#endif
}

int fl__png_decode(const char *file, const uint8_t *p, size_t len, fl__image *im)
{
#ifdef FL_HAVE_PNG
    src_t s = {p, len, 0, NULL, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return fl__err(FL_ENOMEM, "%s: out of memory for a PNG decoder", file);
    }
    int st = run(png, info, &s, file, im);
    if (st == 1) st = fl__err(FL_ECORRUPT, "%s: corrupt or truncated PNG: %s", file, s.msg);
    png_destroy_read_struct(&png, &info, NULL);
    free(s.rows);
    return st;
#else
    (void)p;
    (void)len;
    (void)im;
    return fl__png_header(file, NULL, 0, NULL, NULL);
#endif
}
