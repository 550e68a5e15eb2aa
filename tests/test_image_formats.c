/* test_image_formats.c - the image reader's formats and decode scales: PNG of every colour
 * type and depth (written here with libpng) against the source pixels, the format told by the
 * bytes and not the name, bad PNG files named (or skipped under the policy skip), CMYK JPEG
 * converted as Pillow converts it, and libjpeg-turbo's DCT scaling: which scale a crop
 * allows, that the eval and train transforms take it, and how far the result is from the
 * full-size decode. */
#include <stdint.h>
#include <sys/stat.h>

#include "testhelp.h"
#include "data/image_internal.h"

#ifdef FL_HAVE_TURBOJPEG
#include <turbojpeg.h>
#ifdef FL_HAVE_PNG
#include <png.h>
#endif

static char tmp[256];

static void mktmp(void) { th_mktemp(tmp, sizeof tmp, "fleet-test-imgfmt-"); }

static void rmtmp(void) { th_rmtree(tmp); }

/* A photograph-like picture (gradients, a soft disc and a wave of 48 pixels that a shift of a
 * pixel changes by several levels), h x w RGB. */
static uint8_t *smooth(int h, int w)
{
    uint8_t *px = malloc((size_t)h * w * 3);
    CHECK(px != NULL);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            const double dx = x - 0.4 * w, dy = y - 0.6 * h, r = 0.3 * (h < w ? h : w);
            const double disc = 80.0 / (1.0 + exp((sqrt(dx * dx + dy * dy) - r) / (0.02 * r)));
            const double wave = 30.0 * sin(x * (2 * M_PI / 48)) * cos(y * (2 * M_PI / 64));
            p[0] = (uint8_t)(40 + 120.0 * x / w + disc * 0.5 + wave);
            p[1] = (uint8_t)(40 + 120.0 * y / h + disc * 0.3 - wave);
            p[2] = (uint8_t)(200 - 100.0 * (x + y) / (w + h) - disc * 0.4);
        }
    return px;
}

/* px (h x w, pixel format pf) at quality q, subsampling sub, into path. */
static void write_jpeg(const char *path, const uint8_t *px, int h, int w, int pf, int sub, int q)
{
    tjhandle tj = tjInitCompress();
    CHECK(tj != NULL);
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    if (tjCompress2(tj, px, w, 0, h, pf, &jpeg, &len, sub, q, 0)) TFAIL("tjCompress2: %s", tjGetErrorStr2(tj));
    th_write_bytes(path, jpeg, len);
    tjFree(jpeg);
    tjDestroy(tj);
}

TEST(dct_scale_choice)
{
    /* Pillow's draft rule: the largest of 8, 4, 2 leaving at least the output's pixels */
    CHECK_EQ_INT(fl__image_denom(447, 1000, 224, 224), 1);
    CHECK_EQ_INT(fl__image_denom(448, 1000, 224, 224), 2);
    CHECK_EQ_INT(fl__image_denom(1000, 900, 224, 224), 4);
    CHECK_EQ_INT(fl__image_denom(1792, 1800, 224, 224), 8);
    CHECK_EQ_INT(fl__image_denom(5000, 5000, 224, 224), 8);
    CHECK_EQ_INT(fl__image_denom(1300, 1100, 302, 256), 4); /* eval: 1100 wide to 256 */
    CHECK_EQ_INT(fl__image_denom(500, 600, 256, 256), 1);
    CHECK_EQ_INT(fl__image_denom(512, 600, 256, 256), 2);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    CHECK_EQ_INT(o.dct_scale, 1);
    o.dct_scale = 2;
    float out[3];
    CHECK_FAILS(fl_data_image_load("/nonexistent.jpg", &o, 0, out), FL_EINVAL, "dct_scale");
}

/* A JPEG decoded at 1/2, 1/4, 1/8: the size rounded up, each pixel near the mean of the block
 * of full-size pixels it covers. */
