/* test_ops_seq.c - forward values, shapes, LoD and error messages of the ops in
 * src/graph/ops_seq.c: lookup_table (embedding), sequence_pool, concat, reshape2. */
#include "testhelp.h"

/* Runs the startup program of p in a fresh scope; returns an executor over it. */
static fl_exe *start(fl_prog *p)
{
    fl_exe *e = fl_exe_create(NULL);
    CHECK(e);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    return e;
}

/* Overwrites the values of a persistable variable of the executor's scope. */
static void set_values(fl_exe *e, const char *name, const float *v, int64_t n)
{
    fl_tensor *t = fl_scope_find(fl_exe_scope(e), name);
    CHECK(t);
    CHECK_EQ_INT(fl_tensor_numel(t), n);
    memcpy(fl_tensor_f32(t), v, (size_t)n * sizeof(float));
}

static fl_tensor *ids_lod(int64_t n, const int64_t *ids, const int64_t *lod, int64_t nlod)
{
    fl_tensor *t = th_i64(2, (const int64_t[]){n, 1}, ids);
    CHECK(t);
    if (lod) CHECK_OK(fl_tensor_set_lod(t, lod, nlod));
    return t;
}

static void check_vals(fl_tensor *t, const float *want, int64_t n)
{
    CHECK_EQ_INT(fl_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) CHECK_NEAR(fl_tensor_f32(t)[i], want[i], 1e-6);
}

static const float table5x3[15] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42};

/* ---- embedding ------------------------------------------------------------------------ */

TEST(embedding_forward_lod)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_embedding_attr a = {0};
    a.param.name = "emb";
    fl_var *o = fl_layer_embedding(ids, 5, 3, &a);
    CHECK(o);
    CHECK_EQ_INT(fl_var_ndim(o), 2);
    CHECK_EQ_INT(fl_var_shape(o)[0], -1);
    CHECK_EQ_INT(fl_var_shape(o)[1], 3);
    CHECK_EQ_INT(fl_var_lod_level(o), 1);
    CHECK(fl_var_is_param(fl_prog_var(p, "emb")));
    fl_exe *e = start(p);
    set_values(e, "emb", table5x3, 15);
    fl_tensor *it = ids_lod(5, (const int64_t[]){4, 0, 4, 2, 1}, (const int64_t[]){0, 2, 5}, 3);
    fl_feed f[] = {{"ids", it}};
    const char *fetch[] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 1, &out));
    CHECK_EQ_INT(fl_tensor_dim(out, 0), 5);
    CHECK_EQ_INT(fl_tensor_dim(out, 1), 3);
    check_vals(out, (const float[]){40, 41, 42, 0, 1, 2, 40, 41, 42, 20, 21, 22, 10, 11, 12}, 15);
    int64_t nl;
    const int64_t *lod = fl_tensor_lod(out, &nl);
    CHECK_EQ_INT(nl, 3);
    CHECK_EQ_INT(lod[1], 2);
    CHECK_EQ_INT(lod[2], 5);
    fl_tensor_free(it);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(embedding_default_name_and_init)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    fl_var *o1 = fl_layer_embedding(ids, 100, 8, NULL);
    fl_var *o2 = fl_layer_embedding(ids, 7, 2, NULL);
    CHECK(o1 && o2);
    CHECK(fl_prog_var(p, "embedding_0.w_0"));
    CHECK(fl_prog_var(p, "embedding_1.w_0"));
    CHECK_STR_HAS(fl_var_name(o1), "embedding_0.tmp_");
    /* Xavier uniform, fan_in = vocab, fan_out = dim: |w| <= sqrt(6 / 108) */
    fl_exe *e = start(p);
    fl_tensor *w = fl_scope_find(fl_exe_scope(e), "embedding_0.w_0");
    CHECK(w);
    float lim = sqrtf(6.0f / 108.0f), mx = 0;
    for (int64_t i = 0; i < fl_tensor_numel(w); i++) mx = fmaxf(mx, fabsf(fl_tensor_f32(w)[i]));
    CHECK(mx <= lim && mx > 0.5f * lim);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(embedding_padding_idx)
{
    for (int neg = 0; neg < 2; neg++) {
        fl_prog *p = fl_prog_create();
        fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
        fl_embedding_attr a = {0};
        a.param.name = "emb";
        a.has_padding_idx = 1;
        a.padding_idx = neg ? -2 : 3; /* -2 + vocab 5 = 3 */
        fl_var *o = fl_layer_embedding(ids, 5, 3, &a);
        CHECK(o);
        fl_exe *e = start(p);
        set_values(e, "emb", table5x3, 15);
        fl_tensor *it = ids_lod(3, (const int64_t[]){3, 1, 3}, NULL, 0);
        fl_feed f[] = {{"ids", it}};
        const char *fetch[] = {fl_var_name(o)};
        fl_tensor *out;
        CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 1, &out));
        check_vals(out, (const float[]){0, 0, 0, 10, 11, 12, 0, 0, 0}, 9);
        fl_tensor_free(it);
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

