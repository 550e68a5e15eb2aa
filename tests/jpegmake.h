/* jpegmake.h - test images: an RGB picture compressed by libjpeg-turbo (tjCompress2) into a
 * file, for the tests of the image reader and of the models reading it.  Only with
 * FL_HAVE_TURBOJPEG. */
#ifndef FLEET_TESTS_JPEGMAKE_H
#define FLEET_TESTS_JPEGMAKE_H

#include <stdint.h>
#include <stdio.h>
#include <turbojpeg.h>

#include "testhelp.h"

/* px (h x w RGB, row-major) at `quality`, 4:4:4, into path; returns the file size. */
static inline size_t th_write_jpeg(const char *path, const uint8_t *px, int h, int w, int quality)
{
    tjhandle tj = tjInitCompress();
    CHECK(tj != NULL);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    CHECK(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, &len, TJSAMP_444, quality, 0) == 0);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(jpeg, 1, len, f) == len);
    CHECK(fclose(f) == 0);
    tjFree(jpeg);
    tjDestroy(tj);
    return len;
}

#endif
