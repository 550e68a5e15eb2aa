/* test_prog_text.c - the program text format (round trips, parse errors with line numbers)
 * and fl_prog_prune. */
#include "testhelp.h"

#include "graph/graph_internal.h"

typedef struct {
    fl_prog *p;
    fl_var *x, *y, *h1, *pred, *cost;
} mlp_t;

/* x[8] -> fc 6 tanh -> fc 3 softmax -> cross_entropy(y) -> mean, optionally with SGD. */
static mlp_t build_mlp(int train)
{
    mlp_t m;
    m.p = fl_prog_create();
    m.x = fl_layer_data(m.p, "x", FL_SHAPE(8), FL_FLOAT32, 0);
    m.y = fl_layer_data(m.p, "y", FL_SHAPE(1), FL_INT64, 0);
    m.h1 = fl_layer_fc(FL_VARS(m.x), 6, "tanh");
    m.pred = fl_layer_fc(FL_VARS(m.h1), 3, "softmax");
    m.cost = fl_layer_mean(fl_layer_cross_entropy(m.pred, m.y));
    CHECK(m.cost != NULL);
    if (train) {
        fl_opt *o = fl_opt_sgd(0.1f);
        CHECK_OK(fl_opt_set_exponential_decay(o, 10, 0.9f, 1));
        CHECK_OK(fl_opt_minimize(o, m.cost));
        fl_opt_free(o);
    }
    CHECK_OK(fl_prog_status(m.p));
    return m;
}

static char *text_of(const fl_prog *p)
{
    char *t = NULL;
    size_t n = 0;
    CHECK_OK(fl_prog_to_text(p, &t, &n));
    CHECK_EQ_INT(strlen(t), n);
    return t;
}

static fl_prog *parse(const char *t)
{
    fl_prog *p = NULL;
    CHECK_OK(fl_prog_from_text(t, strlen(t), &p));
    CHECK(p != NULL);
    return p;
}

TEST(text_round_trip_training_program)
{
    mlp_t m = build_mlp(1);
    fl_prog_set_seed(m.p, 1234567890123ULL);
    char *t1 = text_of(m.p);
    if (getenv("FLEET_TEST_VERBOSE")) printf("%s", t1);
    CHECK_STR_HAS(t1, "fleet-program 1\nseed 1234567890123\n");
    CHECK_STR_HAS(t1, "var x float32 [-1,8] data stop_gradient\n");
    CHECK_STR_HAS(t1, "var fc_0.w_0 float32 [8,6] persistable param\n");
    CHECK_STR_HAS(t1, " role=backward ");
    CHECK_STR_HAS(t1, " role=optimize ");
    CHECK_STR_HAS(t1, " role=lrsched ");
    CHECK_STR_HAS(t1, "act=str:\"tanh\"");
    fl_prog *q = parse(t1);
    CHECK_EQ_INT(fl_prog_num_vars(q), fl_prog_num_vars(m.p));
    CHECK_EQ_INT(fl_prog_num_ops(q), fl_prog_num_ops(m.p));
    char *t2 = text_of(q);
    CHECK(strcmp(t1, t2) == 0);
    /* the parsed program is a working program: same step from the same state, same result */
    fl_exe *e1 = fl_exe_create(NULL), *e2 = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e1, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < fl_prog_num_vars(m.p); i++) {
        fl_var *v = fl_prog_var_at(m.p, i);
        if (!fl_var_persistable(v)) continue;
        CHECK_OK(fl_tensor_copy(fl_scope_var(fl_exe_scope(e2), fl_var_name(v)),
                                fl_scope_find(fl_exe_scope(e1), fl_var_name(v))));
    }
    float xs[4 * 8];
    th_fill_uniform(xs, 32, -1, 1, 7);
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 8}, xs);
    fl_tensor *yt = th_i64(2, (const int64_t[]){4, 1}, (const int64_t[]){0, 2, 1, 2});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    const char *fetch[] = {fl_var_name(m.cost), "fc_0.w_0"};
    for (int step = 0; step < 3; step++) {
        fl_tensor *o1[2], *o2[2];
        CHECK_OK(fl_exe_run(e1, m.p, feed, 2, fetch, 2, o1));
        CHECK_OK(fl_exe_run(e2, q, feed, 2, fetch, 2, o2));
        for (int k = 0; k < 2; k++) {
            CHECK_EQ_INT(fl_tensor_nbytes(o1[k]), fl_tensor_nbytes(o2[k]));
            CHECK(memcmp(fl_tensor_cdata(o1[k]), fl_tensor_cdata(o2[k]), fl_tensor_nbytes(o1[k])) == 0);
        }
    }
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_exe_free(e1);
    fl_exe_free(e2);
    free(t1);
    free(t2);
    fl_prog_free(q);
    fl_prog_free(m.p);
}

