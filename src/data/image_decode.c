/*
 * image_decode.c - an image file to interleaved RGB uint8.  The format is told by the file's
 * first bytes (a PNG named .JPEG, as one in ImageNet's training set, is read as the PNG it is),
 * one row of `formats` per kind: JPEG through libjpeg-turbo's TurboJPEG API (accurate integer
 * DCT and fancy upsampling, libjpeg's defaults, as Pillow decodes), PNG through libpng
 * (image_png.c).  A JPEG decodes at 1/2, 1/4 or 1/8 scale on request (DCT scaling: the IDCT
 * of each 8 x 8 block outputs 4 x 4, 2 x 2 or 1 x 1 pixels, as Pillow's draft() asks libjpeg).
 * A warning from the JPEG decoder (a truncated file, a corrupt segment) is an error here: a
 * partial image filled with grey must not be trained on.  Built without libjpeg-turbo, every
 * entry point fails with FL_EUNSUPPORTED.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_internal.h"

#ifdef FL_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

struct fl__decoder {
    void *tj; /* tjhandle */
    uint8_t *buf; /* the file read last: len bytes of cap */
    size_t cap, len;
    const struct format *fmt; /* its format (NULL: none open) */
    uint8_t *cmyk;            /* a CMYK JPEG's pixels before the conversion */
    size_t cmyk_cap;
};

/* A kind of image file: told by `magic` at its start; header sets the full size; decode writes
 * the image at 1/denom (denom > 1 only when scalable). */
struct format {
    const char *name;
    const char *magic;
    size_t magic_len;
    int scalable;
    int (*header)(fl__decoder *d, const char *file, int *h, int *w);
    int (*decode)(fl__decoder *d, const char *file, int denom, fl__image *im);
};

int fl__image_reserve(fl__image *im, int h, int w)
{
    const size_t need = (size_t)h * (size_t)w * 3;
    if (need > im->cap) {
        uint8_t *np = realloc(im->px, need);
        if (!np) return FL_ENOMEM;
        im->px = np;
        im->cap = need;
    }
    im->h = h;
    im->w = w;
    return FL_OK;
}

void fl__image_free(fl__image *im)
{
    if (!im) return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

int fl__image_supported(const char *fn)
{
#ifdef FL_HAVE_TURBOJPEG
    (void)fn;
    return FL_OK;
#else
    return fl__err(FL_EUNSUPPORTED,
                   "%s: images need libjpeg-turbo and this build has none (install libturbojpeg0-dev, "
                   "then rebuild)",
                   fn);
#endif
}

int fl__decoder_create(fl__decoder **out)
{
    *out = NULL;
    FL_CHECK(fl__image_supported("image decoder"));
    fl__decoder *d = calloc(1, sizeof *d);
    if (!d) return fl__err(FL_ENOMEM, "image decoder: out of memory");
#ifdef FL_HAVE_TURBOJPEG
    d->tj = tjInitDecompress();
    if (!d->tj) {
        free(d);
        return fl__err(FL_ENOMEM, "image decoder: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
    }
#endif
    *out = d;
    return FL_OK;
}

void fl__decoder_free(fl__decoder *d)
{
    if (!d) return;
#ifdef FL_HAVE_TURBOJPEG
    if (d->tj) tjDestroy(d->tj);
#endif
    free(d->buf);
    free(d->cmyk);
    free(d);
}

#ifdef FL_HAVE_TURBOJPEG
/* After a failed header or decode a TurboJPEG handle may keep the failed state (the next
 * valid file's header then reads as 0 x 0 pixels): a decoder that goes on after a bad file
 * (policy skip) starts from a fresh handle.  Returns st. */
static int reset_after(fl__decoder *d, int st)
{
    tjDestroy(d->tj);
    d->tj = tjInitDecompress();
    if (!d->tj) return fl__err(FL_ENOMEM, "image decoder: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
    return st;
}
#endif

/* Reads the whole file into d->buf; *len its size. */
static int read_file(fl__decoder *d, const char *file, size_t *len)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fl__err(errno == ENOENT ? FL_ENOTFOUND : FL_EIO, "%s: cannot open image: %s", file, strerror(errno));
    struct stat st;
    int status = FL_OK;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        status = fl__err(FL_EIO, "%s: not a regular file", file);
        goto out;
    }
    if ((size_t)st.st_size > FL__IMAGE_MAX_FILE) {
        status = fl__err(FL_ECORRUPT, "%s: image file of %lld bytes is larger than the limit of %zu", file,
                         (long long)st.st_size, FL__IMAGE_MAX_FILE);
        goto out;
    }
    size_t want = (size_t)st.st_size;
    if (want + 1 > d->cap) {
        uint8_t *nb = realloc(d->buf, want + 1);
        if (!nb) {
            status = fl__err(FL_ENOMEM, "%s: out of memory reading %zu bytes", file, want);
            goto out;
        }
        d->buf = nb;
        d->cap = want + 1;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, d->buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            status = fl__err(FL_EIO, "%s: read failed: %s", file, strerror(errno));
            goto out;
        }
        if (r == 0) break; /* shrank while read: decode what is there */
        got += (size_t)r;
    }
    *len = got;
out:
    close(fd);
    return status;
}

#ifdef FL_HAVE_TURBOJPEG
static int jpeg_header(fl__decoder *d, const char *file, int *h, int *w)
{
    int sub = 0, cs = 0;
    if (!d->tj) return fl__err(FL_ENOMEM, "%s: no image decoder (tjInitDecompress failed earlier)", file);
    if (tjDecompressHeader3(d->tj, d->buf, (unsigned long)d->len, w, h, &sub, &cs))
        return reset_after(d, fl__err(FL_ECORRUPT, "%s: corrupt JPEG header: %s", file, tjGetErrorStr2(d->tj)));
    return FL_OK;
}

