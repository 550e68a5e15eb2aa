/*
 * idx.h - reads (Fashion-)MNIST IDX files, gzipped or not, for the fmnist examples.
 *
 * Format (http://yann.lecun.com/exdb/mnist/): a big-endian header
 *     0x00 0x00 TYPE NDIM, then NDIM big-endian uint32 dimensions, then the data, row-major.
 * The examples need TYPE 0x08 (unsigned byte): images have NDIM 3 (magic 0x00000803, dims
 * N x 28 x 28), labels NDIM 1 (magic 0x00000801, dims N).  Every check that fails names the
 * file and what was expected: the magic, the dimensions, the exact payload size (a
 * truncated file and trailing bytes are both errors), labels in 0..9, and the same N in the
 * images and labels of one split.
 *
 * Decompression: a file that starts with the gzip magic (1f 8b) is read through
 * `gzip -dc -- FILE`, started with posix_spawnp (no shell, so any file name is safe) and
 * read from a pipe; gzip's exit status is checked.  This keeps the examples free of a zlib
 * dependency (gzip is Essential in Debian); an uncompressed IDX file is read directly.
 *
 * Data directory: fmnist_dir() returns the --data argument, else $FMNIST_DIR, else Debian's
 * /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist).
 *
 * Header-only (static functions) so each example is one translation unit, as the
 * Makefile builds examples/DIR/NAME.c into one program.
 */
#ifndef FMNIST_IDX_H
#define FMNIST_IDX_H

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define FMNIST_ROWS 28
#define FMNIST_COLS 28
#define FMNIST_PIXELS (FMNIST_ROWS * FMNIST_COLS)
#define FMNIST_CLASSES 10

extern char **environ;

typedef struct {
    int ndim;
    int64_t dims[4];
    uint8_t *data; /* malloc'ed, prod(dims) bytes */
    size_t size;
} idx_array;

/* One split (train or t10k): pixels scaled to [0, 1], labels 0..9. */
typedef struct {
    int64_t n;
    float *x;   /* n x 784 */
    int64_t *y; /* n */
} fmnist_split;