TEST(scaled_decode_sizes_and_pixels)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/big.jpg", tmp);
    const int h = 301, w = 413;
    uint8_t *px = smooth(h, w);
    write_jpeg(p, px, h, w, TJPF_RGB, TJSAMP_420, 95);
    fl__decoder *d = NULL;
    fl__image full = {0}, im = {0};
    CHECK_OK(fl__decoder_create(&d));
    CHECK_OK(fl__image_read(d, p, &full));
    int oh = 0, ow = 0, scalable = 0;
    for (int den = 2; den <= 8; den *= 2) {
        CHECK_OK(fl__image_open(d, p, &oh, &ow, &scalable));
        CHECK_EQ_INT(scalable, 1);
        CHECK_OK(fl__image_decode(d, p, den, &im));
        CHECK_EQ_INT(im.h, (h + den - 1) / den);
        CHECK_EQ_INT(im.w, (w + den - 1) / den);
        double sum = 0;
        int n = 0;
        for (int y = 0; y < h / den; y++)
            for (int x = 0; x < w / den; x++)
                for (int c = 0; c < 3; c++) {
                    double m = 0;
                    for (int i = 0; i < den; i++)
                        for (int j = 0; j < den; j++) m += full.px[((size_t)(y * den + i) * w + x * den + j) * 3 + c];
                    sum += fabs(m / (den * den) - im.px[((size_t)y * im.w + x) * 3 + c]);
                    n++;
                }
        if (sum / n > 0.8) TFAIL("1/%d: mean difference %.3f from the block means", den, sum / n);
    }
    CHECK_OK(fl__image_open(d, p, &oh, &ow, &scalable));
    CHECK_FAILS(fl__image_decode(d, p, 3, &im), FL_EINVAL, "1/3");
    fl__image_free(&full);
    fl__image_free(&im);
    fl__decoder_free(d);
    free(px);
    rmtmp();
}

/* Eval: a 1300 x 1100 JPEG resized to 302 x 256 decodes at 1/4 and resizes that (what Pillow
 * gives after draft()); against the full-size decode it differs by a few levels (measured: 3
 * at most, 0.45 on average). */
TEST(eval_takes_the_scale)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/tall.jpg", tmp);
    const int h = 1300, w = 1100, crop = 224;
    uint8_t *px = smooth(h, w);
    write_jpeg(p, px, h, w, TJPF_RGB, TJSAMP_420, 90);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    const size_t n = (size_t)3 * crop * crop;
    float *scaled = malloc(sizeof(float) * n), *fullsz = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    CHECK_OK(fl_data_image_load(p, &o, 0, scaled));
    o.dct_scale = 0;
    CHECK_OK(fl_data_image_load(p, &o, 0, fullsz));
    /* the same steps by hand at 1/4 */
    fl__decoder *d = NULL;
    fl__image im = {0}, a = {0}, b = {0};
    CHECK_OK(fl__decoder_create(&d));
    int hh = 0, ww = 0, sc = 0;
    CHECK_OK(fl__image_open(d, p, &hh, &ww, &sc));
    CHECK_OK(fl__image_decode(d, p, 4, &im));
    CHECK_OK(fl__image_resize(&im, 0, 0, im.h, im.w, NULL, 302, 256, &a, &b));
    fl__image_to_chw(&b, 39, 16, crop, 0, o.mean, o.std, want); /* round(78 / 2), round(32 / 2) */
    for (size_t i = 0; i < n; i++)
        if (scaled[i] != want[i]) TFAIL("value %zu: %g, the 1/4 decode gives %g", i, scaled[i], want[i]);
    /* to 0..255 levels: the scaled decode against the full one */
    double worst = 0, sum = 0;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < (size_t)crop * crop; i++) {
            const double e = fabs(scaled[c * crop * crop + i] - fullsz[c * crop * crop + i]) * o.std[c] * 255;
            sum += e;
            if (e > worst) worst = e;
        }
    if (worst > 6.01 || sum / n > 0.6)
        TFAIL("scaled against full-size decode: largest %.2f, mean %.3f levels", worst, sum / n);
    fl__image_free(&im);
    fl__image_free(&a);
    fl__image_free(&b);
    fl__decoder_free(d);
    free(scaled);
    free(fullsz);
    free(want);
    free(px);
    rmtmp();
}

/* Train: the crop and flip are drawn on the full size, so a seed gives the same geometry with
 * and without the scaling; a large crop decodes scaled and lands within a few levels. */
