/*
 * test_transformer_ref.c - a 2 + 2 layer Transformer (fl_model_transformer_build's default
 * configuration at a tiny size: vocabularies 40, d_model 16, 2 heads of 8, d_inner_hid 32,
 * separate source / target embeddings, label smoothing 0.1, dropout 0) trained 5 SGD steps
 * on one padded batch of 3 sentence pairs from the initial parameters of
 * tests/ref/transformer.ref, against the same steps in PyTorch written op by op
 * (tests/ref/make_transformer_reference.py): the two frozen sinusoid tables as our startup
 * writes them, every step's loss, every trained parameter's step-0 gradient, final value and
 * 5-step update, within the tolerances of tests/ref/README.md:
 *   loss of every step:      |ours - ref| <= 1e-5 + 1e-4 |ref|
 *   step-0 gradients:        |ours - ref| <= 1e-6 + 1e-4 |ref|   (elementwise)
 *   final parameters:        |ours - ref| <= 1e-5 + 1e-4 |ref|   (elementwise)
 *   update (final - init):   max |d_ours - d_ref| <= 1e-2 max |d_ref|   (per parameter)
 * The dump (tests/ref/README.md's FLREF 1) is read by refdump.h.
 */
#include "refdump.h"

#define MAXP 96

static ref_worst worst;

static int frozen(const char *name) { return strstr(name, "_pos_enc_table") != NULL; }

