/* test_tensor.c - tensors, LoD and SelectedRows validation. */
#include "testhelp.h"
#include "tensor/tensor_internal.h"

TEST(create_and_resize)
{
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){3, 4});
    CHECK(t);
    CHECK_EQ_INT(fl_tensor_numel(t), 12);
    CHECK_EQ_INT(fl_tensor_nbytes(t), 48);
    for (int i = 0; i < 12; i++) CHECK(fl_tensor_f32(t)[i] == 0.0f);
    CHECK(fl_tensor_i64(t) == NULL);
    CHECK_OK(fl_tensor_resize(t, FL_INT64, 1, (const int64_t[]){100}));
    CHECK_EQ_INT(fl_tensor_numel(t), 100);
    CHECK(fl_tensor_i64(t) != NULL);
    CHECK_EQ_INT((long long)((uintptr_t)fl_tensor_data(t) % 64), 0);
    char buf[64];
    fl_tensor_describe(t, buf, sizeof buf);
    CHECK_STR_HAS(buf, "int64[100]");
    fl_tensor_free(t);
    fl_tensor *s = fl_tensor_create(FL_FLOAT32, 0, NULL);
    CHECK_EQ_INT(fl_tensor_numel(s), 1);
    fl_tensor_free(s);
}

TEST(bad_shapes)
{
    CHECK(fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){3, -1}) == NULL);
    CHECK_STR_HAS(fl_last_error(), "dimension 1 is negative");
    CHECK(fl_tensor_create(FL_FLOAT32, 9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}) == NULL);
    CHECK_STR_HAS(fl_last_error(), "rank 9 out of range");
    CHECK(fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){INT64_MAX / 2, 4}) == NULL);
    CHECK_STR_HAS(fl_last_error(), "overflows");
    fl_dtype dt;
    CHECK_FAILS(fl_dtype_parse("float128", &dt), FL_EINVAL, "unknown dtype 'float128'");
    CHECK_OK(fl_dtype_parse("bfloat16", &dt));
    CHECK_EQ_INT(fl_dtype_size(dt), 2);
}

TEST(lod_validation)
{
    fl_tensor *t = fl_tensor_create(FL_INT64, 2, (const int64_t[]){5, 1});
    CHECK_OK(fl_tensor_set_lod(t, (const int64_t[]){0, 2, 2, 5}, 4));
    int64_t n;
    const int64_t *l = fl_tensor_lod(t, &n);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(l[3], 5);
    CHECK_FAILS(fl_tensor_set_lod(t, (const int64_t[]){1, 5}, 2), FL_EINVAL, "must start at 0");
    CHECK_FAILS(fl_tensor_set_lod(t, (const int64_t[]){0, 3, 2, 5}, 4), FL_EINVAL, "non-decreasing");
    CHECK_FAILS(fl_tensor_set_lod(t, (const int64_t[]){0, 2, 4}, 3), FL_EINVAL, "does not match dimension 0 (5)");
    fl_tensor *c = fl_tensor_create(FL_FLOAT32, 1, (const int64_t[]){1});
    CHECK_OK(fl_tensor_copy(c, t));
    CHECK(fl_tensor_lod(c, &n) && n == 4);
    fl_tensor_free(c);
    fl_tensor_free(t);
}

TEST(selected_rows)
{
    fl_tensor *t = fl_tensor_create(FL_FLOAT32, 2, (const int64_t[]){3, 2});
    CHECK_OK(fl_tensor_set_rows(t, (const int64_t[]){4, 0, 4}, 3, 10));
    int64_t nr, h;
    const int64_t *r = fl_tensor_rows(t, &nr, &h);
    CHECK(r && nr == 3 && h == 10 && r[2] == 4);
    CHECK(fl_tensor_is_rows(t));
    CHECK_FAILS(fl_tensor_set_rows(t, (const int64_t[]){4, 0, 10}, 3, 10), FL_EINVAL, "row 10 out of range [0, 10)");
    CHECK_FAILS(fl_tensor_set_rows(t, (const int64_t[]){1, 2}, 2, 10), FL_EINVAL,
                "2 rows given for a tensor with dimension 0 = 3");
    CHECK_OK(fl_tensor_set_rows(t, NULL, 0, 0));
    CHECK(!fl_tensor_is_rows(t));
    fl_tensor_free(t);
}

TEST(error_strings)
{
    CHECK_STR_HAS(fl_strerror(FL_ETIMEDOUT), "FL_ETIMEDOUT");
    CHECK_STR_HAS(fl_strerror(-99), "FL_E?");
    fl_clear_error();
    CHECK_EQ_INT(fl_last_status(), FL_OK);
    CHECK(fl_last_error()[0] == 0);
}

/* fl__sgemm against a naive product, for every transpose combination, on one thread and
 * split over two (FLEET_NUM_THREADS=2 engages the helper for products this large). */
static void sgemm_case(int threads)
{
    setenv("FLEET_NUM_THREADS", threads == 2 ? "2" : "1", 1);
    enum { M = 200, N = 96, K = 150 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
    th_fill_uniform(a, M * K, -1, 1, 1);
    th_fill_uniform(b, K * N, -1, 1, 2);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int i = 0; i < M * N; i++) c[i] = 1.0f;
            /* A is [M,K] (or [K,M] when transposed), B is [K,N] (or [N,K]) */
            fl__sgemm(ta, tb, M, N, K, 0.5f, a, ta ? M : K, b, tb ? K : N, 2.0f, c, N);
            for (int i = 0; i < M; i += 7)
                for (int j = 0; j < N; j += 5) {
                    double r = 0;
                    for (int k = 0; k < K; k++)
                        r += (double)(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
                    CHECK_NEAR(c[i * N + j], 0.5 * r + 2.0, 1e-4);
                }
        }
    free(a);
    free(b);
    free(c);
}
TEST(sgemm_one_thread) { sgemm_case(1); }
TEST(sgemm_two_threads) { sgemm_case(2); }

TEST_MAIN(T(sgemm_one_thread), T(sgemm_two_threads), T(create_and_resize), T(bad_shapes), T(lod_validation),
          T(selected_rows), T(error_strings))
