#!/usr/bin/python3
"""Generates the PyTorch reference dump of a 2-layer BERT that tests/test_bert_ref.c checks Fleet against.

usage: PYTHON tests/ref/make_bert_reference.py [OUTDIR]     (default: tests/ref)

PYTHON: one with torch and numpy (tests/ref/README.md).  Writes bert.ref (deterministic: seeded numpy
PCG64, one thread): the configuration, the initial value of every parameter, one batch, the loss of 5
SGD steps on that batch (float32 and float64 runs), the step-0 gradient of every parameter (float32
run), the final parameters (float32 run) and, per parameter, how far the float32 run ends from the
float64 run.  File format and the training loop: tests/ref/refdump.py ("FLREF 1").

The network is written op by op as fl_model_bert_build (src/models/bert.c) builds Paddle's BERT:
word + position + sentence embeddings -> layer_norm ("pre_encoder"); per layer: q, k, v fc, the
scaled dot product with the bias (mask mask^T - 1) * 10000, softmax, context, output fc, residual and
layer_norm ("post_att", post-norm), fc gelu (erf form) -> fc, residual and layer_norm ("post_ffn");
pooled = tanh(fc(output at position 0)); masked LM: the rows mask_pos of the flattened output -> fc
gelu -> layer_norm (its bias starts at 1) -> matmul with word_embedding transposed (tied) + bias
mask_lm_out_fc.b_0 -> softmax cross-entropy, mean; next sentence: fc(2) of pooled -> softmax
cross-entropy, mean; loss = the two means added.  Dropout 0.  Weights in Paddle's fc layout
[in, out], used as x @ W + b.  Layer norm: biased variance, epsilon 1e-5 inside the square root.
"""
import math
import os

import refdump  # one thread; before numpy and torch

import numpy as np
import torch

STEPS, LR = 5, 0.05
VOCAB, HID, LAYERS, HEADS, INTER, MAXPOS, TYPES = 100, 32, 2, 4, 64, 16, 2
BATCH, SEQ = 4, 16
LENS = [16, 12, 9, 14]  # tokens of each example; the rest is padding
EPS = 1e-5


def param_shapes():
    """(name, shape) in the order the dump lists them: Paddle's names as fl_model_bert_build gives them."""
    s = [("word_embedding", (VOCAB, HID)), ("pos_embedding", (MAXPOS, HID)), ("sent_embedding", (TYPES, HID)),
         ("pre_encoder_layer_norm_scale", (HID,)), ("pre_encoder_layer_norm_bias", (HID,))]
    for i in range(LAYERS):
        p = "encoder_layer_%d_" % i
        for f in ("query", "key", "value", "output"):
            s += [(p + "multi_head_att_%s_fc.w_0" % f, (HID, HID)), (p + "multi_head_att_%s_fc.b_0" % f, (HID,))]
        s += [(p + "post_att_layer_norm_scale", (HID,)), (p + "post_att_layer_norm_bias", (HID,)),
              (p + "ffn_fc_0.w_0", (HID, INTER)), (p + "ffn_fc_0.b_0", (INTER,)),
              (p + "ffn_fc_1.w_0", (INTER, HID)), (p + "ffn_fc_1.b_0", (HID,)),
              (p + "post_ffn_layer_norm_scale", (HID,)), (p + "post_ffn_layer_norm_bias", (HID,))]
    s += [("pooled_fc.w_0", (HID, HID)), ("pooled_fc.b_0", (HID,)),
          ("mask_lm_trans_fc.w_0", (HID, HID)), ("mask_lm_trans_fc.b_0", (HID,)),
          ("mask_lm_trans_layer_norm_scale", (HID,)), ("mask_lm_trans_layer_norm_bias", (HID,)),
          ("mask_lm_out_fc.b_0", (VOCAB,)), ("next_sent_fc.w_0", (HID, 2)), ("next_sent_fc.b_0", (2,))]
    return s


