"""PyTorch side of bench/bench_zoo.sh: DeepFM, Wide&Deep and ResNet as fleet-lightning trains them
(src/models/deepfm.c, src/models/resnet.c), on the same data, the same way.

usage: /usr/bin/python3 bench/zoo_torch.py --model deepfm|wide_deep --data DIR [--dim 10007] [--emb 8]
           [--hidden 64,64] [--batch 256] [--epochs 1] [--lr 0.003]
       /usr/bin/python3 bench/zoo_torch.py --model resnet --data FMNIST_DIR [--depth 20] [--width 8]
           [--batch 64] [--epochs 1] [--max_steps 0] [--lr 0.05] [--momentum 0.9]

CTR models (DIR/train, DIR/test of fleet-datagen criteo, parsed and hashed into --dim rows as
Fleet's reader does, through bench/ctr_data.py's parser): tables "SparseFeatFactors" [dim, emb]
and "FirstOrderWeights" [dim, 1] (truncated normal 0.1, sparse gradients), one id per slot and
row; first order = sum of the 26 weights + Linear(13, 1); DeepFM adds the FM term
0.5 * sum((sum v)^2 - sum v^2); the DNN is Linear+ReLU over concat(26 embeddings, dense) then
Linear 1 (weights Normal(0, 1/sqrt(fan_in)), bias 0).  Loss: mean BCE-with-logits (= Fleet's
softmax cross-entropy of [0, z]).  Adam (dense) + SparseAdam (tables), lr --lr.  Metric: AUC of
sigmoid(z) on DIR/test.  Rows are shuffled each epoch.

ResNet (Fashion-MNIST IDX, gzipped or not): the CIFAR-style ResNet-depth (3x3 stem, 3 stages of
(depth-2)/6 basic blocks, width x 1, 2, 4 filters, 1x1 conv + BN projections, global average pool,
Linear 10), convolutions without bias (Kaiming normal, fan_in, as Paddle's Normal(0, sqrt(2/fan_in))),
BatchNorm momentum 0.1 (Paddle's 0.9), Momentum SGD, cosine decay per epoch (Paddle's
cosine_decay) or, with --decay_steps N, lr * decay_rate^floor(step / N) (Paddle's staircase
exponential_decay), pixels / 255.  Metric: top-1 accuracy on t10k.

Threads: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 (set before torch is imported), as Fleet's
--thread 1.  Prints 'R<TAB>key<TAB>value<TAB>unit' lines: examples_per_s (training, timed from the
first to the last step) and the metric.
"""
import os
import sys

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import gzip  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def auc(score, label):
    """ROC AUC by ranks (ties averaged)."""
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1
        i = j + 1
    r = np.empty_like(ranks)
    r[order] = ranks
    pos = label == 1
    npos, nneg = pos.sum(), (~pos).sum()
    return (r[pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg)


class Ctr(nn.Module):
    def __init__(self, dim, emb, hidden, fm):
        super().__init__()
        self.v = nn.Embedding(dim, emb, sparse=True)
        self.w = nn.Embedding(dim, 1, sparse=True)
        for e in (self.v, self.w):
            nn.init.trunc_normal_(e.weight, 0.0, 0.1, -0.2, 0.2)
        self.dense_w = nn.Linear(13, 1)
        layers, width = [], 26 * emb + 13
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.dnn = nn.Sequential(*layers)
        for m in [self.dense_w] + [m for m in self.dnn if isinstance(m, nn.Linear)]:
            nn.init.normal_(m.weight, 0.0, 1.0 / math.sqrt(m.in_features))
            nn.init.zeros_(m.bias)
        self.fm = fm

    def forward(self, dense, ids):
        v = self.v(ids)  # [N, 26, emb]
        z = self.w(ids).sum(dim=(1, 2)) + self.dense_w(dense).squeeze(1)
        if self.fm:
            s = v.sum(1)
            z = z + 0.5 * (s * s - (v * v).sum(1)).sum(1)
        return z + self.dnn(torch.cat([v.flatten(1), dense], 1)).squeeze(1)


def run_ctr(a):
    import ctr_data
    ctr_data.DIM = a.dim
    tr = ctr_data.parse_files(ctr_data.files_of(a.data, "train"))
    te = ctr_data.parse_files(ctr_data.files_of(a.data, "test"))
    torch.manual_seed(a.seed)
    net = Ctr(a.dim, a.emb, [int(h) for h in a.hidden.split(",") if h], a.model == "deepfm")
    sparse = [net.v.weight, net.w.weight]
    dense_p = [p for p in net.parameters() if all(p is not s for s in sparse)]
    opts = [torch.optim.Adam(dense_p, lr=a.lr), torch.optim.SparseAdam(sparse, lr=a.lr)]
    d, i, lab = (torch.from_numpy(x) for x in tr)
    n, steps, t0 = len(lab), 0, time.monotonic()
    rng = np.random.default_rng(a.seed)
    for ep in range(a.epochs):
        perm = torch.from_numpy(rng.permutation(n))
        for s in range(0, n, a.batch):
            b = perm[s:s + a.batch]
            loss = F.binary_cross_entropy_with_logits(net(d[b], i[b]), lab[b].float())
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
            steps += 1
    secs = time.monotonic() - t0
    with torch.no_grad():
        score = torch.sigmoid(net(torch.from_numpy(te[0]), torch.from_numpy(te[1]))).numpy()
    print("R\t%s_torch_examples_per_s\t%.1f\texamples/s" % (a.model, n * a.epochs / secs))
    print("R\t%s_torch_test_auc\t%.4f\tauc" % (a.model, auc(score, te[2])))


def read_idx(path):
    for p in (path + ".gz", path):
        if os.path.exists(p):
            with (gzip.open if p.endswith(".gz") else open)(p, "rb") as f:
                b = f.read()
            nd = b[3]
            dims = [int.from_bytes(b[4 + 4 * k:8 + 4 * k], "big") for k in range(nd)]
            return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)
    sys.exit("zoo_torch.py: %s[.gz] not found" % path)


