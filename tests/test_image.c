/* test_image.c - the image reader: JPEG decoding against the source pixels (files made here
 * with libjpeg-turbo's compressor), the list and directory layouts and their labels, bad
 * lines and bad files named in the errors, the transforms' geometry and the train
 * transform's statistics, and the threaded reader's epochs (each image exactly once, in
 * order or shuffled, sharded, reproducible). */
#include <stdint.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "data/image_internal.h"

#ifdef FL_HAVE_TURBOJPEG
#include <turbojpeg.h>

/* A PNG cut after its IHDR: corrupt with libpng, refused by name without it. */
#ifdef FL_HAVE_PNG
#define PNG_BAD FL_ECORRUPT
#else
#define PNG_BAD FL_EUNSUPPORTED
#endif

static char tmp[256];

static void mktmp(void) { th_mktemp(tmp, sizeof tmp, "fleet-test-image-"); }

static void rmtmp(void) { th_rmtree(tmp); }

/* A smooth pattern: r ramps along x, g along y, b a constant plus the image's tag. */
static uint8_t *pattern(int h, int w, int tag)
{
    uint8_t *px = malloc((size_t)h * w * 3);
    CHECK(px != NULL);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 200 / (w > 1 ? w - 1 : 1) + 20);
            p[1] = (uint8_t)(y * 180 / (h > 1 ? h - 1 : 1) + 30);
            p[2] = (uint8_t)tag;
        }
    return px;
}

/* Compresses px (h x w RGB) at quality 100, 4:4:4, into path; returns the file size. */
static size_t write_jpeg(const char *path, const uint8_t *px, int h, int w)
{
    tjhandle tj = tjInitCompress();
    CHECK(tj != NULL);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    CHECK(tjCompress2(tj, px, w, 0, h, TJPF_RGB, &jpeg, &len, TJSAMP_444, 100, 0) == 0);
    th_write_bytes(path, jpeg, len);
    tjFree(jpeg);
    tjDestroy(tj);
    return len;
}

static void pattern_jpeg(const char *path, int h, int w, int tag)
{
    uint8_t *px = pattern(h, w, tag);
    write_jpeg(path, px, h, w);
    free(px);
}

TEST(decode_matches_source)
{
    mktmp();
    char path[400];
    snprintf(path, sizeof path, "%s/a.jpg", tmp);
    const int h = 48, w = 64;
    uint8_t *px = pattern(h, w, 77);
    write_jpeg(path, px, h, w);
    fl__decoder *d = NULL;
    CHECK_OK(fl__decoder_create(&d));
    fl__image im = {0};
    CHECK_OK(fl__image_read(d, path, &im));
    CHECK_EQ_INT(im.h, h);
    CHECK_EQ_INT(im.w, w);
    int worst = 0;
    double sum = 0;
    for (size_t i = 0; i < (size_t)h * w * 3; i++) {
        int e = abs((int)im.px[i] - (int)px[i]);
        sum += e;
        if (e > worst) worst = e;
    }
    /* quality 100, 4:4:4, smooth: only rounding in the colour transform and the DCT */
    if (worst > 5 || sum / (h * w * 3) > 1.0) TFAIL("largest difference %d, mean %g", worst, sum / (h * w * 3));
    /* the decoder and its buffer are reused for a second, larger image */
    snprintf(path, sizeof path, "%s/b.jpg", tmp);
    pattern_jpeg(path, 100, 90, 5);
    CHECK_OK(fl__image_read(d, path, &im));
    CHECK_EQ_INT(im.h, 100);
    CHECK_EQ_INT(im.w, 90);
    CHECK_NEAR(im.px[3 * (50 * 90 + 45) + 2], 5, 3);
    fl__image_free(&im);
    fl__decoder_free(d);
    free(px);
    rmtmp();
}

