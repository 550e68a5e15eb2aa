"""PyTorch side of bench/cnn_ddp.sh: training images/s of torchvision's resnet50 or vgg16 on a
synthetic in-memory batch, on one process or with DistributedDataParallel over gloo, as
build/bench/bench_cnn_ddp measures ours.

usage: python bench/cnn_torch.py [--model resnet50|vgg16] [--batch GLOBAL] [--world N] [--threads T]
           [--steps 3] [--warmup 1] [--size 224] [--v1]

--world 1: one process.  --world N > 1: N processes (torch.multiprocessing.spawn), each with
--threads intra-op threads and GLOBAL / N images, DistributedDataParallel over gloo on
tcp://127.0.0.1.  SGD momentum 0.9 lr 0.01, CrossEntropyLoss, images uniform [-1, 1) (each rank
its own), labels (i * 7919) % 1000.  resnet50 is torchvision's as it is (ResNet v1.5, as
fl_model_resnet50 by default); --v1 moves the stride of each downsampling bottleneck from its 3x3
to its first 1x1 convolution (ResNet v1, fl_model_resnet50 with stride_in_1x1).
Rank 0 prints the median step's images/s of the global batch as 'R<TAB>key<TAB>value<TAB>unit'
with key torch.MODEL.sSIZE.bGLOBAL.pN.images_per_s, and '# ' lines.
"""
import argparse
import os
import socket
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="resnet50", choices=["resnet50", "vgg16"])
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--world", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--size", type=int, default=224)
ap.add_argument("--v1", action="store_true")
A = ap.parse_args()
if A.batch % A.world:
    sys.exit("cnn_torch.py: --batch %d is not a multiple of --world %d" % (A.batch, A.world))
os.environ["OMP_NUM_THREADS"] = str(A.threads)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torchvision  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, world, port):
    torch.set_num_threads(A.threads)
    torch.manual_seed(1)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    if A.model == "resnet50":
        m = torchvision.models.resnet50()
        if A.v1:
            for layer in (m.layer2, m.layer3, m.layer4):
                b = layer[0]
                b.conv1.stride, b.conv2.stride = (2, 2), (1, 1)
    else:
        m = torchvision.models.vgg16()
    net = torch.nn.parallel.DistributedDataParallel(m) if world > 1 else m
    b = A.batch // world
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.rand(b, 3, A.size, A.size, generator=g) * 2 - 1
    y = torch.tensor([((rank * b + i) * 7919) % 1000 for i in range(b)])
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    times = []
    for i in range(A.warmup + A.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = lossf(net(x), y)
        loss.backward()
        opt.step()
        if i >= A.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    if rank == 0:
        print("# torch %s, CPU capability %s, %s%s %dx%d, global batch %d on %d process(es), %d thread(s) each; "
              "step median %.3f s (min %.3f max %.3f); loss %.4f" % (
                  torch.__version__, torch.backends.cpu.get_cpu_capability(), A.model, " (v1 strides)" if A.v1 else "",
                  A.size, A.size, A.batch, world, torch.get_num_threads(), med, times[0], times[-1], loss.item()))
        print("R\ttorch.%s.s%d.b%d.p%d.images_per_s\t%.3f\timages/s" % (A.model, A.size, A.batch, world, A.batch / med))
        sys.stdout.flush()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    if A.world == 1:
        run(0, 1, 0)
    else:
        mp.spawn(run, args=(A.world, free_port()), nprocs=A.world, join=True)
