/* ops_nn.c - operator group "nn" (see graph_internal.h for how to add an op). */
#include "graph_internal.h"

const fl_op_def *const fl__ops_nn[] = {NULL};
