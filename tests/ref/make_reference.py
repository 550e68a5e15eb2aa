#!/usr/bin/python3
"""Generates the PyTorch reference dumps that tests/test_reference.c checks Fleet against.

usage: PYTHON tests/ref/make_reference.py [OUTDIR]     (default: tests/ref)

PYTHON: one with torch and numpy, e.g. $(bench/peer_venv.sh build torch) (tests/ref/README.md).
Writes (all deterministic: seeded numpy PCG64, one OpenBLAS thread):
  mlp.ref        quick-start MLP  x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax -> cross_entropy
                 -> mean, SGD lr 0.01, batch 16, 5 steps: initial parameters, the 5 input batches, the
                 loss of every step (float32 and float64 runs), the final parameters (float32 run) and,
                 per parameter, how far the float32 run ends from the float64 run.
  mlp_grad0.ref  the gradient of every MLP parameter at step 0 (float32 and float64 runs stored as float32).
  ctr.ref        small CTR net: 3 sparse slots of 2-4 ids per sample -> one shared embedding table
                 (vocab 50, dim 4) -> sequence_pool sum per slot -> concat with 2 dense floats ->
                 fc 8 relu -> fc 2 -> softmax -> cross_entropy -> mean, SGD lr 0.1, batch 8, 5 steps:
                 same contents as mlp.ref plus the step-0 gradients (the whole model is tiny).

File format ("FLREF 1"), its writer and the training loop: tests/ref/refdump.py.  Weights are stored
in Paddle's fc layout [in, out] (PyTorch's nn.Linear holds [out, in]; the script transposes).  Losses
are the value computed in the forward pass of that step, before the update, as Fleet's executor
returns them when the loss is fetched.
"""
import os

import refdump  # one thread (the summation order is fixed); before numpy and torch
from refdump import config, write_dump

import numpy as np
import torch
import torch.nn as nn

STEPS = 5


def xavier(rng, fan_in, fan_out):
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(np.float32)


def paddle_ce_mean(logits, y):
    """Paddle's graph: softmax op, then cross_entropy on probabilities (-log p[label]), then mean."""
    p = torch.softmax(logits, dim=1)
    return -torch.log(p.gather(1, y)).mean()


# ---------------------------------------------------------------------------------------------
# (a) quick-start MLP
# ---------------------------------------------------------------------------------------------
MLP_BATCH, MLP_IN, MLP_HID, MLP_OUT, MLP_LR = 16, 32, 128, 2, 0.01
MLP_PARAMS = ["fc1.w", "fc1.b", "fc2.w", "fc2.b", "fc3.w", "fc3.b"]


def mlp_data():
    rng = np.random.default_rng(20240611)
    init = {
        "fc1.w": xavier(rng, MLP_IN, MLP_HID),
        "fc1.b": rng.uniform(-0.1, 0.1, MLP_HID).astype(np.float32),
        "fc2.w": xavier(rng, MLP_HID, MLP_HID),
        "fc2.b": rng.uniform(-0.1, 0.1, MLP_HID).astype(np.float32),
        "fc3.w": xavier(rng, MLP_HID, MLP_OUT),
        "fc3.b": rng.uniform(-0.1, 0.1, MLP_OUT).astype(np.float32),
    }
    xs = rng.uniform(-1.0, 1.0, size=(STEPS, MLP_BATCH, MLP_IN)).astype(np.float32)
    ys = rng.integers(0, MLP_OUT, size=(STEPS, MLP_BATCH, 1)).astype(np.int64)
    return init, xs, ys