def make_data():
    rng = np.random.default_rng(20261129)
    init = {}
    for name, shape in param_shapes():
        if name.endswith("_scale"):  # layer norm scales around 1, biases around 0 (the MLM one around 1)
            a = 1.0 + rng.uniform(-0.2, 0.2, shape)
        elif name.endswith("_bias"):
            a = (1.0 if name.startswith("mask_lm") else 0.0) + rng.uniform(-0.2, 0.2, shape)
        elif name.endswith(".b_0"):
            a = rng.uniform(-0.1, 0.1, shape)
        elif name.endswith(".w_0"):  # larger than BERT's 0.02 so that every path carries gradient
            a = rng.normal(0.0, 1.0 / math.sqrt(shape[0]), shape)
        else:  # embeddings
            a = rng.normal(0.0, 0.5, shape)
        init[name] = a.astype(np.float32)
    src = np.zeros((BATCH, SEQ, 1), np.int64)
    pos = np.zeros((BATCH, SEQ, 1), np.int64)
    sent = np.zeros((BATCH, SEQ, 1), np.int64)
    mask = np.zeros((BATCH, SEQ, 1), np.float32)
    mask_pos, mask_label = [], []
    for i, n in enumerate(LENS):
        sep = n // 2  # [CLS] A [SEP] B [SEP]
        ids = rng.integers(5, VOCAB, n)
        ids[0], ids[sep], ids[n - 1] = 1, 2, 2
        for j in range(1, n - 1):
            if j != sep and rng.uniform() < 0.3:
                mask_pos.append(i * SEQ + j)
                mask_label.append(ids[j])
                ids[j] = 3 if rng.uniform() < 0.8 else rng.integers(5, VOCAB)
        src[i, :n, 0] = ids
        pos[i, :n, 0] = np.arange(n)
        sent[i, sep + 1:n, 0] = 1
        mask[i, :n, 0] = 1
    batch = {"src_ids": src, "pos_ids": pos, "sent_ids": sent, "input_mask": mask,
             "mask_label": np.array(mask_label, np.int64).reshape(-1, 1),
             "mask_pos": np.array(mask_pos, np.int64).reshape(-1, 1),
             "labels": np.array([[1], [0], [1], [0]], np.int64)}
    return init, batch


def layer_norm(x, scale, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * scale + bias


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def softmax_ce_mean(logits, y):
    """softmax_with_cross_entropy then mean: -log softmax(logits)[label]."""
    return -torch.log_softmax(logits, dim=-1).gather(1, y).mean()


def forward(P, b):
    d = HID // HEADS
    src, pos, sent = (torch.from_numpy(b[k][:, :, 0]) for k in ("src_ids", "pos_ids", "sent_ids"))
    m = torch.from_numpy(b["input_mask"]).to(P["word_embedding"].dtype)
    x = P["word_embedding"][src] + P["pos_embedding"][pos] + P["sent_embedding"][sent]
    x = layer_norm(x, P["pre_encoder_layer_norm_scale"], P["pre_encoder_layer_norm_bias"])
    bias = (m @ m.transpose(1, 2) - 1.0) * 10000.0  # [N, S, S], the same for every head
    bias = bias[:, None, :, :]
    for i in range(LAYERS):
        p = "encoder_layer_%d_" % i

        def fc(h, f):
            return h @ P[p + f + ".w_0"] + P[p + f + ".b_0"]

        def heads(h):
            return h.reshape(BATCH, SEQ, HEADS, d).permute(0, 2, 1, 3)

        q, k, v = (heads(fc(x, "multi_head_att_%s_fc" % f)) for f in ("query", "key", "value"))
        prod = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(d)) + bias
        ctx = torch.softmax(prod, dim=-1) @ v
        ctx = ctx.permute(0, 2, 1, 3).reshape(BATCH, SEQ, HID)
        att = fc(ctx, "multi_head_att_output_fc")
        att = layer_norm(att + x, P[p + "post_att_layer_norm_scale"], P[p + "post_att_layer_norm_bias"])
        ffn = fc(gelu(fc(att, "ffn_fc_0")), "ffn_fc_1")
        x = layer_norm(ffn + att, P[p + "post_ffn_layer_norm_scale"], P[p + "post_ffn_layer_norm_bias"])
    pooled = torch.tanh(x[:, 0, :] @ P["pooled_fc.w_0"] + P["pooled_fc.b_0"])
    mf = x.reshape(-1, HID)[torch.from_numpy(b["mask_pos"][:, 0])]
    mf = gelu(mf @ P["mask_lm_trans_fc.w_0"] + P["mask_lm_trans_fc.b_0"])
    mf = layer_norm(mf, P["mask_lm_trans_layer_norm_scale"], P["mask_lm_trans_layer_norm_bias"])
    logits = mf @ P["word_embedding"].T + P["mask_lm_out_fc.b_0"]
    mlm = softmax_ce_mean(logits, torch.from_numpy(b["mask_label"]))
    ns = pooled @ P["next_sent_fc.w_0"] + P["next_sent_fc.b_0"]
    nsp = softmax_ce_mean(ns, torch.from_numpy(b["labels"]))
    return mlm + nsp


def main():
    init, batch = make_data()
    cfg = [("steps", STEPS), ("lr", LR), ("vocab", VOCAB), ("hidden", HID), ("layers", LAYERS), ("heads", HEADS),
           ("intermediate", INTER), ("max_pos", MAXPOS)]
    refdump.write_network_dump(os.path.join(refdump.out_dir(), "bert.ref"), cfg, init, batch, forward, LR, STEPS,
                               spreads=True)


if __name__ == "__main__":
    main()