/* Every attribute type, awkward values and names that need quoting survive exactly. */
TEST(text_round_trip_attrs_and_names)
{
    fl_prog *p = fl_prog_create();
    const char *odd = "we\"ird name\\with\ttab\nnl.@GRAD";
    int64_t one = 1;
    fl_var *v = fl__var_create(p, odd, FL_FLOAT32, 1, &one);
    fl_var *w = fl__var_create(p, "w.b@GRAD@RENAME@0", FL_INT64, 0, NULL);
    fl_var *z = fl__var_create(p, "", FL_FLOAT64, 2, (const int64_t[]){-1, 3});
    CHECK(v && w && z);
    v->lr_scale = 0.1f;
    v->l2_decay = 1e-4f;
    v->is_sparse_grad = 1;
    w->lod_level = 1;
    fl_io out = FL_IO1("Out", v);
    fl_op *op = fl__op_new(p, "fill_constant", NULL, 0, &out, 1);
    CHECK(op != NULL);
    const int64_t ints[] = {1, -1, INT64_MAX, INT64_MIN};
    const float floats[] = {0.1f, -0.0f, 1e-38f, 3.4028235e38f, 16777217.0f, 1.0f / 3.0f};
    CHECK_OK(fl__attr_set_ints(op, "shape", &one, 1));
    CHECK_OK(fl__attr_set_i(op, "dtype", FL_FLOAT32));
    CHECK_OK(fl__attr_set_f(op, "value", 0.1));        /* not a float: written as double */
    CHECK_OK(fl__attr_set_f(op, "f32", (double)0.1f)); /* a float: short form */
    CHECK_OK(fl__attr_set_f(op, "tiny", 4.9406564584124654e-324));
    CHECK_OK(fl__attr_set_f(op, "inf", -INFINITY));
    CHECK_OK(fl__attr_set_i(op, "big", INT64_MIN));
    CHECK_OK(fl__attr_set_s(op, "s", "a \"quoted\" \\ string\n\x01 é"));
    CHECK_OK(fl__attr_set_s(op, "empty", ""));
    CHECK_OK(fl__attr_set_ints(op, "ints", ints, 4));
    CHECK_OK(fl__attr_set_ints(op, "no_ints", NULL, 0));
    CHECK_OK(fl__attr_set_floats(op, "floats", floats, 6));
    CHECK_OK(fl__attr_set_floats(op, "no_floats", NULL, 0));
    CHECK_OK(fl__op_finish(op));
    op->role = FL_ROLE_OPTIMIZE;
    char *t1 = text_of(p);
    if (getenv("FLEET_TEST_VERBOSE")) printf("%s", t1);
    CHECK_STR_HAS(t1, "value=double:0.1 f32=float:0.1 ");
    CHECK_STR_HAS(t1, "var \"\" float64 [-1,3]\n");
    CHECK_STR_HAS(t1, "var w.b@GRAD@RENAME@0 int64 [] lod=1\n");
    fl_prog *q = parse(t1);
    char *t2 = text_of(q);
    CHECK(strcmp(t1, t2) == 0);
    fl_var *qv = fl_prog_var(q, odd);
    CHECK(qv != NULL);
    CHECK(qv->lr_scale == 0.1f && qv->l2_decay == 1e-4f && qv->is_sparse_grad);
    const fl_op *qo = q->ops[0];
    CHECK_EQ_INT(qo->role, FL_ROLE_OPTIMIZE);
    CHECK(fl__attr_f(qo, "value", 0) == 0.1);
    CHECK(fl__attr_f(qo, "f32", 0) == (double)0.1f);
    CHECK(fl__attr_f(qo, "tiny", 0) == 4.9406564584124654e-324);
    CHECK(fl__attr_f(qo, "inf", 0) == -INFINITY);
    CHECK(fl__attr_i(qo, "big", 0) == INT64_MIN);
    CHECK(strcmp(fl__attr_s(qo, "s", ""), "a \"quoted\" \\ string\n\x01 é") == 0);
    const fl_attr *fa = fl__attr_find(qo, "floats");
    CHECK(fa && fa->type == FL_ATTR_FLOATS && fa->n == 6);
    CHECK(memcmp(fa->floats, floats, sizeof floats) == 0); /* bit-exact, -0.0 included */
    const fl_attr *ia = fl__attr_find(qo, "ints");
    CHECK(ia && ia->type == FL_ATTR_INTS && ia->n == 4 && memcmp(ia->ints, ints, sizeof ints) == 0);
    CHECK(fl__attr_find(qo, "no_ints")->type == FL_ATTR_INTS && fl__attr_find(qo, "no_floats")->type == FL_ATTR_FLOATS);
    free(t1);
    free(t2);
    fl_prog_free(q);
    fl_prog_free(p);
}