def conv_bn(cin, cout, k, stride):
    c = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, bias=False)
    nn.init.kaiming_normal_(c.weight, mode="fan_in", nonlinearity="relu")
    return nn.Sequential(c, nn.BatchNorm2d(cout, momentum=0.1, eps=1e-5))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a, self.b = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1)
        self.sc = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.b(F.relu(self.a(x)))
        return F.relu(y + (self.sc(x) if self.sc is not None else x))


class ResNet(nn.Module):
    def __init__(self, depth, width):
        super().__init__()
        n = (depth - 2) // 6
        self.stem = conv_bn(1, width, 3, 1)
        blocks, cin = [], width
        for s in range(3):
            for b in range(n):
                blocks.append(Block(cin, width << s, 2 if s > 0 and b == 0 else 1))
                cin = width << s
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, 10)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def run_resnet(a):
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).astype(np.float32) / 255.0)
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    tx = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0)
    ty = read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    x, tx = x.unsqueeze(1), tx.unsqueeze(1)
    torch.manual_seed(a.seed)
    net = ResNet(a.depth, a.width)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    steps = (len(y) + a.batch - 1) // a.batch
    if a.max_steps:
        steps = min(steps, a.max_steps)
    rng = np.random.default_rng(a.seed)
    seen, t0 = 0, time.monotonic()
    net.train()
    for ep in range(a.epochs):
        for g in opt.param_groups:  # Paddle's cosine_decay: constant within an epoch
            g["lr"] = a.lr * 0.5 * (math.cos(ep * math.pi / a.epochs) + 1)
        perm = torch.from_numpy(rng.permutation(len(y)))
        for s in range(steps):
            if a.decay_steps:  # Paddle's exponential_decay, staircase
                for g in opt.param_groups:
                    g["lr"] = a.lr * a.decay_rate ** ((ep * steps + s) // a.decay_steps)
            b = perm[s * a.batch:(s + 1) * a.batch]
            loss = F.cross_entropy(net(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(b)
    secs = time.monotonic() - t0
    net.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, len(ty), 500):
            correct += int((net(tx[s:s + 500]).argmax(1).numpy() == ty[s:s + 500]).sum())
    print("R\tresnet_torch_examples_per_s\t%.1f\texamples/s" % (seen / secs))
    print("R\tresnet_torch_test_accuracy\t%.4f\taccuracy" % (correct / len(ty)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=["deepfm", "wide_deep", "resnet"])
    p.add_argument("--data", required=True)
    p.add_argument("--dim", type=int, default=10007)
    p.add_argument("--emb", type=int, default=8)
    p.add_argument("--hidden", default="64,64")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--max_steps", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--decay_steps", type=int, default=0, help="staircase exponential decay instead of cosine")
    p.add_argument("--decay_rate", type=float, default=0.5)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.model == "resnet":
        a.batch, a.lr = a.batch or 64, a.lr or 0.05
        run_resnet(a)
    else:
        a.batch, a.lr = a.batch or 256, a.lr or 0.003
        run_ctr(a)


if __name__ == "__main__":
    main()
