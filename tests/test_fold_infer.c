/* test_fold_infer.c - the inference pass (src/graph/fold_infer.c): a ResNet cloned for test
 * (basic blocks with projection shortcuts, and ResNet-50's bottlenecks with its 7x7 stem)
 * has its batch_norms folded into the convolutions and its relus and residual adds fused
 * into them, and computes what the program without the pass (FLEET_INFER_FUSE=0) computes,
 * with blocked layouts on and off; the parameters in the scope are unchanged by runs of the
 * fused program; a batch_norm statistic or a filter changed between two runs changes the
 * next output as the unfused program's (no stale fold); an inference model saved and loaded
 * is fused and computes the same; the folds are skipped while their inputs keep their write
 * versions and redone after each kind of write; bf16 AMP eval agrees within bf16's precision,
 * and its convolutions that write bfloat16 (no cast after them) give the casts' very bits; a training
 * clone is left alone; pool2d on blocked tensors computes what it computes on plain ones. */
#include "gradcheck.h"

#include "graph/op_layout.h"
#include "graph/ops_conv.h"
#include "tensor/dnn_conv.h"
#include "fleet/io.h"
#include "fleet/models.h"

enum { N = 3 };

typedef struct {
    fl_prog *p;
    fl_model_resnet m;
    fl_model_resnet_config c;
    fl_exe *e;
    fl_tensor *x, *y;
} net;

static void bn_away(net *n);

/* ResNet-14 (basic blocks, 16 to 64 channels, 12x12) or ResNet-50's layout at 32x32. */
static void net_build(net *n, int deep, int amp)
{
    memset(n, 0, sizeof *n);
    n->p = fl_prog_create();
    n->c = fl_model_resnet_default();
    n->c.channels = 3, n->c.height = n->c.width = 12, n->c.depth = 14, n->c.base_filters = 16, n->c.num_classes = 5;
    if (deep) n->c.height = n->c.width = 32, n->c.depth = 50, n->c.imagenet_stem = 1;
    CHECK_OK(fl_model_resnet_build(n->p, &n->c, &n->m));
    fl_amp_opts ao = {FL_BFLOAT16};
    if (amp) CHECK(fl_amp_decorate(n->p, &ao) >= 0);
    n->e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(n->e, fl_prog_startup(n->p), NULL, 0, NULL, 0, NULL));
    n->x = fl_tensor_create(FL_FLOAT32, FL_SHAPE(N, 3, n->c.height, n->c.width));
    n->y = fl_tensor_create(FL_INT64, FL_SHAPE(N, 1));
    for (int64_t i = 0; i < n->x->numel; i++) ((float *)n->x->data)[i] = (float)sin((double)i * 0.37);
    for (int64_t i = 0; i < N; i++) ((int64_t *)n->y->data)[i] = i % 5;
    bn_away(n);
}

/* batch_norm's parameters and statistics away from their initial 1 / 0 / 0 / 1 */
static void bn_away(net *n)
{
    fl_scope *s = fl_exe_scope(n->e);
    for (int i = 0; i < n->p->nops; i++) {
        const fl_op *op = n->p->ops[i];
        if (strcmp(op->def->type, "batch_norm") && strcmp(op->def->type, "fused_bn_add_activation")) continue;
        for (int k = 1; k < 5; k++) {
            fl_tensor *t = fl_scope_find(s, op->in[k].vars[0]->name);
            CHECK(t != NULL);
            float *d = fl_tensor_f32(t);
            for (int64_t j = 0; j < t->numel; j++) {
                double u = sin((double)(i * 31 + k * 7 + j) * 1.3);
                d[j] = (float)(k == 4 ? 0.6 + 0.5 * u * u : k == 1 ? 0.6 + 0.3 * u : 0.2 * u);
            }
        }
    }
}

static void net_free(net *n)
{
    fl_tensor_free(n->x), fl_tensor_free(n->y);
    fl_exe_free(n->e);
    fl_prog_free(n->p);
}

static fl_prog *clone_test(const net *n, int fuse)
{
    setenv("FLEET_INFER_FUSE", fuse ? "1" : "0", 1);
    fl_prog *t = fl_prog_clone(n->p, 1);
    unsetenv("FLEET_INFER_FUSE");
    CHECK(t != NULL);
    return t;
}

static int count_ops(const fl_prog *p, const char *type, int with_residual)
{
    int k = 0;
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, type) && (!with_residual || p->ops[i]->in[3].n)) k++;
    return k;
}