/* Ops from every group (sparse embedding with LoD input, sequence pooling, concat, dropout,
 * Adam with L2) survive the text form, and the parsed program trains identically. */
TEST(text_round_trip_ctr_program)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *dense = fl_layer_data(p, "dense", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *label = fl_layer_data(p, "label", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr ea;
    memset(&ea, 0, sizeof ea);
    ea.is_sparse = 1;
    fl_var *pooled = fl_layer_sequence_pool(fl_layer_embedding(ids, 50, 8, &ea), "sum");
    fl_var *h = fl_layer_fc(FL_VARS(fl_layer_concat(FL_VARS(pooled, dense), 1)), 16, "relu");
    fl_var *pred = fl_layer_fc(FL_VARS(fl_layer_dropout(h, 0.25f, "upscale_in_train")), 2, "softmax");
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(pred, label));
    fl_opt *o = fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f);
    CHECK_OK(fl_opt_set_l2(o, 1e-4f));
    CHECK_OK(fl_opt_minimize(o, cost));
    fl_opt_free(o);
    char *t1 = text_of(p);
    CHECK_STR_HAS(t1, "var ids int64 [-1,1] lod=1 data stop_gradient\n");
    CHECK_STR_HAS(t1, " sparse_grad");
    fl_prog *q = parse(t1);
    char *t2 = text_of(q);
    CHECK(strcmp(t1, t2) == 0);
    fl_exe *e1 = fl_exe_create(NULL), *e2 = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e1, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < fl_prog_num_vars(p); i++) {
        fl_var *v = fl_prog_var_at(p, i);
        if (fl_var_persistable(v))
            CHECK_OK(fl_tensor_copy(fl_scope_var(fl_exe_scope(e2), fl_var_name(v)),
                                    fl_scope_find(fl_exe_scope(e1), fl_var_name(v))));
    }
    fl_tensor *it = th_i64(2, (const int64_t[]){7, 1}, (const int64_t[]){1, 4, 9, 4, 20, 33, 2});
    CHECK_OK(fl_tensor_set_lod(it, (const int64_t[]){0, 3, 5, 7}, 4));
    float dv[12];
    th_fill_uniform(dv, 12, -1, 1, 3);
    fl_tensor *dt = th_f32(2, (const int64_t[]){3, 4}, dv);
    fl_tensor *lt = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){0, 1, 1});
    fl_feed feed[] = {{"ids", it}, {"dense", dt}, {"label", lt}};
    const char *fetch[] = {fl_var_name(cost), "embedding_0.w_0"};
    for (int step = 0; step < 3; step++) {
        fl_tensor *a[2], *b[2];
        CHECK_OK(fl_exe_run(e1, p, feed, 3, fetch, 2, a));
        CHECK_OK(fl_exe_run(e2, q, feed, 3, fetch, 2, b));
        for (int k = 0; k < 2; k++) {
            CHECK_EQ_INT(fl_tensor_nbytes(a[k]), fl_tensor_nbytes(b[k]));
            CHECK(memcmp(fl_tensor_cdata(a[k]), fl_tensor_cdata(b[k]), fl_tensor_nbytes(a[k])) == 0);
        }
    }
    fl_tensor_free(it);
    fl_tensor_free(dt);
    fl_tensor_free(lt);
    fl_exe_free(e1);
    fl_exe_free(e2);
    free(t1);
    free(t2);
    fl_prog_free(q);
    fl_prog_free(p);
}

