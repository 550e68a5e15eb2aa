/*
 * image_internal.h - private pieces of the image reader:
 *
 *   image_decode.c     a JPEG file to interleaved RGB uint8 through libjpeg-turbo;
 *   image_transform.c  resize (Pillow's antialiased bilinear), crops, flip, normalisation and
 *                      the random resized crop's draws;
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

/* ---- decoding (image_decode.c) ---- */
/* A decoder: one per thread (libjpeg-turbo handles are not shared). */
typedef struct fl__jpeg fl__jpeg;
int fl__jpeg_create(fl__jpeg **out);
void fl__jpeg_free(fl__jpeg *d);
/* Reads and decodes `file` into im (whose buffer is reused when large enough).  FL_ECORRUPT
 * "FILE: what" for an empty, truncated, corrupt or non-JPEG file, FL_EUNSUPPORTED for a PNG,
 * FL_EIO / FL_ENOTFOUND when it cannot be read. */
int fl__jpeg_decode(fl__jpeg *d, const char *file, fl__image *im);
/* FL_OK when this build decodes JPEG, else FL_EUNSUPPORTED naming fn. */
int fl__image_supported(const char *fn);

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
/* Resizes the region c of src to oh x ow into dst (allocated / reused): Pillow's BILINEAR
 * (triangle filter widened by the scale when shrinking), horizontal pass then vertical, each
 * rounded to uint8. */
int fl__image_resize(const fl__image *src, int top, int left, int h, int w, int oh, int ow, fl__image *tmp, fl__image *dst);
/* Writes the crop x crop region at (top, left) of src to out [3, crop, crop] normalised, mirrored
 * when flip. */
void fl__image_to_chw(const fl__image *src, int top, int left, int crop, int flip, const float mean[3], const float stdv[3],
                      float *out);
/* Scratch of one thread for fl__image_transform. */
typedef struct {
    fl__image a, b;
} fl__image_scratch;
void fl__image_scratch_free(fl__image_scratch *s);
/* The whole transform of o on a decoded image into out [3, crop, crop]. */
int fl__image_transform(const fl__image *im, const fl_data_image_options *o, fl_rng *rng, fl__image_scratch *s, float *out);
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