/* The conv2d ops of p writing bfloat16 (out_dtype); with_residual: of those, the ones with a
 * ResidualData. */
static int count_bf16_out(const fl_prog *p, int with_residual)
{
    int k = 0;
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "conv2d") && fl__attr_i(p->ops[i], "out_dtype", FL_FLOAT32) == FL_BFLOAT16) {
            CHECK_EQ_INT(p->ops[i]->out[0].vars[0]->dtype, FL_BFLOAT16);
            k += !with_residual || p->ops[i]->in[3].n;
        }
    return k;
}

/* The logits (softmax's input) of prog on n's batch, copied into out[N * classes]. */
static const char *logits(const fl_prog *p)
{
    for (int i = 0; i < p->nops; i++)
        if (!strcmp(p->ops[i]->def->type, "softmax")) return p->ops[i]->in[0].vars[0]->name;
    TFAIL("no softmax op");
}

static void predict(net *n, fl_prog *prog, float *out)
{
    fl_feed f[2] = {{fl_var_name(n->m.input), n->x}, {fl_var_name(n->m.label), n->y}};
    const char *fetch = logits(prog);
    fl_tensor *o;
    CHECK_OK(fl_exe_run(n->e, prog, f, 2, &fetch, 1, &o));
    CHECK_EQ_INT((int)o->numel, N * n->c.num_classes);
    CHECK_EQ_INT(fl__tensor_layout(o), FL_LAYOUT_PLAIN);
    memcpy(out, o->data, (size_t)o->numel * sizeof(float));
}

/* a and b agree within tol relative to b's largest magnitude, and the logits are not all
 * alike (the network is not degenerate). */
static void check_close(const float *a, const float *b, int n, int classes, double tol)
{
    double big = 0, spread = 0;
    for (int i = 0; i < n * classes; i++) big = fmax(big, fabs(b[i]));
    for (int i = 0; i < n * classes; i++) {
        CHECK_NEAR(a[i], b[i], tol * big);
        spread += fabs(b[i] - b[0]);
    }
    CHECK(big > 0 && spread > 100 * tol * big);
}

static void same_on_and_off(int deep, int layout)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    setenv("FLEET_DNN_LAYOUT", layout ? "1" : "0", 1);
    fl__layout_enabled_reload();
    net n;
    net_build(&n, deep, 0);
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    int convs = count_ops(n.p, "conv2d", 0);
    CHECK_EQ_INT(count_ops(off, "batch_norm", 0), convs);
    CHECK_EQ_INT(count_ops(on, "batch_norm", 0), 0);
    CHECK_EQ_INT(count_ops(on, "conv_bn_fold", 0), convs);
    CHECK_EQ_INT(count_ops(on, "elementwise_add", 0), 0);
    CHECK_EQ_INT(count_ops(on, "relu", 0), 0);
    CHECK_EQ_INT(count_ops(on, "conv2d", 1), count_ops(off, "elementwise_add", 0));
    CHECK(count_ops(off, "elementwise_add", 0) >= (deep ? 16 : 6));
    float a[N * 5], b[N * 5];
    predict(&n, on, a);
    predict(&n, off, b);
    check_close(a, b, N, 5, 2e-5);
    predict(&n, on, a); /* a second run: the same */
    check_close(a, b, N, 5, 2e-5);
    fl_prog_free(on), fl_prog_free(off);
    net_free(&n);
    unsetenv("FLEET_DNN_LAYOUT");
    fl__layout_enabled_reload();
}

TEST(test_resnet_same_on_and_off) { same_on_and_off(0, 1); }
TEST(test_resnet_same_plain_layouts) { same_on_and_off(0, 0); }
TEST(test_resnet50_same_on_and_off) { same_on_and_off(1, 1); }

/* A test clone made after minimize: the block ends are fused_bn_add_activation ops
 * (append_backward's fusion, src/graph/fuse.c), folded as batch_norm with the residual and
 * relu in the convolution. */
TEST(test_clone_after_minimize)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 0);
    fl_opt *o = fl_opt_momentum(0.05f, 0.9f, 0);
    CHECK_OK(fl_opt_minimize(o, n.m.loss));
    int blocks = count_ops(n.p, "fused_bn_add_activation", 0);
    CHECK(blocks >= 6);
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    CHECK_EQ_INT(count_ops(off, "fused_bn_add_activation", 0), blocks);
    CHECK_EQ_INT(count_ops(on, "fused_bn_add_activation", 0), 0);
    CHECK_EQ_INT(count_ops(on, "batch_norm", 0), 0);
    CHECK_EQ_INT(count_ops(on, "conv2d", 1), blocks);
    float a[N * 5], b[N * 5];
    predict(&n, on, a);
    predict(&n, off, b);
    check_close(a, b, N, 5, 2e-5);
    fl_prog_free(on), fl_prog_free(off);
    fl_opt_free(o);
    net_free(&n);
}

