/*
 * fuzz_data_parse.c - libFuzzer harness for the data-line parsers (src/data/parse.c), the code
 * every byte of a training file goes through.  The first input byte picks the target:
 *   0 MultiSlot (slots: int64 LoD, float32 LoD, float32 dense of width 3, int64 dense of 1)
 *   1 Criteo (dense_input, C1..C26, label)    2 libsvm (ids, values, float32 label)
 *   3 the float scanner against strtof (every accepted token must give strtof's bits, and
 *     every token strtof reads whole to a finite value must be accepted)
 * For 0-2 the rest is split into lines; each line must either fail with FL_ECORRUPT and a
 * "f:LINE: ..." message, leaving the arena as it was, or append exactly one well-formed record.
 * Not built by the Makefile (its name does not match tests/test_*.c).  Build and run by hand:
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz_data_parse.c src/data/parse.c src/base/{env,error,log,strmap,util}.c \
 *       -lm -pthread -o /tmp/fuzz_data_parse
 *   /tmp/fuzz_data_parse -max_total_time=60 [corpus_dir]
 *
 * tests/test_data.c (case fuzz_parsers_briefly) does this for a few seconds when clang with
 * libFuzzer is installed, and skips with a message otherwise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fl__slot slots_ms[4], slots_criteo[28], slots_svm[3];
static char names[28][16];

static fl__slot mk(const char *name, fl_dtype dt, int dense, int width)
{
    fl__slot s = {(char *)name, dt, dense, width, dt == FL_INT64 ? 8 : 4};
    return s;
}

static void setup(void)
{
    static int done;
    if (done) return;
    done = 1;
    slots_ms[0] = mk("a", FL_INT64, 0, 1);
    slots_ms[1] = mk("b", FL_FLOAT32, 0, 1);
    slots_ms[2] = mk("c", FL_FLOAT32, 1, 3);
    slots_ms[3] = mk("d", FL_INT64, 1, 1);
    slots_criteo[0] = mk("dense", FL_FLOAT32, 1, 13);
    for (int i = 1; i <= 26; i++) {
        snprintf(names[i], sizeof names[i], "C%d", i);
        slots_criteo[i] = mk(names[i], FL_INT64, 0, 1);
    }
    slots_criteo[27] = mk("label", FL_INT64, 1, 1);
    slots_svm[0] = mk("ids", FL_INT64, 0, 1);
    slots_svm[1] = mk("vals", FL_FLOAT32, 0, 1);
    slots_svm[2] = mk("label", FL_FLOAT32, 1, 1);
}

static void check_float(const uint8_t *data, size_t size)
{
    if (size > 200 || memchr(data, 0, size)) return;
    char buf[256];
    memcpy(buf, data, size);
    buf[size] = 0;
    float got = 0;
    int r = fl__scan_f32(buf, buf + size, &got);
    char *end;
    float ref = strtof(buf, &end);
    int whole = size > 0 && end == buf + size && (unsigned char)buf[0] > ' ';
    if (whole && isfinite(ref)) {
        if (r != 0 || memcmp(&got, &ref, 4) != 0) abort();
    } else if (r == 0) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1) return 0;
    int which = data[0] % 4;
    if (which == 3) {
        check_float(data + 1, size - 1);
        return 0;
    }
    fl__parser ps = {slots_ms, 4, FL__FMT_MULTISLOT, 1000001, "f"};
    if (which == 1) ps = (fl__parser){slots_criteo, 28, FL__FMT_CRITEO, 1 + data[0] / 4, "f"};
    if (which == 2) ps = (fl__parser){slots_svm, 3, FL__FMT_LIBSVM, 0, "f"};
    fl__arena a = {0};
    const char *p = (const char *)data + 1, *e = (const char *)data + size;
    int64_t ln = 0;
    while (p < e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *le = nl ? nl : e;
        size_t before = a.len;
        int st = fl__parse_line(&ps, p, (size_t)(le - p), ++ln, &a);
        if (st == FL_OK) {
            if (fl__record_size(ps.slots, ps.nslots, a.p + before, a.len - before) != a.len - before) abort();
        } else {
            if (st != FL_ECORRUPT || a.len != before || strncmp(fl_last_error(), "f:", 2) != 0) abort();
        }
        p = nl ? nl + 1 : e;
    }
    fl__arena_free(&a);
    return 0;
}
