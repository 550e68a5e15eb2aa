/*
 * op_layout.h - which ops read tensors in a blocked layout (src/tensor/layout.h) and the
 * executor's conversions around each op (op_layout.c).  An op is one of:
 *   FL_OPLAY_PLAIN   (every op not in the table): its inputs are converted to plain NCHW
 *                    before it runs;
 *   FL_OPLAY_NATIVE  its kernel reads the layouts itself in the listed input slots (the
 *                    others are made plain) and sets its outputs' layouts;
 *   FL_OPLAY_SAME    an elementwise op: when its inputs (float32 or bfloat16) all have one shape, those in
 *                    another layout are converted to the first blocked one, the kernel runs
 *                    on the data as it is, and outputs of that shape get that layout (a plain
 *                    persistable input, a parameter trainer threads share, makes them all plain
 *                    instead: parameters are never converted).
 */
#ifndef FL_OP_LAYOUT_H
#define FL_OP_LAYOUT_H

#include "graph_internal.h"

enum { FL_OPLAY_PLAIN = 0, FL_OPLAY_NATIVE, FL_OPLAY_SAME };

/* The op type's kind; *slots gets the input slots (bit per slot) a NATIVE op reads blocked. */
int fl__op_layout_kind(const char *type, unsigned *slots);
/* Before running c's op of that kind: converts its inputs as above; *same gets the layout
 * a SAME op's outputs take after it (FL_LAYOUT_PLAIN otherwise).  Status. */
int fl__op_layout_before(fl_kctx *c, int kind, unsigned slots, int *same);
/* After a SAME op ran: its float32 / bfloat16 outputs of its inputs' shape take layout `same`. */
int fl__op_layout_after(fl_kctx *c, int same);
/* 1 when blocked layouts are in use (FLEET_DNN_LAYOUT, default on): the convolutions hand
 * their outputs on in oneDNN's blocked layout. */
int fl__layout_enabled(void);
/* Tests: reads FLEET_DNN_LAYOUT again. */
void fl__layout_enabled_reload(void);

#endif
