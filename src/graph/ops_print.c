/*
 * ops_print.c - operator group "print": Paddle's print op (fluid.layers.Print) and its
 * layer builder.
 *
 * Out is a copy of In (any dtype, LoD kept).  Each run that prints writes one record in
 * the format of Paddle's TensorFormatter, in one write to stderr (Paddle writes to stdout;
 * here a program's stdout stays its own):
 *     Variable: fc_0.tmp_1
 *       - message: after fc
 *       - lod: {{0, 2, 5}}
 *       - place: CPUPlace
 *       - shape: [5, 3]
 *       - layout: NCHW
 *       - dtype: float
 *       - data: [0.25 -1 3.5]
 * (the lines of the attributes print_tensor_name / _lod / _shape / _layout / _type that
 * are 0 left out, the message line when it is empty; values as C++ streams write them,
 * which is printf's %g; summarize caps how many, -1 none).  The gradient maker appends
 * another print op, of Out@GRAD into In@GRAD, with is_forward 0: print_phase FORWARD,
 * BACKWARD or BOTH chooses which of the two write.  first_n > 0: an op stops writing after
 * that many records (counted per executor, as Paddle counts per op instance).
 * Port choices: the layout is always NCHW (the executor hands this op plain tensors);
 * bfloat16, float16 and uint8 values are printed too (as float, float, int), where Paddle
 * writes "unprintable type"; their dtype names are "bfloat16", "float16", "uint8".
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "graph_internal.h"

static const char *const phases[] = {"FORWARD", "BACKWARD", "BOTH"};
enum { PHASE_FORWARD, PHASE_BACKWARD, PHASE_BOTH };

static int phase_code(const char *s)
{
    for (int i = 0; s && i < 3; i++)
        if (!strcasecmp(s, phases[i])) return i;
    return -1;
}

static int infer_print(fl_op *op)
{
    FL_CHECK(fl__op_check_slots(op));
    fl_var *x = op->in[0].vars[0], *o = op->out[0].vars[0];
    if (phase_code(fl__attr_s(op, "print_phase", "BOTH")) < 0)
        return fl__op_error(op, "print_phase '%s' (input '%s') must be FORWARD, BACKWARD or BOTH",
                            fl__attr_s(op, "print_phase", ""), x->name);
    fl__var_set_shape(o, x->dtype, x->ndim, x->shape);
    o->lod_level = x->lod_level;
    return FL_OK;
}

/* Paddle's dtype names: the demangled C++ type of the elements. */
static const char *dtype_name(fl_dtype dt)
{
    switch (dt) {
    case FL_FLOAT32: return "float";
    case FL_FLOAT64: return "double";
    case FL_INT32: return "int";
    case FL_INT64: return "long";
    case FL_FLOAT16: return "float16";
    case FL_BFLOAT16: return "bfloat16";
    case FL_UINT8: return "uint8";
    default: return "?";
    }
}

static void value(FILE *m, const fl_tensor *t, int64_t i)
{
    float f;
    switch (t->dtype) {
    case FL_FLOAT32: fprintf(m, "%g", (double)((const float *)t->data)[i]); break;
    case FL_FLOAT64: fprintf(m, "%g", ((const double *)t->data)[i]); break;
    case FL_INT32: fprintf(m, "%d", ((const int32_t *)t->data)[i]); break;
    case FL_INT64: fprintf(m, "%lld", (long long)((const int64_t *)t->data)[i]); break;
    case FL_UINT8: fprintf(m, "%d", ((const uint8_t *)t->data)[i]); break;
    case FL_BFLOAT16:
        fl__cvt_bf16_to_f32(&f, (const uint16_t *)t->data + i, 1);
        fprintf(m, "%g", (double)f);
        break;
    case FL_FLOAT16:
        fl__cvt_f16_to_f32(&f, (const uint16_t *)t->data + i, 1);
        fprintf(m, "%g", (double)f);
        break;
    default: break;
    }
}