TEST(embedding_out_of_range_ids)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr a = {0};
    a.param.name = "emb";
    fl_var *o = fl_layer_embedding(ids, 5, 3, &a);
    fl_exe *e = start(p);
    const char *fetch[] = {fl_var_name(o)};
    fl_tensor *out;
    fl_tensor *it = ids_lod(3, (const int64_t[]){1, 2, 7}, NULL, 0);
    fl_feed f[] = {{"ids", it}};
    CHECK_FAILS(fl_exe_run(e, p, f, 1, fetch, 1, &out), FL_EINVAL, "id 7 at position 2 of 'ids'");
    CHECK_STR_HAS(fl_last_error(), "lookup_table");
    CHECK_STR_HAS(fl_last_error(), "vocab 5");
    CHECK_STR_HAS(fl_last_error(), "'emb'");
    fl_tensor_free(it);
    /* negative ids are out of range too (no padding_idx here) */
    it = ids_lod(2, (const int64_t[]){-1, 0}, NULL, 0);
    f[0].value = it;
    CHECK_FAILS(fl_exe_run(e, p, f, 1, fetch, 1, &out), FL_EINVAL, "id -1 at position 0");
    fl_tensor_free(it);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(embedding_build_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *fid = fl_layer_data(p, "fid", FL_SHAPE(1), FL_FLOAT32, 0);
    CHECK(!fl_layer_embedding(fid, 5, 3, NULL));
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "lookup_table: ids 'fid' must be int64");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *wide = fl_layer_data(p, "wide", FL_SHAPE(2), FL_INT64, 0);
    CHECK(!fl_layer_embedding(wide, 5, 3, NULL));
    CHECK_STR_HAS(fl_prog_error(p), "ids 'wide' [-1, 2] must have last dimension 1");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    CHECK(!fl_layer_embedding(ids, 0, 3, NULL));
    CHECK_STR_HAS(fl_prog_error(p), "embedding: size [0, 3]");
    fl_prog_free(p);

    p = fl_prog_create();
    ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    fl_embedding_attr a = {0};
    a.has_padding_idx = 1;
    a.padding_idx = 5;
    CHECK(!fl_layer_embedding(ids, 5, 3, &a));
    CHECK_STR_HAS(fl_prog_error(p), "padding_idx 5 out of range [-5, 5)");
    fl_prog_free(p);
}

/* Two embeddings with the same parameter name read one table (the CTR model's shared
 * slot table); a mismatching shape or a non-parameter of that name is an error. */
