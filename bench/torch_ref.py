"""PyTorch side of `make bench`: the same models and measurement loop as bench/bench_train.c.

usage: /usr/bin/python3 bench/torch_ref.py MODE [--batch N] [--seconds S] [--warmup N]
           [--threads T] [--blas-threads B] [--tag TAG]
  mlp    quick-start MLP: 32 -> fc128 tanh -> fc128 tanh -> fc2, softmax cross-entropy, SGD lr 0.01, batch 128
  fc     273 -> fc400 relu x3 -> fc2, softmax cross-entropy, SGD lr 0.01, batch 512 (CTR-DNN's dense part)
  fcfwd  forward only of the fc stack under torch.no_grad(), GFLOP/s on the matrix products
Threads: --threads sets OMP_NUM_THREADS and torch.set_num_threads (default 1); --blas-threads sets
OPENBLAS_NUM_THREADS (default 2).  Both are set before torch is imported, because Debian's torch does
its matrix products in OpenBLAS, which reads OPENBLAS_NUM_THREADS at load time (see
shared/peers/RESULTS.md caveat 2: OMP 1 + OpenBLAS 2 is the fastest single-process configuration).
Data: a pool of 32 batches generated before timing, cycled through.  Each measurement runs --warmup
steps, then whole steps until --seconds have passed.  Prints 'R<TAB>key<TAB>value<TAB>unit' lines and a
'#' line naming the BLAS torch's products run on (bench/torch_blas.py: the OpenBLAS core mapped into
this process, or the MKL that PyPI's torch links in).
"""
import os
import sys


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


os.environ["OMP_NUM_THREADS"] = _arg("--threads", "1")
os.environ["OPENBLAS_NUM_THREADS"] = _arg("--blas-threads", "2")

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

POOL = 32


def sys_busy_s():
    """CPU seconds all processes spent busy (/proc/stat); minus our own CPU time = other work."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0
    except (OSError, ValueError, IndexError):
        return 0.0


def build(mode):
    if mode == "mlp":
        return nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 2))
    return nn.Sequential(nn.Linear(273, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
                         nn.Linear(400, 400), nn.ReLU(), nn.Linear(400, 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["mlp", "fc", "fcfwd"])
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blas-threads", type=int, default=2)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    batch = a.batch or (128 if a.mode == "mlp" else 512)
    warmup = a.warmup if a.warmup is not None else (200 if a.mode == "mlp" else 10)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    width = 32 if a.mode == "mlp" else 273
    g = torch.Generator().manual_seed(1000)
    xs = [torch.rand(batch, width, generator=g) * 2 - 1 for _ in range(POOL)]
    ys = [torch.randint(0, 2, (batch,), generator=g) for _ in range(POOL)]
    net = build(a.mode)
    from torch_blas import blas_desc
    print("# torch %s bench %s: batch %d, %s, OPENBLAS_CORETYPE=%s, "
          "OPENBLAS_NUM_THREADS=%s, OMP_NUM_THREADS=%s, torch threads %d" % (
              torch.__version__, a.mode, batch, blas_desc(torch), os.environ.get("OPENBLAS_CORETYPE", "(unset: auto-detect)"),
              os.environ["OPENBLAS_NUM_THREADS"], os.environ["OMP_NUM_THREADS"], torch.get_num_threads()),
          flush=True)
    key = "torch.%s.b%d.omp%d.blas%d%s" % (a.mode, batch, a.threads, a.blas_threads, a.tag)

    if a.mode == "fcfwd":
        flop = 2.0 * batch * (273 * 400 + 2 * 400 * 400 + 400 * 2)
        with torch.no_grad():
            for i in range(warmup):
                net(xs[i % POOL])
            n, b0, c0, t0 = 0, sys_busy_s(), time.process_time(), time.perf_counter()
            while True:
                net(xs[n % POOL])
                n += 1
                el = time.perf_counter() - t0
                if el >= a.seconds:
                    break
        other = (sys_busy_s() - b0 - (time.process_time() - c0)) / el
        print("R\t%s.gflops\t%.1f\tGFLOP/s" % (key, flop * n / el * 1e-9))
        print("R\t%s.other_cpu\t%.2f\tcores busy with other processes" % (key, max(other, 0.0)))
        return

    lossf = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = lossf(net(xs[i % POOL]), ys[i % POOL])
        loss.backward()
        opt.step()
        return loss

    first = step(0).item()
    for i in range(1, warmup):
        step(i)
    steps, b0, c0, t0 = 0, sys_busy_s(), time.process_time(), time.perf_counter()
    while True:
        for _ in range(10):
            loss = step(warmup + steps)
            steps += 1
        el = time.perf_counter() - t0
        if el >= a.seconds:
            break
    other = (sys_busy_s() - b0 - (time.process_time() - c0)) / el
    print("R\t%s.steps_per_s\t%.1f\tsteps/s" % (key, steps / el))
    print("R\t%s.samples_per_s\t%.0f\tsamples/s" % (key, steps * batch / el))
    print("R\t%s.ms_per_step\t%.4f\tms" % (key, el / steps * 1e3))
    print("R\t%s.other_cpu\t%.2f\tcores busy with other processes" % (key, max(other, 0.0)))
    print("# %d timed steps in %.3f s; loss first %.4f, last %.4f" % (steps, el, first, loss.item()), flush=True)


if __name__ == "__main__":
    main()
