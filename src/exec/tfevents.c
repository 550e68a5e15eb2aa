/*
 * tfevents.c - TensorBoard event files: the "tensorboard" metrics format.
 *
 * An event file is a sequence of TFRecords ([len u64 LE][masked crc32c of len][data]
 * [masked crc32c of data]), each holding one serialized tensorflow.Event: the first has
 * wall_time and file_version "brain.Event:2", each later one wall_time, step and a Summary
 * with one Value {tag, simple_value}.  The writer encodes those three messages by hand
 * (six fields) and computes CRC-32C itself: Debian has no C library for CRC-32C, and
 * protobuf-c would need TensorFlow's .proto files and a code generator in the build for
 * these few bytes.  tests/test_metrics.c checks the CRC's known answers and parses the
 * framing back; tests/python/test_metrics.py reads the files with TensorBoard's own
 * EventAccumulator.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec_internal.h"
#include "metrics_internal.h"

uint32_t fl__crc32c(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t fl__crc32c_masked(const void *p, size_t n)
{
    uint32_t c = fl__crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *o, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) o[i] = (uint8_t)(v >> (8 * i));
}

static size_t put_varint(uint8_t *o, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        o[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    o[n++] = (uint8_t)v;
    return n;
}

/* Protocol-buffer field keys: (field << 3) | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32). */
enum {
    EVENT_WALL_TIME = 1 << 3 | 1,
    EVENT_STEP = 2 << 3 | 0,
    EVENT_FILE_VERSION = 3 << 3 | 2,
    EVENT_SUMMARY = 5 << 3 | 2,
    SUMMARY_VALUE = 1 << 3 | 2,
    VALUE_TAG = 1 << 3 | 2,
    VALUE_SIMPLE_VALUE = 2 << 3 | 5,
};

size_t fl__tfevent_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value)
{
    static const char version[] = "brain.Event:2";
    size_t tlen = tag ? strlen(tag) : 0;
    if (tlen > 128 || cap < 256) return 0;
    size_t n = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    buf[n++] = EVENT_WALL_TIME;
    put_le(buf + n, bits, 8);
    n += 8;
    if (!tag) {
        buf[n++] = EVENT_FILE_VERSION;
        n += put_varint(buf + n, sizeof version - 1);
        memcpy(buf + n, version, sizeof version - 1);
        return n + sizeof version - 1;
    }
    buf[n++] = EVENT_STEP;
    n += put_varint(buf + n, (uint64_t)step);
    /* Value {tag, simple_value}: 1 + len(tlen) + tlen + 1 + 4 bytes */
    uint8_t lenbuf[10];
    size_t value_len = 1 + put_varint(lenbuf, tlen) + tlen + 5;
    size_t summary_len = 1 + put_varint(lenbuf, value_len) + value_len;
    buf[n++] = EVENT_SUMMARY;
    n += put_varint(buf + n, summary_len);
    buf[n++] = SUMMARY_VALUE;
    n += put_varint(buf + n, value_len);
    buf[n++] = VALUE_TAG;
    n += put_varint(buf + n, tlen);
    memcpy(buf + n, tag, tlen);
    n += tlen;
    uint32_t fb;
    memcpy(&fb, &value, 4);
    buf[n++] = VALUE_SIMPLE_VALUE;
    put_le(buf + n, fb, 4);
    return n + 4;
}

size_t fl__tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n)
{
    put_le(out, n, 8);
    put_le(out + 8, fl__crc32c_masked(out, 8), 4);
    memcpy(out + 12, data, n);
    put_le(out + 12 + n, fl__crc32c_masked(data, n), 4);
    return n + 16;
}

typedef struct {
    FILE *f;
    char path[4096];
    int err;
} tfw;

static int tf_record(tfw *w, double wall_time, int64_t step, const char *tag, float value)
{
    uint8_t ev[512], rec[512 + 16];
    size_t n = fl__tfevent_encode(ev, sizeof ev, wall_time, step, tag, value);
    if (!n) return fl__err(FL_EINVAL, "metrics: tag '%.40s...' is longer than 128 bytes", tag ? tag : "");
    size_t k = fl__tfrecord_frame(rec, ev, n);
    if (fwrite(rec, 1, k, w->f) != k) {
        if (!w->err) w->err = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
        return w->err;
    }
    return FL_OK;
}

static int tf_close(void *sink);

static int tf_open(void **sink, const char *dir, int rank)
{
    tfw *w = calloc(1, sizeof *w);
    if (!w) return fl__err(FL_ENOMEM, "metrics: out of memory");
    char sub[3072], host[256] = "localhost";
    if (snprintf(sub, sizeof sub, "%s/rank%d", dir, rank) >= (int)sizeof sub) {
        free(w);
        return fl__err(FL_EINVAL, "metrics: directory name too long: %.100s...", dir);
    }
    if (mkdir(sub, 0777) != 0 && errno != EEXIST) {
        free(w);
        return fl__err(FL_EIO, "metrics: cannot create the directory %s: %s", sub, strerror(errno));
    }
    gethostname(host, 64);
    host[64] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    double now = fl__wall_time();
    /* a second writer of this process in the same second gets a suffix */
    for (int i = 0; i < 1000 && !w->f; i++) {
        int k = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", sub, (long long)now, host,
                         (int)getpid());
        if (i) snprintf(w->path + k, sizeof w->path - (size_t)k, ".%d", i);
        w->f = fopen(w->path, "wbx");
        if (!w->f && errno != EEXIST) break;
    }
    if (!w->f) {
        int st = fl__err(FL_EIO, "metrics: cannot create %s: %s", w->path, strerror(errno));
        free(w);
        return st;
    }
    int st = tf_record(w, now, 0, NULL, 0.0f);
    if (st == FL_OK && fflush(w->f) != 0) st = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
    if (st != FL_OK) {
        tf_close(w);
        return st;
    }
    *sink = w;
    return FL_OK;
}

static int tf_write(void *sink, const fl__metric *m)
{
    tfw *w = sink;
    return tf_record(w, m->wall_time, m->step, m->tag, (float)m->value);
}

static int tf_flush(void *sink)
{
    tfw *w = sink;
    if (fflush(w->f) != 0 && !w->err) w->err = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
    return w->err;
}

static int tf_close(void *sink)
{
    tfw *w = sink;
    int st = w->err;
    if (fclose(w->f) != 0 && !st) st = fl__err(FL_EIO, "metrics: cannot write %s: %s", w->path, strerror(errno));
    free(w);
    return st;
}

static const char *tf_path(const void *sink) { return ((const tfw *)sink)->path; }

const fl__metrics_format fl__metrics_tfevents = {"tensorboard", tf_open, tf_write, tf_flush, tf_close, tf_path};
