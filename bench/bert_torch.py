#!/usr/bin/env python3
"""bert_torch.py - the PyTorch side of bench/bert.sh: the BERT of bench_bert.c
(fl_model_bert_build, Paddle's BERT of the Fleet benchmark) written op by op in PyTorch
float32: word + position + sentence embeddings, layer norm, dropout; post-norm encoder layers
(q, k, v and output projections with biases, softmax(q k^T / sqrt(d) + (mask mask^T - 1) *
1e4), attention dropout, residual + dropout + layer norm; fc gelu (erf) -> fc, no dropout
inside the feed-forward); pooled fc tanh of [CLS]; masked LM over the gathered positions
(fc gelu, layer norm, the tied word embedding, a bias); next-sentence fc 2; mean cross-
entropies summed; Adam (decoupled weight decay 0.01, not on layer norms and biases).  The
same synthetic batch shape: every example seq tokens, `mask` predicted positions each.
--recompute 1: torch.utils.checkpoint around each encoder layer.  --amp 1: the forward under
torch.autocast("cpu", bfloat16), as context.  Prints examples/s and ru_maxrss (MiB) after
building the model and after the timed steps."""
import argparse
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt

ap = argparse.ArgumentParser()
for k, v in dict(batch=8, seq=128, mask=20, steps=2, warmup=1, hidden=768, layers=12, heads=12, ffn=3072,
                 vocab=21128, threads=1, recompute=0, amp=0).items():
    ap.add_argument("--" + k, type=int, default=v)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(1)
P = 0.1  # hidden and attention dropout


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def linear(i, o):
    lin = nn.Linear(i, o)
    nn.init.trunc_normal_(lin.weight, 0, 0.02, -0.04, 0.04)
    nn.init.zeros_(lin.bias)
    return lin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        h = a.hidden
        self.q, self.k, self.v, self.o = linear(h, h), linear(h, h), linear(h, h), linear(h, h)
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-5), nn.LayerNorm(h, eps=1e-5)
        self.f1, self.f2 = linear(h, a.ffn), linear(a.ffn, h)

    def forward(self, x, bias):
        n, s, h = x.shape
        nh, d = a.heads, h // a.heads

        def heads(t):
            return t.view(n, s, nh, d).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        w = F.dropout(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d)) + bias, -1), P,
                      self.training)
        ctx = torch.matmul(w, v).transpose(1, 2).reshape(n, s, h)
        x = self.ln1(x + F.dropout(self.o(ctx), P, self.training))
        return self.ln2(x + F.dropout(self.f2(F.gelu(self.f1(x))), P, self.training))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        h = a.hidden
        self.word, self.pos, self.sent = nn.Embedding(a.vocab, h), nn.Embedding(512, h), nn.Embedding(2, h)
        for e in (self.word, self.pos, self.sent):
            nn.init.trunc_normal_(e.weight, 0, 0.02, -0.04, 0.04)
        self.ln = nn.LayerNorm(h, eps=1e-5)
        self.layers = nn.ModuleList(Layer() for _ in range(a.layers))
        self.pooled, self.trans, self.nsp = linear(h, h), linear(h, h), linear(h, 2)
        self.trans_ln = nn.LayerNorm(h, eps=1e-5)
        nn.init.ones_(self.trans_ln.bias)
        self.out_b = nn.Parameter(torch.zeros(a.vocab))

    def forward(self, src, pos, sent, mask, mask_pos, mask_label, labels):
        x = F.dropout(self.ln(self.word(src) + self.pos(pos) + self.sent(sent)), P, self.training)
        bias = ((mask @ mask.transpose(1, 2) - 1) * 1e4)[:, None]  # [N, 1, S, S], over the heads
        for layer in self.layers:
            x = ckpt.checkpoint(layer, x, bias, use_reentrant=False) if a.recompute else layer(x, bias)
        pooled = torch.tanh(self.pooled(x[:, 0]))
        mf = x.reshape(-1, a.hidden)[mask_pos]
        mf = self.trans_ln(F.gelu(self.trans(mf)))
        logits = mf @ self.word.weight.t() + self.out_b
        return F.cross_entropy(logits, mask_label) + F.cross_entropy(self.nsp(pooled), labels)


m = Bert()
decay = [p for n, p in m.named_parameters() if p.dim() > 1 and "ln" not in n]
rest = [p for n, p in m.named_parameters() if not (p.dim() > 1 and "ln" not in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=1e-4,
                        eps=1e-6)
rss_model = rss_mib()
B, S = a.batch, a.seq
src = torch.randint(4, a.vocab, (B, S))
src[:, 0] = 1
pos = torch.arange(S).repeat(B, 1)
sent = (torch.arange(S) >= S // 2).long().repeat(B, 1)
mask = torch.ones(B, S, 1)
mask_pos = torch.tensor([b * S + 1 + j * (S - 1) // a.mask for b in range(B) for j in range(a.mask)])
mask_label = torch.randint(4, a.vocab, (B * a.mask,))
labels = torch.arange(B) % 2


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.amp)):
        loss = m(src, pos, sent, mask, mask_pos, mask_label, labels)
    loss.backward()
    opt.step()
    return loss.item()


for _ in range(a.warmup):
    step()
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(a.steps):
    loss = step()
dt, dc = time.perf_counter() - t0, time.process_time() - c0
print("torch train: %.3f examples/s (%d x %d, %d masked each, %d steps in %.2f s, loss %.3f; amp %d, recompute %d) "
      "cpu_s %.2f rss_startup_mib %.0f rss_peak_mib %.0f" % (B * a.steps / dt, B, S, a.mask, a.steps, dt, loss, a.amp,
                                                             a.recompute, dc, rss_model, rss_mib()))
