#!/usr/bin/python3
"""Generates tests/ref/resnet50.ref, the PyTorch reference that tests/test_resnet_ref.c checks
fl_model_resnet50 against.

usage: PYTHON tests/ref/make_resnet50_reference.py [--v1] [OUTDIR]     (default: tests/ref)

PYTHON: one with torch, torchvision and numpy (PEER_TORCH_VENV=/work/torch-venv, tests/ref/README.md).

The network is torchvision's resnet50 as it is: ResNet v1.5, the stride of each downsampling
bottleneck on its 3x3 convolution, as PaddleCV's ResNet50 and fl_model_resnet50 by default.  --v1
moves that stride to the first 1x1 (ResNet v1, fl_model_resnet50 with stride_in_1x1) and writes
resnet50_v1.ref instead (not committed; for comparing by hand).  The rest is the same in the two
networks: 7x7/2 stem + batch_norm relu + max pool 3x3/2 pad 1, bottlenecks 3,4,6,3 with a 1x1 conv +
batch_norm projection on the first block of each stage, global average pool, fc 1000.

No weights are stored (25.6 M of them): both sides generate them from the same counter-based hash
(lowbias32), element by element, so the C test makes bit-identical ones:
    h(seed, i) = mix(i ^ mix(seed)) (uint32), u = ((h >> 8) + 0.5) * 2^-23 - 1 in (-1, 1) (exact
    in double), value = float32(center + bound * u) (double arithmetic, one rounding)
with seed = 1 + the parameter's position in the network's creation order (torchvision's
parameters() order is fl_model_resnet_build's order) and i its element index in Paddle's layout
(convolutions OIHW in both; fc [in, out] in Paddle, transposed for nn.Linear):
    conv weight:        center 0, bound sqrt(6 / fan_in)     (He uniform)
    batch_norm scale:   center 1, bound 0.1;  batch_norm bias: center 0, bound 0.1
    fc weight and bias: center 0, bound 1 / sqrt(2048)
The batch: images [2, 3, 224, 224] from seed 1000 (bound 1), labels [7, 444].  Training: 3 steps of
Momentum (lr 1e-4, momentum 0.9; torch.optim.SGD with momentum is Paddle's Momentum) on that same
batch; batch_norm in training mode (batch statistics, eps 1e-5).  Loss: softmax, -log p[label],
mean, as Paddle's graph computes it.

Stored ("FLREF 1", see refdump.py), per parameter p in creation order (P = 161):
    param.numel [P], param.dims [P, 4] (Paddle layout, padded with 1), param.center/bound [P]
    grad0.{sum,sumsq} [P] (f64), grad0.idx [P, K] (i64), grad0.val [P, K] (f32): the step-0
        gradient's sum, sum of squares and K sampled elements, from the float32 run
    grad0_f64.{sum,sumsq,val}: the same from the float64 run
    update.{sum,sumsq,val}: final - initial parameter after the 3 steps (float32 run), at the same
        indices; update_f64.*: the float64 run's
    loss.f32 [3], loss.f64 [3] (f64): the loss of each step, computed before that step's update
Deterministic: one thread.  The script prints the float32-vs-float64 gaps.
"""
import os
import sys

import refdump  # one thread; before numpy and torch
from refdump import config, write_dump

import numpy as np
import torch
import torchvision

BATCH, SIZE, CLASSES, STEPS, LR, MOMENTUM, K = 2, 224, 1000, 3, 0.0001, 0.9, 32
IMAGE_SEED, LABELS = 1000, [7, 444]
M32 = np.uint64(0xFFFFFFFF)


def mix(x):
    """lowbias32 (Chris Wellons) on uint64 arrays holding uint32 values."""
    x = np.asarray(x, dtype=np.uint64) & M32
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & M32
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & M32
    x ^= x >> np.uint64(16)
    return x


def hashed(seed, n, center, bound):
    """float32[n]: center + bound * u(seed, i), u uniform in (-1, 1); the C test's fill()."""
    h = mix(np.arange(n, dtype=np.uint64) ^ mix(np.uint64(seed)))
    u = ((h >> np.uint64(8)).astype(np.float64) + 0.5) * (2.0 / 16777216.0) - 1.0
    return (center + bound * u).astype(np.float32)


def sample_idx(p, numel):
    """K element indices of parameter p: the first, the last and K-2 hashed ones."""
    h = mix(np.arange(K, dtype=np.uint64) ^ mix(np.uint64(100000 + p)))
    idx = (h % np.uint64(numel)).astype(np.int64)
    idx[0], idx[-1] = 0, numel - 1
    return idx


V1 = "--v1" in sys.argv[1:]


def build():
    m = torchvision.models.resnet50(num_classes=CLASSES)
    if V1:
        for layer in (m.layer2, m.layer3, m.layer4):  # v1: stride on the first 1x1
            b = layer[0]
            b.conv1.stride, b.conv2.stride = (2, 2), (1, 1)
    return m