TEST(embedding_shared_table)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 1);
    fl_var *b = fl_layer_data(p, "b", FL_SHAPE(1), FL_INT64, 1);
    fl_embedding_attr at = {0};
    at.param.name = "shared.w";
    at.is_sparse = 1;
    int nv0 = fl_prog_num_vars(p);
    fl_var *oa = fl_layer_embedding(a, 5, 3, &at);
    int nv1 = fl_prog_num_vars(p);
    fl_var *ob = fl_layer_embedding(b, 5, 3, &at);
    CHECK(oa && ob);
    CHECK_EQ_INT(nv1 - nv0, 2);                           /* table + output */
    CHECK_EQ_INT(fl_prog_num_vars(p) - nv1, 1);           /* output only */
    CHECK_EQ_INT(fl_prog_num_ops(fl_prog_startup(p)), 1); /* one initializer */
    /* training updates the one table with both slots' sparse gradients */
    fl_var *loss = fl_layer_mean(fl_layer_concat(FL_VARS(oa, ob), 0));
    fl_opt *sgd = fl_opt_sgd(1.0f);
    CHECK_OK(fl_opt_minimize(sgd, loss));
    CHECK(fl_prog_var(p, "shared.w@GRAD"));
    fl_exe *e = start(p);
    set_values(e, "shared.w", table5x3, 15);
    fl_tensor *ta = ids_lod(2, (const int64_t[]){1, 4}, (const int64_t[]){0, 2}, 2);
    fl_tensor *tb = ids_lod(1, (const int64_t[]){4}, (const int64_t[]){0, 1}, 2);
    fl_feed f[] = {{"a", ta}, {"b", tb}};
    const char *fetch[] = {fl_var_name(oa), fl_var_name(ob), "shared.w@GRAD"};
    fl_tensor *out[3];
    CHECK_OK(fl_exe_run(e, p, f, 2, fetch, 3, out));
    check_vals(out[0], (const float[]){10, 11, 12, 40, 41, 42}, 6);
    check_vals(out[1], (const float[]){40, 41, 42}, 3);
    int64_t nr;
    CHECK(fl_tensor_rows(out[2], &nr, NULL)); /* both slots' rows, concatenated by sum */
    CHECK_EQ_INT(nr, 3);
    /* d mean / d out = 1/9 per element; row 4 is used twice, row 1 once */
    fl_tensor *w = fl_scope_find(fl_exe_scope(e), "shared.w");
    CHECK_NEAR(fl_tensor_f32(w)[4 * 3 + 0], 40 - 2.0 / 9, 1e-5);
    CHECK_NEAR(fl_tensor_f32(w)[1 * 3 + 2], 12 - 1.0 / 9, 1e-5);
    CHECK_NEAR(fl_tensor_f32(w)[0], 0, 0);
    CHECK_NEAR(fl_tensor_f32(w)[2 * 3 + 1], 21, 0);
    fl_opt_free(sgd);
    fl_tensor_free(ta);
    fl_tensor_free(tb);
    fl_exe_free(e);

    fl_embedding_attr bad = at;
    CHECK(!fl_layer_embedding(a, 6, 3, &bad));
    CHECK_STR_HAS(fl_prog_error(p), "parameter 'shared.w' already exists with shape [5, 3]; this use needs shape");
    fl_prog_free(p);

    p = fl_prog_create();
    a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 1);
    bad.param.name = "a";
    CHECK(!fl_layer_embedding(a, 5, 3, &bad));
    CHECK_STR_HAS(fl_prog_error(p), "parameter 'a' already exists with shape");
    CHECK_STR_HAS(fl_prog_error(p), "(and is not a parameter)");
    fl_prog_free(p);
}

/* Gradient values by hand: loss = mean(emb(ids)), so every looked-up row gets 1/(N*dim). */
TEST(embedding_grad_values)
{
    for (int sparse = 0; sparse < 2; sparse++) {
        fl_prog *p = fl_prog_create();
        fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
        fl_embedding_attr a = {0};
        a.param.name = "emb";
        a.is_sparse = sparse;
        a.has_padding_idx = 1;
        a.padding_idx = 0;
        fl_var *loss = fl_layer_mean(fl_layer_embedding(ids, 5, 2, &a));
        CHECK_OK(fl_append_backward(loss, NULL, 0, NULL, NULL));
        fl_exe *e = start(p);
        fl_tensor *it = ids_lod(4, (const int64_t[]){3, 0, 3, 1}, (const int64_t[]){0, 1, 4}, 3);
        fl_feed f[] = {{"ids", it}};
        const char *fetch[] = {"emb@GRAD"};
        fl_tensor *g;
        CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 1, &g));
        float u = 1.0f / 8;
        if (sparse) {
            int64_t nr, h;
            const int64_t *rows = fl_tensor_rows(g, &nr, &h);
            CHECK(rows);
            CHECK_EQ_INT(nr, 4);
            CHECK_EQ_INT(h, 5);
            for (int i = 0; i < 4; i++) CHECK_EQ_INT(rows[i], ((const int64_t[]){3, 0, 3, 1})[i]);
            check_vals(g, (const float[]){u, u, 0, 0, u, u, u, u}, 8);
        } else {
            CHECK(!fl_tensor_is_rows(g));
            check_vals(g, (const float[]){0, 0, u, u, 0, 0, 2 * u, 2 * u, 0, 0}, 10);
        }
        fl_tensor_free(it);
        fl_exe_free(e);
        fl_prog_free(p);
    }
}

/* ---- sequence_pool -------------------------------------------------------------------- */

