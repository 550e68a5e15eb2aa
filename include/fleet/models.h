/*
 * fleet/models.h - model builders shared by the examples, the benchmarks and the tests.
 *
 * CTR-DNN is Paddle's click-through-rate example network (FleetX examples/ctr,
 * network_conf.py): a dense_input float[13] slot, sparse slots C1..C26 (int64, LoD) looked
 * up in one shared embedding table "SparseFeatFactors" [sparse_feature_dim, 10] (is_sparse;
 * is_distributed puts it on the parameter servers), each slot sum-pooled, concatenated with
 * the dense input (26 x 10 + 13 = 273), three fc 400 relu layers and an fc 2 softmax
 * (weights Normal(0, 1/sqrt(fan_in))), cross-entropy summed over the batch (Paddle's
 * reduce_sum; mean with loss_mean = 1), and Paddle's auc (4096 thresholds, 20 slide steps).
 */
#ifndef FLEET_MODELS_H
#define FLEET_MODELS_H

#include "fleet/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FL_MODEL_CTR_MAX_SLOTS 64
#define FL_MODEL_CTR_MAX_LAYERS 8

typedef struct {
    int64_t sparse_feature_dim; /* rows of the shared table (default 1000001) */
    int embedding_size;         /* default 10 */
    int num_sparse_slots;       /* default 26 (C1..C26) */
    int dense_dim;              /* default 13 */
    int is_sparse;              /* default 1: SelectedRows gradient for the table */
    int is_distributed;         /* default 0: 1 keeps the table on the servers */
    int hidden[FL_MODEL_CTR_MAX_LAYERS]; /* default 400, 400, 400 */
    int nhidden;
    int loss_mean;              /* default 0: reduce_sum of the cross-entropy, as Paddle */
} fl_model_ctr_dnn_config;

typedef struct {
    fl_var *dense_input;
    fl_var *sparse[FL_MODEL_CTR_MAX_SLOTS];
    fl_var *label;
    fl_var *predict;   /* [N, 2] probabilities */
    fl_var *loss;      /* [1] */
    fl_var *auc;       /* global AUC, float64 [1] */
    fl_var *batch_auc; /* AUC of the last 20 batches */
    fl_var *auc_states[4]; /* the AUC's persistable statistics: zero them (fl_scope_zero)
                            * to evaluate afresh */
    int nauc_states;
    /* dataset slots in Paddle's order: dense_input, C1..C26, label */
    fl_var *use_var[FL_MODEL_CTR_MAX_SLOTS + 2];
    int nuse_var;
} fl_model_ctr_dnn;

FL_API fl_model_ctr_dnn_config fl_model_ctr_dnn_default(void);
/* Builds the network into p (whose startup program gets the initializers).  Errors name
 * the bad configuration field; the program keeps its build error otherwise. */
FL_API int fl_model_ctr_dnn_build(fl_prog *p, const fl_model_ctr_dnn_config *cfg, fl_model_ctr_dnn *out);

#ifdef __cplusplus
}
#endif
#endif
