#!/usr/bin/env python3
"""transformer_torch.py - the PyTorch side of bench/transformer.sh: the model of
bench_transformer.c (Paddle's benchmark Transformer: pre-norm layers, attention without
biases, embeddings x sqrt(d_model) plus sinusoid positions, output projection without bias,
label smoothing 0.1, Adam(0.9, 0.997, 1e-9)) in float32 on the same synthetic batch shape;
prints training tokens/s and beam-search sentences/s twice, as bench_transformer does: with
a key / value cache (nn.Transformer has no incremental decoding, so the loop below runs its
layers' own weights one position at a time: self-attention keys / values cached per layer
and reordered with the beams, cross-attention keys / values of the memory computed once)
and with the decoder re-run over the whole prefix each step; the two must give the same
words (printed).  --decode 0 leaves the beam search out.  cpu_s: the process's CPU seconds
over the timed steps."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
for k, v in dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=8000, tokens=2048, seq=32, steps=3, beam=4,
                 decode=8, out_len=32, threads=1).items():
    ap.add_argument("--" + k, type=int, default=v)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)


def sinusoid(n, d):
    h = d // 2
    inv = torch.exp(-torch.arange(h, dtype=torch.float64) * math.log(1e4) / (h - 1))
    x = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([torch.sin(x), torch.cos(x)], 1).float()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        d = a.d_model
        self.src_emb = nn.Embedding(a.vocab, d)
        self.trg_emb = nn.Embedding(a.vocab, d)
        nn.init.normal_(self.src_emb.weight, 0, d ** -0.5)
        nn.init.normal_(self.trg_emb.weight, 0, d ** -0.5)
        self.register_buffer("pos", sinusoid(a.seq + a.out_len + 2, d))
        self.t = nn.Transformer(d, a.heads, a.layers, a.layers, a.ffn, dropout=0.1, batch_first=True, norm_first=True,
                                bias=False)
        self.out = nn.Linear(d, a.vocab, bias=False)

    def embed(self, emb, ids):
        return F.dropout(emb(ids) * math.sqrt(a.d_model) + self.pos[: ids.shape[1]], 0.1, self.training)

    def encode(self, src):
        return self.t.encoder(self.embed(self.src_emb, src))

    def decode(self, trg, mem):
        mask = torch.triu(torch.full((trg.shape[1], trg.shape[1]), float("-inf")), 1)
        return self.out(self.t.decoder(self.embed(self.trg_emb, trg), mem, tgt_mask=mask))


m = Model()
opt = torch.optim.Adam(m.parameters(), lr=1e-4, betas=(0.9, 0.997), eps=1e-9)
B = a.tokens // a.seq
src = torch.randint(3, a.vocab, (B, a.seq))
trg = torch.randint(3, a.vocab, (B, a.seq))
lbl = torch.randint(3, a.vocab, (B, a.seq))


def step():
    opt.zero_grad()
    logits = m.decode(trg, m.encode(src))
    loss = F.cross_entropy(logits.reshape(-1, a.vocab), lbl.reshape(-1), label_smoothing=0.1)
    loss.backward()
    opt.step()
    return loss.item()


step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(a.steps):
    loss = step()
dt, dc = time.perf_counter() - t0, time.process_time() - c0
print("torch train: %.1f tokens/s (%d x %d target tokens per batch, %d steps in %.2f s, loss %.3f) cpu_s %.2f"
      % (B * a.seq * a.steps / dt, B, a.seq, a.steps, dt, loss, dc))
if not a.decode:
    raise SystemExit(0)

m.eval()
K, n = a.beam, a.decode
H, dh = a.heads, a.d_model // a.heads


def heads(x):  # [R, L, d] -> [R, H, L, dh]
    return x.view(x.shape[0], x.shape[1], H, dh).transpose(1, 2)


def merge(x):  # [R, H, L, dh] -> [R, L, d]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], H * dh)


class Cached:
    """One position per step through nn.TransformerDecoder's layers (norm_first, relu,
    no biases, eval): the keys / values of earlier positions kept per layer."""

    def __init__(self, mem):
        d = a.d_model
        self.layers = m.t.decoder.layers
        self.cross = [(heads(F.linear(mem, L.multihead_attn.in_proj_weight[d:2 * d])),
                       heads(F.linear(mem, L.multihead_attn.in_proj_weight[2 * d:]))) for L in self.layers]
        self.kv = [None] * len(self.layers)

    def reorder(self, rows):
        self.kv = [(k[rows], v[rows]) for k, v in self.kv]

    def step(self, last, i):  # last [R] word ids at position i -> logits [R, V]
        x = m.trg_emb(last)[:, None] * math.sqrt(a.d_model) + m.pos[i]
        for li, L in enumerate(self.layers):
            q, k, v = map(heads, F.linear(L.norm1(x), L.self_attn.in_proj_weight).chunk(3, -1))
            if self.kv[li] is not None:
                k, v = torch.cat([self.kv[li][0], k], 2), torch.cat([self.kv[li][1], v], 2)
            self.kv[li] = (k, v)
            x = x + L.self_attn.out_proj(merge(F.scaled_dot_product_attention(q, k, v)))
            q = heads(F.linear(L.norm2(x), L.multihead_attn.in_proj_weight[:a.d_model]))
            ck, cv = self.cross[li]
            x = x + L.multihead_attn.out_proj(merge(F.scaled_dot_product_attention(q, ck, cv)))
            x = x + L.linear2(F.relu(L.linear1(L.norm3(x))))
        return m.out(m.t.decoder.norm(x))[:, -1]


def beam(cached):
    mem = m.encode(src[:n]).repeat_interleave(K, 0)
    c = Cached(mem) if cached else None
    seq = torch.zeros(n * K, 1, dtype=torch.long)
    score = torch.full((n, K), float("-inf"))
    score[:, 0] = 0
    for i in range(a.out_len):
        logits = c.step(seq[:, -1], i) if cached else m.decode(seq, mem)[:, -1]
        logp = F.log_softmax(logits, -1).view(n, K, -1)
        cand = (score[:, :, None] + logp).view(n, -1) / ((5.0 + i + 1) / 6.0) ** 0.6
        top, idx = cand.topk(K, 1)
        beam_idx = idx // a.vocab
        score = top * ((5.0 + i + 1) / 6.0) ** 0.6
        rows = (torch.arange(n)[:, None] * K + beam_idx).view(-1)
        seq = torch.cat([seq[rows], (idx % a.vocab).view(-1, 1)], 1)
        if cached:
            c.reorder(rows)
    return seq


secs, out = [], []
with torch.no_grad():
    for cached in (True, False):
        t0 = time.perf_counter()
        out.append(beam(cached))
        secs.append(time.perf_counter() - t0)
for name, dt in zip(("kv cache", "full prefix"), secs):
    print("torch beam search, %s: %.2f sentences/s (beam %d, %d sentences of %d source tokens, %d steps, %.2f s)"
          % (name, n / dt, K, n, a.seq, a.out_len, dt))
print("torch kv cache / full prefix: %.2fx, the same words: %s"
      % (secs[1] / secs[0], "yes" if torch.equal(out[0], out[1]) else "NO"))
