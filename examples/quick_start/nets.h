/*
 * nets.h - the quick-start model and data generator shared by the quick-start examples
 * (the seed's nets.py and utils.py).
 */
#ifndef QUICK_START_NETS_H
#define QUICK_START_NETS_H

#include <fleet.h>

/* fc(hid, tanh) -> fc(hid, tanh) -> fc(label_dim, softmax) -> cross_entropy -> mean */
static inline fl_var *mlp(fl_var *input_x, fl_var *input_y, int hid_dim, int label_dim)
{
    fl_var *fc_1 = fl_layer_fc(FL_VARS(input_x), hid_dim, "tanh");
    fl_var *fc_2 = fl_layer_fc(FL_VARS(fc_1), hid_dim, "tanh");
    fl_var *prediction = fl_layer_fc(FL_VARS(fc_2), label_dim, "softmax");
    fl_var *cost = fl_layer_cross_entropy(prediction, input_y);
    fl_var *avg_cost = fl_layer_mean(cost);
    return avg_cost;
}

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
            if (j < 16) a += v; else b += v;
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