def spec(name, t):
    """(Paddle-layout dims, center, bound) of one torchvision parameter."""
    if name == "fc.weight":
        return (t.shape[1], t.shape[0]), 0.0, 1.0 / np.sqrt(2048.0)
    if name == "fc.bias":
        return tuple(t.shape), 0.0, 1.0 / np.sqrt(2048.0)
    if t.ndim == 4:
        return tuple(t.shape), 0.0, np.sqrt(6.0 / (t.shape[1] * t.shape[2] * t.shape[3]))
    if name.endswith(".weight"):  # batch_norm scale
        return tuple(t.shape), 1.0, 0.1
    return tuple(t.shape), 0.0, 0.1  # batch_norm bias


def to_paddle(name, a):
    return a.T if name == "fc.weight" else a


def train(dtype):
    m = build()
    specs = []
    with torch.no_grad():
        for p, (name, t) in enumerate(m.named_parameters()):
            dims, center, bound = spec(name, t)
            v = hashed(p + 1, int(np.prod(dims)), center, bound).reshape(dims)
            t.copy_(torch.from_numpy(to_paddle(name, v).copy()))
            specs.append((name, dims, center, bound, v.astype(np.float64)))
    m = m.to(dtype).train()
    x = torch.from_numpy(hashed(IMAGE_SEED, BATCH * 3 * SIZE * SIZE, 0.0, 1.0).reshape(BATCH, 3, SIZE, SIZE)).to(dtype)
    y = torch.tensor(LABELS, dtype=torch.int64).reshape(BATCH, 1)
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM)

    def loss_of_step(s):
        p = torch.softmax(m(x), dim=1)
        return -torch.log(p.gather(1, y)).mean()

    def log(s, loss):
        print("  %s step %d loss %.8f" % (dtype, s, loss), flush=True)

    names = [n for n, _ in m.named_parameters()]
    losses, g, final = refdump.train_steps(m.named_parameters(), opt, loss_of_step, STEPS, to_paddle, log)
    return specs, losses, [g[n] for n in names], [final[n] - sp[4] for n, sp in zip(names, specs)]


def summaries(arrs, idx):
    flat = [a.reshape(-1) for a in arrs]
    return (np.array([f.sum() for f in flat]), np.array([(f * f).sum() for f in flat]),
            np.stack([f[i] for f, i in zip(flat, idx)]))


def main():
    outdir = refdump.out_dir([a for a in sys.argv[1:] if a != "--v1"])
    print("torch %s, torchvision %s, numpy %s; ResNet %s" % (torch.__version__, torchvision.__version__, np.__version__,
                                                           "v1" if V1 else "v1.5"))
    specs, l32, g32, u32 = train(torch.float32)
    _, l64, g64, u64 = train(torch.float64)
    P = len(specs)
    numel = np.array([int(np.prod(s[1])) for s in specs], np.int64)
    dims = np.ones((P, 4), np.int64)
    for p, s in enumerate(specs):
        dims[p, :len(s[1])] = s[1]
    idx = np.stack([sample_idx(p, int(numel[p])) for p in range(P)])
    out = config([("batch", BATCH), ("size", SIZE), ("classes", CLASSES), ("steps", STEPS), ("lr", LR),
                  ("momentum", MOMENTUM), ("image_seed", IMAGE_SEED)])
    out += [("config.labels", np.array(LABELS, np.int64)), ("param.numel", numel), ("param.dims", dims),
            ("param.center", np.array([s[2] for s in specs], np.float64)),
            ("param.bound", np.array([s[3] for s in specs], np.float64)),
            ("loss.f32", l32), ("loss.f64", l64), ("grad0.idx", idx)]
    for key, arrs in (("grad0", g32), ("grad0_f64", g64), ("update", u32), ("update_f64", u64)):
        s, q, v = summaries(arrs, idx)
        out += [(key + ".sum", s), (key + ".sumsq", q), (key + ".val", v.astype(np.float32))]
    write_dump(os.path.join(outdir, "resnet50_v1.ref" if V1 else "resnet50.ref"), out)
    print("loss f32 %s" % " ".join("%.7f" % v for v in l32))
    print("max |loss f32 - f64| = %.3g" % np.abs(l32 - l64).max())
    for key, a32, a64 in (("grad0", g32, g64), ("update", u32, u64)):
        worst = []
        for p in range(P):
            d, r = a32[p].reshape(-1) - a64[p].reshape(-1), a64[p].reshape(-1)
            rms = np.sqrt((r * r).mean())
            worst.append((np.abs(d).max() / rms if rms > 0 else 0.0, abs((a32[p] ** 2).sum() / (r * r).sum() - 1), p))
        worst.sort(reverse=True)
        print("%s: f32 vs f64, max |diff| / rms(f64) up to %.3g (%s), relative sum-of-squares gap up to %.3g" % (
            key, worst[0][0], specs[worst[0][2]][0], max(w[1] for w in worst)))


if __name__ == "__main__":
    main()
