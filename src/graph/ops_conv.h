/*
 * ops_conv.h - what the image ops share between ops_conv.c (conv2d, batch_norm, and the
 * group's op table) and ops_pool.c (pool2d).  Private to those two files.
 */
#ifndef FL_OPS_CONV_H
#define FL_OPS_CONV_H

#include "graph_internal.h"

/* FL_OK when the string attribute `attr` (data_format / data_layout) is NCHW or AnyLayout;
 * else an op error naming the layout and input x. */
int fl__conv_need_nchw(fl_op *op, const char *attr, const fl_var *x);
/* Two-element int attribute (one element means both; absent gives def twice); 0 if absent
 * or well formed, -1 otherwise. */
int fl__conv_attr2(const fl_op *op, const char *name, int64_t def, int64_t v[2]);

/* ops_pool.c: pool2d and its gradient, listed in fl__ops_conv. */
extern const fl_op_def fl__def_pool2d, fl__def_pool2d_grad;

#endif
