/*
 * test_bert_ref.c - a 2-layer BERT (fl_model_bert_build: vocab 100, hidden 32, 4 heads,
 * intermediate 64, 16 positions, gelu, dropout 0) trained 5 SGD steps on one batch from the
 * initial parameters of tests/ref/bert.ref, against the same steps in PyTorch written op by op
 * (tests/ref/make_bert_reference.py): every step's loss, every parameter's step-0 gradient,
 * final value and 5-step update, within the tolerances of tests/ref/README.md:
 *   loss of every step:      |ours - ref| <= 1e-5 + 1e-4 |ref|
 *   step-0 gradients:        |ours - ref| <= 1e-6 + 1e-4 |ref|   (elementwise)
 *   final parameters:        |ours - ref| <= 1e-5 + 1e-4 |ref|   (elementwise)
 *   update (final - init):   max |d_ours - d_ref| <= 1e-2 max |d_ref|   (per parameter)
 * The dump (tests/ref/README.md's FLREF 1) is read by refdump.h.
 */
#include "refdump.h"

static ref_worst worst;

TEST(bert_two_layers_vs_pytorch)
{
    ref_file *rf = calloc(1, sizeof *rf);
    CHECK(rf);
    ref_load(rf, "bert.ref");
    fl_model_bert_config c = fl_model_bert_default();
    c.vocab_size = ref_i64(ref_at(rf, "config.", "vocab"), 0);
    c.hidden_size = (int)ref_i64(ref_at(rf, "config.", "hidden"), 0);
    c.num_hidden_layers = (int)ref_i64(ref_at(rf, "config.", "layers"), 0);
    c.num_attention_heads = (int)ref_i64(ref_at(rf, "config.", "heads"), 0);
    c.intermediate_size = (int)ref_i64(ref_at(rf, "config.", "intermediate"), 0);
    c.max_position_embeddings = (int)ref_i64(ref_at(rf, "config.", "max_pos"), 0);
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
    const int steps = (int)ref_i64(ref_at(rf, "config.", "steps"), 0);
    const double lr = ref_f64(ref_at(rf, "config.", "lr"), 0);
    CHECK(steps >= 1 && steps <= 16);

    fl_prog *p = fl_prog_create();
    fl_model_bert m;
    CHECK_OK(fl_model_bert_build(p, &c, &m));
    fl_opt *opt = fl_opt_sgd((float)lr);
    CHECK_OK(fl_opt_minimize(opt, m.loss));
    const char *names[64];
    const int np = ref_params(p, rf, names, 64);
    CHECK(np > 40 && np <= 64);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    for (int i = 0; i < np; i++) { /* the dump's initial values */
        const ref_tensor *r = ref_at(rf, "init.", names[i]);
        fl_tensor *t = fl_scope_find(fl_exe_scope(e), names[i]);
        CHECK(t);
        CHECK_EQ_INT(fl_tensor_numel(t), r->numel);
        memcpy(fl_tensor_data(t), r->data, (size_t)r->numel * 4);
    }
    fl_feed feed[7];
    fl_tensor *in[7];
    for (int k = 0; k < 7; k++) {
        feed[k].name = fl_var_name(m.feeds[k]);
        feed[k].value = in[k] = ref_tensor_new(ref_at(rf, "batch.", feed[k].name));
    }
    const char *fetch[65];
    char gname[64][160];
    fetch[0] = fl_var_name(m.loss);
    for (int i = 0; i < np; i++) snprintf(gname[i], sizeof gname[i], "%s@GRAD", names[i]), fetch[i + 1] = gname[i];
    const ref_tensor *l32 = ref_at(rf, "loss.", "f32");
    CHECK_EQ_INT(l32->numel, steps);
    worst.frac = 0;
    for (int s = 0; s < steps; s++) {
        fl_tensor *out[65];
        CHECK_OK(fl_exe_run(e, p, feed, 7, fetch, s == 0 ? np + 1 : 1, out));
        double ours = fl_tensor_f32(out[0])[0], ref = ref_f64(l32, s), lim = 1e-5 + 1e-4 * fabs(ref);
        if (!(fabs(ours - ref) <= lim)) TFAIL("step %d loss: ours %.9g, PyTorch %.9g", s, ours, ref);
        if (fabs(ours - ref) / lim > worst.frac)
            worst.frac = fabs(ours - ref) / lim, snprintf(worst.what, sizeof worst.what, "loss");
        if (s) continue;
        printf("  step 0 loss: ours %.7f, PyTorch %.7f (f64 %.7f)\n", ours, ref, ref_f64(ref_at(rf, "loss.", "f64"), 0));
        for (int i = 0; i < np; i++) {
            const ref_tensor *r = ref_at(rf, "grad0.", names[i]);
            CHECK(!fl_tensor_rows(out[i + 1], NULL, NULL)); /* dense: every table is looked up densely */
            CHECK_EQ_INT(fl_tensor_numel(out[i + 1]), r->numel);
            ref_close(&worst, "step-0 gradient of", names[i], fl_tensor_cdata(out[i + 1]), r, 1e-6, 1e-4);
        }
    }
    int still = 0;
    for (int i = 0; i < np; i++) {
        const ref_tensor *fin = ref_at(rf, "final.", names[i]), *ini = ref_at(rf, "init.", names[i]);
        const float *ours = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), names[i]));
        ref_close(&worst, "final", names[i], ours, fin, 1e-5, 1e-4);
        double dmax = 0, emax = 0;
        for (int64_t j = 0; j < fin->numel; j++) {
            double dref = (double)ref_f32(fin, j) - ref_f32(ini, j), dours = (double)ours[j] - ref_f32(ini, j);
            dmax = fmax(dmax, fabs(dref)), emax = fmax(emax, fabs(dours - dref));
        }
        /* the key biases add q . b_k to every score of a query row: the softmax does not see
         * it, their gradient is 0 and PyTorch's update only rounding (about 1e-9) */
        if (strstr(names[i], "_key_fc.b_0")) {
            if (!(dmax < 1e-7 && emax < 1e-7))
                TFAIL("the key bias %s moves: ours by %.3g from PyTorch's %.3g", names[i], emax, dmax);
            still++;
            continue;
        }
        if (!(dmax > 0)) TFAIL("parameter %s does not move in PyTorch's 5 steps", names[i]);
        if (!(emax <= 1e-2 * dmax))
            TFAIL("update of %s: max |ours - PyTorch| %.3g > 1%% of max |update| %.3g", names[i], emax, dmax);
        if (emax / (1e-2 * dmax) > worst.frac)
            worst.frac = emax / (1e-2 * dmax), snprintf(worst.what, sizeof worst.what, "update of %s", names[i]);
    }
    CHECK_EQ_INT(still, c.num_hidden_layers);
    printf("  bert: %d losses, %d step-0 gradients, final parameters and updates (the %d key biases: none) match "
           "PyTorch; closest to its tolerance: %s at %.1f%%\n",
           steps, np, still, worst.what, 100 * worst.frac);
    for (int k = 0; k < 7; k++) fl_tensor_free(in[k]);
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_prog_free(p);
    free(rf->buf);
    free(rf);
}

TEST_MAIN(T(bert_two_layers_vs_pytorch))
