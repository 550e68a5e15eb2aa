"""PyTorch side of bench/zoo_text.sh: simnet-bow and word2vec as src/models/simnet.c and
src/models/word2vec.c build them, trained the way examples/simnet/train.c and
examples/word2vec/train.c train them, on the same files.

usage: /usr/bin/python3 bench/zoo_text_torch.py simnet --data DIR [--epochs 3] [--batch 64]
           [--lr 0.1] [--emb 32] [--hid 32] [--margin 0.1]
       /usr/bin/python3 bench/zoo_text_torch.py word2vec --data DIR --pairs FILE [--epochs 2]
           [--batch 64] [--lr 1.0] [--emb 16]

simnet: DIR from `fleet-datagen simnet` (MultiSlot lines: query, positive title, negative
title ids).  One nn.Embedding (sparse gradient, init U(-0.1, 0.1)) sum-pooled per text
(nn.EmbeddingBag mode "sum"), softsign, a query Linear and a title Linear shared by both
titles (Xavier-uniform weights, zero bias), cosine similarity, loss mean(relu(margin - cos_pos
+ cos_neg)); Adagrad (eps 1e-6, Paddle's form: lr * g / (sqrt(G) + eps)) on every parameter.
Batches in file order (train/part-* sorted), as QueueDataset with one thread reads them.
Metric: order rate on DIR/test (ties 1/2).

word2vec: FILE is the training pairs the C reader wrote (examples/word2vec/train
--keep_samples 1), so both sides train on the same pairs in the same order.  emb U(-0.5/D,
0.5/D), emb_w and emb_b zeros (all sparse), true logit <emb, emb_w> + emb_b, negative logits
by bmm, loss mean over the batch of the summed sigmoid cross-entropies; SGD.  Metrics: the
nearest-neighbour cluster accuracy and 3CosAdd analogy accuracy of DIR/clusters.txt and
DIR/analogies.txt, as fl_model_word2vec_eval computes them.

One thread (torch.set_num_threads(1), OMP/OpenBLAS 1), set before torch is imported.  Prints
'R<TAB>key<TAB>value' lines: examples_per_s (training loop only, data parsed before),
and the metric(s).
"""
import os
import sys

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import argparse  # noqa: E402
import glob  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


def read_multislot(path, nslots):
    rows = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            v = line.split()
            k, slots = 0, []
            for s in range(nslots):
                if k >= len(v):
                    sys.exit(f"{path}:{ln}: slot #{s + 1} missing")
                n = int(v[k])
                slots.append([int(x) for x in v[k + 1:k + 1 + n]])
                k += 1 + n
            rows.append(slots)
    return rows


def bag(batch, i):
    ids, offs = [], []
    for r in batch:
        offs.append(len(ids))
        ids.extend(r[i])
    return torch.tensor(ids, dtype=torch.long), torch.tensor(offs, dtype=torch.long)


class Simnet(torch.nn.Module):
    def __init__(self, dict_dim, emb, hid):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(dict_dim, emb, mode="sum", sparse=True)
        torch.nn.init.uniform_(self.emb.weight, -0.1, 0.1)
        self.q_fc = torch.nn.Linear(emb, hid)
        self.fc = torch.nn.Linear(emb, hid)
        for l in (self.q_fc, self.fc):
            torch.nn.init.xavier_uniform_(l.weight)
            torch.nn.init.zeros_(l.bias)

    def forward(self, q, p, n):
        tq = self.q_fc(F.softsign(self.emb(*q)))
        tp = self.fc(F.softsign(self.emb(*p)))
        tn = self.fc(F.softsign(self.emb(*n)))
        return F.cosine_similarity(tq, tp, eps=1e-12), F.cosine_similarity(tq, tn, eps=1e-12)


def simnet(a):
    train = [r for f in sorted(glob.glob(os.path.join(a.data, "train", "part-*"))) for r in read_multislot(f, 3)]
    test = [r for f in sorted(glob.glob(os.path.join(a.data, "test", "part-*"))) for r in read_multislot(f, 3)]
    dict_dim = 1 + max(max(max(s) for s in r) for r in train + test)
    torch.manual_seed(a.seed)
    m = Simnet(dict_dim, a.emb, a.hid)
    opt = torch.optim.Adagrad(m.parameters(), lr=a.lr, eps=1e-6)
    batches = [train[i:i + a.batch] for i in range(0, len(train), a.batch)]
    feeds = [(bag(b, 0), bag(b, 1), bag(b, 2)) for b in batches]
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for q, p, n in feeds:
            cp, cn = m(q, p, n)
            loss = F.relu(a.margin - cp + cn).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dt = time.perf_counter() - t0
    with torch.no_grad():
        score = 0.0
        for i in range(0, len(test), 256):
            b = test[i:i + 256]
            cp, cn = m(bag(b, 0), bag(b, 1), bag(b, 2))
            score += float((cp > cn).sum()) + 0.5 * float((cp == cn).sum())
    print(f"R\tsimnet_examples_per_s\t{a.epochs * len(train) / dt:.1f}")
    print(f"R\tsimnet_order_rate\t{score / len(test):.4f}")