/* bf16 AMP training (its normalisations write bfloat16, graph/amp_bn.c) cloned for test: each
 * conv2d's output variable has the type the op writes, and the predictions are the unfused
 * clone's within bf16's precision. */
TEST(test_amp_clone_after_minimize)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 0);
    fl_opt *o = fl_opt_momentum(0.05f, 0.9f, 0);
    fl_amp_opts ao = {FL_BFLOAT16};
    CHECK_OK(fl_amp_decorate_optimizer(o, &ao));
    CHECK_OK(fl_opt_minimize(o, n.m.loss));
    CHECK_OK(fl_exe_run(n.e, fl_prog_startup(n.p), NULL, 0, NULL, 0, NULL));
    bn_away(&n);
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    for (int i = 0; i < on->nops; i++) {
        const fl_op *op = on->ops[i];
        if (!strcmp(op->def->type, "conv2d"))
            CHECK_EQ_INT(op->out[0].vars[0]->dtype, fl__attr_i(op, "out_dtype", FL_FLOAT32));
    }
    printf("  %d of %d conv2d write bfloat16\n", count_bf16_out(on, 0), count_ops(on, "conv2d", 0));
    CHECK(count_bf16_out(on, 0) > 0);
    float a[N * 5], b[N * 5];
    predict(&n, on, a);
    predict(&n, off, b);
    check_close(a, b, N, 5, 2e-2);
    fl_prog_free(on), fl_prog_free(off);
    fl_opt_free(o);
    net_free(&n);
}

TEST(test_training_clone_untouched)
{
    net n;
    net_build(&n, 0, 0);
    fl_prog *t = fl_prog_clone(n.p, 0);
    CHECK(t != NULL);
    CHECK_EQ_INT(count_ops(t, "conv_bn_fold", 0), 0);
    CHECK_EQ_INT(count_ops(t, "batch_norm", 0), count_ops(n.p, "batch_norm", 0));
    fl_prog_free(t);
    net_free(&n);
}

/* Every persistable of the program, copied. */
typedef struct {
    int n;
    char **name;
    fl_tensor **t;
} snapshot;

static void snap(net *n, snapshot *s)
{
    s->n = 0;
    s->name = calloc((size_t)n->p->nvars, sizeof *s->name);
    s->t = calloc((size_t)n->p->nvars, sizeof *s->t);
    for (int i = 0; i < n->p->nvars; i++) {
        const fl_var *v = n->p->vars[i];
        fl_tensor *t = v->persistable ? fl_scope_find(fl_exe_scope(n->e), v->name) : NULL;
        if (!t) continue;
        s->name[s->n] = strdup(v->name);
        s->t[s->n] = fl_tensor_create(FL_FLOAT32, FL_SHAPE(1));
        CHECK_OK(fl_tensor_copy(s->t[s->n], t));
        s->n++;
    }
    CHECK(s->n > 40);
}

static void snap_free(snapshot *s)
{
    for (int i = 0; i < s->n; i++) free(s->name[i]), fl_tensor_free(s->t[i]);
    free(s->name), free(s->t);
}