TEST(bad_files_are_named)
{
    mktmp();
    char good[400], p[400];
    snprintf(good, sizeof good, "%s/good.jpg", tmp);
    pattern_jpeg(good, 64, 64, 1);
    FILE *f = fopen(good, "rb");
    CHECK(f != NULL);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n > 600);
    float *out = malloc(sizeof(float) * 3 * 224 * 224);
    CHECK_OK(fl_data_image_load(good, NULL, 0, out));

    snprintf(p, sizeof p, "%s/empty.jpg", tmp);
    th_write_bytes(p, buf, 0);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ECORRUPT, p);
    CHECK_STR_HAS(fl_last_error(), "empty");

    snprintf(p, sizeof p, "%s/truncated.jpg", tmp);
    th_write_bytes(p, buf, n / 2);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ECORRUPT, p);

    snprintf(p, sizeof p, "%s/header.jpg", tmp);
    th_write_bytes(p, buf, 40);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ECORRUPT, p);

    /* the entropy-coded data replaced by noise after the headers */
    uint8_t bad[65536];
    memcpy(bad, buf, n);
    fl_rng g = {42};
    for (size_t i = n / 3; i < n - 2; i++) bad[i] = (uint8_t)fl__rng_next(&g);
    snprintf(p, sizeof p, "%s/corrupt.jpg", tmp);
    th_write_bytes(p, bad, n);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ECORRUPT, p);

    snprintf(p, sizeof p, "%s/text.jpg", tmp);
    th_write_bytes(p, "hello, not an image\n", 20);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ECORRUPT, p);
    CHECK_STR_HAS(fl_last_error(), "not a JPEG");

    snprintf(p, sizeof p, "%s/pic.png", tmp);
    th_write_bytes(p, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), PNG_BAD, p);
    CHECK_STR_HAS(fl_last_error(), "PNG");

    snprintf(p, sizeof p, "%s/missing.jpg", tmp);
    CHECK_FAILS(fl_data_image_load(p, NULL, 0, out), FL_ENOTFOUND, p);
    free(out);
    rmtmp();
}

TEST(list_layout_and_labels)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/train", tmp);
    CHECK(mkdir(p, 0755) == 0);
    const int labels[3] = {4, 0, 2};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/train/img %d.jpg", tmp, i); /* a blank inside the path */
        pattern_jpeg(p, 20, 30, i);
    }
    snprintf(p, sizeof p, "%s/train.txt", tmp);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fprintf(f, "train/img 0.jpg 4\r\n\n  train/img 1.jpg\t0\ntrain/img 2.jpg 2\n");
    fclose(f);
    fl_data_image_reader *r = fl_data_image_reader_create(p, NULL);
    CHECK(r != NULL);
    CHECK_EQ_INT(fl_data_image_reader_size(r), 3);
    CHECK_EQ_INT(fl_data_image_reader_num_classes(r), 5);
    for (int i = 0; i < 3; i++) {
        const char *path = NULL;
        int64_t label = -1;
        CHECK_OK(fl_data_image_reader_item(r, i, &path, &label));
        char want[400];
        snprintf(want, sizeof want, "%s/train/img %d.jpg", tmp, i);
        CHECK(!strcmp(path, want));
        CHECK_EQ_INT(label, labels[i]);
    }
    CHECK_FAILS(fl_data_image_reader_item(r, 3, NULL, NULL), FL_EINVAL, "fl_data_image_reader_item");
    fl_data_image_reader_free(r);

    const char *bad[] = {"train/img 0.jpg 1\ntrain/img 1.jpg\n", "train/img 0.jpg 1\n\ntrain/img 1.jpg x7\n",
                         "train/img 0.jpg 1\ntrain/img 1.jpg -3\n"};
    const char *where[] = {":2:", ":3:", ":2:"};
    for (int i = 0; i < 3; i++) {
        f = fopen(p, "w");
        fputs(bad[i], f);
        fclose(f);
        CHECK(fl_data_image_reader_create(p, NULL) == NULL);
        CHECK_EQ_INT(fl_last_status(), FL_ECORRUPT);
        char want[400];
        snprintf(want, sizeof want, "%s%s", p, where[i]);
        CHECK_STR_HAS(fl_last_error(), want);
    }
    rmtmp();
}