TEST(train_scale_keeps_the_geometry)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/wide.jpg", tmp);
    const int h = 1200, w = 1600, crop = 160;
    uint8_t *px = smooth(h, w);
    write_jpeg(p, px, h, w, TJPF_RGB, TJSAMP_444, 95);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.train = 1;
    o.crop = crop;
    o.scale[0] = 0.5f; /* crops of 600+ pixels a side: 1/2 to 1/8 */
    const size_t n = (size_t)3 * crop * crop;
    float *on = malloc(sizeof(float) * n), *off = malloc(sizeof(float) * n);
    double mean_all = 0;
    int dens[9] = {0};
    for (uint64_t seed = 1; seed <= 12; seed++) {
        /* the scale this seed's crop allows (the reader's own draw: fl_data_image_load's rng) */
        fl_rng g = {fl__hash_u64(seed)};
        const fl__crop c = fl__image_random_crop(h, w, &o, &g);
        dens[fl__image_denom(c.h, c.w, crop, crop)]++;
        o.dct_scale = 1;
        CHECK_OK(fl_data_image_load(p, &o, seed, on));
        o.dct_scale = 0;
        CHECK_OK(fl_data_image_load(p, &o, seed, off));
        double worst = 0, sum = 0;
        for (int ch = 0; ch < 3; ch++)
            for (size_t i = 0; i < (size_t)crop * crop; i++) {
                const double e = fabs(on[ch * crop * crop + i] - off[ch * crop * crop + i]) * o.std[ch] * 255;
                sum += e;
                if (e > worst) worst = e;
            }
        /* measured: at most 4 levels, 0.33-0.41 on average; the box a full-size pixel off
         * gives 0.65 */
        if (worst > 6.01 || sum / n > 0.5)
            TFAIL("seed %llu (crop %d x %d): largest %.2f, mean %.3f levels", (unsigned long long)seed, c.h, c.w, worst,
                  sum / n);
        mean_all += sum / n;
    }
    CHECK(dens[2] + dens[4] + dens[8] >= 10); /* the scaled path was taken */
    CHECK(mean_all > 0);                      /* and it is not the full-size one */
    free(on);
    free(off);
    free(px);
    rmtmp();
}

/* A CMYK JPEG (Adobe's inverted samples, as libjpeg-turbo and Photoshop write them) comes out
 * as Pillow's convert("RGB") gives it: R = C * K / 255 with C, K the stored samples. */
TEST(cmyk_jpeg_converted)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/cmyk.jpg", tmp);
    const int h = 40, w = 56;
    uint8_t *cmyk = malloc((size_t)h * w * 4);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = cmyk + ((size_t)y * w + x) * 4;
            q[0] = (uint8_t)(60 + 3 * x);
            q[1] = (uint8_t)(50 + 4 * y);
            q[2] = 180;
            q[3] = (uint8_t)(x < w / 2 ? 255 : 160);
        }
    write_jpeg(p, cmyk, h, w, TJPF_CMYK, TJSAMP_444, 100);
    fl__decoder *d = NULL;
    fl__image im = {0};
    CHECK_OK(fl__decoder_create(&d));
    CHECK_OK(fl__image_read(d, p, &im));
    CHECK_EQ_INT(im.h, h);
    CHECK_EQ_INT(im.w, w);
    int worst = 0;
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++) {
            if (x >= w / 2 - 1 && x <= w / 2) continue; /* the step in K rings */
            const uint8_t *q = cmyk + ((size_t)y * w + x) * 4;
            for (int c = 0; c < 3; c++) {
                const int e = abs(im.px[((size_t)y * w + x) * 3 + c] - (int)(q[c] * q[3] / 255.0 + 0.5));
                if (e > worst) worst = e;
            }
        }
    if (worst > 4) TFAIL("largest difference %d from C * K / 255", worst);
    /* and at 1/2 */
    int hh, ww, sc;
    CHECK_OK(fl__image_open(d, p, &hh, &ww, &sc));
    CHECK_OK(fl__image_decode(d, p, 2, &im));
    CHECK_EQ_INT(im.w, w / 2);
    CHECK_NEAR(im.px[((size_t)5 * im.w + 3) * 3 + 2], 180, 4);
    fl__image_free(&im);
    fl__decoder_free(d);
    free(cmyk);
    rmtmp();
}

#ifdef FL_HAVE_PNG
static size_t read_bytes(const char *path, uint8_t *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    CHECK(n < cap);
    return n;
}

/* One PNG kind: colour type, bit depth, interlacing. */
typedef struct {
    const char *name;
    int ctype, depth, interlace;
} png_kind;

