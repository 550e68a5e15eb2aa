/* test_grad_seq.c - finite-difference checks of the ops in ops_seq.c: lookup_table (dense,
 * sparse, padding_idx, shared table), sequence_pool (all pool types, with an empty
 * sequence), concat (axis 0, 1, -1, inputs without gradient) and reshape2.  Tolerances:
 * see gradcheck.h.
 *
 * gc_input makes parameters, which carry no LoD, and the public API has no op that
 * attaches LoD to a dense tensor (Paddle's lod_reset).  So sequence_pool inputs are
 * built as embedding(ids) (ids fed with LoD) optionally followed by fc, which keeps the
 * LoD: the checked parameters are the table and the fc weights upstream of the pool. */
#include "gradcheck.h"

static const gc_opts defaults = {0, 0, 0, 0};

static fl_tensor *ids_tensor(int64_t n, const int64_t *ids, const int64_t *lod, int64_t nlod)
{
    fl_tensor *t = th_i64(2, (const int64_t[]){n, 1}, ids);
    CHECK(t);
    if (lod) CHECK_OK(fl_tensor_set_lod(t, lod, nlod));
    return t;
}

static fl_var *emb(fl_var *ids, int64_t vocab, int64_t dim, const char *name, int sparse, int pad, int64_t pad_idx)
{
    fl_embedding_attr a;
    memset(&a, 0, sizeof a);
    a.param.name = name;
    a.param.init = fl_init_uniform(-1.0f, 1.0f);
    a.is_sparse = sparse;
    a.has_padding_idx = pad;
    a.padding_idx = pad_idx;
    return fl_layer_embedding(ids, vocab, dim, &a);
}

/* ---- embedding ---------------------------------------------------------------------------- */

static void embedding_case(int sparse)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *o = emb(ids, 6, 4, "table", sparse, 0, 0);
    fl_tensor *it = ids_tensor(7, (const int64_t[]){2, 5, 2, 0, 5, 5, 3}, (const int64_t[]){0, 3, 7}, 3);
    fl_feed f[] = {{"ids", it}};
    gc_check(gc_loss(o), f, 1, NULL, defaults);
    fl_tensor_free(it);
    fl_prog_free(p);
}

TEST(grad_embedding_dense) { embedding_case(0); }
TEST(grad_embedding_sparse) { embedding_case(1); }

/* The padding row reads zeros and gets an exactly zero gradient (dense: the row is 0;
 * sparse: the values at padding positions are 0). */
static void padding_case(int sparse)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *o = emb(ids, 5, 3, "table", sparse, 1, -1); /* row 4 */
    fl_var *loss = gc_loss(o);
    fl_tensor *it = ids_tensor(5, (const int64_t[]){4, 1, 4, 2, 1}, (const int64_t[]){0, 2, 5}, 3);
    fl_feed f[] = {{"ids", it}};
    gc_check(loss, f, 1, NULL, defaults);
    fl_scope *s = fl_scope_create(NULL);
    fl_exe *e = fl_exe_create(s);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *fetch[] = {"table@GRAD"};
    fl_tensor *g;
    CHECK_OK(fl_exe_run(e, p, f, 1, fetch, 1, &g));
    const float *gv = fl_tensor_f32(g);
    if (sparse) {
        int64_t nr, h;
        const int64_t *rows = fl_tensor_rows(g, &nr, &h);
        CHECK(rows);
        CHECK_EQ_INT(nr, 5);
        for (int64_t r = 0; r < nr; r++)
            for (int j = 0; j < 3; j++)
                if (rows[r] == 4) CHECK_EQ_INT(gv[r * 3 + j] == 0.0f, 1);
                else CHECK(gv[r * 3 + j] != 0.0f);
    } else {
        CHECK(!fl_tensor_is_rows(g));
        for (int j = 0; j < 3; j++) {
            CHECK_EQ_INT(gv[4 * 3 + j] == 0.0f, 1);
            CHECK(gv[1 * 3 + j] != 0.0f);
        }
    }
    fl_exe_free(e);
    fl_scope_free(s);
    fl_tensor_free(it);
    fl_prog_free(p);
}

TEST(grad_embedding_padding_dense) { padding_case(0); }
TEST(grad_embedding_padding_sparse) { padding_case(1); }

/* One table shared by two slots (one sparse, one dense lookup): gradients add up. */
TEST(grad_embedding_shared)
{
    for (int mix = 0; mix < 2; mix++) {
        fl_prog *p = fl_prog_create();
        fl_var *a = fl_layer_data(p, "a", FL_SHAPE(1), FL_INT64, 1);
        fl_var *b = fl_layer_data(p, "b", FL_SHAPE(1), FL_INT64, 1);
        fl_var *ea = emb(a, 6, 3, "shared", 1, 0, 0);
        fl_var *eb = emb(b, 6, 3, "shared", !mix, 0, 0);
        fl_var *pa = fl_layer_sequence_pool(ea, "sum"), *pb = fl_layer_sequence_pool(eb, "average");
        fl_var *o = fl_layer_concat(FL_VARS(pa, pb), 1);
        fl_tensor *at = ids_tensor(4, (const int64_t[]){1, 3, 3, 5}, (const int64_t[]){0, 1, 4}, 3);
        fl_tensor *bt = ids_tensor(3, (const int64_t[]){3, 0, 1}, (const int64_t[]){0, 2, 3}, 3);
        fl_feed f[] = {{"a", at}, {"b", bt}};
        gc_check(gc_loss(o), f, 2, NULL, defaults);
        fl_tensor_free(at);
        fl_tensor_free(bt);
        fl_prog_free(p);
    }
}

/* ---- sequence_pool -------------------------------------------------------------------------- */