TEST(directory_layout_and_labels)
{
    mktmp();
    const char *classes[] = {"zebra", "ant", "moth"}; /* sorted: ant 0, moth 1, zebra 2 */
    const int want_label[] = {2, 0, 1};
    char p[400];
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/%s", tmp, classes[c]);
        CHECK(mkdir(p, 0755) == 0);
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/%s/%c.JPG", tmp, classes[c], 'b' - i);
            pattern_jpeg(p, 16, 16, c);
        }
        snprintf(p, sizeof p, "%s/%s/notes.txt", tmp, classes[c]);
        th_write_bytes(p, "x", 1);
    }
    snprintf(p, sizeof p, "%s/README", tmp); /* a file at the top is not a class */
    th_write_bytes(p, "x", 1);
    fl_data_image_reader *r = fl_data_image_reader_create(tmp, NULL);
    CHECK(r != NULL);
    CHECK_EQ_INT(fl_data_image_reader_size(r), 6);
    CHECK_EQ_INT(fl_data_image_reader_num_classes(r), 3);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 2; i++) {
            const char *path = NULL;
            int64_t label = -1;
            CHECK_OK(fl_data_image_reader_item(r, 2 * want_label[c] + i, &path, &label));
            char want[400];
            snprintf(want, sizeof want, "%s/%s/%c.JPG", tmp, classes[c], 'a' + i);
            CHECK(!strcmp(path, want));
            CHECK_EQ_INT(label, want_label[c]);
        }
    fl_data_image_reader_free(r);
    snprintf(p, sizeof p, "%s/nothing", tmp);
    CHECK(fl_data_image_reader_create(p, NULL) == NULL);
    CHECK_EQ_INT(fl_last_status(), FL_ENOTFOUND);
    CHECK_STR_HAS(fl_last_error(), p);
    rmtmp();
}

TEST(options_are_checked)
{
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    CHECK_EQ_INT(o.crop, 224);
    CHECK_EQ_INT(o.resize, 256);
    float out[3];
    o.crop = 0;
    CHECK_FAILS(fl_data_image_load("/nonexistent.jpg", &o, 0, out), FL_EINVAL, "crop");
    fl_data_image_options_init(&o);
    o.scale[0] = 0.9f;
    o.scale[1] = 0.5f;
    CHECK_FAILS(fl_data_image_load("/nonexistent.jpg", &o, 0, out), FL_EINVAL, "scale");
    fl_data_image_options_init(&o);
    o.resize = 100;
    CHECK_FAILS(fl_data_image_load("/nonexistent.jpg", &o, 0, out), FL_EINVAL, "resize");
    fl_data_image_options_init(&o);
    o.rank = 2;
    o.nranks = 2;
    CHECK(fl_data_image_reader_create("/tmp", &o) == NULL);
    CHECK_STR_HAS(fl_last_error(), "rank");
}

/* Eval: the shorter side resized (a no-op when it is already `resize`), the centre crop at
 * offsets rounded half to even, then normalised. */
TEST(eval_transform_geometry)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/wide.jpg", tmp);
    const int h = 40, w = 75, crop = 32; /* (75 - 32) / 2 = 21.5 -> 22 (half to even) */
    pattern_jpeg(p, h, w, 99);
    fl__decoder *d = NULL;
    fl__image im = {0};
    CHECK_OK(fl__decoder_create(&d));
    CHECK_OK(fl__image_read(d, p, &im));
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.resize = h;
    o.crop = crop;
    float *out = malloc(sizeof(float) * 3 * crop * crop);
    CHECK_OK(fl_data_image_load(p, &o, 0, out));
    const int top = 4, left = 22;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < crop; y++)
            for (int x = 0; x < crop; x++) {
                const uint8_t v = im.px[((size_t)(top + y) * w + left + x) * 3 + c];
                const float want = ((float)v / 255.0f - o.mean[c]) / o.std[c];
                CHECK_NEAR(out[(size_t)c * crop * crop + (size_t)y * crop + x], want, 1e-6);
            }
    int rh = 0, rw = 0;
    fl__image_eval_size(480, 640, 256, &rh, &rw);
    CHECK_EQ_INT(rh, 256);
    CHECK_EQ_INT(rw, 341); /* int(256 * 640 / 480) */
    fl__image_eval_size(500, 333, 256, &rh, &rw);
    CHECK_EQ_INT(rw, 256);
    CHECK_EQ_INT(rh, 384);
    free(out);
    fl__image_free(&im);
    fl__decoder_free(d);
    rmtmp();
}