/* Layers added to a parsed program get fresh names (no accidental sharing by name). */
TEST(text_parsed_program_extends_with_fresh_names)
{
    mlp_t m = build_mlp(0);
    char *t = text_of(m.p);
    fl_prog *q = parse(t);
    fl_var *h = fl_layer_fc(FL_VARS(fl_prog_var(q, fl_var_name(m.pred))), 3, "tanh");
    CHECK(h != NULL);
    CHECK_STR_HAS(fl_var_name(h), "fc_2.");
    CHECK(fl_prog_var(q, "fc_2.w_0") && fl_prog_var(q, "fc_2.b_0"));
    CHECK(fl_layer_mean(h) != NULL);
    CHECK(fl_prog_var(q, "mean.tmp_1") != NULL); /* mean.tmp_0 was taken */
    CHECK_OK(fl_prog_status(q));
    free(t);
    fl_prog_free(q);
    fl_prog_free(m.p);
}

TEST(text_comments_blank_lines_crlf)
{
    const char *t = "# a comment\n\n  fleet-program 1\r\n"
                    "seed 5\n"
                    "   # indented comment\n"
                    "var a float32 [-1,4] data stop_gradient\r\n"
                    "var b float32 [-1,4]\n"
                    "op tanh role=forward in X=a out Out=b\n";
    fl_prog *p = parse(t);
    CHECK_EQ_INT(fl_prog_num_ops(p), 1);
    CHECK_EQ_INT(fl_prog_num_vars(p), 2);
    CHECK_EQ_INT(p->seed, 5);
    fl_prog_free(p);
}

static void parse_fails(const char *text, const char *want1, const char *want2)
{
    fl_prog *p = (fl_prog *)1;
    CHECK_FAILS(fl_prog_from_text(text, strlen(text), &p), FL_ECORRUPT, want1);
    CHECK_STR_HAS(fl_last_error(), want2);
    CHECK(p == NULL);
}

#define HDR "fleet-program 1\nseed 1\n"
#define VARS "var x float32 [-1,4] data stop_gradient\nvar h float32 [-1,4]\n"

TEST(text_parse_errors_name_the_line)
{
    parse_fails("", "line 1", "no 'fleet-program 1' header");
    parse_fails("var x float32 [1]\n", "line 1", "expected the header");
    parse_fails("# c\nfleet-program 2\n", "line 2", "unsupported program format version 2");
    parse_fails(HDR VARS "op nope role=forward in X=x out Out=h\n", "line 5", "unknown operator type 'nope'");
    parse_fails(HDR VARS "op tanh role=forward in X=zz out Out=h\n", "line 5", "unknown variable 'zz'");
    parse_fails(HDR VARS "op tanh role=forward in Bogus=x out Out=h\n", "line 5", "has no input slot 'Bogus'");
    parse_fails(HDR VARS "op tanh role=sideways in X=x out Out=h\n", "line 5", "unknown role 'sideways'");
    parse_fails(HDR VARS "op tanh role=forward in X=x X=x out Out=h\n", "line 5", "slot 'X' given twice");
    parse_fails(HDR VARS "op tanh in X=x out Out=h\n", "line 5", "expected role=");
    parse_fails(HDR VARS "op tanh role=forward out Out=h in X=x\n", "line 5", "unexpected 'in'");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h attr a=int:x\n", "line 5", "bad integer 'x'");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h attr a=bool:1\n", "line 5", "unknown type 'bool'");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h attr a=str:\"open\n", "line 5", "unterminated string");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h attr a=int:1 a=int:2\n", "line 5", "given twice");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h junk\n", "line 5", "unexpected 'junk'");
    parse_fails(HDR "var x float33 [1]\n", "line 3", "unknown dtype 'float33'");
    parse_fails(HDR "var x float32 [1,y]\n", "line 3", "bad integer 'y'");
    parse_fails(HDR "var x float32 [1,2\n", "line 3", "expected ']'");
    parse_fails(HDR "var x float32 [-2]\n", "line 3", "dimension 0 is -2");
    parse_fails(HDR "var x float32 [1,1,1,1,1,1,1,1,1]\n", "line 3", "rank 9 exceeds 8");
    parse_fails(HDR "var x float32 [1] shiny\n", "line 3", "unknown flag 'shiny'");
    parse_fails(HDR "var x float32 [1]\nvar x float32 [1]\n", "line 4", "variable 'x' already exists");
    parse_fails(HDR "var \"x\\q\" float32 [1]\n", "line 3", "bad escape");
    parse_fails(HDR "seed -1\n", "line 3", "bad seed");
    parse_fails(HDR "frobnicate\n", "line 3", "unknown statement 'frobnicate'");
    parse_fails(HDR "var x float32 [1] stop_gradient extra=1\n", "line 3", "unknown property 'extra='");
    parse_fails(HDR VARS "op tanh role=forward in X=x out Out=h\nop tanh role=forward in X=h out Out=x extra\n", "line 6",
                "unexpected 'extra'");
    /* shape inference runs again: an int64 input to tanh is rejected */
    parse_fails(HDR "var x int64 [-1,4] data\nvar h float32 [-1,4]\nop tanh role=forward in X=x out Out=h\n", "line 5",
                "tanh");
    /* inferred output type disagrees with the declaration */
    parse_fails(HDR VARS "var k float32 [-1,5]\nop tanh role=forward in X=x out Out=k\n", "line 6",
                "gives float32[-1, 4] for output 'k', but the variable is declared float32[-1, 5]");
    char nul[] = HDR "var x float32 [1]\0\n";
    fl_prog *p = NULL;
    CHECK_FAILS(fl_prog_from_text(nul, sizeof nul - 1, &p), FL_ECORRUPT, "line 3: NUL byte");
}