/* The sample (0 .. 2^depth - 1) of channel c at (y, x) of a test picture. */
static unsigned sample(int y, int x, int c, int depth)
{
    const unsigned max = (1u << depth) - 1;
    return (unsigned)((x * 37 + y * 11 + c * 101 + (x * y) % 13) * (max / 255.0 + (depth < 8 ? 0.03 : 0))) % (max + 1);
}

/* Writes kind k (h x w) to path with libpng; want gets the RGB the reader must give. */
static void write_png(const char *path, const png_kind *k, int h, int w, uint8_t *want)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    CHECK(png && info);
    if (setjmp(png_jmpbuf(png))) TFAIL("libpng failed writing %s", path);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, k->depth, k->ctype,
                 k->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_color pal[256];
    png_byte trns[256];
    const int npal = k->ctype == PNG_COLOR_TYPE_PALETTE ? 1 << k->depth : 0;
    for (int i = 0; i < npal; i++) {
        pal[i].red = (png_byte)(i * 53 + 7);
        pal[i].green = (png_byte)(255 - i * 29);
        pal[i].blue = (png_byte)(i * 97 + 50);
        trns[i] = (png_byte)(i * 40); /* transparency, dropped as Pillow drops it */
    }
    if (npal) {
        png_set_PLTE(png, info, pal, npal);
        png_set_tRNS(png, info, trns, npal, NULL);
    }
    png_write_info(png, info);
    const int chans = png_get_channels(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    png_bytep *rows = malloc(sizeof *rows * (size_t)h);
    for (int y = 0; y < h; y++) {
        rows[y] = calloc(rowbytes, 1);
        for (int x = 0; x < w; x++) {
            unsigned v[4];
            for (int c = 0; c < chans; c++) v[c] = sample(y, x, c, k->depth) % (npal ? (unsigned)npal : 1u << k->depth);
            for (int c = 0; c < chans; c++) { /* pack big-endian, any depth */
                const size_t bit = ((size_t)x * chans + c) * k->depth;
                if (k->depth == 16) {
                    rows[y][bit / 8] = (png_byte)(v[c] >> 8);
                    rows[y][bit / 8 + 1] = (png_byte)v[c];
                } else {
                    rows[y][bit / 8] |= (png_byte)(v[c] << (8 - k->depth - bit % 8));
                }
            }
            uint8_t *o = want + ((size_t)y * w + x) * 3;
            if (npal) {
                o[0] = pal[v[0]].red;
                o[1] = pal[v[0]].green;
                o[2] = pal[v[0]].blue;
                continue;
            }
            const int colour = k->ctype & PNG_COLOR_MASK_COLOR;
            for (int c = 0; c < 3; c++) {
                const unsigned s = v[colour ? c : 0];
                o[c] = (uint8_t)(k->depth == 16 ? s >> 8 : s * 255 / ((1u << k->depth) - 1));
            }
        }
    }
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    for (int y = 0; y < h; y++) free(rows[y]);
    free(rows);
    CHECK(fclose(f) == 0);
}

