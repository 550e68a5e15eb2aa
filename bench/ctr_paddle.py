"""Paddle 3.x side of bench/bench_ctr.sh: CTR-DNN as bench/bench_ctr.c trains it (fl_model_ctr_dnn_build).

usage: build/peer-venv/bin/python bench/ctr_paddle.py --data DIR [--files 2] [--batches 32,512]
           [--graph static|dynamic] [--ir legacy|pir] [--dtype f32|bf16] [--threads 1] [--onednn 0|1]
           [--seconds 1] [--lr 1e-3] [--tag TAG]
       (the virtual environment comes from bench/peer_venv.sh; the data cache from ctr_data.py)

Model: paddle.nn.Embedding(1000001, 10, sparse=True) (init U(-1, 1)) looked up by the 26 slots (one
id per slot and row, so the sum-pool is the lookup itself), concatenated with the 13 dense values
(273), Linear 400 ReLU x 3, Linear 2 (weights Normal(0, 1/sqrt(fan_in)), bias 0), softmax
cross-entropy summed over the batch; SGD lr 1e-3 (sparse gradient rows for the table).

--graph static: paddle.enable_static(), one Program run by paddle.static.Executor with the batch fed
  as NumPy arrays and nothing fetched in the timed loop (Paddle's fastest CPU training mode that
  takes in-memory arrays), in the legacy IR (FLAGS_enable_pir_api=0; --ir pir: Paddle 3's default
  PIR, which applies the is_sparse table's gradient densely, 20+ ms per step; key tagged .pir).
  --graph dynamic: eager mode, the same layers.
--dtype bf16: static: paddle.static.amp.bf16.decorate_bf16 (AMP O1: the bf16 list's ops in
  bfloat16, fp32 master weights); dynamic: paddle.amp.auto_cast(dtype="bfloat16", level="O1"),
  which on Paddle 3.3's CPU place leaves Linear in float32: the run then fails with that message.
--threads N: OMP_NUM_THREADS=MKL_NUM_THREADS=N before paddle is imported and
  paddle.base.core.set_num_threads(N) (intra-op threads of MKL / oneDNN; one process).
MKL_DEBUG_CPU_TYPE=5 on AMD CPUs unless set (paddle_info.mkl_env: MKL's AVX2 kernels, about 2x there).
--onednn 1: FLAGS_use_mkldnn=1 (oneDNN kernels for the ops that have them); 0: Paddle's default CPU
  kernels (MKL cblas for the matrix products).

Per batch size: a warm-up pass over the test rows, then batches in order (wrapping around) until
--seconds have passed; examples/s = examples / elapsed.  Prints 'R<TAB>key<TAB>value<TAB>unit'
lines (key paddle.ctr.b<B>.<graph>.<dtype>.t<N>[.onednn]) and a '#' line naming the Paddle
version, its MKL / oneDNN build flags and the CPU's ISA.
"""
import os
import sys


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


_threads = _arg("--threads", "1")
os.environ["OMP_NUM_THREADS"] = _threads
os.environ["MKL_NUM_THREADS"] = _threads
os.environ["OPENBLAS_NUM_THREADS"] = _threads
if _arg("--onednn", "0") == "1":
    os.environ["FLAGS_use_mkldnn"] = "1"
if _arg("--graph", "static") == "static":
    # the legacy static IR: under PIR (Paddle 3's default) the optimizer densifies the
    # is_sparse table's gradient (a [1000001, 10] update per step, 20+ ms at batch 32)
    os.environ["FLAGS_enable_pir_api"] = "1" if _arg("--ir", "legacy") == "pir" else "0"
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paddle_info import mkl_env, paddle_info  # noqa: E402

mkl_env()

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from ctr_data import DIM, load, sys_busy_s  # noqa: E402


def make_net(paddle):
    nn = paddle.nn
    init = paddle.nn.initializer

    class CTR(nn.Layer):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(DIM, 10, sparse=True,
                                    weight_attr=paddle.ParamAttr(initializer=init.Uniform(-1.0, 1.0)))
            dims = [26 * 10 + 13, 400, 400, 400, 2]
            self.fcs = nn.LayerList([
                nn.Linear(dims[i], dims[i + 1],
                          weight_attr=paddle.ParamAttr(initializer=init.Normal(0.0, 1.0 / dims[i] ** 0.5)),
                          bias_attr=paddle.ParamAttr(initializer=init.Constant(0.0))) for i in range(4)])

        def forward(self, dense, ids):
            x = paddle.concat([paddle.reshape(self.emb(ids), [-1, 260]), dense], axis=1)
            for fc in self.fcs[:-1]:
                x = paddle.nn.functional.relu(fc(x))
            return self.fcs[-1](x)

    return CTR()


def batches(data, b):
    d, i, lab = data
    return [(d[s:s + b], i[s:s + b], lab[s:s + b].reshape(-1, 1)) for s in range(0, len(lab), b)]


