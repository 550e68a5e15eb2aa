"""PyTorch side of bench/bench_ctr.sh: CTR-DNN as bench/bench_ctr.c trains it (fl_model_ctr_dnn_build).

usage: /usr/bin/python3 bench/ctr_torch.py --data DIR [--files 2] [--batches 32,512] [--mode t1]
           [--seconds 1] [--optimizer sgd|adam] [--lr 1e-3] [--amp 0|1] [--tag TAG]
       /usr/bin/python3 bench/ctr_torch.py --data DIR --files N --prepare   (parse and cache only)

Model: nn.Embedding(1000001, 10, sparse=True) (init U(-1, 1)) looked up by the 26 slots (one id per
slot and row, so the sum-pool is the lookup itself), concatenated with the 13 dense values
(26 x 10 + 13 = 273), Linear 400 ReLU x 3, Linear 2 (weights Normal(0, 1/sqrt(fan_in)), bias 0),
cross-entropy of the softmax summed over the batch (Paddle's reduce_sum).  SGD lr 1e-3 on the
dense and the sparse gradients (torch.optim.SGD takes the embedding's sparse gradient), or Adam +
SparseAdam.  (Fleet's program also computes Paddle's AUC every batch; this one does not.)
--amp 1: the forward under torch.autocast("cpu", dtype=torch.bfloat16) (Linear in bfloat16 through
torch's oneDNN, the loss in float32, float32 weights); keys tagged .bf16.

Data: the first --files files of DIR/train (sorted) and the files of DIR/test (warm-up), parsed
before any timing, as Fleet's Criteo reader does: label, 13 dense columns (x - min) / diff with
Paddle's constants, empty -> 0, 26 categorical columns hashed with FNV-1a 64 over "C<k>:" + the
field's bytes, modulo 1000001 (fl_data_criteo_id; empty fields hash too).  The tensors are cached
as DIR/torch_cache_<files>.npz.  Rows are read in file order (Fleet's InMemoryDataset without a
shuffle does the same).

Per batch size: one warm-up pass over the test rows, then batches in order (wrapping around)
until --seconds have passed; examples/s = examples / elapsed.  --mode (threads):
  t1       1 process, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  t2blas   1 process, OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 (shared/peers: the fastest
           single-process configuration)
  t2omp    1 process, OMP_NUM_THREADS=2 (torch.set_num_threads(2)) OPENBLAS_NUM_THREADS=1
  t2hog    Hogwild the PyTorch way: model.share_memory(), 2 processes (torch.multiprocessing,
           fork) each OMP 1 / OpenBLAS 1 and its own optimizer, each on its half of the rows
           (contiguous halves); both start after a barrier; total = all examples / (last end -
           first start), one monotonic clock.
Both environment variables are set before torch is imported (Debian's torch does its matrix
products in the system OpenBLAS, which reads OPENBLAS_NUM_THREADS at load time).
Prints 'R<TAB>key<TAB>value<TAB>unit' lines and '#' lines (the BLAS torch runs on: bench/torch_blas.py).
"""
import os
import sys

MODES = {"t1": ("1", "1", 1), "t2blas": ("1", "2", 1), "t2omp": ("2", "1", 1), "t2hog": ("1", "1", 2)}


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


_mode = _arg("--mode", "t1")
if _mode not in MODES:
    sys.exit("ctr_torch.py: --mode must be one of %s" % ", ".join(MODES))
os.environ["OMP_NUM_THREADS"] = MODES[_mode][0]
os.environ["OPENBLAS_NUM_THREADS"] = MODES[_mode][1]

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from ctr_data import DIM, load, sys_busy_s  # noqa: E402


def make_model(torch, nn):
    class CTR(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(DIM, 10, sparse=True)
            nn.init.uniform_(self.emb.weight, -1.0, 1.0)
            dims = [26 * 10 + 13, 400, 400, 400, 2]
            self.fcs = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(4))
            for fc, fan_in in zip(self.fcs, dims[:-1]):
                nn.init.normal_(fc.weight, 0.0, 1.0 / fan_in ** 0.5)
                nn.init.zeros_(fc.bias)

        def forward(self, dense, ids):
            x = torch.cat([self.emb(ids).reshape(ids.shape[0], 260), dense], dim=1)
            for fc in self.fcs[:-1]:
                x = torch.relu(fc(x))
            return self.fcs[-1](x)

    return CTR()


def make_opt(torch, net, a):
    dense = [p for n, p in net.named_parameters() if not n.startswith("emb.")]
    if a.optimizer == "adam":
        return [torch.optim.Adam(dense, lr=a.lr), torch.optim.SparseAdam([net.emb.weight], lr=a.lr)]
    return [torch.optim.SGD(net.parameters(), lr=a.lr)]


def batches(data, b):
    d, i, l = data
    return [(d[s:s + b], i[s:s + b], l[s:s + b]) for s in range(0, len(l), b)]