/* Resizing keeps a constant image constant and a linear ramp linear (the filter's weights sum
 * to one and are symmetric), shrinking or growing. */
TEST(resize_is_a_normalised_filter)
{
    fl__image src = {0}, tmpi = {0}, dst = {0};
    CHECK_OK(fl__image_reserve(&src, 60, 90));
    for (int y = 0; y < 60; y++)
        for (int x = 0; x < 90; x++) {
            uint8_t *q = src.px + ((size_t)y * 90 + x) * 3;
            q[0] = 123;
            q[1] = (uint8_t)(2 * x);
            q[2] = (uint8_t)(3 * y);
        }
    const int sizes[][2] = {{30, 45}, {17, 29}, {120, 100}, {60, 30}, {25, 90}}; /* both, width only, height only */
    for (int s = 0; s < 5; s++) {
        const int oh = sizes[s][0], ow = sizes[s][1];
        CHECK_OK(fl__image_resize(&src, 0, 0, 60, 90, NULL, oh, ow, &tmpi, &dst));
        CHECK_EQ_INT(dst.h, oh);
        CHECK_EQ_INT(dst.w, ow);
        for (int y = 2; y < oh - 2; y++)
            for (int x = 2; x < ow - 2; x++) {
                const uint8_t *q = dst.px + ((size_t)y * ow + x) * 3;
                CHECK_EQ_INT(q[0], 123);
                /* the sample centre (x + 0.5) * scale - 0.5 in source pixels */
                CHECK_NEAR(q[1], 2 * ((x + 0.5) * 90.0 / ow - 0.5), 1.01);
                CHECK_NEAR(q[2], 3 * ((y + 0.5) * 60.0 / oh - 0.5), 1.51);
            }
    }
    fl__image_free(&src);
    fl__image_free(&tmpi);
    fl__image_free(&dst);
}

TEST(train_crop_statistics)
{
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.train = 1;
    const int H = 375, W = 500, N = 20000;
    fl_rng g = {7};
    int flips = 0;
    double area_sum = 0, amin = 2, amax = 0, rmin = 10, rmax = 0;
    for (int i = 0; i < N; i++) {
        fl__crop c = fl__image_random_crop(H, W, &o, &g);
        CHECK(c.h >= 1 && c.w >= 1 && c.top >= 0 && c.left >= 0);
        CHECK(c.top + c.h <= H && c.left + c.w <= W);
        const double a = (double)c.h * c.w / ((double)H * W), r = (double)c.w / c.h;
        area_sum += a;
        if (a < amin) amin = a;
        if (a > amax) amax = a;
        if (r < rmin) rmin = r;
        if (r > rmax) rmax = r;
        flips += c.flip;
    }
    /* rounding the sides to whole pixels moves the area and ratio by a pixel at most */
    CHECK(amin >= 0.08 * 0.99 && amax <= 1.0);
    CHECK(rmin >= 0.75 * 0.98 && rmax <= 4.0 / 3.0 * 1.02);
    CHECK(amin < 0.09);                /* the small end of the range is reached */
    CHECK(rmin < 0.77 && rmax > 1.30); /* and both ends of the ratio range */
    CHECK_NEAR((double)flips / N, 0.5, 0.02);
    /* mean area: uniform draws in [0.08, 1] mostly accepted, some out-of-bounds tries redrawn */
    CHECK(area_sum / N > 0.4 && area_sum / N < 0.6);
    /* the same seed gives the same crops */
    fl_rng a1 = {99}, a2 = {99};
    for (int i = 0; i < 100; i++) {
        fl__crop x = fl__image_random_crop(H, W, &o, &a1), y = fl__image_random_crop(H, W, &o, &a2);
        CHECK(!memcmp(&x, &y, sizeof x));
    }
    /* the fallback: a sliver far outside the ratio range is centre-cropped to the ratio bound */
    o.scale[0] = 0.99f;
    fl_rng s = {1};
    fl__crop c = fl__image_random_crop(10, 1000, &o, &s);
    CHECK_EQ_INT(c.h, 10);
    CHECK_EQ_INT(c.w, 13); /* round(10 * 4/3) */
    CHECK_EQ_INT(c.left, (1000 - 13) / 2);
    o.flip = 0;
    for (int i = 0; i < 100; i++) CHECK(!fl__image_random_crop(H, W, &o, &g).flip);
}