/* x rows [1,2] [3,-1] [0,5] | (empty) | [4,4]: LoD {0, 3, 3, 4} */
static void pool_case(const char *type, const float *want, const int64_t *want_idx)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 1);
    fl_var *o = fl_layer_sequence_pool(x, type);
    CHECK(o);
    CHECK_EQ_INT(fl_var_lod_level(o), 0);
    CHECK_EQ_INT(fl_var_shape(o)[1], 2);
    fl_exe *e = start(p);
    fl_tensor *xt = th_f32(2, (const int64_t[]){4, 2}, (const float[]){1, 2, 3, -1, 0, 5, 4, 4});
    CHECK_OK(fl_tensor_set_lod(xt, (const int64_t[]){0, 3, 3, 4}, 4));
    fl_feed f[] = {{"x", xt}};
    const char *fetch[2] = {fl_var_name(o), NULL};
    fl_tensor *out[2];
    int nf = 1;
    if (want_idx) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s", fl_var_name(o));
        nm[strlen(nm) - 1] = '1'; /* sequence_pool_0.tmp_1 */
        fetch[1] = nm;
        nf = 2;
        CHECK_OK(fl_exe_run(e, p, f, 1, fetch, nf, out));
        CHECK_EQ_INT(fl_tensor_dtype(out[1]), FL_INT64);
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(fl_tensor_i64(out[1])[i], want_idx[i]);
    } else {
        CHECK_OK(fl_exe_run(e, p, f, 1, fetch, nf, out));
    }
    CHECK_EQ_INT(fl_tensor_dim(out[0], 0), 3);
    CHECK_EQ_INT(fl_tensor_dim(out[0], 1), 2);
    CHECK(!fl_tensor_lod(out[0], NULL));
    check_vals(out[0], want, 6);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(sequence_pool_sum) { pool_case("sum", (const float[]){4, 6, 0, 0, 4, 4}, NULL); }
TEST(sequence_pool_average) { pool_case("average", (const float[]){4.0f / 3, 2, 0, 0, 4, 4}, NULL); }
TEST(sequence_pool_sqrt)
{
    float r = 1.0f / sqrtf(3.0f);
    pool_case("sqrt", (const float[]){4 * r, 6 * r, 0, 0, 4, 4}, NULL);
}
TEST(sequence_pool_max) { pool_case("MAX", (const float[]){3, 5, 0, 0, 4, 4}, (const int64_t[]){1, 2, -1, -1, 3, 3}); }
TEST(sequence_pool_first) { pool_case("first", (const float[]){1, 2, 0, 0, 4, 4}, NULL); }
TEST(sequence_pool_last) { pool_case("last", (const float[]){0, 5, 0, 0, 4, 4}, NULL); }

TEST(sequence_pool_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 1);
    CHECK(!fl_layer_sequence_pool(x, "median"));
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "sequence_pool: unknown pool_type 'median' on 'x'");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *flat = fl_layer_data(p, "flat", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(!fl_layer_sequence_pool(flat, "sum"));
    CHECK_STR_HAS(fl_prog_error(p), "sequence_pool: input 'flat' must be a sequence (lod_level 1)");
    fl_prog_free(p);

    /* Missing LoD at run time: reshape [-1, 4] -> [-1, 2] keeps lod_level 1 at build time
     * (Paddle's rule) but at run time the rows change, so the LoD is dropped. */
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(4), FL_FLOAT32, 1);
    fl_var *r = fl_layer_reshape(x, FL_SHAPE(-1, 2));
    CHECK_EQ_INT(fl_var_lod_level(r), 1);
    fl_var *o = fl_layer_sequence_pool(r, "sum");
    CHECK(o);
    fl_exe *e = start(p);
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 4}, (const float[]){1, 2, 3, 4, 5, 6, 7, 8});
    CHECK_OK(fl_tensor_set_lod(xt, (const int64_t[]){0, 2}, 2));
    fl_feed f[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, f, 1, fetch, 1, &out), FL_EINVAL, "sequence_pool: input 'reshape2_0.tmp_0' has no LoD");
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* ---- concat ----------------------------------------------------------------------------- */

static fl_tensor *run1(fl_prog *p, const fl_feed *f, int nf, fl_var *o, fl_exe **e)
{
    *e = start(p);
    const char *fetch[] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_OK(fl_exe_run(*e, p, f, nf, fetch, 1, &out));
    return out;
}

