"""Paddle 3.x side of `make bench` (bench/run.sh): the models and loop of bench/torch_ref.py.

usage: build/peer-venv/bin/python bench/paddle_ref.py MODE [--batch N] [--seconds S] [--warmup N]
           [--threads T] [--graphs static,dynamic] [--tag TAG]
  mlp    quick-start MLP: 32 -> fc128 tanh -> fc128 tanh -> fc2, softmax cross-entropy (mean), SGD lr
         0.01, batch 128
  fc     273 -> fc400 relu x3 -> fc2, softmax cross-entropy (mean), SGD lr 0.01, batch 512
  fcfwd  forward only of the fc stack (no loss), GFLOP/s on the matrix products
Each graph in --graphs is measured in turn in this process: static = a legacy-IR Program run by
paddle.static.Executor with the batch fed as NumPy arrays and the loss fetched every step (as
bench_train and torch_ref do); dynamic = eager mode (fcfwd under paddle.no_grad()).  Threads:
OMP_NUM_THREADS = MKL_NUM_THREADS = --threads before paddle is imported, and
paddle.base.core.set_num_threads; MKL_DEBUG_CPU_TYPE=5 on AMD (paddle_info.mkl_env).
Data: a pool of 32 batches generated before timing, cycled through.  --warmup steps, then whole
steps until --seconds have passed.  Prints 'R<TAB>key<TAB>value<TAB>unit' lines (key
paddle.MODE.bB.GRAPH.tT) and a '#' line naming what Paddle runs on.
"""
import os
import sys


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


_threads = _arg("--threads", "1")
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = _threads
os.environ["FLAGS_enable_pir_api"] = "0"  # the legacy static IR (see ctr_paddle.py)
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paddle_info import mkl_env, paddle_info  # noqa: E402

mkl_env()

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from ctr_data import sys_busy_s  # noqa: E402

POOL = 32


def build(paddle, mode):
    nn = paddle.nn
    if mode == "mlp":
        class Tanh(nn.Layer):  # paddle.tanh is PIR-only in 3.x: Paddle's tanh op appended in the legacy IR
            def forward(self, x):
                if paddle.in_dynamic_mode():
                    return paddle.tanh(x)
                blk = x.block
                y = blk.create_var(dtype=x.dtype, shape=x.shape)
                blk.append_op(type="tanh", inputs={"X": [x]}, outputs={"Out": [y]})
                return y

        return nn.Sequential(nn.Linear(32, 128), Tanh(), nn.Linear(128, 128), Tanh(), nn.Linear(128, 2))
    return nn.Sequential(nn.Linear(273, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(), nn.Linear(400, 400), nn.ReLU(),
                         nn.Linear(400, 2))


def timed(step, warmup, seconds):
    """Runs step(i) warmup times, then in groups of 10 until seconds; returns (steps, elapsed, other_cpu)."""
    for i in range(warmup):
        step(i)
    n, b0, c0, t0 = 0, sys_busy_s(), time.process_time(), time.perf_counter()
    while True:
        for _ in range(10):
            step(warmup + n)
            n += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            break
    other = (sys_busy_s() - b0 - (time.process_time() - c0)) / el
    return n, el, max(other, 0.0)


def static_step(paddle, a, width, xs, ys):
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, width], "float32")
        net = build(paddle, a.mode)
        out = net(x)
        if a.mode != "fcfwd":
            y = paddle.static.data("y", [None, 1], "int64")
            blk = main.global_block()
            ce = paddle.nn.functional.softmax_with_cross_entropy(out, y)
            loss = blk.create_var(name="loss_mean", dtype="float32", shape=[])
            blk.append_op(type="mean", inputs={"X": [ce]}, outputs={"Out": [loss]})
            paddle.optimizer.SGD(learning_rate=0.01).minimize(loss)
            out = loss
    if a.mode == "fcfwd":
        main = main.clone(for_test=True)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)

    def step(i):
        feed = {"x": xs[i % POOL]}
        if a.mode != "fcfwd":
            feed["y"] = ys[i % POOL]
        return exe.run(main, feed=feed, fetch_list=[out])[0]

    return step


def dynamic_step(paddle, a, width, xs, ys):
    paddle.disable_static()
    net = build(paddle, a.mode)
    tx = [paddle.to_tensor(x) for x in xs]
    ty = [paddle.to_tensor(y) for y in ys]
    if a.mode == "fcfwd":
        def fwd(i):
            with paddle.no_grad():
                return net(tx[i % POOL])
        return fwd
    opt = paddle.optimizer.SGD(learning_rate=0.01, parameters=net.parameters())

    def step(i):
        loss = paddle.nn.functional.cross_entropy(net(tx[i % POOL]), ty[i % POOL])
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
        return loss

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["mlp", "fc", "fcfwd"])
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--graphs", default="static,dynamic")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    graphs = a.graphs.split(",")
    if any(g not in ("static", "dynamic") for g in graphs):
        sys.exit("paddle_ref.py: --graphs is a comma list of static, dynamic; got %r" % a.graphs)
    batch = a.batch or (128 if a.mode == "mlp" else 512)
    warmup = a.warmup if a.warmup is not None else (200 if a.mode == "mlp" else 10)
    warnings.filterwarnings("ignore")
    import paddle
    paddle.base.core.set_num_threads(a.threads)
    paddle.seed(0)
    width = 32 if a.mode == "mlp" else 273
    rs = np.random.RandomState(1000)
    xs = [(rs.rand(batch, width) * 2 - 1).astype("float32") for _ in range(POOL)]
    ys = [rs.randint(0, 2, (batch, 1)).astype("int64") for _ in range(POOL)]
    print("# paddle bench %s: batch %d, graphs %s; %s" % (a.mode, batch, ",".join(graphs), paddle_info(paddle)), flush=True)
    for g in graphs:
        key = "paddle.%s.b%d.%s.t%d%s" % (a.mode, batch, g, a.threads, a.tag)
        step = (static_step if g == "static" else dynamic_step)(paddle, a, width, xs, ys)
        n, el, other = timed(step, warmup, a.seconds)
        if a.mode == "fcfwd":
            flop = 2.0 * batch * (273 * 400 + 2 * 400 * 400 + 400 * 2)
            print("R\t%s.gflops\t%.1f\tGFLOP/s" % (key, flop * n / el * 1e-9))
        else:
            print("R\t%s.steps_per_s\t%.1f\tsteps/s" % (key, n / el))
            print("R\t%s.samples_per_s\t%.0f\tsamples/s" % (key, n * batch / el))
            print("R\t%s.ms_per_step\t%.4f\tms" % (key, el / n * 1e3))
        print("R\t%s.other_cpu\t%.2f\tcores busy with other processes" % (key, other))
        print("# %s: %d timed steps in %.3f s" % (g, n, el), flush=True)


if __name__ == "__main__":
    main()
