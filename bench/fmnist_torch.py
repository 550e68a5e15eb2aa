"""PyTorch side of bench/bench_fmnist.sh: the Fashion-MNIST MLP of examples/fmnist/train_mlp.c, or
with --model cnn the CNN of examples/fmnist/train_cnn.c.

usage: /usr/bin/python3 bench/fmnist_torch.py [--model mlp|cnn] [--world 2] [--batch 64] [--epochs 1]
           [--threads 1] [--blas-threads 1] [--data DIR] [--lr 0.01] [--momentum 0.9] [--seed 0] [--pin]
  mlp: 784 -> Linear 512 ReLU -> Linear 256 ReLU -> Linear 10;
  cnn: [1, 28, 28] -> Conv2d 5x5 x20 ReLU -> MaxPool 2 -> Conv2d 5x5 x50 ReLU -> MaxPool 2 -> Linear 500
  ReLU -> Linear 10 (NCHW float32 tensors; torch runs these convolutions on its bundled oneDNN,
  MKL-DNN, when the '#' line says it is enabled);
  both CrossEntropyLoss (softmax + cross-entropy),
  SGD(lr, momentum), torch.manual_seed(0) initialisation, pixels / 255, fixed shuffle
  torch.randperm(seed 0 + epoch); rank r of w takes perm[r::w] (as shared/peers/py/train.py).
  --world 1: one process, no DDP.  --world N > 1: N processes (torch.multiprocessing.spawn),
  DistributedDataParallel over gloo on tcp://127.0.0.1, each with --threads intra-op threads and
  --blas-threads OpenBLAS threads (Debian's torch does its matrix products in the system OpenBLAS,
  which reads OPENBLAS_NUM_THREADS when it is loaded, so both are set before torch is imported).
  --batch is PER RANK.  Epoch time: from a barrier to the end of the last step of the slowest rank
  (data loading excluded); test accuracy on the 10,000 test images, by rank 0.
Prints the same epoch line as train_mlp:
  epoch E/N: loss L  samples/s S  time T s  test_acc A% (C/10000)  [W trainers x batch B]
and a '#' line with the BLAS torch's products run on (bench/torch_blas.py), torch's CPU
capability (the ISA of its own vector kernels) and whether its oneDNN is available.
"""
import os
import sys


def _arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


if "--multiprocessing-fork" not in sys.argv:
    os.environ["OMP_NUM_THREADS"] = _arg("--threads", "1")
    os.environ["OPENBLAS_NUM_THREADS"] = _arg("--blas-threads", "1")

import argparse  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import fmnist_data  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def load_split(d, prefix):
    x, y = fmnist_data.load_split(d, prefix)
    return torch.from_numpy(x), torch.from_numpy(y)


def run(rank, world, port, args):
    if args.pin:  # rank r on CPU r (before any thread is started), as bench_fmnist.sh FMNIST_PIN=1 does for ours
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(args.threads)
    if world > 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    t_load = time.perf_counter()
    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "t10k")
    t_load = time.perf_counter() - t_load
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    if args.model == "cnn":
        xtr, xte = xtr.view(-1, 1, 28, 28), xte.view(-1, 1, 28, 28)
        net = nn.Sequential(nn.Conv2d(1, 20, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.ReLU(),
                            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))
    else:
        net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    lossf = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    def allreduce(v, op):
        if world == 1:
            return v
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return t.item()

    if rank == 0:
        from torch_blas import blas_desc
        cap = [ln.split(":", 1)[1].strip() for ln in torch.__config__.show().splitlines() if "CPU capability" in ln]
        print("# torch %s, %s; OMP_NUM_THREADS=%s torch threads=%d; "
              "CPU capability %s; oneDNN %s; data loaded in %.2f s"
              % (torch.__version__, blas_desc(torch), os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(),
                 cap[0] if cap else "?", "enabled" if torch.backends.mkldnn.is_available() else "not available",
                 t_load), flush=True)
    for ep in range(args.epochs):
        perm = torch.randperm(xtr.shape[0], generator=torch.Generator().manual_seed(args.seed + ep))
        mine = perm[rank::world]
        if world > 1:
            dist.barrier()
        model.train()
        t0 = time.perf_counter()
        loss_sum, nsteps = 0.0, 0
        for i in range(0, mine.shape[0], args.batch):
            idx = mine[i:i + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            nsteps += 1
        el = allreduce(time.perf_counter() - t0, dist.ReduceOp.MAX if world > 1 else None)
        mean_loss = allreduce(loss_sum / nsteps, dist.ReduceOp.SUM if world > 1 else None) / world
        if rank == 0:
            with torch.no_grad():
                net.eval()
                correct = int((net(xte).argmax(1) == yte).sum().item())
            print("epoch %d/%d: loss %.4f  samples/s %.0f  time %.3f s  test_acc %.2f%% (%d/%d)  "
                  "[%d trainer%s x batch %d]" % (ep + 1, args.epochs, mean_loss, xtr.shape[0] / el, el,
                                                 100.0 * correct / yte.shape[0], correct, yte.shape[0], world,
                                                 "" if world == 1 else "s", args.batch), flush=True)
    if world > 1:
        dist.barrier()
        # no destroy_process_group(): with DDP on torch 1.13 it was seen to spin forever on one rank
        # (shared/peers/py/train.py)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pin", action="store_true", help="pin rank r to CPU r")
    ap.add_argument("--data", default=os.environ.get("FMNIST_DIR") or DEFAULT_DIR)
    args = ap.parse_args()
    if args.world < 1 or args.batch < 1 or args.epochs < 1:
        ap.error("--world, --batch and --epochs must be >= 1")
    if args.world == 1:
        run(0, 1, 0, args)
    else:
        mp.spawn(run, args=(args.world, free_port(), args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