static const png_kind kinds[] = {
    {"RGB 8", PNG_COLOR_TYPE_RGB, 8, 0},
    {"RGBA 8", PNG_COLOR_TYPE_RGB_ALPHA, 8, 0},
    {"grey 8", PNG_COLOR_TYPE_GRAY, 8, 0},
    {"grey+alpha 8", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0},
    {"palette 8", PNG_COLOR_TYPE_PALETTE, 8, 0},
    {"palette 2", PNG_COLOR_TYPE_PALETTE, 2, 0},
    {"grey 1", PNG_COLOR_TYPE_GRAY, 1, 0},
    {"grey 4", PNG_COLOR_TYPE_GRAY, 4, 0},
    {"RGB 16", PNG_COLOR_TYPE_RGB, 16, 0},
    {"RGBA 16", PNG_COLOR_TYPE_RGB_ALPHA, 16, 0},
    {"grey 16", PNG_COLOR_TYPE_GRAY, 16, 0},
    {"RGB 8 interlaced", PNG_COLOR_TYPE_RGB, 8, 1},
    {"palette 4 interlaced", PNG_COLOR_TYPE_PALETTE, 4, 1},
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

TEST(png_kinds_match_source)
{
    mktmp();
    const int h = 23, w = 37;
    uint8_t *want = malloc((size_t)h * w * 3);
    fl__decoder *d = NULL;
    fl__image im = {0};
    CHECK_OK(fl__decoder_create(&d));
    for (int i = 0; i < NKINDS; i++) {
        char p[400];
        snprintf(p, sizeof p, "%s/k%d.png", tmp, i);
        write_png(p, &kinds[i], h, w, want);
        int hh = 0, ww = 0, sc = 1;
        CHECK_OK(fl__image_open(d, p, &hh, &ww, &sc));
        CHECK_EQ_INT(sc, 0); /* no DCT to scale */
        CHECK_OK(fl__image_decode(d, p, 1, &im));
        CHECK_EQ_INT(im.h, h);
        CHECK_EQ_INT(im.w, w);
        for (size_t j = 0; j < (size_t)h * w * 3; j++)
            if (im.px[j] != want[j])
                TFAIL("%s: byte %zu (pixel %zu, channel %zu) is %d, want %d", kinds[i].name, j, j / 3, j % 3, im.px[j],
                      want[j]);
        /* and through the eval transform (the shorter side already at size: a crop) */
        fl_data_image_options o;
        fl_data_image_options_init(&o);
        o.resize = h;
        o.crop = 16;
        float out[3 * 16 * 16];
        CHECK_OK(fl_data_image_load(p, &o, 0, out));
        const int top = 4, left = 10; /* round(7 / 2) = 4 (half to even), round(21 / 2) = 10 */
        CHECK_NEAR(out[16 * 16 + 5], (want[((size_t)top * w + left + 5) * 3 + 1] / 255.0f - o.mean[1]) / o.std[1], 1e-5);
    }
    fl__image_free(&im);
    fl__decoder_free(d);
    free(want);
    rmtmp();
}

/* The format is the bytes': a PNG named .JPEG (ImageNet holds one) and a JPEG named .png. */
TEST(format_told_by_bytes)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/cls", tmp);
    CHECK(mkdir(p, 0755) == 0);
    const int h = 30, w = 40;
    uint8_t *want = malloc((size_t)h * w * 3);
    snprintf(p, sizeof p, "%s/cls/a.JPEG", tmp);
    write_png(p, &kinds[0], h, w, want);
    snprintf(p, sizeof p, "%s/cls/b.png", tmp);
    write_jpeg(p, want, h, w, TJPF_RGB, TJSAMP_444, 100);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.batch_size = 2;
    o.crop = 24;
    o.resize = 30;
    fl_data_image_reader *r = fl_data_image_reader_create(tmp, &o);
    CHECK(r != NULL);
    float img[2 * 3 * 24 * 24];
    int64_t lab[2];
    CHECK_OK(fl_data_image_reader_begin(r, 0));
    CHECK_EQ_INT(fl_data_image_reader_next(r, img, lab), 2);
    CHECK_EQ_INT(lab[0], 0);
    CHECK_EQ_INT(lab[1], 0);
    /* the PNG (first in byte order) exactly, the JPEG of the same picture near it */
    const size_t plane = 24 * 24;
    double sum = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 24; y++)
            for (int x = 0; x < 24; x++) {
                const float v = want[((size_t)(y + 3) * w + x + 8) * 3 + c] / 255.0f; /* crop at (3, 8) */
                CHECK_NEAR(img[c * plane + (size_t)y * 24 + x], (v - o.mean[c]) / o.std[c], 1e-5);
                sum += fabs(img[3 * plane + c * plane + (size_t)y * 24 + x] - img[c * plane + (size_t)y * 24 + x]) *
                       o.std[c];
            }
    if (sum * 255 / (3 * plane) > 3) TFAIL("the JPEG copy is %.2f levels off on average", sum * 255 / (3 * plane));
    CHECK_EQ_INT(fl_data_image_reader_next(r, img, lab), 0);
    fl_data_image_reader_free(r);
    free(want);
    rmtmp();
}

/* Bad PNG files fail naming the file; the decoder goes on with the next; the policy skip
 * counts them. */