def train_for(torch, F, net, opts, bl, seconds, first_pass_only=False, amp=False):
    """Batches in order (wrapping) until `seconds`; returns (examples, elapsed, last loss)."""
    n, k, t0 = 0, 0, time.perf_counter()
    loss = None
    while True:
        dense, ids, y = bl[k % len(bl)]
        for o in opts:
            o.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = net(dense, ids)
        loss = F.cross_entropy(logits.float(), y, reduction="sum")
        loss.backward()
        for o in opts:
            o.step()
        n += y.shape[0]
        k += 1
        el = time.perf_counter() - t0
        if (first_pass_only and k == len(bl)) or (not first_pass_only and el >= seconds):
            return n, el, loss.item()


def hog_child(rank, net, a, part, warm, batch, barrier, q):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    opts = make_opt(torch, net, a)
    bl = batches(part, batch)
    train_for(torch, F, net, opts, batches(warm, batch), 0, first_pass_only=True, amp=a.amp == 1)
    barrier.wait(timeout=120)
    s0 = time.monotonic()
    n, el, loss = train_for(torch, F, net, opts, bl, a.seconds, amp=a.amp == 1)
    q.put((rank, n, s0, time.monotonic(), el, loss))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--batches", default="32,512")
    ap.add_argument("--mode", default="t1", choices=list(MODES))
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--amp", type=int, default=0, choices=[0, 1])
    ap.add_argument("--tag", default="")
    ap.add_argument("--prepare", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    train_np, warm_np = load(a.data, a.files)
    tload = time.perf_counter() - t0
    if a.prepare:
        print("# ctr_torch: %d train rows, %d warm-up rows parsed and cached in %.2f s" % (len(train_np[2]), len(warm_np[2]),
                                                                                          tload))
        return

    import torch
    import torch.nn.functional as F
    import torch.nn as nn
    omp, blas, procs = MODES[a.mode]
    torch.set_num_threads(int(omp))
    torch.manual_seed(0)
    tt = lambda z: tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in z)  # noqa: E731
    train, warm = tt(train_np), tt(warm_np)
    from torch_blas import blas_desc
    print("# torch %s ctr %s: %s, OPENBLAS_CORETYPE=%s, OPENBLAS_NUM_THREADS=%s, "
          "OMP_NUM_THREADS=%s, torch threads %d, %d process(es); %d train rows (data ready in %.2f s, not timed); "
          "optimizer %s lr %g; %s; oneDNN (mkldnn) %s" % (torch.__version__, a.mode, blas_desc(torch),
                                  os.environ.get("OPENBLAS_CORETYPE", "(unset: auto-detect)"), blas, omp,
                                  torch.get_num_threads(), procs, len(train[2]), tload, a.optimizer, a.lr,
                                  "autocast bf16" if a.amp else "float32", torch.backends.mkldnn.is_available()), flush=True)
    for b in [int(x) for x in a.batches.split(",")]:
        key = "torch.ctr.b%d.%s%s%s" % (b, a.mode, ".bf16" if a.amp else "", a.tag)
        net = make_model(torch, nn)
        b0, c0, w0 = sys_busy_s(), None, time.perf_counter()
        if procs == 1:
            opts = make_opt(torch, net, a)
            train_for(torch, F, net, opts, batches(warm, b), 0, first_pass_only=True, amp=a.amp == 1)
            b0, c0, w0 = sys_busy_s(), time.process_time(), time.perf_counter()
            n, el, loss = train_for(torch, F, net, opts, batches(train, b), a.seconds, amp=a.amp == 1)
            own = time.process_time() - c0
            rate = n / el
            print("# b%d %s: %d examples in %.3f s; last loss (sum over the batch) %.4f" % (b, a.mode, n, el, loss))
        else:
            import torch.multiprocessing as mp
            net.share_memory()
            ctx = mp.get_context("fork")
            barrier, q = ctx.Barrier(procs), ctx.Queue()
            half = (len(train[2]) + procs - 1) // procs
            parts = [tuple(x[r * half:(r + 1) * half] for x in train) for r in range(procs)]
            ps = [ctx.Process(target=hog_child, args=(r, net, a, parts[r], warm, b, barrier, q)) for r in range(procs)]
            for p in ps:
                p.start()
            res = []
            try:
                for _ in ps:
                    res.append(q.get(timeout=120 + 4 * a.seconds))
            finally:
                for p in ps:
                    p.join(timeout=10)
                    if p.is_alive():
                        p.kill()
                        p.join()
            own = 0.0
            for p in ps:
                if p.exitcode != 0:
                    sys.exit("ctr_torch.py: hogwild process exited with %s" % p.exitcode)
            n = sum(r[1] for r in res)
            el = max(r[3] for r in res) - min(r[2] for r in res)
            rate = n / el
            for r in sorted(res):
                print("# b%d t2hog process %d: %d examples in %.3f s (%.0f examples/s); last loss %.4f" % (
                    b, r[0], r[1], r[4], r[1] / r[4], r[5]))
        threads = 2 if a.mode != "t1" else 1
        wall = time.perf_counter() - w0
        other = (sys_busy_s() - b0 - own) / wall if procs == 1 else None
        print("R\t%s.ex_per_s\t%.0f\texamples/s" % (key, rate))
        print("R\t%s.ex_per_s_per_thread\t%.0f\texamples/s" % (key, rate / threads))
        if other is not None:
            print("R\t%s.other_cpu\t%.2f\tcores busy with other processes" % (key, max(other, 0.0)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
