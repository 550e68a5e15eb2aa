/*
 * collref.h - the serial reference of the collective tests (tests/test_coll.c and the
 * mpirun helper tests/bin/coll_mpi.c): every rank's input as a function of (rank, index),
 * the exact result of each reduction over P ranks, written independently of the library
 * (its own bfloat16 rounding), and a bit-exact comparison naming the first difference.
 * Include after testhelp.h.
 */
#ifndef FLEET_TESTS_COLLREF_H
#define FLEET_TESTS_COLLREF_H

#include <math.h>
#include <string.h>

#include "fleet/coll.h"

static const fl_dtype DTS[] __attribute__((unused)) = {FL_FLOAT32, FL_FLOAT64, FL_INT64, FL_FLOAT16, FL_BFLOAT16};
static const fl_coll_op OPS[] __attribute__((unused)) = {FL_COLL_SUM, FL_COLL_MAX, FL_COLL_MIN, FL_COLL_AVG};
#define NDTS 5
#define NOPS 4

static inline int64_t ival(int r, size_t i) { return (int64_t)((i * 7 + (size_t)r * 13) % 17) - 8; }

/* float -> bfloat16, round to nearest even, written independently of the library: pick the
 * nearer of the two truncation neighbours, ties to the even one. */
static inline uint16_t t_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float fl, fh;
    memcpy(&fl, &lo, 4);
    memcpy(&fh, &hi, 4);
    double dl = fabs((double)f - (double)fl), dh = fabs((double)fh - (double)f);
    if (dl < dh || (dl == dh && !((lo >> 16) & 1))) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static inline void put(void *b, fl_dtype dt, size_t i, double v)
{
    switch (dt) {
    case FL_FLOAT32: ((float *)b)[i] = (float)v; break;
    case FL_FLOAT64: ((double *)b)[i] = v; break;
    case FL_INT64: ((int64_t *)b)[i] = (int64_t)v; break;
    case FL_INT32: ((int32_t *)b)[i] = (int32_t)v; break;
    case FL_FLOAT16: {
        _Float16 h = (_Float16)(float)v;
        memcpy((uint16_t *)b + i, &h, 2);
        break;
    }
    case FL_BFLOAT16: ((uint16_t *)b)[i] = t_bf16((float)v); break;
    default: break;
    }
}

static inline void fill(void *b, fl_dtype dt, size_t n, int r, size_t off)
{
    for (size_t i = 0; i < n; i++) put(b, dt, i, (double)ival(r, off + i));
}

/* Reference reduction of element off+i over P ranks, stored as dt. */
static inline void reference(void *out, fl_dtype dt, fl_coll_op op, size_t n, int np, size_t off)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == FL_INT64) {
            int64_t a = ival(0, off + i);
            for (int r = 1; r < np; r++) {
                int64_t x = ival(r, off + i);
                a = op == FL_COLL_MAX ? (x > a ? x : a) : op == FL_COLL_MIN ? (x < a ? x : a) : a + x;
            }
            ((int64_t *)out)[i] = op == FL_COLL_AVG ? a / np : a;
        } else if (dt == FL_FLOAT64) {
            double a = (double)ival(0, off + i);
            for (int r = 1; r < np; r++) {
                double x = (double)ival(r, off + i);
                a = op == FL_COLL_MAX ? (x > a ? x : a) : op == FL_COLL_MIN ? (x < a ? x : a) : a + x;
            }
            ((double *)out)[i] = op == FL_COLL_AVG ? a / np : a;
        } else {
            float a = (float)ival(0, off + i);
            for (int r = 1; r < np; r++) {
                float x = (float)ival(r, off + i);
                a = op == FL_COLL_MAX ? (x > a ? x : a) : op == FL_COLL_MIN ? (x < a ? x : a) : a + x;
            }
            if (op == FL_COLL_AVG) a = a / (float)np;
            put(out, dt, i, a);
        }
    }
}

static inline void check_same(const void *got, const void *want, fl_dtype dt, size_t n, const char *what, int rank)
{
    size_t es = fl_dtype_size(dt);
    if (!memcmp(got, want, n * es)) return;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es)) {
            uint64_t g = 0, w = 0;
            memcpy(&g, (const char *)got + i * es, es);
            memcpy(&w, (const char *)want + i * es, es);
            TFAIL("rank %d: %s (%s, n=%zu): element %zu is 0x%llx, expected 0x%llx", rank, what, fl_dtype_name(dt), n, i,
                  (unsigned long long)g, (unsigned long long)w);
        }
}

#endif