static void idx__err(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* Reads all of fd into a growing buffer. Returns 0, or -1 with errno set. */
static int idx__slurp(int fd, uint8_t **buf, size_t *len)
{
    size_t cap = 1 << 20, n = 0;
    uint8_t *b = malloc(cap);
    if (!b) return -1;
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                errno = ENOMEM;
                return -1;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(b);
            errno = e;
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    *buf = b;
    *len = n;
    return 0;
}

/* The whole (decompressed) content of path. Returns 0, or -1 with a message in err. */
static int idx__read_file(const char *path, uint8_t **buf, size_t *len, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        idx__err(err, cap, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t magic[2] = {0, 0};
    ssize_t got = pread(fd, magic, 2, 0);
    if (got != 2 || magic[0] != 0x1f || magic[1] != 0x8b) { /* not gzip: a raw IDX file */
        int rc = idx__slurp(fd, buf, len);
        int e = errno;
        close(fd);
        if (rc) idx__err(err, cap, "%s: read failed: %s", path, strerror(e));
        return rc;
    }
    close(fd);
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC)) {
        idx__err(err, cap, "%s: pipe: %s", path, strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], STDOUT_FILENO);
    char *const argv[] = {"gzip", "-dc", "--", (char *)path, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gzip", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc) {
        close(pfd[0]);
        idx__err(err, cap,
                 "%s: cannot start gzip to decompress it: %s (install gzip, or pass the "
                 "uncompressed file)",
                 path, strerror(rc));
        return -1;
    }
    int srd = idx__slurp(pfd[0], buf, len), e = errno;
    close(pfd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (srd) {
        idx__err(err, cap, "%s: reading gzip's output failed: %s", path, strerror(e));
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        free(*buf);
        *buf = NULL;
        idx__err(err, cap, "%s: gzip -dc failed (%s %d): the file is not a valid gzip stream", path,
                 WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return -1;
    }
    return 0;
}

static uint32_t idx__be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads an unsigned-byte IDX file of `want_ndim` dimensions. Returns 0, or -1 with err. */
static int idx_read_u8(const char *path, int want_ndim, idx_array *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    uint8_t *b;
    size_t n;
    if (idx__read_file(path, &b, &n, err, cap)) return -1;
    uint32_t want_magic = 0x0800u | (uint32_t)want_ndim;
    if (n < 4 || idx__be32(b) != want_magic) {
        if (n < 4)
            idx__err(err, cap, "%s: %zu bytes, too short for an IDX header (expected magic 0x%08x)", path, n, want_magic);
        else
            idx__err(err, cap, "%s: IDX magic is 0x%08x, expected 0x%08x (unsigned bytes, %d dimension%s)", path,
                     idx__be32(b), want_magic, want_ndim, want_ndim == 1 ? "" : "s");
        free(b);
        return -1;
    }
    size_t hdr = 4 + 4 * (size_t)want_ndim;
    if (n < hdr) {
        idx__err(err, cap, "%s: truncated IDX header (%zu bytes, need %zu)", path, n, hdr);
        free(b);
        return -1;
    }
    size_t total = 1;
    for (int i = 0; i < want_ndim; i++) {
        uint32_t d = idx__be32(b + 4 + 4 * i);
        if (d == 0 || d > (1u << 28)) {
            idx__err(err, cap, "%s: dimension %d is %u (expected 1..%u)", path, i, d, 1u << 28);
            free(b);
            return -1;
        }
        out->dims[i] = d;
        total *= d;
    }
    if (n - hdr != total) {
        char dims[64] = "";
        for (int i = 0; i < want_ndim; i++)
            snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", i ? " x " : "", (long long)out->dims[i]);
        idx__err(err, cap, "%s: header says %s = %zu bytes of data, the file has %zu (%s)", path, dims, total, n - hdr,
                 n - hdr < total ? "truncated" : "trailing bytes");
        free(b);
        return -1;
    }
    memmove(b, b + hdr, total);
    out->ndim = want_ndim;
    out->data = b;
    out->size = total;
    return 0;
}

/* The data directory: arg, else $FMNIST_DIR, else Debian's. */
static const char *fmnist_dir(const char *arg)
{
    if (arg && *arg) return arg;
    const char *e = getenv("FMNIST_DIR");
    return e && *e ? e : FMNIST_DEFAULT_DIR;
}

/* Loads DIR/PREFIX-images-idx3-ubyte[.gz] and DIR/PREFIX-labels-idx1-ubyte[.gz] (PREFIX
 * "train" or "t10k").  Pixels become float32 / 255. Returns 0, or -1 with err. */
static int fmnist_load(const char *dir, const char *prefix, fmnist_split *s, char *err, size_t cap)
{
    memset(s, 0, sizeof *s);
    char ip[4096], lp[4096];
    const char *kind[2] = {"images-idx3", "labels-idx1"};
    char *paths[2] = {ip, lp};
    for (int k = 0; k < 2; k++) {
        snprintf(paths[k], sizeof ip, "%s/%s-%s-ubyte.gz", dir, prefix, kind[k]);
        if (access(paths[k], F_OK)) { /* also accept the uncompressed name */
            char raw[4096];
            snprintf(raw, sizeof raw, "%s/%s-%s-ubyte", dir, prefix, kind[k]);
            if (!access(raw, F_OK)) snprintf(paths[k], sizeof ip, "%s", raw);
        }
        if (access(paths[k], R_OK)) {
            idx__err(err, cap,
                     "%s: %s (Fashion-MNIST: apt-get install dataset-fashion-mnist, or --data DIR / "
                     "FMNIST_DIR pointing at the IDX files)",
                     paths[k], strerror(errno));
            return -1;
        }
    }
    idx_array im, lb;
    if (idx_read_u8(ip, 3, &im, err, cap)) return -1;
    if (im.dims[1] != FMNIST_ROWS || im.dims[2] != FMNIST_COLS) {
        idx__err(err, cap, "%s: images are %lld x %lld, expected %d x %d", ip, (long long)im.dims[1], (long long)im.dims[2],
                 FMNIST_ROWS, FMNIST_COLS);
        free(im.data);
        return -1;
    }
    if (idx_read_u8(lp, 1, &lb, err, cap)) {
        free(im.data);
        return -1;
    }
    if (lb.dims[0] != im.dims[0]) {
        idx__err(err, cap, "%s has %lld labels but %s has %lld images", lp, (long long)lb.dims[0], ip,
                 (long long)im.dims[0]);
        free(im.data);
        free(lb.data);
        return -1;
    }
    int64_t n = im.dims[0];
    s->x = malloc((size_t)n * FMNIST_PIXELS * sizeof(float));
    s->y = malloc((size_t)n * sizeof(int64_t));
    if (!s->x || !s->y) {
        idx__err(err, cap, "out of memory for %lld images", (long long)n);
        free(s->x);
        free(s->y);
        free(im.data);
        free(lb.data);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        if (lb.data[i] >= FMNIST_CLASSES) {
            idx__err(err, cap, "%s: label %lld is %u, expected 0..%d", lp, (long long)i, lb.data[i], FMNIST_CLASSES - 1);
            free(s->x);
            free(s->y);
            free(im.data);
            free(lb.data);
            memset(s, 0, sizeof *s);
            return -1;
        }
        s->y[i] = lb.data[i];
    }
    for (size_t i = 0; i < (size_t)n * FMNIST_PIXELS; i++) s->x[i] = (float)im.data[i] / 255.0f;
    s->n = n;
    free(im.data);
    free(lb.data);
    return 0;
}

static void fmnist_free(fmnist_split *s)
{
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

/* The fixed shuffle: Fisher-Yates driven by splitmix64(seed).  It is not PyTorch's
 * randperm (a different permutation of the same data), but it is the same on every rank
 * and every run for a given seed. */
static uint64_t fmnist__splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fmnist_shuffle(int64_t *perm, int64_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(fmnist__splitmix(&s) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Copies the samples idx[0..b) into the feed tensors, resized to b rows when needed:
 * x float32 [b, 784] (image 0) or [b, 1, 28, 28] (image 1), y int64 [b, 1].
 * Returns 0, or -1 with fl_last_error() set (fleet.h must be included first). */
#ifdef FLEET_H
static int fmnist_gather(const fmnist_split *d, const int64_t *idx, int64_t b, int image, fl_tensor *x, fl_tensor *y)
{
    if (fl_tensor_dim(x, 0) != b || fl_tensor_ndim(x) != (image ? 4 : 2)) {
        const int64_t xs[4] = {b, image ? 1 : FMNIST_PIXELS, FMNIST_ROWS, FMNIST_COLS};
        if (fl_tensor_resize(x, FL_FLOAT32, image ? 4 : 2, xs) || fl_tensor_resize(y, FL_INT64, 2, (const int64_t[]){b, 1}))
            return -1;
    }
    float *xp = fl_tensor_f32(x);
    int64_t *yp = fl_tensor_i64(y);
    for (int64_t i = 0; i < b; i++) {
        memcpy(xp + i * FMNIST_PIXELS, d->x + idx[i] * FMNIST_PIXELS, FMNIST_PIXELS * sizeof(float));
        yp[i] = d->y[idx[i]];
    }
    return 0;
}
#endif

#endif