TEST(test_params_unchanged_and_no_stale_fold)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 0);
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    snapshot s;
    snap(&n, &s);
    float a[N * 5], b[N * 5];
    predict(&n, on, a);
    predict(&n, on, a);
    for (int i = 0; i < s.n; i++) { /* bit for bit, and plain */
        fl_tensor *t = fl_scope_find(fl_exe_scope(n.e), s.name[i]);
        CHECK_EQ_INT(fl__tensor_layout(t), FL_LAYOUT_PLAIN);
        CHECK_EQ_INT((int)t->numel, (int)s.t[i]->numel);
        CHECK(!memcmp(t->data, s.t[i]->data, fl_tensor_nbytes(t)));
    }
    /* a moving variance, a batch_norm scale and a filter change between runs */
    const char *changed[3] = {NULL, NULL, "conv2d_5.w_0"};
    for (int i = 0; i < on->nops || i < off->nops; i++) {
        const fl_op *op = i < off->nops ? off->ops[i] : NULL;
        if (op && !strcmp(op->def->type, "batch_norm") && !changed[0]) {
            changed[0] = op->in[4].vars[0]->name;
            changed[1] = op->in[1].vars[0]->name;
        }
    }
    CHECK(changed[0] != NULL);
    for (int k = 0; k < 3; k++) {
        fl_tensor *t = fl_scope_find(fl_exe_scope(n.e), changed[k]);
        CHECK(t != NULL);
        float *v = fl_tensor_f32(t); /* the public accessor: a write the fold's cache sees */
        for (int64_t j = 0; j < t->numel; j++) v[j] *= k == 0 ? 2.5f : 0.5f;
        float before[N * 5];
        memcpy(before, a, sizeof a);
        predict(&n, on, a);
        predict(&n, off, b);
        check_close(a, b, N, 5, 2e-5);
        double moved = 0;
        for (int i = 0; i < N * 5; i++) moved += fabs(a[i] - before[i]);
        CHECK(moved > 1e-3);
    }
    snap_free(&s);
    fl_prog_free(on), fl_prog_free(off);
    net_free(&n);
}

/* Scales a scope tensor through the public accessor (a direct set). */
static void scale_var(net *n, const char *name, float by)
{
    fl_tensor *t = fl_scope_find(fl_exe_scope(n->e), name);
    CHECK(t != NULL);
    float *v = fl_tensor_f32(t);
    CHECK(v != NULL);
    for (int64_t j = 0; j < t->numel; j++) v[j] *= by;
}

/* The unfused clone's logits on a copy of n's persistables in an executor of its own: its
 * batch_norms (which write their statistics in place) leave n's scope alone. */
static void reference(net *n, fl_prog *off, float *b)
{
    fl_exe *e = fl_exe_create(NULL);
    for (int i = 0; i < off->nvars; i++) {
        const fl_var *v = off->vars[i];
        const fl_tensor *t = v->persistable ? fl_scope_find(fl_exe_scope(n->e), v->name) : NULL;
        if (t) CHECK_OK(fl_tensor_copy(fl_scope_var(fl_exe_scope(e), v->name), t));
    }
    fl_exe *keep = n->e;
    n->e = e;
    predict(n, off, b);
    n->e = keep;
    fl_exe_free(e);
}

/* Runs the fused clone, checks it agrees with the unfused one, and returns the folds that
 * were skipped (their inputs unchanged) in the fused run. */
static int cached_run(net *n, fl_prog *on, fl_prog *off, float *a)
{
    float b[N * 5];
    uint64_t h0 = fl__conv_bn_fold_hits();
    predict(n, on, a);
    int hits = (int)(fl__conv_bn_fold_hits() - h0);
    reference(n, off, b);
    check_close(a, b, N, 5, 2e-5);
    return hits;
}

/* conv_bn_fold skips its work while its inputs keep their write versions, and folds again
 * after each kind of input changes through each writer: a set through the public accessor
 * (scale, bias, mean, variance, filter), an optimizer step of the training program sharing
 * the scope, fl_io_load_persistables; the convolutions keep their reordered filters while
 * the folded ones are unchanged; each run computes what the unfused program computes. */
