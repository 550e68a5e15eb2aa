/* registry.c - looks operator definitions up by type across the op groups. */
#include <pthread.h>
#include <string.h>

#include "graph_internal.h"

/* Extra groups registered by upper layers (the one process-wide table of the graph layer,
 * filled once by fleet/ before programs use collective ops). */
#define MAX_EXTRA 8
static const fl_op_def *const *extra[MAX_EXTRA];
static int nextra;
static pthread_mutex_t extra_mu = PTHREAD_MUTEX_INITIALIZER;

int fl__op_register_group(const fl_op_def *const *group)
{
    int st = FL_OK;
    pthread_mutex_lock(&extra_mu);
    int found = 0;
    for (int i = 0; i < nextra; i++) found |= extra[i] == group;
    if (!found) {
        if (nextra == MAX_EXTRA) st = fl__err(FL_ENOMEM, "op registry: too many op groups");
        else
            __atomic_store_n(&extra[nextra], group, __ATOMIC_RELEASE),
                __atomic_store_n(&nextra, nextra + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&extra_mu);
    return st;
}

static const fl_op_def *const *const groups[] = {
    fl__ops_basic,      fl__ops_act,         fl__ops_nn,     fl__ops_seq,     fl__ops_loss,
    fl__ops_metric,     fl__ops_optim,       fl__ops_conv,   fl__ops_extra,   fl__ops_amp,
    fl__ops_optim_lars, fl__ops_amp_scaling, fl__ops_dgc,    fl__ops_math,    fl__ops_nlp,
    fl__ops_nlp_idx,    fl__ops_nlp_train,   fl__ops_bcast,  fl__ops_more,    fl__ops_lr,
    fl__ops_optim_more, fl__ops_select,      fl__ops_deconv, fl__ops_seqconv, fl__ops_print};

const fl_op_def *fl__op_lookup(const char *type)
{
    if (!type) return NULL;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (const fl_op_def *const *d = groups[g]; *d; d++)
            if (!strcmp((*d)->type, type)) return *d;
    int n = __atomic_load_n(&nextra, __ATOMIC_ACQUIRE);
    for (int g = 0; g < n; g++)
        for (const fl_op_def *const *d = __atomic_load_n(&extra[g], __ATOMIC_ACQUIRE); *d; d++)
            if (!strcmp((*d)->type, type)) return *d;
    return NULL;
}