/* A list of n constant-ish images whose label is their index and whose blue channel encodes it. */
static void make_set(int n, char *list, size_t cap)
{
    mktmp();
    snprintf(list, cap, "%s/val.txt", tmp);
    FILE *f = fopen(list, "w");
    CHECK(f != NULL);
    for (int i = 0; i < n; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/%03d.jpg", tmp, i);
        pattern_jpeg(p, 24 + i % 5, 30 + i % 7, 10 * i);
        fprintf(f, "%03d.jpg %d\n", i, i);
    }
    fclose(f);
}

/* Reads an epoch; seen[label]++; checks each image's blue channel against its label. */
static int read_epoch(fl_data_image_reader *r, const fl_data_image_options *o, int epoch, int *seen, int64_t *order)
{
    const size_t chw = (size_t)3 * o->crop * o->crop;
    float *img = malloc(sizeof(float) * chw * (size_t)o->batch_size);
    int64_t lab[64];
    CHECK_OK(fl_data_image_reader_begin(r, epoch));
    int total = 0, n;
    while ((n = fl_data_image_reader_next(r, img, lab)) > 0) {
        CHECK(n <= o->batch_size);
        for (int i = 0; i < n; i++) {
            seen[lab[i]]++;
            order[total + i] = lab[i];
            const float blue = img[(size_t)i * chw + 2 * (size_t)o->crop * o->crop + 5];
            CHECK_NEAR(blue * o->std[2] + o->mean[2], (10.0 * lab[i]) / 255.0, 4.0 / 255);
        }
        total += n;
    }
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(fl_data_image_reader_next(r, img, lab), 0);
    free(img);
    return total;
}

TEST(threaded_reader_epochs)
{
    char list[400];
    const int N = 23;
    make_set(N, list, sizeof list);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.batch_size = 4;
    o.threads = 3;
    o.prefetch = 2;
    o.crop = 16;
    o.resize = 20;
    fl_data_image_reader *r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    int seen[32] = {0};
    int64_t order[32], order2[32];
    CHECK_EQ_INT(read_epoch(r, &o, 0, seen, order), N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(seen[i], 1);
        CHECK_EQ_INT(order[i], i); /* unshuffled: listing order */
    }
    fl_data_image_reader_free(r);

    /* shuffled, train transform: each image once, a new order per epoch, reproducible */
    o.shuffle = 1;
    o.train = 1;
    o.seed = 1234;
    r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    memset(seen, 0, sizeof seen);
    CHECK_EQ_INT(read_epoch(r, &o, 0, seen, order), N);
    for (int i = 0; i < N; i++) CHECK_EQ_INT(seen[i], 1);
    memset(seen, 0, sizeof seen);
    CHECK_EQ_INT(read_epoch(r, &o, 1, seen, order2), N);
    CHECK(memcmp(order, order2, sizeof(int64_t) * N) != 0);
    memset(seen, 0, sizeof seen);
    CHECK_EQ_INT(read_epoch(r, &o, 0, seen, order2), N);
    CHECK(!memcmp(order, order2, sizeof(int64_t) * N));
    /* a pass abandoned half-way is stopped by the next begin and by free */
    CHECK_OK(fl_data_image_reader_begin(r, 2));
    fl_data_image_reader_free(r);

    /* two ranks: disjoint shares that cover the set; drop_last leaves out partial batches */
    memset(seen, 0, sizeof seen);
    int total = 0;
    o.drop_last = 1;
    o.nranks = 2;
    for (int rank = 0; rank < 2; rank++) {
        o.rank = rank;
        r = fl_data_image_reader_create(list, &o);
        CHECK(r != NULL);
        total += read_epoch(r, &o, 0, seen, order);
        fl_data_image_reader_free(r);
    }
    CHECK_EQ_INT(total, 12 + 8); /* 12 and 11 images: three and two full batches of 4 */
    for (int i = 0; i < N; i++) CHECK(seen[i] <= 1);
    rmtmp();
}

