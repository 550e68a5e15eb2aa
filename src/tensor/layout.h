/*
 * layout.h - memory layouts of activation tensors (layout.c).  A float32 or bfloat16 4-D tensor
 * [N, C, H, W] may hold its data in a channel-blocked layout (oneDNN's nChw16c / nChw8c:
 * element (n, c, s) at ((n * C/B + c/B) * H*W + s) * B + c%B, with C a multiple of B, so
 * the buffer holds exactly numel values).  Its shape stays the logical NCHW one.  Only ops
 * that declare they understand a layout (src/graph/layout.c's table) see one; every other
 * reader gets the tensor converted back to plain first (lazily, in place), as do fetches,
 * fl_tensor_data and the end of each executor run.  Reshaping a tensor (writing it as an
 * output) makes it plain again.
 *
 * How to add a layout: a row in layout.c's table and an FL_LAYOUT_* code here; the
 * consumers (dnn_conv.c's descriptors, ops_bn.c's kernels) ask fl__layout_block().
 */
#ifndef FL_LAYOUT_H
#define FL_LAYOUT_H

#include <stdint.h>

#include "fleet/tensor.h"

enum { FL_LAYOUT_PLAIN = 0, FL_LAYOUT_NCHW16C, FL_LAYOUT_NCHW8C, FL_LAYOUT_COUNT };

/* Channels per block of layout `lay` (0 for plain or an unknown code). */
int fl__layout_block(int lay);
/* The layout's name ("NCHW", "nChw16c", ...). */
const char *fl__layout_name(int lay);
/* 1 when a float32 / bfloat16 tensor of this shape can take layout lay (4-D, C a multiple of its block). */
int fl__layout_fits(int lay, int ndim, const int64_t *shape);
/* The tensor's layout (FL_LAYOUT_PLAIN when t is NULL). */
int fl__tensor_layout(const fl_tensor *t);
/* Marks t's data as being in layout lay (the caller wrote it so); FL_EINVAL when lay does
 * not fit t's shape or dtype. */
int fl__tensor_set_layout(fl_tensor *t, int lay);
/* Converts t's data in place to layout lay (plain included); a no-op when it is there or t
 * has no data.  FL_ENOMEM or FL_EINVAL (lay does not fit) with the message set. */
int fl__tensor_to_layout(fl_tensor *t, int lay);
static inline int fl__tensor_to_plain(fl_tensor *t) { return fl__tensor_to_layout(t, FL_LAYOUT_PLAIN); }
/* Conversions made so far (tests and benchmarks count the reorders a step makes). */
uint64_t fl__layout_conversions(void);

#endif