TEST(test_fold_cache)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 0);
    fl_opt *o = fl_opt_momentum(0.05f, 0.9f, 0);
    CHECK_OK(fl_opt_minimize(o, n.m.loss));
    CHECK_OK(fl_exe_run(n.e, fl_prog_startup(n.p), NULL, 0, NULL, 0, NULL)); /* the optimizer's variables too */
    bn_away(&n);
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    const int folds = count_ops(on, "conv_bn_fold", 0);
    CHECK(folds >= 10);
    float a[N * 5], first[N * 5];
    CHECK_EQ_INT(cached_run(&n, on, off, first), 0);
    uint64_t w0 = fl__conv_filter_reorders_skipped();
    CHECK_EQ_INT(cached_run(&n, on, off, a), folds); /* nothing changed: every fold skipped */
    CHECK_EQ_INT(cached_run(&n, on, off, a), folds);
    CHECK(!memcmp(a, first, sizeof a));
    /* the filter reorders skipped too, where oneDNN's layout differs from OIHW */
    CHECK(fl__conv_filter_reorders_skipped() > w0);
    /* one input of each kind of one batch_norm (folded in front of one convolution), and a filter */
    const fl_op *bn = NULL, *cv = NULL;
    for (int i = 0; i < off->nops && (!bn || !cv); i++) {
        if (!bn && !strcmp(off->ops[i]->def->type, "batch_norm")) bn = off->ops[i];
        if (!cv && i > 0 && !strcmp(off->ops[i]->def->type, "conv2d") && bn) cv = off->ops[i];
    }
    CHECK(bn != NULL && cv != NULL);
    const char *changed[5] = {bn->in[1].vars[0]->name, bn->in[2].vars[0]->name, bn->in[3].vars[0]->name,
                              bn->in[4].vars[0]->name, cv->in[1].vars[0]->name};
    for (int k = 0; k < 5; k++) {
        memcpy(first, a, sizeof a);
        scale_var(&n, changed[k], k == 3 ? 1.7f : 0.6f);
        CHECK_EQ_INT(cached_run(&n, on, off, a), folds - 1); /* that one folds again */
        double moved = 0;
        for (int i = 0; i < N * 5; i++) moved += fabs(a[i] - first[i]);
        CHECK(moved > 1e-4);
        CHECK_EQ_INT(cached_run(&n, on, off, a), folds);
    }
    /* checkpoint now, then a training step: every filter and statistic changes */
    char dir[64];
    th_mktemp(dir, sizeof dir, "fold_cache");
    CHECK_OK(fl_io_save_persistables(n.e, dir, n.p));
    float saved[N * 5];
    memcpy(saved, a, sizeof a);
    fl_feed f[2] = {{fl_var_name(n.m.input), n.x}, {fl_var_name(n.m.label), n.y}};
    CHECK_OK(fl_exe_run(n.e, n.p, f, 2, NULL, 0, NULL));
    CHECK_EQ_INT(cached_run(&n, on, off, a), 0);
    double moved = 0;
    for (int i = 0; i < N * 5; i++) moved += fabs(a[i] - saved[i]);
    CHECK(moved > 1e-4);
    CHECK_EQ_INT(cached_run(&n, on, off, a), folds);
    /* loading the checkpoint swaps every persistable back: every fold again, the saved outputs */
    CHECK_OK(fl_io_load_persistables(n.e, dir, n.p));
    CHECK_EQ_INT(cached_run(&n, on, off, a), 0);
    check_close(a, saved, N, 5, 2e-5);
    CHECK_EQ_INT(cached_run(&n, on, off, a), folds);
    /* zeroing a statistic through the scope */
    CHECK_OK(fl_scope_zero(fl_exe_scope(n.e), changed[2]));
    CHECK_EQ_INT(cached_run(&n, on, off, a), folds - 1);
    th_rmtree(dir);
    fl_prog_free(on), fl_prog_free(off);
    fl_opt_free(o);
    net_free(&n);
}

TEST(test_save_load_inference_model)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 0);
    char dir[64];
    th_mktemp(dir, sizeof dir, "fold_infer");
    const char *feeds[1] = {fl_var_name(n.m.input)};
    fl_var *targets[1] = {n.m.predict};
    CHECK_OK(fl_io_save_inference_model(n.e, dir, feeds, 1, targets, 1, n.p));
    fl_prog *off = clone_test(&n, 0);
    float a[N * 5], b[N * 5];
    predict(&n, off, b);
    fl_exe *e2 = fl_exe_create(NULL);
    fl_prog *lp;
    char **fd, **ft;
    int nfd, nft;
    CHECK_OK(fl_io_load_inference_model(e2, dir, &lp, &fd, &nfd, &ft, &nft));
    CHECK_EQ_INT(count_ops(lp, "batch_norm", 0), 0);
    CHECK_EQ_INT(count_ops(lp, "conv_bn_fold", 0), count_ops(n.p, "conv2d", 0));
    CHECK(count_ops(lp, "conv2d", 1) > 0);
    CHECK_EQ_INT(nft, 1);
    CHECK(!strcmp(ft[0], fl_var_name(n.m.predict)));
    fl_feed f = {fd[0], n.x};
    fl_tensor *o;
    const char *lg = logits(lp);
    CHECK_OK(fl_exe_run(e2, lp, &f, 1, &lg, 1, &o));
    CHECK_EQ_INT((int)o->numel, N * 5);
    memcpy(a, o->data, sizeof a);
    check_close(a, b, N, 5, 2e-5);
    fl_io_free_names(fd, nfd), fl_io_free_names(ft, nft);
    fl_prog_free(lp);
    fl_exe_free(e2);
    /* a fused clone saved as it is (conv_bn_fold, ResidualData in the text) loads and runs the same */
    fl_prog *on = clone_test(&n, 1);
    fl_var *ton[1] = {fl_prog_var(on, fl_var_name(n.m.predict))};
    CHECK(ton[0] != NULL);
    CHECK_OK(fl_io_save_inference_model(n.e, dir, feeds, 1, ton, 1, on));
    e2 = fl_exe_create(NULL);
    CHECK_OK(fl_io_load_inference_model(e2, dir, &lp, &fd, &nfd, &ft, &nft));
    CHECK_EQ_INT(count_ops(lp, "conv_bn_fold", 0), count_ops(n.p, "conv2d", 0));
    CHECK_EQ_INT(count_ops(lp, "conv2d", 1), count_ops(off, "elementwise_add", 0));
    f.name = fd[0];
    lg = logits(lp);
    CHECK_OK(fl_exe_run(e2, lp, &f, 1, &lg, 1, &o));
    memcpy(a, o->data, sizeof a);
    check_close(a, b, N, 5, 2e-5);
    fl_io_free_names(fd, nfd), fl_io_free_names(ft, nft);
    fl_prog_free(lp);
    fl_exe_free(e2);
    fl_prog_free(on);
    fl_prog_free(off);
    th_rmtree(dir);
    net_free(&n);
}

