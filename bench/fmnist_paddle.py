"""Paddle 3.x side of bench/bench_fmnist.sh: the Fashion-MNIST MLP of examples/fmnist/train_mlp.c
(or, with --model cnn, the CNN of train_cnn.c).

usage: build/peer-venv/bin/python bench/fmnist_paddle.py [--world 2] [--batch 64] [--epochs 1]
           [--threads 1] [--data DIR] [--lr 0.01] [--momentum 0.9] [--seed 0] [--model mlp|cnn]
  784 -> Linear 512 ReLU -> Linear 256 ReLU -> Linear 10, softmax cross-entropy (mean),
  (cnn: [1, 28, 28] -> Conv2D 5x5 x20 ReLU -> MaxPool 2 -> Conv2D 5x5 x50 ReLU -> MaxPool 2 -> Linear 500
  ReLU -> Linear 10),
  paddle.optimizer.Momentum(lr, momentum), paddle.seed(0) initialisation, pixels / 255, a fixed
  shuffle (NumPy RandomState(seed + epoch).permutation; rank r of w takes perm[r::w]).
  --world 1: one process.  --world N > 1: N processes (paddle.distributed.spawn, backend gloo on
  127.0.0.1), the model in paddle.DataParallel (gradients all-reduced every step), dynamic graph
  (Paddle's data-parallel CPU path), each rank with --threads intra-op threads (OMP / MKL, set
  before paddle is imported; MKL_DEBUG_CPU_TYPE=5 on AMD, paddle_info.mkl_env).
  --batch is PER RANK.  Epoch time: from a barrier to the end of the last step of the slowest rank
  (data loading excluded); test accuracy on the 10,000 test images, by rank 0.
Prints the same epoch line as train_mlp and fmnist_torch.py:
  epoch E/N: loss L  samples/s S  time T s  test_acc A% (C/10000)  [W trainers x batch B]
and a '#' line naming what Paddle runs on.
"""
import os
import sys


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = _arg("--threads", "1")
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paddle_info import mkl_env, paddle_info  # noqa: E402
from fmnist_data import load_split  # noqa: E402

mkl_env()

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def run(args):
    warnings.filterwarnings("ignore")
    import paddle
    import paddle.distributed as dist
    paddle.base.core.set_num_threads(args.threads)
    world = args.world
    if world > 1:
        dist.init_parallel_env()
    rank = dist.get_rank() if world > 1 else 0
    t_load = time.perf_counter()
    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "t10k")
    t_load = time.perf_counter() - t_load
    paddle.seed(0)  # same initial weights on every rank (DataParallel also broadcasts rank 0's)
    nn = paddle.nn
    if args.model == "cnn":
        xtr, xte = xtr.reshape(-1, 1, 28, 28), xte.reshape(-1, 1, 28, 28)
        net = nn.Sequential(nn.Conv2D(1, 20, 5), nn.ReLU(), nn.MaxPool2D(2), nn.Conv2D(20, 50, 5), nn.ReLU(),
                            nn.MaxPool2D(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    else:
        net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    model = paddle.DataParallel(net) if world > 1 else net
    opt = paddle.optimizer.Momentum(learning_rate=args.lr, momentum=args.momentum, parameters=model.parameters())
    xtr_t, ytr_t = paddle.to_tensor(xtr), paddle.to_tensor(ytr)

    def allreduce(v, op):
        if world == 1:
            return v
        t = paddle.to_tensor([v], dtype="float64")
        dist.all_reduce(t, op=op)
        return float(t.numpy()[0])

    if rank == 0:
        print("# %s; data loaded in %.2f s" % (paddle_info(paddle), t_load), flush=True)
    for ep in range(args.epochs):
        mine = np.random.RandomState(args.seed + ep).permutation(xtr.shape[0])[rank::world]
        idxs = [paddle.to_tensor(mine[i:i + args.batch]) for i in range(0, mine.shape[0], args.batch)]
        if world > 1:
            dist.barrier()
        model.train()
        t0 = time.perf_counter()
        loss_sum = 0.0
        for idx in idxs:
            loss = nn.functional.cross_entropy(model(paddle.gather(xtr_t, idx)), paddle.gather(ytr_t, idx))
            loss.backward()
            opt.step()
            opt.clear_grad(set_to_zero=False)
            loss_sum += float(loss)
        el = allreduce(time.perf_counter() - t0, dist.ReduceOp.MAX)
        mean_loss = allreduce(loss_sum / len(idxs), dist.ReduceOp.SUM) / world
        if rank == 0:
            net.eval()
            with paddle.no_grad():
                correct = int((net(paddle.to_tensor(xte)).argmax(1).numpy() == yte).sum())
            print("epoch %d/%d: loss %.4f  samples/s %.0f  time %.3f s  test_acc %.2f%% (%d/%d)  "
                  "[%d trainer%s x batch %d]" % (ep + 1, args.epochs, mean_loss, xtr.shape[0] / el, el,
                                                 100.0 * correct / yte.shape[0], correct, yte.shape[0], world,
                                                 "" if world == 1 else "s", args.batch), flush=True)
    if world > 1:
        dist.barrier()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--data", default=os.environ.get("FMNIST_DIR") or DEFAULT_DIR)
    args = ap.parse_args()
    if args.world < 1 or args.batch < 1 or args.epochs < 1:
        ap.error("--world, --batch and --epochs must be >= 1")
    if args.world == 1:
        run(args)
    else:
        import paddle.distributed as dist
        dist.spawn(run, args=(args,), nprocs=args.world, backend="gloo")


if __name__ == "__main__":
    main()