/* Writes t's record (name NULL: none) as TensorFormatter::Format does. */
static int print_record(const fl_op *op, const char *name, const fl_tensor *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return fl__err(FL_ENOMEM, "print: cannot format '%s'", name ? name : "?");
    const char *msg = fl__attr_s(op, "message", "");
    if (name) fprintf(m, "Variable: %s\n", name);
    if (*msg) fprintf(m, "  - message: %s\n", msg);
    if (fl__attr_i(op, "print_tensor_lod", 1)) {
        fputs("  - lod: {", m);
        if (t->lod_n) {
            fputc('{', m);
            for (int64_t i = 0; i < t->lod_n; i++) fprintf(m, "%s%lld", i ? ", " : "", (long long)t->lod[i]);
            fputc('}', m);
        }
        fputs("}\n", m);
    }
    fputs("  - place: CPUPlace\n", m);
    if (fl__attr_i(op, "print_tensor_shape", 1)) {
        fputs("  - shape: [", m);
        for (int i = 0; i < t->ndim; i++) fprintf(m, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        fputs("]\n", m);
    }
    if (fl__attr_i(op, "print_tensor_layout", 1)) fputs("  - layout: NCHW\n", m);
    if (fl__attr_i(op, "print_tensor_type", 1)) fprintf(m, "  - dtype: %s\n", dtype_name(t->dtype));
    int64_t sum = fl__attr_i(op, "summarize", 20), n = sum < 0 || sum > t->numel ? t->numel : sum;
    fputs("  - data: [", m);
    for (int64_t i = 0; i < n; i++) {
        if (i) fputc(' ', m);
        value(m, t, i);
    }
    fputs("]\n", m);
    if (fclose(m) != 0 || !buf) {
        free(buf);
        return fl__err(FL_ENOMEM, "print: cannot format '%s'", name ? name : "?");
    }
    fputs(buf, stderr); /* one call: records of several threads do not interleave */
    free(buf);
    return FL_OK;
}

static int run_print(fl_kctx *c)
{
    fl_tensor *x = FL_IN(c, 0), *out = FL_OUT(c, 0);
    if (!x) return fl__err(FL_EINVAL, "print: input '%s' has no value", fl__kctx_var_name(c, 0, 0));
    if (x->is_rows)
        return fl__err(FL_EUNSUPPORTED, "print: input '%s' is a SelectedRows gradient (dense tensors only)",
                       fl__kctx_var_name(c, 0, 0));
    int phase = phase_code(fl__attr_s(c->op, "print_phase", "BOTH")), fwd = fl__attr_i(c->op, "is_forward", 1) != 0;
    int64_t first_n = fl__attr_i(c->op, "first_n", -1);
    int show = phase == PHASE_BOTH || (phase == PHASE_FORWARD) == fwd;
    if (show && first_n > 0) { /* Paddle: ++times_ > first_n */
        if (!*c->state && !(*c->state = calloc(1, sizeof(int64_t)))) return fl__err(FL_ENOMEM, "print: out of memory");
        int64_t *times = *c->state;
        show = ++*times <= first_n;
    }
    if (show)
        FL_CHECK(print_record(c->op, fl__attr_i(c->op, "print_tensor_name", 1) ? fl__kctx_var_name(c, 0, 0) : NULL, x));
    return fl_tensor_copy(out, x);
}

/* Paddle's PrintOpGradientMaker: print of Out@GRAD into In@GRAD, with is_forward 0. */
static int grad_print(fl_op *op, fl_grad_ctx *g)
{
    fl_var *x = op->in[0].vars[0], *dy = fl__grad_of(g, op->out[0].vars[0]), *dx = dy ? fl__grad_for(g, x) : NULL;
    if (!dx) return FL_OK;
    fl_io in = FL_IO1("In", dy);
    fl_io o = FL_IO1("Out", dx);
    FL_CHECK(fl__grad_append(op, "print", &in, 1, &o, 1));
    return fl__attr_set_i(op->prog->ops[op->prog->nops - 1], "is_forward", 0);
}

static const fl_op_def def_print = {"print", {"In"}, {"Out"}, infer_print, run_print, grad_print};

fl_var *fl_layer_print(fl_var *x, int first_n, const char *message, int summarize, int flags, const char *print_phase)
{
    fl_prog *p = fl__prog_of(&x, 1);
    if (!p || p->status != FL_OK) return NULL;
    int phase = print_phase ? phase_code(print_phase) : PHASE_BOTH;
    if (phase < 0 || (flags & ~FL_PRINT_ALL)) {
        fl__prog_error(p, FL_EINVAL,
                       "print: input '%s': print_phase '%s' must be forward, backward or both, flags %#x "
                       "FL_PRINT_* bits",
                       x->name, print_phase ? print_phase : "(null)", (unsigned)flags);
        return NULL;
    }
    char base[128];
    snprintf(base, sizeof base, "print_%s", x->name); /* Paddle's LayerHelper('print_' + name) */
    fl_var *out = fl__tmp_var(p, base, x->dtype, x->ndim, x->shape);
    if (!out) return NULL;
    fl_io in = FL_IO1("In", x);
    fl_io o = FL_IO1("Out", out);
    fl_op *op = fl__op_new(p, "print", &in, 1, &o, 1);
    if (!op || fl__attr_set_i(op, "first_n", first_n) || fl__attr_set_s(op, "message", message ? message : "") ||
        fl__attr_set_i(op, "summarize", summarize) || fl__attr_set_i(op, "print_tensor_name", !!(flags & FL_PRINT_NAME)) ||
        fl__attr_set_i(op, "print_tensor_type", !!(flags & FL_PRINT_TYPE)) ||
        fl__attr_set_i(op, "print_tensor_shape", !!(flags & FL_PRINT_SHAPE)) ||
        fl__attr_set_i(op, "print_tensor_layout", !!(flags & FL_PRINT_LAYOUT)) ||
        fl__attr_set_i(op, "print_tensor_lod", !!(flags & FL_PRINT_LOD)) ||
        fl__attr_set_s(op, "print_phase", phases[phase]) || fl__attr_set_i(op, "is_forward", 1) || fl__op_finish(op))
        return NULL;
    return out;
}

const fl_op_def *const fl__ops_print[] = {&def_print, NULL};