TEST(prune_keeps_only_needed_forward_ops)
{
    mlp_t m = build_mlp(1);
    const char *feeds[] = {"x"};
    const char *targets[] = {fl_var_name(m.pred)};
    fl_prog *q = NULL;
    CHECK_OK(fl_prog_prune(m.p, feeds, 1, targets, 1, &q));
    /* fc(tanh), fc, softmax: no loss, no gradients, no optimizer, no lr schedule */
    CHECK_EQ_INT(fl_prog_num_ops(q), 3);
    CHECK_EQ_INT(th_count_ops(q, "fc"), 2);
    CHECK_EQ_INT(th_count_ops(q, "softmax"), 1);
    for (int i = 0; i < fl_prog_num_ops(q); i++) CHECK_EQ_INT(q->ops[i]->role, FL_ROLE_FORWARD);
    for (int i = 0; i < fl_prog_num_vars(q); i++) {
        const char *n = fl_var_name(fl_prog_var_at(q, i));
        CHECK(!strstr(n, "@GRAD") && strcmp(n, "y") != 0 && !strstr(n, "learning_rate"));
    }
    CHECK(fl_prog_var(q, "fc_0.w_0") && fl_prog_var(q, "fc_1.b_0") && fl_prog_var(q, "x"));
    CHECK_EQ_INT(fl_prog_num_vars(q), 8); /* x, fc_0.{w,b,tmp}, fc_1.{w,b,tmp}, softmax out */
    /* the pruned program computes the same prediction */
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(m.p), NULL, 0, NULL, 0, NULL));
    float xs[2 * 8];
    th_fill_uniform(xs, 16, -1, 1, 3);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 8}, xs);
    fl_tensor *yt = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){0, 1});
    fl_feed feed[] = {{"x", xt}, {"y", yt}};
    fl_tensor *a, *b;
    fl_prog *test = fl_prog_clone(m.p, 1);
    CHECK_OK(fl_exe_run(e, test, feed, 2, targets, 1, &a));
    fl_tensor *acopy = fl_tensor_create(FL_FLOAT32, 0, NULL);
    CHECK_OK(fl_tensor_copy(acopy, a));
    CHECK_OK(fl_exe_run(e, q, feed, 1, targets, 1, &b));
    CHECK_EQ_INT(fl_tensor_nbytes(acopy), fl_tensor_nbytes(b));
    CHECK(memcmp(fl_tensor_cdata(acopy), fl_tensor_cdata(b), fl_tensor_nbytes(b)) == 0);
    /* round trip of the pruned program */
    char *t1 = text_of(q);
    fl_prog *r = parse(t1);
    char *t2 = text_of(r);
    CHECK(strcmp(t1, t2) == 0);
    free(t1);
    free(t2);
    fl_prog_free(r);
    fl_tensor_free(acopy);
    fl_tensor_free(xt);
    fl_tensor_free(yt);
    fl_exe_free(e);
    fl_prog_free(test);
    fl_prog_free(q);
    fl_prog_free(m.p);
}

