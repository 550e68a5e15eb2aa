#!/usr/bin/python3
"""Generates the PyTorch reference dump of a 2-layer Transformer that tests/test_transformer_ref.c checks Fleet against.

usage: PYTHON tests/ref/make_transformer_reference.py [OUTDIR]     (default: tests/ref)

PYTHON: one with torch and numpy (tests/ref/README.md).  Writes transformer.ref (deterministic: seeded
numpy PCG64, one thread): the configuration, the initial value of every parameter (the two frozen
sinusoid tables included), one batch, the loss of 5 SGD steps on that batch (float32 and float64 runs),
the step-0 gradient of every trained parameter (float32 run) and the final parameters (float32 run);
the largest float32 / float64 gaps are printed (refdump.h reads at most 256 tensors).  File format:
tests/ref/refdump.py ("FLREF 1"), which holds the training loop too.

The network is written op by op as fl_model_transformer_build (src/models/transformer.c,
attention.c) builds the benchmark's model.py with its default configuration (separate source and
target embeddings, an fc output projection without bias): word embedding (row <s> = 0 reads as
zeros: padding_idx) * sqrt(d_model) + the sinusoid table row of the position; per encoder layer:
pre "n" (layer_norm), self-attention (q, k, v, output fc without bias, softmax(q k^T / sqrt(d_key) +
bias) v), post "da" (dropout 0, residual add), pre "n", fc relu -> fc, post "da"; the encoder's final
layer_norm; per decoder layer the same with causal self-attention and a cross-attention over the
encoder output between; the decoder's final layer_norm; logits = x @ trg_output_fc.w_0; the
label-smoothed (eps 0.1: (1 - eps) one_hot + eps / V) soft cross-entropy, weighted by lbl_weight and
divided by the sum of the weights.  The attention biases are fed as the benchmark's reader makes
them: -1e9 on padded source keys, -1e9 above the diagonal of the target self-attention.  Weights in
Paddle's fc layout [in, out], used as x @ W + b.  Layer norm: biased variance, epsilon 1e-5.
"""
import math
import os

import refdump  # one thread; before numpy and torch

import numpy as np
import torch

STEPS, LR = 5, 0.05
VOCAB, DM, LAYERS, HEADS, DK, INNER, MAXLEN, EPS_LS = 40, 16, 2, 2, 8, 32, 16, 0.1
BOS, EOS = 0, 1
SRC_LENS = [8, 6, 5]  # tokens of each source sentence, <e> included; the rest is padding (<e>)
TRG_LENS = [7, 5, 4]  # tokens of each target label, <e> included
B, S, T = 3, 8, 7
EPS = 1e-5
NEG = -1e9


def param_shapes():
    """(name, shape) in the order the dump lists them: the names fl_model_transformer_build gives."""
    s = [("src_word_emb_table", (VOCAB, DM)), ("src_pos_enc_table", (MAXLEN, DM))]

    def ln(p):
        return [(p + "_layer_norm_scale", (DM,)), (p + "_layer_norm_bias", (DM,))]

    def att(p):
        return [(p + "_%s_fc.w_0" % f, (DM, HEADS * DK) if f != "output" else (HEADS * DK, DM))
                for f in ("query", "key", "value", "output")]

    def ffn(p):
        return [(p + "_fc_0.w_0", (DM, INNER)), (p + "_fc_0.b_0", (INNER,)),
                (p + "_fc_1.w_0", (INNER, DM)), (p + "_fc_1.b_0", (DM,))]

    for i in range(LAYERS):
        p = "encoder_layer_%d" % i
        s += ln(p + "_pre_att") + att(p + "_multi_head_att") + ln(p + "_pre_ffn") + ffn(p + "_ffn")
    s += ln("encoder_post_encoder")
    s += [("trg_word_emb_table", (VOCAB, DM)), ("trg_pos_enc_table", (MAXLEN, DM))]
    for i in range(LAYERS):
        p = "decoder_layer_%d" % i
        s += ln(p + "_pre_slf_att") + att(p + "_slf_att") + ln(p + "_pre_cross_att") + att(p + "_cross_att")
        s += ln(p + "_pre_ffn") + ffn(p + "_ffn")
    s += ln("post_decoder") + [("trg_output_fc.w_0", (DM, VOCAB))]
    return s


def sinusoid(n, d):
    """Paddle's position_encoding_init as the sinusoid_position_encoding op computes it."""
    h = d // 2
    inc = math.log(1e4) / (h - 1)
    a = np.arange(n)[:, None] * np.exp(-np.arange(h) * inc)[None, :]
    t = np.zeros((n, d))
    t[:, :h], t[:, h:2 * h] = np.sin(a), np.cos(a)
    return t.astype(np.float32)


