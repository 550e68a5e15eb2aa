/* test_ops_print.c - the print op (src/graph/ops_print.c, Paddle's fluid.layers.Print):
 *   - the record's exact text (Paddle's TensorFormatter: name, message, LoD, place, shape,
 *     layout, dtype, data) for float32 with LoD and int64, summarize (2, and -1 for all),
 *     the FL_PRINT_* flags leaving lines out;
 *   - first_n counting the records of one executor;
 *   - the output is the input (values, LoD), and gradients pass through unchanged
 *     (a finite-difference check across it);
 *   - print_phase: "forward" prints only the input, "backward" only its gradient (the
 *     gradient op's record names the gradient variable and holds its values), "both" both;
 *   - a bad print_phase fails naming the input.
 * stderr of each case goes to a temporary file (each case runs in its own process). */
#include <fcntl.h>

#include "gradcheck.h"

static char err_dir[64], err_path[96];

/* Sends stderr to a fresh file in a th_mktemp directory. */
static void capture(void)
{
    th_mktemp(err_dir, sizeof err_dir, "fleet_print");
    snprintf(err_path, sizeof err_path, "%s/stderr", err_dir);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    fflush(stderr);
    CHECK(dup2(fd, 2) == 2);
    close(fd);
}

/* What stderr got since capture() (malloc'ed); the directory is removed. */
static char *captured(void)
{
    fflush(stderr);
    FILE *f = fopen(err_path, "rb");
    CHECK(f != NULL);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    th_rmtree(err_dir);
    return strdup(buf);
}

static int count(const char *s, const char *sub)
{
    int n = 0;
    for (const char *q = s; (q = strstr(q, sub)); q += strlen(sub)) n++;
    return n;
}

#define CHECK_TEXT(got, want)                                                         \
    do {                                                                              \
        if (strcmp((got), (want))) TFAIL("printed\n%s\nexpected\n%s", (got), (want)); \
    } while (0)

static const int64_t lod[3] = {0, 1, 3};
static const float xv[6] = {0.5f, -1.0f, 2.25f, 3.0f, 100000.0f, 1e-7f};

/* Runs p once feeding x (float32 [3, 2] with LoD), fetching `fetch`. */
static fl_tensor *run1(fl_exe *e, fl_prog *p, const char *fetch)
{
    fl_tensor *xt = th_f32(2, (const int64_t[]){3, 2}, xv);
    CHECK_OK(fl_tensor_set_lod(xt, lod, 3));
    fl_feed f[] = {{"x", xt}};
    fl_tensor *out = NULL;
    CHECK_OK(fl_exe_run(e, p, f, 1, &fetch, 1, &out));
    fl_tensor_free(xt);
    return out;
}

TEST(record_text_and_pass_through)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 1);
    fl_var *y = fl_layer_print(x, -1, "The content of x:", 20, FL_PRINT_ALL, NULL);
    CHECK(y != NULL);
    CHECK_EQ_INT(fl_var_lod_level(y), 1);
    fl_exe *e = fl_exe_create(NULL);
    capture();
    fl_tensor *out = run1(e, p, fl_var_name(y));
    char *text = captured();
    CHECK_TEXT(text, "Variable: x\n"
                     "  - message: The content of x:\n"
                     "  - lod: {{0, 1, 3}}\n"
                     "  - place: CPUPlace\n"
                     "  - shape: [3, 2]\n"
                     "  - layout: NCHW\n"
                     "  - dtype: float\n"
                     "  - data: [0.5 -1 2.25 3 100000 1e-07]\n");
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(fl_tensor_f32(out)[i] == xv[i], 1);
    int64_t nl = 0;
    const int64_t *ol = fl_tensor_lod(out, &nl);
    CHECK_EQ_INT(nl, 3);
    CHECK_EQ_INT(ol[2], 3);
    free(text);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* No flags and summarize 2: place and data only; an int64 tensor's dtype "long" with
 * summarize -1 (all values) and no message line when the message is empty. */
TEST(flags_summarize_and_int64)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 1);
    fl_var *y = fl_layer_print(x, 0, NULL, 2, 0, "FORWARD");
    fl_exe *e = fl_exe_create(NULL);
    capture();
    run1(e, p, fl_var_name(y));
    char *text = captured();
    CHECK_TEXT(text, "  - place: CPUPlace\n  - data: [0.5 -1]\n");
    free(text);
    fl_exe_free(e);
    fl_prog_free(p);

    p = fl_prog_create();
    fl_var *ids = fl_layer_data(p, "ids", FL_SHAPE(1), FL_INT64, 0);
    y = fl_layer_print(ids, -1, "", -1, FL_PRINT_ALL & ~FL_PRINT_LOD, "both");
    fl_tensor *it = th_i64(2, (const int64_t[]){3, 1}, (const int64_t[]){7, -2, 30000000000});
    fl_feed f[] = {{"ids", it}};
    e = fl_exe_create(NULL);
    const char *fetch = fl_var_name(y);
    fl_tensor *out;
    capture();
    CHECK_OK(fl_exe_run(e, p, f, 1, &fetch, 1, &out));
    text = captured();
    CHECK_TEXT(text, "Variable: ids\n"
                     "  - place: CPUPlace\n"
                     "  - shape: [3, 1]\n"
                     "  - layout: NCHW\n"
                     "  - dtype: long\n"
                     "  - data: [7 -2 30000000000]\n");
    CHECK_EQ_INT(((const int64_t *)fl_tensor_data(out))[2], 30000000000LL);
    free(text);
    fl_tensor_free(it);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(first_n_counts_records)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 1);
    fl_var *y = fl_layer_print(x, 2, "step", 1, FL_PRINT_NAME, NULL);
    fl_exe *e = fl_exe_create(NULL);
    capture();
    for (int i = 0; i < 4; i++) run1(e, p, fl_var_name(y));
    char *text = captured();
    CHECK_EQ_INT(count(text, "Variable: x\n  - message: step\n"), 2);
    free(text);
    fl_exe_free(e);
    fl_prog_free(p);
}