def run_static(paddle, a, b, train, warm):
    """Returns (examples, elapsed, last loss) of the timed loop."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = 0
    with paddle.static.program_guard(main, startup):
        dense = paddle.static.data("dense", [None, 13], "float32")
        ids = paddle.static.data("ids", [None, 26], "int64")
        label = paddle.static.data("label", [None, 1], "int64")
        net = make_net(paddle)
        opt = paddle.optimizer.SGD(learning_rate=a.lr)
        if a.dtype == "bf16":
            bf16 = paddle.static.amp.bf16
            opt = bf16.decorate_bf16(opt, amp_lists=bf16.AutoMixedPrecisionListsBF16(), use_bf16_guard=False,
                                     use_pure_bf16=False)
        logits = net(dense, ids)
        ce = paddle.nn.functional.softmax_with_cross_entropy(logits, label)
        if a.ir == "pir":
            loss = paddle.sum(ce)
        else:  # paddle.sum is PIR-only in 3.x: Paddle's reduce_sum op, appended as the legacy IR has it
            blk = main.global_block()
            loss = blk.create_var(name="loss_sum", dtype="float32", shape=[])
            blk.append_op(type="reduce_sum", inputs={"X": [ce]}, outputs={"Out": [loss]},
                          attrs={"dim": [0, 1], "keep_dim": False, "reduce_all": True})
        opt.minimize(loss)
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    exe.run(startup)

    def feed(bt):
        return {"dense": bt[0], "ids": bt[1], "label": bt[2]}

    for bt in batches(warm, b):
        exe.run(main, feed=feed(bt), fetch_list=[])
    bl = batches(train, b)
    n, k, t0 = 0, 0, time.perf_counter()
    while True:
        bt = bl[k % len(bl)]
        exe.run(main, feed=feed(bt), fetch_list=[])
        n += bt[2].shape[0]
        k += 1
        el = time.perf_counter() - t0
        if el >= a.seconds:
            break
    last = exe.run(main, feed=feed(bl[k % len(bl)]), fetch_list=[loss])[0]
    return n, el, float(np.asarray(last))


def run_dynamic(paddle, a, b, train, warm):
    net = make_net(paddle)
    opt = paddle.optimizer.SGD(learning_rate=a.lr, parameters=net.parameters())
    amp = a.dtype == "bf16"
    if amp:
        with paddle.amp.auto_cast(dtype="bfloat16", level="O1"):
            got = net.fcs[0](paddle.zeros([1, 273])).dtype
        if got != paddle.bfloat16:
            raise RuntimeError("paddle.amp.auto_cast(dtype='bfloat16') leaves Linear in %s on this CPU place: "
                               "dygraph bf16 AMP does not run here (static bf16 does)" % got)

    def step(bt):
        dense, ids, y = (paddle.to_tensor(x) for x in bt)
        if amp:
            with paddle.amp.auto_cast(dtype="bfloat16", level="O1"):
                logits = net(dense, ids)
        else:
            logits = net(dense, ids)
        loss = paddle.nn.functional.cross_entropy(paddle.cast(logits, "float32"), y, reduction="sum")
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
        return loss

    for bt in batches(warm, b):
        step(bt)
    bl = batches(train, b)
    n, k, t0 = 0, 0, time.perf_counter()
    while True:
        bt = bl[k % len(bl)]
        loss = step(bt)
        n += bt[2].shape[0]
        k += 1
        el = time.perf_counter() - t0
        if el >= a.seconds:
            break
    return n, el, float(loss.numpy())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--batches", default="32,512")
    ap.add_argument("--graph", default="static", choices=["static", "dynamic"])
    ap.add_argument("--ir", default="legacy", choices=["legacy", "pir"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--onednn", type=int, default=0, choices=[0, 1])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    t0 = time.perf_counter()
    train, warm = load(a.data, a.files)
    tload = time.perf_counter() - t0
    warnings.filterwarnings("ignore")
    import paddle
    paddle.base.core.set_num_threads(a.threads)
    paddle.seed(0)
    if a.graph == "static":
        paddle.enable_static()
    print("# paddle ctr %s%s %s t%d onednn %d: %s; %d train rows (data ready in %.2f s, not timed); SGD lr %g" % (
        a.graph, " (%s IR)" % a.ir if a.graph == "static" else "", a.dtype, a.threads, a.onednn, paddle_info(paddle), len(train[2]), tload, a.lr), flush=True)
    run = run_static if a.graph == "static" else run_dynamic
    for b in [int(x) for x in a.batches.split(",")]:
        graph = a.graph + (".pir" if a.graph == "static" and a.ir == "pir" else "")
        key = "paddle.ctr.b%d.%s.%s.t%d%s%s" % (b, graph, a.dtype, a.threads, ".onednn" if a.onednn else "", a.tag)
        b0, c0, w0 = sys_busy_s(), time.process_time(), time.perf_counter()
        try:
            n, el, loss = run(paddle, a, b, train, warm)
        except Exception as e:  # an unsupported combination is reported, the other batches still run
            print("# FAILED: %s: %s: %s" % (key, type(e).__name__, str(e).strip().splitlines()[-1][:300]), flush=True)
            continue
        wall = time.perf_counter() - w0
        own = time.process_time() - c0
        print("# b%d %s %s: %d examples in %.3f s; last loss (sum over the batch) %.4f" % (b, a.graph, a.dtype, n, el, loss))
        print("R\t%s.ex_per_s\t%.0f\texamples/s" % (key, n / el))
        print("R\t%s.ex_per_s_per_thread\t%.0f\texamples/s" % (key, n / el / a.threads))
        print("R\t%s.other_cpu\t%.2f\tcores busy with other processes" % (key, max((sys_busy_s() - b0 - own) / wall, 0.0)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