TEST(concat_axes)
{
    /* a [2,2,1] = 0..3, b [2,2,2] = 10..17 */
    fl_tensor *at = th_f32(3, (const int64_t[]){2, 2, 1}, (const float[]){0, 1, 2, 3});
    fl_tensor *bt = th_f32(3, (const int64_t[]){2, 2, 2}, (const float[]){10, 11, 12, 13, 14, 15, 16, 17});
    fl_tensor *ct = th_f32(3, (const int64_t[]){2, 1, 1}, (const float[]){20, 21});
    CHECK_OK(fl_tensor_set_lod(at, (const int64_t[]){0, 1, 2}, 3));
    fl_feed f[] = {{"a", at}, {"b", bt}, {"c", ct}};
    for (int k = 0; k < 2; k++) { /* axis -1 and 2 */
        fl_prog *p = fl_prog_create();
        fl_var *a = fl_layer_data(p, "a", FL_SHAPE(2, 1), FL_FLOAT32, 1);
        fl_var *b = fl_layer_data(p, "b", FL_SHAPE(2, 2), FL_FLOAT32, 0);
        fl_var *o = fl_layer_concat(FL_VARS(a, b), k ? 2 : -1);
        CHECK(o);
        CHECK_EQ_INT(fl_var_shape(o)[2], 3);
        CHECK_EQ_INT(fl_var_lod_level(o), 1);
        fl_exe *e;
        fl_tensor *out = run1(p, f, 2, o, &e);
        CHECK_EQ_INT(fl_tensor_dim(out, 2), 3);
        check_vals(out, (const float[]){0, 10, 11, 1, 12, 13, 2, 14, 15, 3, 16, 17}, 12);
        CHECK(fl_tensor_lod(out, NULL)); /* rows unchanged: LoD of input 0 kept */
        fl_exe_free(e);
        fl_prog_free(p);
    }
    { /* axis 1 */
        fl_prog *p = fl_prog_create();
        fl_var *a = fl_layer_data(p, "a", FL_SHAPE(2, 1), FL_FLOAT32, 1);
        fl_var *c = fl_layer_data(p, "c", FL_SHAPE(1, 1), FL_FLOAT32, 0);
        fl_var *o = fl_layer_concat(FL_VARS(a, c, a), 1);
        CHECK_EQ_INT(fl_var_shape(o)[1], 5);
        fl_exe *e;
        fl_feed fac[] = {f[0], f[2]};
        fl_tensor *out = run1(p, fac, 2, o, &e);
        check_vals(out, (const float[]){0, 1, 20, 0, 1, 2, 3, 21, 2, 3}, 10);
        fl_exe_free(e);
        fl_prog_free(p);
    }
    { /* axis 0: rows stacked, no LoD */
        fl_prog *p = fl_prog_create();
        fl_var *b = fl_layer_data(p, "b", FL_SHAPE(2, 2), FL_FLOAT32, 0);
        fl_var *o = fl_layer_concat(FL_VARS(b, b), 0);
        CHECK_EQ_INT(fl_var_shape(o)[0], -1);
        CHECK_EQ_INT(fl_var_lod_level(o), 0);
        fl_exe *e;
        fl_tensor *out = run1(p, f + 1, 1, o, &e);
        CHECK_EQ_INT(fl_tensor_dim(out, 0), 4);
        check_vals(out, (const float[]){10, 11, 12, 13, 14, 15, 16, 17, 10, 11, 12, 13, 14, 15, 16, 17}, 16);
        CHECK(!fl_tensor_lod(out, NULL));
        fl_exe_free(e);
        fl_prog_free(p);
    }
    fl_tensor_free(at);
    fl_tensor_free(bt);
    fl_tensor_free(ct);
}

TEST(concat_int64_and_known_dims)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 0);
    fl_var *b = fl_layer_data(p, "b", FL_SHAPE(2), FL_INT64, 0);
    fl_var *o = fl_layer_concat(FL_VARS(a, b), 1);
    CHECK_EQ_INT(fl_var_dtype(o), FL_INT64);
    CHECK_EQ_INT(fl_var_shape(o)[1], 3);
    fl_tensor *at = th_i64(2, (const int64_t[]){2, 1}, (const int64_t[]){1, 2});
    fl_tensor *bt = th_i64(2, (const int64_t[]){2, 2}, (const int64_t[]){3, 4, 5, 6});
    fl_feed f[] = {{"a", at}, {"b", bt}};
    fl_exe *e;
    fl_tensor *out = run1(p, f, 2, o, &e);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(fl_tensor_i64(out)[i], ((const int64_t[]){1, 3, 4, 2, 5, 6})[i]);
    fl_exe_free(e);
    fl_tensor_free(at);
    fl_tensor_free(bt);
    fl_prog_free(p);
    /* -1 in a non-axis dim takes the known size of another input */
    p = fl_prog_create();
    fl_param_attr pa = {0};
    pa.name = "w";
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(4, 3), FL_FLOAT32, &pa);
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(3), FL_FLOAT32, 0);
    o = fl_layer_concat(FL_VARS(x, w), 1);
    CHECK_EQ_INT(fl_var_shape(o)[0], 4);
    CHECK_EQ_INT(fl_var_shape(o)[1], 6);
    o = fl_layer_concat(FL_VARS(w, w), -2);
    CHECK_EQ_INT(fl_var_shape(o)[0], 8);
    fl_prog_free(p);
}