def word_ids(path, vocab):
    out = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            try:
                out.append([vocab[w] for w in line.split()])
            except KeyError as e:
                sys.exit(f"{path}:{ln}: word {e} is not in the dictionary")
    return out


def word2vec(a):
    vocab = {}
    with open(os.path.join(a.data, "dict.txt")) as f:
        for line in f:
            vocab[line.split()[0]] = len(vocab)
    V, D = len(vocab), a.emb
    pairs = np.array([[int(x) for x in line.split()] for line in open(a.pairs)], dtype=np.int64)
    K = int(pairs[0, 4])
    inw, truew, negw = pairs[:, 1], pairs[:, 3], pairs[:, 5:5 + K]
    torch.manual_seed(a.seed)
    emb = torch.nn.Embedding(V, D, sparse=True)
    torch.nn.init.uniform_(emb.weight, -0.5 / D, 0.5 / D)
    emb_w = torch.nn.Embedding(V, D, sparse=True)
    emb_b = torch.nn.Embedding(V, 1, sparse=True)
    torch.nn.init.zeros_(emb_w.weight)
    torch.nn.init.zeros_(emb_b.weight)
    opt = torch.optim.SGD(list(emb.parameters()) + list(emb_w.parameters()) + list(emb_b.parameters()), lr=a.lr)
    n = len(pairs)
    feeds = [(torch.from_numpy(inw[i:i + a.batch]), torch.from_numpy(truew[i:i + a.batch]),
              torch.from_numpy(negw[i:i + a.batch])) for i in range(0, n, a.batch)]
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for i, t, ng in feeds:
            e = emb(i)
            tl = (e * emb_w(t)).sum(1, keepdim=True) + emb_b(t)
            nl = torch.bmm(e.unsqueeze(1), emb_w(ng).transpose(1, 2)).squeeze(1) + emb_b(ng).squeeze(-1)
            loss = (F.binary_cross_entropy_with_logits(tl, torch.ones_like(tl), reduction="none").sum(1)
                    + F.binary_cross_entropy_with_logits(nl, torch.zeros_like(nl), reduction="none").sum(1)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    dt = time.perf_counter() - t0
    E = F.normalize(emb.weight.detach(), dim=1)
    clusters = word_ids(os.path.join(a.data, "clusters.txt"), vocab)
    members = [w for c in clusters for w in c]
    cl_of = {w: k for k, c in enumerate(clusters) for w in c}
    M = E[members]
    S = M @ M.T
    S.fill_diagonal_(-float("inf"))
    nn_ = S.argmax(1)
    hits = sum(cl_of[members[i]] == cl_of[members[int(j)]] for i, j in enumerate(nn_))
    an = torch.tensor(word_ids(os.path.join(a.data, "analogies.txt"), vocab))
    q = E[an[:, 1]] - E[an[:, 0]] + E[an[:, 2]]
    sc = q @ E.T
    for k in range(3):
        sc.scatter_(1, an[:, k:k + 1], -float("inf"))
    ahits = int((sc.argmax(1) == an[:, 3]).sum())
    print(f"R\tword2vec_examples_per_s\t{a.epochs * n / dt:.1f}")
    print(f"R\tword2vec_cluster_acc\t{hits / len(members):.4f}")
    print(f"R\tword2vec_analogy_acc\t{ahits / len(an):.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["simnet", "word2vec"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--pairs")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--emb", type=int)
    ap.add_argument("--hid", type=int, default=32)
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.model == "simnet":
        a.epochs, a.lr, a.emb = a.epochs or 3, a.lr or 0.1, a.emb or 32
        simnet(a)
    else:
        if not a.pairs:
            sys.exit("word2vec needs --pairs FILE (examples/word2vec/train --keep_samples 1 writes it)")
        a.epochs, a.lr, a.emb = a.epochs or 2, a.lr or 1.0, a.emb or 16
        word2vec(a)


if __name__ == "__main__":
    main()