def make_data():
    rng = np.random.default_rng(20261130)
    init = {}
    for name, shape in param_shapes():
        if name.endswith("_pos_enc_table"):
            a = sinusoid(*shape)
        elif name.endswith("_scale"):
            a = 1.0 + rng.uniform(-0.2, 0.2, shape)
        elif name.endswith("_bias") or name.endswith(".b_0"):
            a = rng.uniform(-0.2, 0.2, shape)
        elif name.endswith(".w_0"):
            a = rng.normal(0.0, 1.0 / math.sqrt(shape[0]), shape)
        else:  # word embeddings: Normal(0, d^-0.5) as the builder's initializer
            a = rng.normal(0.0, DM ** -0.5, shape)
        init[name] = a.astype(np.float32)
    src = np.full((B, S, 1), EOS, np.int64)
    src_pos = np.zeros((B, S, 1), np.int64)
    trg = np.full((B, T, 1), EOS, np.int64)
    trg_pos = np.zeros((B, T, 1), np.int64)
    lbl = np.full((B, T, 1), EOS, np.int64)
    w = np.zeros((B, T, 1), np.float32)
    for i in range(B):
        n, m = SRC_LENS[i], TRG_LENS[i]
        src[i, :n - 1, 0] = rng.integers(3, VOCAB, n - 1)
        src_pos[i, :n, 0] = np.arange(n)
        words = rng.integers(3, VOCAB, m - 1)
        trg[i, 0, 0] = BOS
        trg[i, 1:m, 0] = words
        trg_pos[i, :m, 0] = np.arange(m)
        lbl[i, :m - 1, 0] = words
        w[i, :m, 0] = 1
    key_pad = np.zeros((B, S), np.float32)
    for i, n in enumerate(SRC_LENS):
        key_pad[i, n:] = NEG
    src_bias = np.broadcast_to(key_pad[:, None, None, :], (B, HEADS, S, S)).copy()
    causal = np.triu(np.full((T, T), NEG, np.float32), 1)
    trg_bias = np.broadcast_to(causal, (B, HEADS, T, T)).copy()
    cross_bias = np.broadcast_to(key_pad[:, None, None, :], (B, HEADS, T, S)).copy()
    batch = {"src_word": src, "src_pos": src_pos, "src_slf_attn_bias": src_bias, "trg_word": trg,
             "trg_pos": trg_pos, "trg_slf_attn_bias": trg_bias, "trg_src_attn_bias": cross_bias,
             "lbl_word": lbl.reshape(-1, 1), "lbl_weight": w.reshape(-1, 1)}
    return init, batch


def layer_norm(x, P, p):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS) * P[p + "_layer_norm_scale"] + P[p + "_layer_norm_bias"]


def attention(P, p, q_in, kv_in, bias):
    def heads(h):
        return h.reshape(h.shape[0], h.shape[1], HEADS, DK).permute(0, 2, 1, 3)

    q = heads(q_in @ P[p + "_query_fc.w_0"])
    k = heads(kv_in @ P[p + "_key_fc.w_0"])
    v = heads(kv_in @ P[p + "_value_fc.w_0"])
    prod = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(DK)) + bias
    ctx = (torch.softmax(prod, dim=-1) @ v).permute(0, 2, 1, 3)
    return ctx.reshape(ctx.shape[0], ctx.shape[1], HEADS * DK) @ P[p + "_output_fc.w_0"]


def ffn(P, p, x):
    h = torch.relu(x @ P[p + "_fc_0.w_0"] + P[p + "_fc_0.b_0"])
    return h @ P[p + "_fc_1.w_0"] + P[p + "_fc_1.b_0"]


def embed(P, table, pos_table, word, pos):
    w = P[table][word] * (word != BOS).unsqueeze(-1).to(P[table].dtype)  # padding_idx <s>: zeros
    return w * math.sqrt(DM) + P[pos_table][pos]


def forward(P, b):
    dt = P["src_word_emb_table"].dtype
    f = {k: torch.from_numpy(v) for k, v in b.items()}
    x = embed(P, "src_word_emb_table", "src_pos_enc_table", f["src_word"][:, :, 0], f["src_pos"][:, :, 0])
    src_bias = f["src_slf_attn_bias"].to(dt)
    for i in range(LAYERS):
        p = "encoder_layer_%d" % i
        h = layer_norm(x, P, p + "_pre_att")
        x = x + attention(P, p + "_multi_head_att", h, h, src_bias)
        x = x + ffn(P, p + "_ffn", layer_norm(x, P, p + "_pre_ffn"))
    enc = layer_norm(x, P, "encoder_post_encoder")
    y = embed(P, "trg_word_emb_table", "trg_pos_enc_table", f["trg_word"][:, :, 0], f["trg_pos"][:, :, 0])
    slf, cross = f["trg_slf_attn_bias"].to(dt), f["trg_src_attn_bias"].to(dt)
    for i in range(LAYERS):
        p = "decoder_layer_%d" % i
        h = layer_norm(y, P, p + "_pre_slf_att")
        y = y + attention(P, p + "_slf_att", h, h, slf)
        y = y + attention(P, p + "_cross_att", layer_norm(y, P, p + "_pre_cross_att"), enc, cross)
        y = y + ffn(P, p + "_ffn", layer_norm(y, P, p + "_pre_ffn"))
    y = layer_norm(y, P, "post_decoder").reshape(-1, DM)
    logits = y @ P["trg_output_fc.w_0"]
    label = torch.nn.functional.one_hot(f["lbl_word"][:, 0], VOCAB).to(dt) * (1 - EPS_LS) + EPS_LS / VOCAB
    cost = -(label * torch.log_softmax(logits, dim=-1)).sum(dim=-1, keepdim=True)
    w = f["lbl_weight"].to(dt)
    return (cost * w).sum() / w.sum()


def main():
    init, batch = make_data()
    cfg = [("steps", STEPS), ("lr", LR), ("vocab", VOCAB), ("d_model", DM), ("layers", LAYERS), ("heads", HEADS),
           ("d_key", DK), ("d_inner", INNER), ("max_length", MAXLEN), ("label_smooth", EPS_LS)]
    frozen = [n for n in init if n.endswith("_pos_enc_table")]
    refdump.write_network_dump(os.path.join(refdump.out_dir(), "transformer.ref"), cfg, init, batch, forward, LR,
                               STEPS, frozen=frozen)


if __name__ == "__main__":
    main()