TEST(concat_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_data(p, "a", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *b = fl_layer_data(p, "b", FL_SHAPE(4), FL_FLOAT32, 0);
    CHECK(!fl_layer_concat(FL_VARS(a, b), 0));
    CHECK_STR_HAS(fl_prog_error(p), "concat: input 'b' [-1, 4] does not match input 'a' [-1, 3] in dimension 1");
    fl_prog_free(p);

    p = fl_prog_create();
    a = fl_layer_data(p, "a", FL_SHAPE(3), FL_FLOAT32, 0);
    CHECK(!fl_layer_concat(FL_VARS(a, a), 2));
    CHECK_STR_HAS(fl_prog_error(p), "concat: axis 2 out of range for input 'a' of rank 2");
    fl_prog_free(p);

    p = fl_prog_create();
    a = fl_layer_data(p, "a", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *i = fl_layer_data(p, "i", FL_SHAPE(3), FL_INT64, 0);
    CHECK(!fl_layer_concat(FL_VARS(a, i), 1));
    CHECK_STR_HAS(fl_prog_error(p), "concat: input 'i' is int64 [-1, 3] but input 'a' is float32 [-1, 3]");
    fl_prog_free(p);

    p = fl_prog_create();
    a = fl_layer_data(p, "a", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *r3 = fl_layer_data(p, "r3", FL_SHAPE(3, 1), FL_FLOAT32, 0);
    CHECK(!fl_layer_concat(FL_VARS(a, r3), 1));
    CHECK_STR_HAS(fl_prog_error(p),
                  "input 'r3' is float32 [-1, 3, 1] but input 'a' is float32 [-1, 3] (dtypes and ranks must agree)");
    fl_prog_free(p);

    /* run time: batch sizes differ on a non-axis dimension */
    p = fl_prog_create();
    a = fl_layer_data(p, "a", FL_SHAPE(1), FL_FLOAT32, 0);
    b = fl_layer_data(p, "b", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_var *o = fl_layer_concat(FL_VARS(a, b), 1);
    fl_exe *e = start(p);
    fl_tensor *at = th_f32(2, (const int64_t[]){2, 1}, (const float[]){1, 2});
    fl_tensor *bt = th_f32(2, (const int64_t[]){3, 2}, NULL);
    fl_feed f[] = {{"a", at}, {"b", bt}};
    const char *fetch[] = {fl_var_name(o)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, f, 2, fetch, 1, &out), FL_EINVAL,
                "concat: input 'b' is float32[3, 2] but input 'a' is float32[2, 1]");
    fl_tensor_free(at);
    fl_tensor_free(bt);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* ---- reshape ---------------------------------------------------------------------------- */

TEST(reshape_forward)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 1);
    fl_var *r1 = fl_layer_reshape(x, FL_SHAPE(0, 2, 3));
    fl_var *r2 = fl_layer_reshape(x, FL_SHAPE(-1));
    fl_var *r3 = fl_layer_reshape(r1, FL_SHAPE(0, -1));
    CHECK(r1 && r2 && r3);
    CHECK_EQ_INT(fl_var_ndim(r1), 3);
    CHECK_EQ_INT(fl_var_shape(r1)[0], -1);
    CHECK_EQ_INT(fl_var_shape(r1)[2], 3);
    CHECK_EQ_INT(fl_var_lod_level(r1), 1);
    CHECK_EQ_INT(fl_var_shape(r3)[1], 6); /* the copied -1 cancels: 6 is known */
    fl_param_attr pa = {0};
    pa.name = "w";
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(4, 6), FL_FLOAT32, &pa);
    fl_var *r4 = fl_layer_reshape(w, FL_SHAPE(3, -1, 2));
    CHECK_EQ_INT(fl_var_shape(r4)[1], 4);
    CHECK_EQ_INT(fl_var_lod_level(r4), 0);
    fl_exe *e = start(p);
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)i;
    fl_tensor *xt = th_f32(2, (const int64_t[]){2, 6}, xv);
    CHECK_OK(fl_tensor_set_lod(xt, (const int64_t[]){0, 1, 2}, 3));
    fl_feed f[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(r1), fl_var_name(r2), fl_var_name(r3)};
    fl_tensor *out[3];
    CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 3, out));
    CHECK_EQ_INT(fl_tensor_ndim(out[0]), 3);
    CHECK_EQ_INT(fl_tensor_dim(out[0], 0), 2);
    CHECK_EQ_INT(fl_tensor_dim(out[0], 1), 2);
    CHECK(fl_tensor_lod(out[0], NULL)); /* dim 0 unchanged: LoD kept */
    CHECK_EQ_INT(fl_tensor_ndim(out[1]), 1);
    CHECK_EQ_INT(fl_tensor_dim(out[1], 0), 12);
    CHECK(!fl_tensor_lod(out[1], NULL));
    CHECK_EQ_INT(fl_tensor_dim(out[2], 1), 6);
    check_vals(out[0], xv, 12);
    check_vals(out[1], xv, 12);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(reshape_errors)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    CHECK(!fl_layer_reshape(x, FL_SHAPE(-1, -1)));
    CHECK_STR_HAS(fl_prog_error(p), "reshape2: shape [-1, -1] for input 'x' has more than one -1");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    CHECK(!fl_layer_reshape(x, FL_SHAPE(0, 4)));
    CHECK_STR_HAS(fl_prog_error(p), "reshape2: cannot reshape input 'x' [-1, 6] to [0, 4]");
    fl_prog_free(p);

    p = fl_prog_create();
    fl_param_attr pa = {0};
    pa.name = "w";
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(2, 3), FL_FLOAT32, &pa);
    CHECK(!fl_layer_reshape(w, FL_SHAPE(4, -1)));
    CHECK_STR_HAS(fl_prog_error(p), "cannot reshape input 'w' [2, 3] to [4, -1]");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    CHECK(!fl_layer_reshape(x, FL_SHAPE(0, 0, 0)));
    CHECK_STR_HAS(fl_prog_error(p), "dimension 2 is 0 (copy) but input 'x' [-1, 6] has rank 2");
    fl_prog_free(p);

    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    CHECK(!fl_layer_reshape(x, FL_SHAPE(-3, 2)));
    CHECK_STR_HAS(fl_prog_error(p), "dimension 0 is -3");
    fl_prog_free(p);

    /* run time: 3 x 6 = 18 elements do not split into rows of 4 */
    p = fl_prog_create();
    x = fl_layer_data(p, "x", FL_SHAPE(6), FL_FLOAT32, 0);
    fl_var *r = fl_layer_reshape(x, FL_SHAPE(-1, 4));
    CHECK(r);
    fl_exe *e = start(p);
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 6}, NULL);
    fl_feed f[] = {{"x", xt}};
    const char *fetch[] = {fl_var_name(r)};
    fl_tensor *out;
    CHECK_FAILS(fl_exe_run(e, p, f, 1, fetch, 1, &out), FL_EINVAL,
                "reshape2: cannot reshape input 'x' float32[3, 6] (18 elements) to shape [-1, 4]");
    fl_tensor_free(xt);
    xt = th_f32(2, (const int64_t[]){2, 6}, NULL);
    f[0].value = xt;
    CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 1, &out));
    CHECK_EQ_INT(fl_tensor_dim(out, 0), 3);
    fl_tensor_free(xt);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* ---- program text and clone ------------------------------------------------------------- */