TEST(reader_reports_bad_file)
{
    char list[400];
    make_set(9, list, sizeof list);
    char p[400];
    snprintf(p, sizeof p, "%s/005.jpg", tmp);
    th_write_bytes(p, "GIF89a....", 10);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.batch_size = 2;
    o.crop = 16;
    o.resize = 16;
    fl_data_image_reader *r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    float img[2 * 3 * 16 * 16];
    int64_t lab[2];
    CHECK_FAILS(fl_data_image_reader_next(r, img, lab), FL_ESTATE, "begin");
    CHECK_OK(fl_data_image_reader_begin(r, 0));
    int st, batches = 0;
    while ((st = fl_data_image_reader_next(r, img, lab)) > 0) batches++;
    CHECK_EQ_INT(st, FL_ECORRUPT);
    CHECK_STR_HAS(fl_last_error(), p);
    CHECK(batches <= 2);
    fl_data_image_reader_free(r);
    rmtmp();
}

/* The bad kinds: each written over image `i` of a set made by make_set. */
static const char *const bad_kinds[] = {"zero-byte", "truncated", "corrupt", "not a JPEG", "cut PNG", "cut in the header"};
#define NBAD_KINDS 6

static void write_bad(int kind, int i)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%03d.jpg", tmp, i);
    FILE *f = fopen(p, "rb");
    CHECK(f != NULL);
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(n > 300);
    if (kind == 0) th_write_bytes(p, buf, 0);
    if (kind == 1) th_write_bytes(p, buf, n / 2);
    if (kind == 2) { /* the entropy-coded data replaced by noise after the headers */
        fl_rng g = {(uint64_t)i + 7};
        for (size_t k = n / 2; k < n - 2; k++) buf[k] = (uint8_t)fl__rng_next(&g);
        th_write_bytes(p, buf, n);
    }
    if (kind == 3) th_write_bytes(p, "hello, not an image\n", 20);
    if (kind == 4) th_write_bytes(p, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
    if (kind == 5) th_write_bytes(p, buf, 200);
}

/* One decoder goes on after each kind of bad file (policy skip): the next good file decodes
 * (a TurboJPEG handle that failed once read the next header as 0 x 0 pixels). */
TEST(decoder_recovers_after_each_bad_kind)
{
    char list[400], p[400];
    make_set(NBAD_KINDS + 1, list, sizeof list);
    for (int k = 0; k < NBAD_KINDS; k++) write_bad(k, k + 1);
    fl__decoder *d = NULL;
    fl__image im = {0};
    CHECK_OK(fl__decoder_create(&d));
    for (int k = 0; k < NBAD_KINDS; k++) {
        snprintf(p, sizeof p, "%s/%03d.jpg", tmp, k + 1);
        CHECK(fl__image_read(d, p, &im) != FL_OK);
        snprintf(p, sizeof p, "%s/%03d.jpg", tmp, 0);
        if (fl__image_read(d, p, &im) != FL_OK) TFAIL("after a %s file: %s", bad_kinds[k], fl_last_error());
        CHECK_EQ_INT(im.h, 24);
        CHECK_EQ_INT(im.w, 30);
    }
    fl__image_free(&im);
    fl__decoder_free(d);
    rmtmp();
}

