/*
 * metrics_internal.h - the metrics writer's formats (src/exec/metrics.c dispatches to
 * them) and the TensorBoard record encoding that tests/test_metrics.c checks.
 *
 * How to add a format: write its five functions in a new file (csv and tfevents are the
 * examples), declare its row here and add the row to the table in metrics.c; the name is
 * what fl_metrics_opts.formats lists.
 */
#ifndef FL_METRICS_INTERNAL_H
#define FL_METRICS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fleet/metrics.h"

/* One scalar as every format receives it. */
typedef struct {
    double wall_time; /* seconds since the epoch (1970) */
    int rank;
    int epoch; /* -1: none */
    int64_t step;
    const char *tag;
    double value;
} fl__metric;

typedef struct {
    const char *name;
    /* Opens this rank's file under dir into *sink; errors name the file. */
    int (*open)(void **sink, const char *dir, int rank);
    int (*write)(void *sink, const fl__metric *m);
    int (*flush)(void *sink);
    /* Flushes and frees; returns a final write error. */
    int (*close)(void *sink);
    /* The file written (owned by the sink). */
    const char *(*path)(const void *sink);
} fl__metrics_format;

extern const fl__metrics_format fl__metrics_csv;
extern const fl__metrics_format fl__metrics_tfevents;

/* CRC-32C (Castagnoli, reflected 0x82F63B78) of n bytes, continuing from crc (0 to start):
 * fl__crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t fl__crc32c(uint32_t crc, const void *p, size_t n);
/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t fl__crc32c_masked(const void *p, size_t n);

/* Encodes one tensorflow.Event holding a scalar summary (wall_time, step,
 * summary { value { tag, simple_value } }), or with tag NULL the first event of a file
 * (wall_time, file_version "brain.Event:2"), into buf.  Returns the bytes written, or 0 if
 * cap is too small (256 bytes always suffice for tags up to 128 bytes). */
size_t fl__tfevent_encode(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value);
/* Frames data as one TFRecord: [len u64 LE][masked crc32c of len][data][masked crc32c of
 * data].  out must hold n + 16 bytes; returns n + 16. */
size_t fl__tfrecord_frame(uint8_t *out, const uint8_t *data, size_t n);

#endif