/* A CTR-style program with every op of the group, its gradients and an optimizer survives
 * the text round trip (shape inference agrees with the declared variables) and clone. */
TEST(seq_ops_text_round_trip)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *d = fl_layer_data(p, "d", FL_SHAPE(2), FL_FLOAT32, 0);
    fl_embedding_attr a = {0};
    a.is_sparse = 1;
    a.is_distributed = 1;
    a.param.name = "emb";
    a.has_padding_idx = 1;
    fl_var *e = fl_layer_embedding(ids, 10, 4, &a);
    fl_var *pm = fl_layer_sequence_pool(e, "max"), *ps = fl_layer_sequence_pool(e, "sqrt");
    fl_var *c = fl_layer_concat(FL_VARS(pm, ps, d), 1);
    fl_var *r = fl_layer_reshape(fl_layer_reshape(c, FL_SHAPE(0, 2, 5)), FL_SHAPE(-1, 10));
    fl_var *loss = fl_layer_mean(fl_layer_fc(FL_VARS(r), 1, NULL));
    fl_opt *o = fl_opt_adam(0.01f, 0.9f, 0.999f, 1e-8f);
    CHECK_OK(fl_opt_minimize(o, loss));
    char *t1, *t2;
    size_t n1, n2;
    CHECK_OK(fl_prog_to_text(p, &t1, &n1));
    CHECK_STR_HAS(t1, "is_distributed=int:1");
    CHECK_STR_HAS(t1, "padding_idx=int:0");
    CHECK_STR_HAS(t1, "grad_index=ints:[0,1]");
    fl_prog *q;
    CHECK_OK(fl_prog_from_text(t1, n1, &q));
    CHECK_OK(fl_prog_to_text(q, &t2, &n2));
    CHECK(n1 == n2 && !memcmp(t1, t2, n1));
    fl_prog *cl = fl_prog_clone(p, 1);
    CHECK(cl);
    CHECK_EQ_INT(fl_prog_num_ops(cl), 8); /* forward ops only */
    fl_prog_free(cl);
    fl_prog_free(q);
    fl_prog_free(p);
    free(t1);
    free(t2);
    fl_opt_free(o);
}