TEST(test_amp_bf16_eval)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    net n;
    net_build(&n, 0, 1);
    CHECK(count_ops(n.p, "cast", 0) > 0);
    setenv("FLEET_INFER_CONV_BF16", "0", 1); /* the convolutions' bf16 outputs: test_amp_bf16_conv_out */
    fl_prog *on = clone_test(&n, 1), *off = clone_test(&n, 0);
    unsetenv("FLEET_INFER_CONV_BF16");
    CHECK_EQ_INT(count_ops(on, "batch_norm", 0), 0);
    CHECK_EQ_INT(count_ops(on, "conv_bn_fold", 0), count_ops(n.p, "conv2d", 0));
    /* the filters' casts became the folds' bfloat16 outputs; the activations' casts stay */
    CHECK_EQ_INT(count_ops(on, "cast", 0), count_ops(off, "cast", 0) - count_ops(n.p, "conv2d", 0));
    float a[N * 5], b[N * 5];
    predict(&n, on, a);
    predict(&n, off, b);
    /* bf16 filters rounded after the fold against rounded before it: bf16's 2^-8 per product */
    check_close(a, b, N, 5, 2e-2);
    fl_prog_free(on), fl_prog_free(off);
    net_free(&n);
}

/* The eval clone of n with FLEET_INFER_CONV_BF16 set to on. */
static fl_prog *clone_conv_bf16(const net *n, const char *on)
{
    setenv("FLEET_INFER_CONV_BF16", on, 1);
    fl_prog *t = fl_prog_clone(n->p, 1);
    unsetenv("FLEET_INFER_CONV_BF16");
    CHECK(t != NULL);
    return t;
}

/* The fetch of v from prog on n's batch, copied into out (bytes, at most cap). */
static int64_t fetch_bytes(net *n, fl_prog *prog, const char *v, fl_dtype want, void *out, size_t cap)
{
    fl_feed f[2] = {{fl_var_name(n->m.input), n->x}, {fl_var_name(n->m.label), n->y}};
    fl_tensor *o;
    CHECK_OK(fl_exe_run(n->e, prog, f, 2, &v, 1, &o));
    CHECK_EQ_INT(o->dtype, want);
    CHECK(fl__tensor_to_plain(o) == FL_OK);
    size_t bytes = (size_t)o->numel * fl_dtype_size(o->dtype);
    CHECK(bytes <= cap);
    memcpy(out, o->data, bytes);
    return (int64_t)bytes;
}

/* bf16 AMP eval: the convolutions whose output only casts to bfloat16 read write bfloat16
 * themselves and the casts go; the logits are those of the clone that keeps the casts
 * (FLEET_INFER_CONV_BF16=0) bit for bit, on oneDNN (a bf16 destination: the f32 result of the
 * accumulation, bias and relu rounded to nearest even once, as the cast rounds) and on the
 * im2col path (the f32 output rounded by the cast's own conversion); a fetch of such an output
 * gives the bfloat16 values the cast's output held.  A float32 program is untouched. */