TEST(prune_stops_at_fed_variables)
{
    mlp_t m = build_mlp(0);
    const char *feeds[] = {fl_var_name(m.h1)};
    const char *targets[] = {fl_var_name(m.pred)};
    fl_prog *q = NULL;
    CHECK_OK(fl_prog_prune(m.p, feeds, 1, targets, 1, &q));
    CHECK_EQ_INT(fl_prog_num_ops(q), 2); /* fc_1 and softmax */
    CHECK(fl_prog_var(q, "x") == NULL && fl_prog_var(q, "fc_0.w_0") == NULL);
    CHECK(fl_prog_var(q, fl_var_name(m.h1)) != NULL);
    fl_prog_free(q);
    /* a target that is fed needs no op at all */
    CHECK_OK(fl_prog_prune(m.p, feeds, 1, feeds, 1, &q));
    CHECK_EQ_INT(fl_prog_num_ops(q), 0);
    CHECK_EQ_INT(fl_prog_num_vars(q), 1);
    fl_prog_free(q);
    fl_prog_free(m.p);
}

TEST(prune_errors)
{
    mlp_t m = build_mlp(1);
    const char *feeds[] = {"x"};
    const char *cost[] = {fl_var_name(m.cost)};
    const char *bad[] = {"no_such_var"};
    fl_prog *q = (fl_prog *)1;
    CHECK_FAILS(fl_prog_prune(m.p, feeds, 1, cost, 1, &q), FL_EINVAL, "data variable 'y'");
    CHECK(q == NULL);
    CHECK_FAILS(fl_prog_prune(m.p, feeds, 1, bad, 1, &q), FL_ENOTFOUND, "target 'no_such_var'");
    CHECK_FAILS(fl_prog_prune(m.p, bad, 1, cost, 1, &q), FL_ENOTFOUND, "feed 'no_such_var'");
    CHECK_FAILS(fl_prog_prune(m.p, feeds, 1, cost, 0, &q), FL_EINVAL, "no targets");
    const char *both[] = {"x", "y"};
    CHECK_OK(fl_prog_prune(m.p, both, 2, cost, 1, &q));
    CHECK_EQ_INT(th_count_ops(q, "mean"), 1);
    CHECK_EQ_INT(th_count_ops(q, "sgd"), 0);
    CHECK_EQ_INT(th_count_ops(q, "mean_grad"), 0);
    fl_prog_free(q);
    fl_prog_free(m.p);
}

/* Conditional ops (gradient merge runs the optimizer every k steps) keep their condition. */
TEST(text_round_trip_conditional_ops)
{
    unsetenv("PADDLE_TRAINER_ENDPOINTS");
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(p, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(fl_layer_fc(FL_VARS(x), 2, "softmax"), y));
    fleet_strategy s = fleet_strategy_default();
    s.gradient_merge = 1;
    s.gradient_merge_configs.k_steps = 2;
    fleet_t *f = fleet_init_collective(NULL, &s);
    CHECK(f);
    fl_opt *o = fleet_distributed_optimizer(f, fl_opt_momentum(0.1f, 0.9f, 0), NULL);
    CHECK(o);
    CHECK_OK(fl_opt_minimize(o, cost));
    char *t1, *t2;
    size_t n1, n2;
    CHECK_OK(fl_prog_to_text(p, &t1, &n1));
    CHECK_STR_HAS(t1, "op momentum role=optimize cond=@GRADIENT_MERGE_COND@");
    fl_prog *q;
    CHECK_OK(fl_prog_from_text(t1, n1, &q));
    CHECK_OK(fl_prog_to_text(q, &t2, &n2));
    CHECK(n1 == n2 && !memcmp(t1, t2, n1));
    fl_prog_free(q);
    const char *bad = "fleet-program 1\nop sgd role=optimize cond=nope in Param=a\n";
    CHECK_FAILS(fl_prog_from_text(bad, strlen(bad), &q), FL_ECORRUPT, "unknown condition variable 'nope'");
    free(t1);
    free(t2);
    fl_opt_free(o);
    fleet_free(f);
    fl_prog_free(p);
}

TEST_MAIN(T(text_round_trip_conditional_ops), T(text_round_trip_training_program), T(text_round_trip_attrs_and_names),
          T(text_round_trip_ctr_program), T(text_parsed_program_extends_with_fresh_names),
          T(text_comments_blank_lines_crlf), T(text_parse_errors_name_the_line), T(prune_keeps_only_needed_forward_ops),
          T(prune_stops_at_fed_variables), T(prune_errors))