def mlp_train(init, xs, ys, dtype):
    """Trains with nn.Linear / torch.optim.SGD; returns losses, step-0 grads, final params ([in,out])."""
    layers = [nn.Linear(MLP_IN, MLP_HID), nn.Linear(MLP_HID, MLP_HID), nn.Linear(MLP_HID, MLP_OUT)]
    with torch.no_grad():
        for i, lin in enumerate(layers):
            lin.to(dtype)
            lin.weight.copy_(torch.from_numpy(init["fc%d.w" % (i + 1)]).T.to(dtype))  # [in,out] -> [out,in]
            lin.bias.copy_(torch.from_numpy(init["fc%d.b" % (i + 1)]).to(dtype))
    params = [t for lin in layers for t in (lin.weight, lin.bias)]
    opt = torch.optim.SGD(params, lr=MLP_LR)

    def loss_of_step(s):
        x = torch.from_numpy(xs[s]).to(dtype)
        y = torch.from_numpy(ys[s])
        h = torch.tanh(layers[0](x))
        h = torch.tanh(layers[1](h))
        return paddle_ce_mean(layers[2](h), y)

    return refdump.train_steps(zip(MLP_PARAMS, params), opt, loss_of_step, STEPS, paddle_layout)


def paddle_layout(name, a):
    return a.T.copy() if name.endswith(".w") else a


def make_mlp(outdir):
    init, xs, ys = mlp_data()
    l32, g32, f32 = mlp_train(init, xs, ys, torch.float32)
    l64, g64, f64 = mlp_train(init, xs, ys, torch.float64)
    out = config([("batch", MLP_BATCH), ("steps", STEPS), ("lr", MLP_LR)])
    out += [("init." + n, init[n]) for n in MLP_PARAMS]
    out += [("x", xs), ("y", ys), ("loss.f32", l32), ("loss.f64", l64)]
    out += [("final." + n, f32[n].astype(np.float32)) for n in MLP_PARAMS]
    # how far float32 arithmetic alone moves the result: |final32 - final64| and |update64|
    out += [("f32err." + n, np.array([np.abs(f32[n] - f64[n]).max()], np.float64)) for n in MLP_PARAMS]
    out += [("update." + n, np.array([np.abs(f64[n] - init[n]).max()], np.float64)) for n in MLP_PARAMS]
    write_dump(os.path.join(outdir, "mlp.ref"), out)
    grads = [("grad0." + n, g32[n].astype(np.float32)) for n in MLP_PARAMS]
    grads += [("grad0_f64." + n, g64[n].astype(np.float32)) for n in MLP_PARAMS]
    write_dump(os.path.join(outdir, "mlp_grad0.ref"), grads)
    print("mlp: loss f32 %s" % " ".join("%.7f" % v for v in l32))
    print("mlp: max |loss f32 - f64| = %.3g" % np.abs(l32 - l64).max())
    for n in MLP_PARAMS:
        print("mlp: %-6s max|update| %.3g  max|final f32 - f64| %.3g  max|grad0 f32-f64| %.3g  max|grad0| %.3g" % (
            n, np.abs(f64[n] - init[n]).max(), np.abs(f32[n] - f64[n]).max(), np.abs(g32[n] - g64[n]).max(),
            np.abs(g64[n]).max()))


# ---------------------------------------------------------------------------------------------
# (b) small CTR net with variable-length sparse slots
# ---------------------------------------------------------------------------------------------
CTR_BATCH, CTR_SLOTS, CTR_VOCAB, CTR_DIM, CTR_DENSE, CTR_HID, CTR_LR = 8, 3, 50, 4, 2, 8, 0.1
CTR_PARAMS = ["emb", "fc1.w", "fc1.b", "fc2.w", "fc2.b"]
CTR_IN = CTR_SLOTS * CTR_DIM + CTR_DENSE  # concat order: pool(slot0), pool(slot1), pool(slot2), dense


def ctr_data():
    rng = np.random.default_rng(20240612)
    init = {
        "emb": rng.uniform(-0.5, 0.5, size=(CTR_VOCAB, CTR_DIM)).astype(np.float32),
        "fc1.w": xavier(rng, CTR_IN, CTR_HID),
        "fc1.b": rng.uniform(-0.1, 0.1, CTR_HID).astype(np.float32),
        "fc2.w": xavier(rng, CTR_HID, 2),
        "fc2.b": rng.uniform(-0.1, 0.1, 2).astype(np.float32),
    }
    batches = []
    for _ in range(STEPS):
        slots = []
        for _ in range(CTR_SLOTS):
            lens = rng.integers(2, 5, size=CTR_BATCH)  # 2..4 ids per sample
            lod = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            ids = rng.integers(0, CTR_VOCAB, size=(int(lod[-1]), 1)).astype(np.int64)
            slots.append((ids, lod))
        dense = rng.uniform(0.0, 1.0, size=(CTR_BATCH, CTR_DENSE)).astype(np.float32)
        label = rng.integers(0, 2, size=(CTR_BATCH, 1)).astype(np.int64)
        batches.append((slots, dense, label))
    return init, batches