TEST(test_amp_bf16_conv_out)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    for (int deep = 0; deep < 2; deep++)
        for (int lib = 0; lib < 2; lib++) {
            setenv("FLEET_GEMM", lib ? "openblas" : "dnnl", 1);
            fl__gemm_lib_reload();
            net n;
            net_build(&n, deep, 1);
            fl_prog *on = clone_conv_bf16(&n, "1"), *off = clone_conv_bf16(&n, "0"), *res = clone_conv_bf16(&n, "2");
            const int k = count_bf16_out(on, 0), conv = count_ops(on, "conv2d", 0);
            printf("  %s, %s: %d of %d conv2d write bfloat16, casts %d -> %d\n", deep ? "ResNet-50" : "ResNet-14",
                   lib ? "im2col" : "oneDNN", k, conv, count_ops(off, "cast", 0), count_ops(on, "cast", 0));
            /* ResNet-14: the first convolution of each basic block; ResNet-50: two per bottleneck */
            CHECK_EQ_INT(k, deep ? 2 * 16 : 6);
            CHECK_EQ_INT(count_bf16_out(on, 1), 0);
            CHECK_EQ_INT(count_bf16_out(off, 0), 0);
            CHECK_EQ_INT(count_ops(on, "cast", 0), count_ops(off, "cast", 0) - k);
            CHECK_EQ_INT(count_ops(on, "conv2d", 0), count_ops(off, "conv2d", 0));
            CHECK_EQ_INT(count_bf16_out(n.p, 0), 0); /* the decorated training program is untouched */
            float a[N * 5], b[N * 5];
            predict(&n, on, a);
            predict(&n, off, b);
            CHECK(!memcmp(a, b, sizeof a));
            check_close(a, b, N, 5, 0);
            /* FLEET_INFER_CONV_BF16=2: the block ends too (all but the last, read by the pool),
             * the projection shortcuts and ResNet-14's stem (read by the first block and its
             * identity shortcut; ResNet-50's is pooled); their residual is then rounded to bf16
             * before the sum: close to, not equal to, the float32 residual's result */
            const int kr = count_bf16_out(res, 1), blocks = deep ? 16 : 6, proj = deep ? 4 : 2, stem = !deep;
            printf("  ... and with the residuals: %d conv2d write bfloat16 (%d with ResidualData), casts %d\n",
                   count_bf16_out(res, 0), kr, count_ops(res, "cast", 0));
            CHECK_EQ_INT(kr, blocks - 1);
            CHECK_EQ_INT(count_bf16_out(res, 0), k + blocks - 1 + proj + stem);
            CHECK_EQ_INT(count_ops(res, "cast", 0), count_ops(on, "cast", 0) - (blocks - 1) - stem);
            float r[N * 5];
            predict(&n, res, r);
            double big = 0, dmax = 0;
            for (int i = 0; i < N * 5; i++) big = fmax(big, fabs(b[i])), dmax = fmax(dmax, fabs(r[i] - b[i]));
            printf("  logits differ by up to %.2g of the largest\n", dmax / big);
            check_close(r, b, N, 5, 2e-2);
            /* the first such convolution's output fetched: the cast's output of the other clone */
            const char *yv = NULL, *cv = NULL;
            for (int i = 0; i < on->nops && !yv; i++)
                if (!strcmp(on->ops[i]->def->type, "conv2d") && fl__attr_i(on->ops[i], "out_dtype", 0) == FL_BFLOAT16)
                    yv = on->ops[i]->out[0].vars[0]->name;
            for (int i = 0; yv && i < off->nops && !cv; i++)
                if (!strcmp(off->ops[i]->def->type, "cast") && !strcmp(off->ops[i]->in[0].vars[0]->name, yv))
                    cv = off->ops[i]->out[0].vars[0]->name;
            CHECK(yv != NULL && cv != NULL);
            enum { CAP = N * 64 * 32 * 32 * 2 };
            void *ya = malloc(CAP), *yb = malloc(CAP);
            int64_t na = fetch_bytes(&n, on, yv, FL_BFLOAT16, ya, CAP), nb = fetch_bytes(&n, off, cv, FL_BFLOAT16, yb, CAP);
            CHECK(na == nb && na > 0 && !memcmp(ya, yb, (size_t)na));
            fetch_bytes(&n, off, yv, FL_FLOAT32, ya, CAP); /* the other clone's own output stays float32 */
            free(ya), free(yb);
            fl_prog_free(on), fl_prog_free(off), fl_prog_free(res);
            net_free(&n);
        }
    setenv("FLEET_GEMM", "dnnl", 1);
    fl__gemm_lib_reload();
    /* float32: nothing to rewrite */
    net n;
    net_build(&n, 0, 0);
    fl_prog *on = clone_conv_bf16(&n, "1");
    CHECK_EQ_INT(count_bf16_out(on, 0), 0);
    CHECK_EQ_INT(count_ops(on, "cast", 0), 0);
    fl_prog_free(on);
    net_free(&n);
}

