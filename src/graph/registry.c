/* registry.c - looks operator definitions up by type across the op groups. */
#include <string.h>

#include "graph_internal.h"

static const fl_op_def *const *const groups[] = {fl__ops_basic, fl__ops_nn,     fl__ops_seq,
                                                  fl__ops_loss,  fl__ops_metric, fl__ops_optim};

const fl_op_def *fl__op_lookup(const char *type)
{
    if (!type) return NULL;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (const fl_op_def *const *d = groups[g]; *d; d++)
            if (!strcmp((*d)->type, type)) return *d;
    return NULL;
}