def ctr_train(init, batches, dtype):
    emb = nn.EmbeddingBag(CTR_VOCAB, CTR_DIM, mode="sum")  # one table shared by the three slots
    fc1, fc2 = nn.Linear(CTR_IN, CTR_HID), nn.Linear(CTR_HID, 2)
    with torch.no_grad():
        for m in (emb, fc1, fc2):
            m.to(dtype)
        emb.weight.copy_(torch.from_numpy(init["emb"]).to(dtype))
        fc1.weight.copy_(torch.from_numpy(init["fc1.w"]).T.to(dtype))
        fc1.bias.copy_(torch.from_numpy(init["fc1.b"]).to(dtype))
        fc2.weight.copy_(torch.from_numpy(init["fc2.w"]).T.to(dtype))
        fc2.bias.copy_(torch.from_numpy(init["fc2.b"]).to(dtype))
    params = [emb.weight, fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    opt = torch.optim.SGD(params, lr=CTR_LR)

    def loss_of_step(s):
        slots, dense, label = batches[s]
        pooled = [emb(torch.from_numpy(ids[:, 0]), torch.from_numpy(lod[:-1])) for ids, lod in slots]
        h = torch.cat(pooled + [torch.from_numpy(dense).to(dtype)], dim=1)
        h = torch.relu(fc1(h))
        return paddle_ce_mean(fc2(h), torch.from_numpy(label))

    return refdump.train_steps(zip(CTR_PARAMS, params), opt, loss_of_step, len(batches), paddle_layout)


def make_ctr(outdir):
    init, batches = ctr_data()
    l32, g32, f32 = ctr_train(init, batches, torch.float32)
    l64, g64, f64 = ctr_train(init, batches, torch.float64)
    out = config([("batch", CTR_BATCH), ("steps", STEPS), ("lr", CTR_LR), ("vocab", CTR_VOCAB), ("dim", CTR_DIM)])
    out += [("init." + n, init[n]) for n in CTR_PARAMS]
    for s, (slots, dense, label) in enumerate(batches):
        for k, (ids, lod) in enumerate(slots):
            out += [("step%d.slot%d.ids" % (s, k), ids), ("step%d.slot%d.lod" % (s, k), lod)]
        out += [("step%d.dense" % s, dense), ("step%d.label" % s, label)]
    out += [("loss.f32", l32), ("loss.f64", l64)]
    out += [("final." + n, f32[n].astype(np.float32)) for n in CTR_PARAMS]
    out += [("grad0." + n, g32[n].astype(np.float32)) for n in CTR_PARAMS]
    out += [("f32err." + n, np.array([np.abs(f32[n] - f64[n]).max()], np.float64)) for n in CTR_PARAMS]
    out += [("update." + n, np.array([np.abs(f64[n] - init[n]).max()], np.float64)) for n in CTR_PARAMS]
    write_dump(os.path.join(outdir, "ctr.ref"), out)
    print("ctr: loss f32 %s" % " ".join("%.7f" % v for v in l32))
    print("ctr: max |loss f32 - f64| = %.3g" % np.abs(l32 - l64).max())
    for n in CTR_PARAMS:
        print("ctr: %-6s max|update| %.3g  max|final f32 - f64| %.3g  max|grad0 f32-f64| %.3g  max|grad0| %.3g" % (
            n, np.abs(f64[n] - init[n]).max(), np.abs(f32[n] - f64[n]).max(), np.abs(g32[n] - g64[n]).max(),
            np.abs(g64[n]).max()))


def main():
    outdir = refdump.out_dir()
    print("torch %s, numpy %s" % (torch.__version__, np.__version__))
    make_mlp(outdir)
    make_ctr(outdir)


if __name__ == "__main__":
    main()
