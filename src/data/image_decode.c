/*
 * image_decode.c - a JPEG file to interleaved RGB uint8 through libjpeg-turbo's TurboJPEG API
 * (accurate integer DCT and fancy upsampling, libjpeg's defaults, as Pillow decodes).  A
 * warning from the decoder (a truncated file, a corrupt segment) is an error here: a partial
 * image filled with grey must not be trained on.  Built without libjpeg-turbo, every entry
 * point fails with FL_EUNSUPPORTED.
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

struct fl__jpeg {
    void *tj; /* tjhandle */
    uint8_t *buf;
    size_t cap;
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

int fl__jpeg_create(fl__jpeg **out)
{
    *out = NULL;
    FL_CHECK(fl__image_supported("image decoder"));
    fl__jpeg *d = calloc(1, sizeof *d);
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

void fl__jpeg_free(fl__jpeg *d)
{
    if (!d) return;
#ifdef FL_HAVE_TURBOJPEG
    if (d->tj) tjDestroy(d->tj);
#endif
    free(d->buf);
    free(d);
}

#ifdef FL_HAVE_TURBOJPEG
/* After a failed header or decode a TurboJPEG handle may keep the failed state (the next
 * valid file's header then reads as 0 x 0 pixels): a decoder that goes on after a bad file
 * (policy skip) starts from a fresh handle.  Returns st. */
static int reset_after(fl__jpeg *d, int st)
{
    tjDestroy(d->tj);
    d->tj = tjInitDecompress();
    if (!d->tj) return fl__err(FL_ENOMEM, "image decoder: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
    return st;
}
#endif

/* Reads the whole file into d->buf; *len its size. */
static int read_file(fl__jpeg *d, const char *file, size_t *len)
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

int fl__jpeg_decode(fl__jpeg *d, const char *file, fl__image *im)
{
    size_t len = 0;
    FL_CHECK(read_file(d, file, &len));
    const uint8_t *p = d->buf;
    if (len == 0) return fl__err(FL_ECORRUPT, "%s: empty image file (0 bytes)", file);
    if (len >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        return fl__err(FL_EUNSUPPORTED, "%s: a PNG image; the image reader decodes JPEG only (convert it to JPEG)", file);
    if (len < 3 || p[0] != 0xFF || p[1] != 0xD8 || p[2] != 0xFF)
        return fl__err(FL_ECORRUPT, "%s: not a JPEG file (no JPEG start-of-image marker)", file);
#ifdef FL_HAVE_TURBOJPEG
    int w = 0, h = 0, sub = 0, cs = 0;
    if (!d->tj) return fl__err(FL_ENOMEM, "%s: no image decoder (tjInitDecompress failed earlier)", file);
    if (tjDecompressHeader3(d->tj, p, (unsigned long)len, &w, &h, &sub, &cs))
        return reset_after(d, fl__err(FL_ECORRUPT, "%s: corrupt JPEG header: %s", file, tjGetErrorStr2(d->tj)));
    if (w <= 0 || h <= 0 || (int64_t)w * h > FL__IMAGE_MAX_PIXELS)
        return fl__err(FL_ECORRUPT, "%s: JPEG of %d x %d pixels is outside the limit of %lld pixels", file, w, h,
                       (long long)FL__IMAGE_MAX_PIXELS);
    if (cs == TJCS_CMYK || cs == TJCS_YCCK)
        return fl__err(FL_EUNSUPPORTED, "%s: a CMYK JPEG; the image reader decodes RGB and greyscale JPEG only", file);
    if (fl__image_reserve(im, h, w)) return fl__err(FL_ENOMEM, "%s: out of memory for a %d x %d image", file, w, h);
    if (tjDecompress2(d->tj, p, (unsigned long)len, im->px, w, 0, h, TJPF_RGB, TJFLAG_STOPONWARNING)) {
        const int fatal = tjGetErrorCode(d->tj) == TJERR_FATAL;
        return reset_after(d, fl__err(FL_ECORRUPT, "%s: %s JPEG: %s", file, fatal ? "corrupt" : "truncated or corrupt",
                                      tjGetErrorStr2(d->tj)));
    }
    return FL_OK;
#else
    (void)im;
    return fl__image_supported(file);
#endif
}