TEST(transformer_two_layers_vs_pytorch)
{
    ref_file *rf = calloc(1, sizeof *rf);
    CHECK(rf);
    ref_load(rf, "transformer.ref");
    check_little_endian();
    fl_model_transformer_config c = fl_model_transformer_default();
    c.src_vocab_size = c.trg_vocab_size = ref_i64(ref_at(rf, "config.", "vocab"), 0);
    c.d_model = (int)ref_i64(ref_at(rf, "config.", "d_model"), 0);
    c.n_layer = (int)ref_i64(ref_at(rf, "config.", "layers"), 0);
    c.n_head = (int)ref_i64(ref_at(rf, "config.", "heads"), 0);
    c.d_key = c.d_value = (int)ref_i64(ref_at(rf, "config.", "d_key"), 0);
    c.d_inner_hid = (int)ref_i64(ref_at(rf, "config.", "d_inner"), 0);
    c.max_length = (int)ref_i64(ref_at(rf, "config.", "max_length"), 0);
    c.label_smooth_eps = (float)ref_f64(ref_at(rf, "config.", "label_smooth"), 0);
    c.prepostprocess_dropout = c.attention_dropout = c.relu_dropout = 0;
    CHECK(!c.weight_sharing && c.label_smooth_eps > 0); /* the defaults the dump was made with */
    const int steps = (int)ref_i64(ref_at(rf, "config.", "steps"), 0);
    const double lr = ref_f64(ref_at(rf, "config.", "lr"), 0);
    CHECK(steps >= 1 && steps <= 16);

    fl_prog *p = fl_prog_create();
    fl_model_transformer m;
    CHECK_OK(fl_model_transformer_build(p, &c, &m));
    fl_opt *opt = fl_opt_sgd((float)lr);
    CHECK_OK(fl_opt_minimize(opt, m.loss));
    const char *names[MAXP], *trained[MAXP];
    const int np = ref_params(p, rf, names, MAXP);
    CHECK(np > 40);
    fl_exe *e = fl_exe_create(NULL);
    CHECK_OK(fl_exe_run(e, fl_prog_startup(p), NULL, 0, NULL, 0, NULL));
    int nt = 0, nfrozen = 0;
    for (int i = 0; i < np; i++) {
        const ref_tensor *r = ref_at(rf, "init.", names[i]);
        fl_tensor *t = fl_scope_find(fl_exe_scope(e), names[i]);
        CHECK(t);
        CHECK_EQ_INT(fl_tensor_numel(t), r->numel);
        if (frozen(names[i])) { /* the sinusoid table our startup wrote, against NumPy's */
            ref_close(&worst, "sinusoid table", names[i], fl_tensor_cdata(t), r, 1e-6, 1e-6);
            nfrozen++;
            continue;
        }
        memcpy(fl_tensor_data(t), r->data, (size_t)r->numel * 4); /* the dump's initial values */
        trained[nt++] = names[i];
    }
    CHECK_EQ_INT(nfrozen, 2);
    fl_feed feed[FL_MODEL_TRANSFORMER_FEEDS];
    fl_tensor *in[FL_MODEL_TRANSFORMER_FEEDS];
    CHECK_EQ_INT(m.nuse_var, FL_MODEL_TRANSFORMER_FEEDS);
    for (int k = 0; k < m.nuse_var; k++) {
        feed[k].name = fl_var_name(m.use_var[k]);
        feed[k].value = in[k] = ref_tensor_new(ref_at(rf, "batch.", feed[k].name));
    }
    const char *fetch[MAXP + 1];
    char gname[MAXP][160];
    fetch[0] = fl_var_name(m.loss);
    for (int i = 0; i < nt; i++) snprintf(gname[i], sizeof gname[i], "%s@GRAD", trained[i]), fetch[i + 1] = gname[i];
    const ref_tensor *l32 = ref_at(rf, "loss.", "f32");
    CHECK_EQ_INT(l32->numel, steps);
    worst.frac = 0;
    for (int s = 0; s < steps; s++) {
        fl_tensor *out[MAXP + 1];
        CHECK_OK(fl_exe_run(e, p, feed, m.nuse_var, fetch, s == 0 ? nt + 1 : 1, out));
        double ours = fl_tensor_f32(out[0])[0], ref = ref_f64(l32, s), lim = 1e-5 + 1e-4 * fabs(ref);
        if (!(fabs(ours - ref) <= lim)) TFAIL("step %d loss: ours %.9g, PyTorch %.9g", s, ours, ref);
        if (fabs(ours - ref) / lim > worst.frac)
            worst.frac = fabs(ours - ref) / lim, snprintf(worst.what, sizeof worst.what, "loss");
        if (s) continue;
        printf("  step 0 loss: ours %.7f, PyTorch %.7f (f64 %.7f)\n", ours, ref, ref_f64(ref_at(rf, "loss.", "f64"), 0));
        for (int i = 0; i < nt; i++) {
            const ref_tensor *r = ref_at(rf, "grad0.", trained[i]);
            CHECK(!fl_tensor_rows(out[i + 1], NULL, NULL)); /* dense: the tables are looked up densely */
            CHECK_EQ_INT(fl_tensor_numel(out[i + 1]), r->numel);
            ref_close(&worst, "step-0 gradient of", trained[i], fl_tensor_cdata(out[i + 1]), r, 1e-6, 1e-4);
        }
    }
    for (int i = 0; i < nt; i++) {
        const ref_tensor *fin = ref_at(rf, "final.", trained[i]), *ini = ref_at(rf, "init.", trained[i]);
        const float *ours = fl_tensor_f32(fl_scope_find(fl_exe_scope(e), trained[i]));
        ref_close(&worst, "final", trained[i], ours, fin, 1e-5, 1e-4);
        double dmax = 0, emax = 0;
        for (int64_t j = 0; j < fin->numel; j++) {
            double dref = (double)ref_f32(fin, j) - ref_f32(ini, j), dours = (double)ours[j] - ref_f32(ini, j);
            dmax = fmax(dmax, fabs(dref)), emax = fmax(emax, fabs(dours - dref));
        }
        if (!(dmax > 0)) TFAIL("parameter %s does not move in PyTorch's 5 steps", trained[i]);
        if (!(emax <= 1e-2 * dmax))
            TFAIL("update of %s: max |ours - PyTorch| %.3g > 1%% of max |update| %.3g", trained[i], emax, dmax);
        if (emax / (1e-2 * dmax) > worst.frac)
            worst.frac = emax / (1e-2 * dmax), snprintf(worst.what, sizeof worst.what, "update of %s", trained[i]);
    }
    for (int i = 0; i < np; i++) /* the sinusoid tables stay as they were */
        if (frozen(names[i]))
            ref_close(&worst, "frozen", names[i], fl_tensor_f32(fl_scope_find(fl_exe_scope(e), names[i])),
                      ref_at(rf, "final.", names[i]), 1e-6, 1e-6);
    printf("  transformer: 2 sinusoid tables, %d losses, %d step-0 gradients, final parameters and updates match "
           "PyTorch; closest to its tolerance: %s at %.1f%%\n",
           steps, nt, worst.what, 100 * worst.frac);
    for (int k = 0; k < m.nuse_var; k++) fl_tensor_free(in[k]);
    fl_exe_free(e);
    fl_opt_free(opt);
    fl_prog_free(p);
    free(rf->buf);
    free(rf);
}

TEST_MAIN(T(transformer_two_layers_vs_pytorch))
