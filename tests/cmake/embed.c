/*
 * embed.c - a program outside the project, built against an installed Fleet by
 * tests/test_install.c: once with `pkg-config --cflags --libs fleet`, once with CMake
 * (CMakeLists.txt beside it, find_package(Fleet)).  It prints the library's version and
 * trains a tiny softmax classifier for a few steps; the test checks both lines.
 * It includes only the installed headers and uses only the public API.
 */
#include <fleet.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "embed: %s: %s\n", what, fl_last_error());
    return 1;
}

int main(void)
{
    printf("fleet %s\n", fl_version());
    fl_prog *prog = fl_prog_create();
    fl_var *x = fl_layer_data(prog, "x", FL_SHAPE(4), FL_FLOAT32, 0);
    fl_var *y = fl_layer_data(prog, "y", FL_SHAPE(1), FL_INT64, 0);
    fl_var *cost = fl_layer_mean(fl_layer_cross_entropy(fl_layer_fc(FL_VARS(x), 2, "softmax"), y));
    fl_opt *opt = fl_opt_sgd(0.5f);
    if (!opt || fl_opt_minimize(opt, cost) != FL_OK) return fail("building the program");

    /* label = whether the first feature exceeds the second: learnable in a few steps */
    float xs[8 * 4];
    int64_t ys[8];
    for (int i = 0; i < 8; i++) {
        for (int j = 0; j < 4; j++) xs[i * 4 + j] = (float)((i * 7 + j * 3) % 5) - 2.0f;
        ys[i] = xs[i * 4] > xs[i * 4 + 1];
    }
    fl_tensor *tx = fl_tensor_from_data(FL_FLOAT32, 2, (const int64_t[]){8, 4}, xs);
    fl_tensor *ty = fl_tensor_from_data(FL_INT64, 2, (const int64_t[]){8, 1}, ys);
    fl_exe *exe = fl_exe_create(NULL);
    if (!tx || !ty || !exe) return fail("allocating");
    if (fl_exe_run(exe, fl_prog_startup(prog), NULL, 0, NULL, 0, NULL) != FL_OK) return fail("startup");
    fl_feed feed[] = {{"x", tx}, {"y", ty}};
    const char *fetch[] = {fl_var_name(cost)};
    float first = 0, last = 0;
    for (int step = 0; step < 20; step++) {
        fl_tensor *out;
        if (fl_exe_run(exe, prog, feed, 2, fetch, 1, &out) != FL_OK) return fail("training step");
        last = fl_tensor_f32(out)[0];
        if (step == 0) first = last;
    }
    printf("cost %.4f -> %.4f %s\n", first, last, last < first ? "falls" : "does not fall");
    fl_exe_free(exe);
    fl_tensor_free(tx);
    fl_tensor_free(ty);
    fl_opt_free(opt);
    fl_prog_free(prog);
    return last < first ? 0 : 1;
}