/* Pillow's conversion of a CMYK JPEG to RGB: libjpeg's CMYK samples are taken as Adobe's
 * inverted ones (Pillow's rawmode "CMYK;I"), then its cmyk2rgb: with c, k the stored samples,
 * R = k - (255 - c) * k / 255 rounded as its MULDIV255. */
static void cmyk_to_rgb(const uint8_t *in, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++, in += 4, out += 3) {
        const int nk = in[3];
        for (int c = 0; c < 3; c++) {
            const int t = (255 - in[c]) * nk + 128;
            const int v = nk - (((t >> 8) + t) >> 8);
            out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static int jpeg_decode(fl__decoder *d, const char *file, int denom, fl__image *im)
{
    int w = 0, h = 0, sub = 0, cs = 0;
    if (!d->tj) return fl__err(FL_ENOMEM, "%s: no image decoder (tjInitDecompress failed earlier)", file);
    if (tjDecompressHeader3(d->tj, d->buf, (unsigned long)d->len, &w, &h, &sub, &cs))
        return reset_after(d, fl__err(FL_ECORRUPT, "%s: corrupt JPEG header: %s", file, tjGetErrorStr2(d->tj)));
    /* TurboJPEG picks the largest of its scaling factors whose output fits the size asked:
     * 1/denom (for an image of a few pixels, a larger factor of the same output size). */
    const tjscalingfactor sf = {1, denom};
    const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    const int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    if (fl__image_reserve(im, sh, sw)) return fl__err(FL_ENOMEM, "%s: out of memory for a %d x %d image", file, sw, sh);
    uint8_t *dst = im->px;
    if (cmyk) {
        const size_t need = (size_t)sh * (size_t)sw * 4;
        if (need > d->cmyk_cap) {
            uint8_t *np = realloc(d->cmyk, need);
            if (!np) return fl__err(FL_ENOMEM, "%s: out of memory for a %d x %d CMYK image", file, sw, sh);
            d->cmyk = np;
            d->cmyk_cap = need;
        }
        dst = d->cmyk;
    }
    if (tjDecompress2(d->tj, d->buf, (unsigned long)d->len, dst, sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB,
                      TJFLAG_STOPONWARNING)) {
        const int fatal = tjGetErrorCode(d->tj) == TJERR_FATAL;
        return reset_after(d, fl__err(FL_ECORRUPT, "%s: %s JPEG: %s", file, fatal ? "corrupt" : "truncated or corrupt",
                                      tjGetErrorStr2(d->tj)));
    }
    if (cmyk) cmyk_to_rgb(d->cmyk, (size_t)sh * (size_t)sw, im->px);
    return FL_OK;
}
#endif

static int png_header(fl__decoder *d, const char *file, int *h, int *w)
{
    return fl__png_header(file, d->buf, d->len, h, w);
}

static int png_decode(fl__decoder *d, const char *file, int denom, fl__image *im)
{
    (void)denom;
    return fl__png_decode(file, d->buf, d->len, im);
}

/* The formats read here; a new one is a row (its magic bytes, whether it scales, two functions). */
static const struct format formats[] = {
#ifdef FL_HAVE_TURBOJPEG
    {"JPEG", "\xFF\xD8\xFF", 3, 1, jpeg_header, jpeg_decode},
#endif
    {"PNG", "\x89PNG\r\n\x1a\n", 8, 0, png_header, png_decode},
};

int fl__image_open(fl__decoder *d, const char *file, int *h, int *w, int *scalable)
{
    d->fmt = NULL;
    FL_CHECK(fl__image_supported(file));
    size_t len = 0;
    FL_CHECK(read_file(d, file, &len));
    d->len = len;
    if (len == 0) return fl__err(FL_ECORRUPT, "%s: empty image file (0 bytes)", file);
    const struct format *f = NULL;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0] && !f; i++)
        if (len >= formats[i].magic_len && !memcmp(d->buf, formats[i].magic, formats[i].magic_len)) f = &formats[i];
    if (!f)
        return fl__err(FL_ECORRUPT, "%s: not a JPEG or PNG file (neither a JPEG start-of-image marker nor a PNG signature)",
                       file);
    FL_CHECK(f->header(d, file, h, w));
    if (*w <= 0 || *h <= 0 || (int64_t)*w * *h > FL__IMAGE_MAX_PIXELS)
        return fl__err(FL_ECORRUPT, "%s: %s of %d x %d pixels is outside the limit of %lld pixels", file, f->name, *w, *h,
                       (long long)FL__IMAGE_MAX_PIXELS);
    d->fmt = f;
    *scalable = f->scalable;
    return FL_OK;
}

int fl__image_decode(fl__decoder *d, const char *file, int denom, fl__image *im)
{
    if (!d->fmt) return fl__err(FL_ESTATE, "%s: no image open to decode", file);
    if (denom != 1 && (!d->fmt->scalable || (denom != 2 && denom != 4 && denom != 8)))
        return fl__err(FL_EINVAL, "%s: cannot decode a %s at 1/%d scale", file, d->fmt->name, denom);
    const int st = d->fmt->decode(d, file, denom, im);
    if (st) d->fmt = NULL;
    return st;
}

int fl__image_read(fl__decoder *d, const char *file, fl__image *im)
{
    int h = 0, w = 0, scalable = 0;
    FL_CHECK(fl__image_open(d, file, &h, &w, &scalable));
    return fl__image_decode(d, file, 1, im);
}