/* A batch whose slot has no ids at all ([0, 1] with LoD {0, 0, 0}): embedding gives [0, dim],
 * sequence_pool gives zero rows, and training runs (dense shared table; sparse private
 * table, whose gradient then has 0 rows). */
TEST(seq_ops_empty_batch)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 1);
    fl_var *b = fl_layer_data(p, "b", FL_SHAPE(1), FL_INT64, 1);
    fl_embedding_attr at = {0}, sp = {0};
    at.param.name = "emb";
    sp.param.name = "emb_sparse";
    sp.is_sparse = 1;
    fl_var *pa = fl_layer_sequence_pool(fl_layer_embedding(a, 10, 4, &at), "sum");
    fl_var *pb = fl_layer_sequence_pool(fl_layer_embedding(b, 10, 4, &at), "max");
    fl_var *pc = fl_layer_sequence_pool(fl_layer_embedding(a, 10, 4, &sp), "average");
    fl_var *loss = fl_layer_mean(fl_layer_fc(FL_VARS(fl_layer_concat(FL_VARS(pa, pb, pc), 1)), 1, NULL));
    fl_opt *o = fl_opt_sgd(0.1f);
    CHECK_OK(fl_opt_minimize(o, loss));
    fl_exe *e = start(p);
    fl_tensor *ta = fl_tensor_create(FL_INT64, 2, (const int64_t[]){0, 1});
    CHECK_OK(fl_tensor_set_lod(ta, (const int64_t[]){0, 0, 0}, 3));
    fl_tensor *tb = ids_lod(2, (const int64_t[]){3, 4}, (const int64_t[]){0, 0, 2}, 3);
    fl_feed f[] = {{"a", ta}, {"b", tb}};
    const char *fetch[] = {fl_var_name(pa), fl_var_name(pb), "emb_sparse@GRAD"};
    fl_tensor *out[3];
    for (int step = 0; step < 2; step++) {
        CHECK_OK(fl_exe_run(e, p, f, 2, fetch, 3, out));
        check_vals(out[0], (const float[]){0, 0, 0, 0, 0, 0, 0, 0}, 8);
        CHECK_EQ_INT(fl_tensor_dim(out[1], 0), 2);
        CHECK(fl_tensor_is_rows(out[2]));
        CHECK_EQ_INT(fl_tensor_dim(out[2], 0), 0);
    }
    fl_exe_free(e);
    fl_tensor_free(ta);
    fl_tensor_free(tb);
    fl_opt_free(o);
    fl_prog_free(p);
}

TEST_MAIN(T(embedding_forward_lod), T(embedding_default_name_and_init), T(embedding_padding_idx),
          T(embedding_out_of_range_ids), T(embedding_build_errors), T(embedding_shared_table), T(embedding_grad_values),
          T(sequence_pool_sum), T(sequence_pool_average), T(sequence_pool_sqrt), T(sequence_pool_max),
          T(sequence_pool_first), T(sequence_pool_last), T(sequence_pool_errors), T(concat_axes),
          T(concat_int64_and_known_dims), T(concat_errors), T(reshape_forward), T(reshape_errors),
          T(seq_ops_text_round_trip), T(seq_ops_empty_batch))