/* A conv2d writing bfloat16 is an inference op: its gradient is refused, naming the input. */
TEST(test_conv_bf16_out_no_gradient)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3, 6, 6), FL_FLOAT32, 0);
    fl_var *y = fl_layer_conv2d(x, 4, 3, 3, "relu", NULL);
    CHECK(y != NULL);
    fl_op *cv = p->ops[p->nops - 1];
    CHECK(!strcmp(cv->def->type, "conv2d"));
    CHECK_OK(fl__attr_set_i(cv, "out_dtype", FL_BFLOAT16));
    CHECK(fl_append_backward(fl_layer_mean(y), NULL, 0, NULL, NULL) != FL_OK);
    CHECK(strstr(fl_last_error(), "writing bfloat16") && strstr(fl_last_error(), "'x'"));
    fl_prog_free(p);
}

/* pool2d on a convolution's blocked output (nChw16c, and nChw8c-sized channels) gives the
 * plain path's values bit for bit: max 3x3 stride 2 padding 1 (ResNet's), avg with padding
 * (exclusive and not), global avg. */
TEST(test_pool_blocked_same_as_plain)
{
    if (!fl__dnn_available()) TSKIP("no oneDNN in this build");
    enum { NP = 4 };
    float *res[2][NP];
    int64_t cnt[NP];
    for (int lay = 0; lay < 2; lay++) {
        setenv("FLEET_DNN_LAYOUT", lay ? "1" : "0", 1);
        fl__layout_enabled_reload();
        fl_prog *p = fl_prog_create();
        fl_var *x = fl_layer_data(p, "x", FL_SHAPE(8, 9, 11), FL_FLOAT32, 0);
        fl_var *c = fl_layer_conv2d(x, 32, 3, 3, "relu", &(fl_conv2d_attr){.padding = {1, 1}});
        fl_var *out[NP] = {fl_layer_pool2d(c, 3, "max", 2, 1, 0, 1), fl_layer_pool2d(c, 3, "avg", 2, 1, 0, 1),
                           fl_layer_pool2d(c, 2, "avg", 1, 1, 0, 0), fl_layer_pool2d(c, 1, "avg", 1, 0, 1, 1)};
        const char *names[NP];
        for (int k = 0; k < NP; k++) {
            CHECK(out[k] != NULL);
            names[k] = fl_var_name(out[k]);
        }
        fl_exe *e = fl_exe_create(NULL);
        CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
        fl_tensor *xt = fl_tensor_create(FL_FLOAT32, FL_SHAPE(2, 8, 9, 11)), *o[NP];
        for (int64_t i = 0; i < xt->numel; i++) ((float *)xt->data)[i] = (float)sin((double)i * 0.71);
        fl_feed f = {"x", xt};
        uint64_t c0 = fl__layout_conversions();
        CHECK_OK(fl_exe_run(e, p, &f, 1, names, NP, o));
        if (lay) CHECK(fl__layout_conversions() - c0 <= 3); /* the three pooled outputs fetched, not the input */
        for (int k = 0; k < NP; k++) {
            cnt[k] = o[k]->numel;
            res[lay][k] = malloc((size_t)cnt[k] * sizeof(float));
            memcpy(res[lay][k], o[k]->data, (size_t)cnt[k] * sizeof(float));
        }
        fl_tensor_free(xt);
        fl_exe_free(e);
        fl_prog_free(p);
    }
    for (int k = 0; k < NP; k++) {
        CHECK(!memcmp(res[0][k], res[1][k], (size_t)cnt[k] * sizeof(float)));
        free(res[0][k]), free(res[1][k]);
    }
    unsetenv("FLEET_DNN_LAYOUT");
    fl__layout_enabled_reload();
}

TEST_MAIN(T(test_resnet_same_on_and_off), T(test_resnet_same_plain_layouts), T(test_resnet50_same_on_and_off),
          T(test_training_clone_untouched), T(test_clone_after_minimize), T(test_amp_clone_after_minimize),
          T(test_params_unchanged_and_no_stale_fold), T(test_fold_cache), T(test_save_load_inference_model),
          T(test_amp_bf16_eval), T(test_amp_bf16_conv_out), T(test_conv_bf16_out_no_gradient),
          T(test_pool_blocked_same_as_plain))