TEST(bad_png_named_or_skipped)
{
    mktmp();
    const int h = 40, w = 50;
    uint8_t *want = malloc((size_t)h * w * 3);
    char good[400], p[400], list[400];
    snprintf(good, sizeof good, "%s/0.png", tmp);
    write_png(good, &kinds[1], h, w, want);
    uint8_t buf[65536];
    const size_t n = read_bytes(good, buf, sizeof buf);
    CHECK(n > 200);
    const char *what[] = {"truncated", "corrupt data", "cut in IHDR", "bad IHDR CRC"};
    snprintf(list, sizeof list, "%s/list.txt", tmp);
    FILE *lf = fopen(list, "w");
    CHECK(lf != NULL);
    fprintf(lf, "0.png 0\n");
    fl__decoder *d = NULL;
    fl__image im = {0};
    CHECK_OK(fl__decoder_create(&d));
    for (int k = 0; k < 4; k++) {
        uint8_t bad[65536];
        memcpy(bad, buf, n);
        size_t len = n;
        if (k == 0) len = n / 2;
        if (k == 1)
            for (size_t i = n / 2; i < n / 2 + 16; i++) bad[i] ^= 0x5a; /* inside IDAT: its CRC fails */
        if (k == 2) len = 20;
        if (k == 3) bad[29] ^= 1; /* the IHDR's CRC */
        snprintf(p, sizeof p, "%s/%d.png", tmp, k + 1);
        th_write_bytes(p, bad, len);
        fprintf(lf, "%d.png %d\n", k + 1, k + 1);
        const int st = fl__image_read(d, p, &im);
        if (st != FL_ECORRUPT || !strstr(fl_last_error(), p) || !strstr(fl_last_error(), "PNG"))
            TFAIL("%s PNG: status %d, message '%s'", what[k], st, fl_last_error());
        CHECK_OK(fl__image_read(d, good, &im));
        CHECK(!memcmp(im.px, want, (size_t)h * w * 3));
    }
    fclose(lf);
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.batch_size = 5;
    o.crop = 32;
    o.resize = 40;
    fl_data_image_reader *r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    float *img = malloc(sizeof(float) * 5 * 3 * 32 * 32);
    int64_t lab[5];
    CHECK_OK(fl_data_image_reader_begin(r, 0));
    CHECK_FAILS(fl_data_image_reader_next(r, img, lab), FL_ECORRUPT, ".png");
    fl_data_image_reader_free(r);
    o.skip_bad = 1;
    r = fl_data_image_reader_create(list, &o);
    CHECK(r != NULL);
    CHECK_OK(fl_data_image_reader_begin(r, 0));
    CHECK_EQ_INT(fl_data_image_reader_next(r, img, lab), 1);
    CHECK_EQ_INT(lab[0], 0);
    CHECK_EQ_INT(fl_data_image_reader_next(r, img, lab), 0);
    CHECK_EQ_INT(fl_data_image_reader_bad_images(r), 4);
    fl_data_image_reader_free(r);
    free(img);
    fl__image_free(&im);
    fl__decoder_free(d);
    free(want);
    rmtmp();
}
#define PNG_TESTS , T(png_kinds_match_source), T(format_told_by_bytes), T(bad_png_named_or_skipped)
#else /* a build without libpng: a PNG is refused naming the file and what to install */
TEST(png_unsupported)
{
    mktmp();
    char p[400];
    snprintf(p, sizeof p, "%s/a.jpg", tmp);
    th_write_bytes(p, "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x02\0\0\0\0\0\0\0", 33);
    float out[3 * 8 * 8];
    fl_data_image_options o;
    fl_data_image_options_init(&o);
    o.crop = o.resize = 8;
    CHECK_FAILS(fl_data_image_load(p, &o, 0, out), FL_EUNSUPPORTED, p);
    CHECK_STR_HAS(fl_last_error(), "libpng");
    rmtmp();
}
#define PNG_TESTS , T(png_unsupported)
#endif

TEST_MAIN(T(dct_scale_choice), T(scaled_decode_sizes_and_pixels), T(eval_takes_the_scale),
          T(train_scale_keeps_the_geometry), T(cmyk_jpeg_converted) PNG_TESTS)

#else /* a build without libjpeg-turbo: test_image checks the refusal */

TEST(images_unsupported)
{
    float out[3];
    CHECK_FAILS(fl_data_image_load("/tmp/x.png", NULL, 0, out), FL_EUNSUPPORTED, "libjpeg-turbo");
}

TEST_MAIN(T(images_unsupported))
#endif