/* x = fc(embedding(ids)) keeps the LoD of ids; pool it and check the table and fc weights.
 * The LoD {0, 3, 3, 5, 6} has an empty sequence.  For max/first/last, ids are distinct
 * within a sequence so no maximum is tied. */
static void pool_grad_case(const char *type, int with_fc)
{
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *x = emb(ids, 8, 4, "table", 0, 0, 0);
    if (with_fc) x = fl_layer_fc(FL_VARS(x), 3, NULL);
    fl_var *o = fl_layer_sequence_pool(x, type);
    CHECK(o);
    fl_tensor *it = ids_tensor(6, (const int64_t[]){1, 6, 2, 4, 7, 2}, (const int64_t[]){0, 3, 3, 5, 6}, 5);
    fl_feed f[] = {{"ids", it}};
    gc_check(gc_loss(o), f, 1, NULL, defaults);
    fl_tensor_free(it);
    fl_prog_free(p);
}

TEST(grad_sequence_pool_sum) { pool_grad_case("sum", 0); }
TEST(grad_sequence_pool_average) { pool_grad_case("average", 0); }
TEST(grad_sequence_pool_sqrt) { pool_grad_case("sqrt", 0); }
TEST(grad_sequence_pool_max) { pool_grad_case("max", 0); }
TEST(grad_sequence_pool_first) { pool_grad_case("first", 0); }
TEST(grad_sequence_pool_last) { pool_grad_case("last", 0); }
TEST(grad_sequence_pool_sum_fc) { pool_grad_case("sum", 1); }
TEST(grad_sequence_pool_average_fc) { pool_grad_case("average", 1); }
TEST(grad_sequence_pool_sqrt_fc) { pool_grad_case("sqrt", 1); }
TEST(grad_sequence_pool_max_fc) { pool_grad_case("max", 1); }

/* ---- concat --------------------------------------------------------------------------------- */

TEST(grad_concat_axis0)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(2, 3), -1, 1);
    fl_var *b = gc_input(p, "b", FL_SHAPE(4, 3), -1, 1);
    gc_check(gc_loss(fl_layer_concat(FL_VARS(a, b, a), 0)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_concat_axis1)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 2), -1, 1);
    fl_var *b = gc_input(p, "b", FL_SHAPE(3, 4), -1, 1);
    gc_check(gc_loss(fl_layer_concat(FL_VARS(a, b), 1)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_concat_axis_neg1)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(2, 3, 2), -1, 1);
    fl_var *b = gc_input(p, "b", FL_SHAPE(2, 3, 1), -1, 1);
    gc_check(gc_loss(fl_layer_concat(FL_VARS(a, b), -1)), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

/* A fed input in the middle gets no gradient; the others' slices must still line up. */
TEST(grad_concat_with_data_input)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(3, 2), -1, 1);
    fl_var *d = fl_layer_data(p, "d", FL_SHAPE(3), FL_FLOAT32, 0);
    fl_var *b = gc_input(p, "b", FL_SHAPE(3, 1), -1, 1);
    fl_var *o = fl_layer_concat(FL_VARS(a, d, b), 1);
    fl_tensor *dt = th_f32(2, (const int64_t[]){3, 3}, (const float[]){1, -2, 3, 0.5f, 0, -1, 2, 2, 2});
    fl_feed f[] = {{"d", dt}};
    gc_check(gc_loss(fl_layer_tanh(o)), f, 1, NULL, defaults);
    CHECK(!fl_prog_var(p, "d@GRAD"));
    fl_tensor_free(dt);
    fl_prog_free(p);
}

/* ---- reshape ---------------------------------------------------------------------------------- */

TEST(grad_reshape)
{
    fl_prog *p = fl_prog_create();
    fl_var *a = gc_input(p, "a", FL_SHAPE(4, 6), -1, 1);
    fl_var *r1 = fl_layer_reshape(a, FL_SHAPE(0, 2, 3));
    fl_var *r2 = fl_layer_reshape(fl_layer_tanh(r1), FL_SHAPE(-1, 8));
    gc_check(gc_loss(r2), NULL, 0, NULL, defaults);
    fl_prog_free(p);
}

TEST(grad_reshape_sequence)
{
    /* [N, 6] sequence -> [N, 2, 3] keeps the LoD (dim 0 unchanged) -> sequence_pool */
    fl_prog *p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 1);
    fl_var *x = emb(ids, 5, 6, "table", 1, 0, 0);
    fl_var *r = fl_layer_reshape(x, FL_SHAPE(0, 2, 3));
    fl_var *o = fl_layer_sequence_pool(r, "sqrt");
    fl_tensor *it = ids_tensor(4, (const int64_t[]){0, 4, 4, 2}, (const int64_t[]){0, 1, 4}, 3);
    fl_feed f[] = {{"ids", it}};
    gc_check(gc_loss(o), f, 1, NULL, defaults);
    fl_tensor_free(it);
    fl_prog_free(p);
}

TEST_MAIN(T(grad_embedding_dense), T(grad_embedding_sparse), T(grad_embedding_padding_dense),
          T(grad_embedding_padding_sparse), T(grad_embedding_shared), T(grad_sequence_pool_sum),
          T(grad_sequence_pool_average), T(grad_sequence_pool_sqrt), T(grad_sequence_pool_max), T(grad_sequence_pool_first),
          T(grad_sequence_pool_last), T(grad_sequence_pool_sum_fc), T(grad_sequence_pool_average_fc),
          T(grad_sequence_pool_sqrt_fc), T(grad_sequence_pool_max_fc), T(grad_concat_axis0), T(grad_concat_axis1),
          T(grad_concat_axis_neg1), T(grad_concat_with_data_input), T(grad_reshape), T(grad_reshape_sequence))
