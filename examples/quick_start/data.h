/*
 * data.h - the data generator shared by the quick-start examples (the seed's utils.py).
 * The model (the seed's nets.py) is the library's quick-start MLP, fl_model_mlp_build
 * with fl_model_mlp_default() (fleet/models.h).
 */
#ifndef QUICK_START_DATA_H
#define QUICK_START_DATA_H

#include <fleet.h>

/* A learnable synthetic task: label = 1 when the sum of the first 16 features exceeds
 * the sum of the last 16.  Deterministic for a given seed. */
typedef struct {
    fl_tensor *x, *y;
} batch_data;

static inline void gen_data(batch_data *d, int batch, unsigned seed)
{
    if (!d->x) {
        d->x = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){batch, 32});
        d->y = fl_tensor_create(FL_INT64, 2, (const int64_t[]){batch, 1});
    }
    float *x = fl_tensor_f32(d->x);
    int64_t *y = fl_tensor_i64(d->y);
    unsigned s = seed * 2654435761u + 12345u;
    for (int i = 0; i < batch; i++) {
        float a = 0, b = 0;
        for (int j = 0; j < 32; j++) {
            s = s * 1664525u + 1013904223u;
            float v = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
            x[i * 32 + j] = v;
            if (j < 16) a += v;
            else b += v;
        }
        y[i] = a > b;
    }
}

static inline void batch_data_free(batch_data *d)
{
    fl_tensor_free(d->x);
    fl_tensor_free(d->y);
}

#endif