/* Policy stop (the default): each kind of bad file ends the pass with an error naming it. */
TEST(reader_stops_on_each_bad_kind)
{
    for (int kind = 0; kind < NBAD_KINDS; kind++) {
        char list[400], p[400];
        make_set(7, list, sizeof list);
        write_bad(kind, 4);
        snprintf(p, sizeof p, "%s/004.jpg", tmp);
        fl_data_image_options o;
        fl_data_image_options_init(&o);
        o.batch_size = 3;
        o.crop = 16;
        o.resize = 16;
        fl_data_image_reader *r = fl_data_image_reader_create(list, &o);
        CHECK(r != NULL);
        float img[3 * 3 * 16 * 16];
        int64_t lab[3];
        CHECK_OK(fl_data_image_reader_begin(r, 0));
        int st;
        while ((st = fl_data_image_reader_next(r, img, lab)) > 0) {
        }
        if (st != (kind == 4 ? PNG_BAD : FL_ECORRUPT) || !strstr(fl_last_error(), p))
            TFAIL("%s file: status %d, message '%s'", bad_kinds[kind], st, fl_last_error());
        CHECK_EQ_INT(fl_data_image_reader_bad_images(r), 0);
        fl_data_image_reader_free(r);
        rmtmp();
    }
}

/* Policy skip: every bad kind is left out of its batch and counted; the other images arrive in
 * order with their labels; a batch of bad files only is left out; each pass counts afresh; a
 * missing file still stops the pass. */
TEST(reader_skips_bad_files)
{
    char list[400];
    const int N = 17;
    make_set(N, list, sizeof list);
    const int bad[] = {1, 5, 6, 7, 12, 14}; /* with image 4 below: the whole second batch of 4 */
    for (int k = 0; k < NBAD_KINDS; k++) write_bad(k, bad[k]);
    write_bad(2, 4);
    char p[400];
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.batch_size = 4;
    o.threads = 3;
    o.prefetch = 2;
    o.crop = 16;
    o.resize = 20;
    o.skip_bad = 1;
    fl_data_image_reader *r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[32] = {0};
        int64_t order[32];
        CHECK_EQ_INT(read_epoch(r, &o, epoch, seen, order), N - 7);
        CHECK_EQ_INT(fl_data_image_reader_bad_images(r), 7);
        for (int i = 0, j = 0; i < N; i++) {
            const int is_bad = i == 4 || i == 1 || i == 5 || i == 6 || i == 7 || i == 12 || i == 14;
            CHECK_EQ_INT(seen[i], !is_bad);
            if (!is_bad) CHECK_EQ_INT(order[j++], i);
        }
    }
    fl_data_image_reader_free(r);
    /* a file that cannot be read is not a bad image: the pass stops, naming it */
    snprintf(p, sizeof p, "%s/%03d.jpg", tmp, 9);
    CHECK(unlink(p) == 0);
    r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    float *img = malloc(sizeof(float) * 4 * 3 * 16 * 16);
    int64_t lab[4];
    CHECK_OK(fl_data_image_reader_begin(r, 0));
    int st;
    while ((st = fl_data_image_reader_next(r, img, lab)) > 0) {
    }
    CHECK_EQ_INT(st, FL_ENOTFOUND);
    CHECK_STR_HAS(fl_last_error(), p);
    free(img);
    fl_data_image_reader_free(r);
    rmtmp();
}

TEST_MAIN(T(decode_matches_source), T(bad_files_are_named), T(list_layout_and_labels), T(directory_layout_and_labels),
          T(options_are_checked), T(eval_transform_geometry), T(resize_is_a_normalised_filter), T(train_crop_statistics),
          T(threaded_reader_epochs), T(reader_reports_bad_file), T(reader_stops_on_each_bad_kind),
          T(decoder_recovers_after_each_bad_kind), T(reader_skips_bad_files))

#else /* a build without libjpeg-turbo: every image call is refused by name */

TEST(images_unsupported)
{
    float out[3];
    CHECK_FAILS(fl_data_image_load("/tmp/x.jpg", NULL, 0, out), FL_EUNSUPPORTED, "libjpeg-turbo");
    CHECK(fl_data_image_reader_create("/tmp", NULL) == NULL);
    CHECK_EQ_INT(fl_last_status(), FL_EUNSUPPORTED);
    CHECK_STR_HAS(fl_last_error(), "fl_data_image_reader_create");
}

TEST_MAIN(T(images_unsupported))
#endif