/* x (a parameter) -> print -> loss: the phases, the gradient record and its values. */
static void phase_case(const char *phase, int want_fwd, int want_bwd)
{
    fl_prog *p = fl_prog_create();
    fl_param_attr a;
    memset(&a, 0, sizeof a);
    a.name = "w";
    a.init = fl_init_constant(1.5f);
    fl_var *w = fl_layer_create_parameter(p, FL_SHAPE(2, 2), FL_FLOAT32, &a);
    fl_var *y = fl_layer_print(w, -1, phase, 20, FL_PRINT_NAME, phase);
    fl_var *loss = fl_layer_mean(fl_layer_scale(y, 4.0f, 0.0f, 1));
    CHECK_OK(fl_append_backward(loss, NULL, 0, NULL, NULL));
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    const char *fetch = "w@GRAD";
    fl_tensor *g;
    capture();
    CHECK_OK(fl_exe_run(e, p, NULL, 0, &fetch, 1, &g));
    char *text = captured();
    char fwd[128], bwd[128];
    snprintf(fwd, sizeof fwd, "Variable: w\n  - message: %s\n  - place: CPUPlace\n  - data: [1.5 1.5 1.5 1.5]\n", phase);
    snprintf(bwd, sizeof bwd, "  - message: %s\n  - place: CPUPlace\n  - data: [1 1 1 1]\n", phase);
    CHECK_EQ_INT(count(text, fwd), want_fwd);
    CHECK_EQ_INT(count(text, bwd), want_bwd);
    CHECK_EQ_INT(count(text, "Variable: "), want_fwd + want_bwd);
    if (want_bwd) CHECK_STR_HAS(text, "@GRAD\n"); /* the gradient record names a gradient variable */
    for (int i = 0; i < 4; i++) CHECK_NEAR(fl_tensor_f32(g)[i], 1.0f, 1e-6); /* d mean(4 w) / dw, through print */
    free(text);
    fl_exe_free(e);
    fl_prog_free(p);
}

TEST(print_phase_forward) { phase_case("forward", 1, 0); }
TEST(print_phase_backward) { phase_case("backward", 0, 1); }
TEST(print_phase_both) { phase_case("both", 1, 1); }

/* The gradient through a print op is the gradient without it (finite differences). */
TEST(grad_through_print)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = gc_input(p, "x", FL_SHAPE(3, 4), -1, 1);
    fl_var *y = fl_layer_tanh(fl_layer_print(x, 1, NULL, 1, 0, "forward"));
    capture();
    gc_check(gc_loss(y), NULL, 0, NULL, (gc_opts){0, 0, 0, 0});
    free(captured());
    fl_prog_free(p);
}

TEST(bad_phase_fails)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 0);
    CHECK(fl_layer_print(x, -1, NULL, 20, FL_PRINT_ALL, "sideways") == NULL);
    CHECK_EQ_INT(fl_prog_status(p), FL_EINVAL);
    CHECK_STR_HAS(fl_prog_error(p), "print: input 'x': print_phase 'sideways' must be forward, backward or both");
    fl_prog_free(p);
}

/* The program text keeps the print ops (a message with spaces, a colon and quotes) and the
 * reloaded program prints the same record. */
TEST(text_round_trip)
{
    fl_prog *p = fl_prog_create();
    fl_var *x = fl_layer_data(p, "x", FL_SHAPE(2), FL_FLOAT32, 1);
    fl_var *y = fl_layer_print(x, 3, "say \"x\": =", 4, FL_PRINT_ALL, "both");
    CHECK(y != NULL);
    char *t1, *t2;
    size_t n1, n2;
    CHECK_OK(fl_prog_to_text(p, &t1, &n1));
    fl_prog *q;
    CHECK_OK(fl_prog_from_text(t1, n1, &q));
    CHECK_OK(fl_prog_to_text(q, &t2, &n2));
    CHECK(n1 == n2 && !memcmp(t1, t2, n1));
    fl_exe *e = fl_exe_create(NULL);
    capture();
    run1(e, p, fl_var_name(y));
    run1(e, q, fl_var_name(y));
    char *text = captured();
    const char *rec = "Variable: x\n  - message: say \"x\": =\n  - lod: {{0, 1, 3}}\n";
    CHECK_EQ_INT(count(text, rec), 2);
    free(text);
    fl_exe_free(e);
    fl_prog_free(q);
    fl_prog_free(p);
    free(t1);
    free(t2);
}

TEST_MAIN(T(record_text_and_pass_through), T(flags_summarize_and_int64), T(first_n_counts_records), T(print_phase_forward),
          T(print_phase_backward), T(print_phase_both), T(grad_through_print), T(bad_phase_fails), T(text_round_trip))
