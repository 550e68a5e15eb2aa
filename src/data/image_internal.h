/*
 * image_internal.h - private pieces of the image reader:
 *
 *   image_decode.c     an image file to interleaved RGB uint8: the format told by its first bytes,
 *                      JPEG through libjpeg-turbo (at 1/2, 1/4 or 1/8 scale when asked);
 *   image_png.c        PNG through libpng;
 *   image_transform.c  resize (Pillow's antialiased bilinear), crops, flip, normalisation, the
 *                      random resized crop's draws and the decode scale they allow;
 *   image_list.c       the set of (path, label): Paddle's list file or a class-per-directory tree;
 *   image_reader.c     the fl_data_image_reader handle, its decode threads and batch queue.
 *
 * Images here are HWC uint8 RGB (3 channels) unless said otherwise.
 */
#ifndef FL_IMAGE_INTERNAL_H
#define FL_IMAGE_INTERNAL_H

#include <stdint.h>

#include "fleet/data.h"
#include "../base/base_internal.h"

#define FL_IMAGE_READER_MAGIC 0x494d4752u /* "IMGR" */
/* Largest file read (bytes) and image decoded (pixels); larger ones are refused by name. */
#define FL__IMAGE_MAX_FILE ((size_t)256 << 20)
#define FL__IMAGE_MAX_PIXELS ((int64_t)1 << 28)

typedef struct {
    uint8_t *px; /* h * w * 3 */
    int h, w;
    size_t cap; /* bytes allocated at px */
} fl__image;
/* Makes room for h x w (keeps a larger buffer) and sets the size. */
int fl__image_reserve(fl__image *im, int h, int w);
void fl__image_free(fl__image *im);

/* ---- decoding (image_decode.c, image_png.c) ---- */
/* A decoder: one per thread (libjpeg-turbo handles are not shared); it holds the file read last. */
typedef struct fl__decoder fl__decoder;
int fl__decoder_create(fl__decoder **out);
void fl__decoder_free(fl__decoder *d);
/* Reads `file` and its header, the format told by its first bytes (not its name): *h x *w
 * pixels; *scalable 1 when it decodes at 1/2, 1/4 and 1/8 of that (a JPEG, by DCT scaling).
 * FL_ECORRUPT "FILE: what" for an empty, truncated or corrupt file or one of no format
 * known here, FL_EUNSUPPORTED for a PNG in a build without libpng, FL_EIO / FL_ENOTFOUND when
 * it cannot be read. */
int fl__image_open(fl__decoder *d, const char *file, int *h, int *w, int *scalable);
/* Decodes the file opened last at 1/denom (1, 2, 4 or 8; 1 when it is not scalable) into im,
 * ceil(h / denom) x ceil(w / denom) RGB (grey replicated, alpha dropped, CMYK converted as
 * Pillow converts it, 16-bit samples to their high byte), its buffer reused when large enough.
 * Errors as fl__image_open's. */
int fl__image_decode(fl__decoder *d, const char *file, int denom, fl__image *im);
/* Both at full size. */
int fl__image_read(fl__decoder *d, const char *file, fl__image *im);
/* FL_OK when this build decodes images (it has libjpeg-turbo), else FL_EUNSUPPORTED naming fn. */
int fl__image_supported(const char *fn);
/* PNG (image_png.c), on a file's bytes p[0 .. len); file names it in the errors. */
int fl__png_header(const char *file, const uint8_t *p, size_t len, int *h, int *w);
int fl__png_decode(const char *file, const uint8_t *p, size_t len, fl__image *im);

/* ---- transforms (image_transform.c) ---- */
typedef struct {
    int top, left, h, w; /* the crop of the source */
    int flip;
} fl__crop;
/* torchvision's RandomResizedCrop.get_params (then a flip draw) for an h x w image. */
fl__crop fl__image_random_crop(int h, int w, const fl_data_image_options *o, fl_rng *rng);
/* Eval geometry: the shorter side resized to o->resize (the longer one truncated as torchvision),
 * then the centre crop (offsets rounded half to even as Python's round). */
void fl__image_eval_size(int h, int w, int resize, int *rh, int *rw);
/* The DCT scale a crop of ch x cw pixels allows when it is resized to oh x ow: the largest of 8,
 * 4, 2 that leaves at least oh x ow pixels (Pillow's draft rule), else 1. */
int fl__image_denom(int ch, int cw, int oh, int ow);
/* Pillow's ImagingResample with BILINEAR (triangle filter widened by the scale when shrinking,
 * horizontal pass then vertical, each rounded to uint8) of the region (top, left, h, w) of src,
 * the image the filter sees (its edges clamp the filter), over `box` (x0, y0, x1, y1 in the
 * region's pixels, fractions allowed; NULL: the whole region), to oh x ow into dst (allocated
 * / reused; tmp holds the horizontal pass). */
int fl__image_resize(const fl__image *src, int top, int left, int h, int w, const float *box, int oh, int ow,
                     fl__image *tmp, fl__image *dst);
/* Writes the crop x crop region at (top, left) of src to out [3, crop, crop] normalised, mirrored
 * when flip. */
void fl__image_to_chw(const fl__image *src, int top, int left, int crop, int flip, const float mean[3], const float stdv[3],
                      float *out);
/* Scratch of one thread for fl__image_process: the decoded image and the two passes. */
typedef struct {
    fl__image im, a, b;
} fl__image_scratch;
void fl__image_scratch_free(fl__image_scratch *s);
/* Opens `file`, draws the transform of o (train: the crop and flip from rng), decodes at the
 * scale the crop allows (o->dct_scale) and writes the result into out [3, crop, crop]. */
int fl__image_process(fl__decoder *d, const char *file, const fl_data_image_options *o, fl_rng *rng, fl__image_scratch *s,
                      float *out);
/* Checks o (FL_EINVAL naming fn and the field). */
int fl__image_check_options(const char *fn, const fl_data_image_options *o);

/* ---- the set of images (image_list.c) ---- */
typedef struct {
    char **paths;
    int64_t *labels;
    int64_t n;
    int classes;
} fl__image_set;
/* A directory: class per sub-directory; a file: Paddle's list. */
int fl__image_set_load(const char *path, fl__image_set *set);
void fl__image_set_free(fl__image_set *set);

#endif
