"""PyTorch side of bench/bench_resnet50.sh: torchvision's resnet50 (float32, NCHW) training and
inference images/s on one synthetic in-memory batch, as build/bench/bench_resnet50 measures ours.

usage: python bench/resnet50_torch.py [--mode train|eval] [--batch 8] [--steps 3] [--warmup 1]
           [--threads 1] [--size 224] [--v1]

train: SGD momentum 0.9 lr 0.01, CrossEntropyLoss, images uniform [-1, 1), labels i*7919 % 1000;
eval: model.eval() under torch.no_grad().  The model is torchvision's resnet50 as it is (ResNet
v1.5, the stride of each downsampling bottleneck on its 3x3, as PaddleCV's ResNet50 and
fl_model_resnet50 by default); --v1 moves that stride to the first 1x1 convolution (ResNet v1,
fl_model_resnet50 with stride_in_1x1, about 6% fewer multiply-adds).  Prints the median step's images/s (and images per
second of the process's CPU time) as 'R<TAB>key<TAB>value<TAB>unit', and '# ' lines: torch version, its CPU capability and the oneDNN
(mkldnn) kernels the convolutions dispatch to (ONEDNN_VERBOSE is read from the environment).
"""
import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="train", choices=["train", "eval"])
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--warmup", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--size", type=int, default=224)
ap.add_argument("--v1", action="store_true")
a = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(a.threads)

import torch  # noqa: E402
import torchvision  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(1)
m = torchvision.models.resnet50()
if a.v1:
    for layer in (m.layer2, m.layer3, m.layer4):
        b = layer[0]
        b.conv1.stride, b.conv2.stride = (2, 2), (1, 1)
x = torch.rand(a.batch, 3, a.size, a.size) * 2 - 1
y = torch.tensor([(i * 7919) % 1000 for i in range(a.batch)])
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()
if a.mode == "eval":
    m.eval()
times, cpu = [], []
for i in range(a.warmup + a.steps):
    t0, c0 = time.perf_counter(), time.process_time()
    if a.mode == "train":
        opt.zero_grad(set_to_none=True)
        loss = lossf(m(x), y)
        loss.backward()
        opt.step()
    else:
        with torch.no_grad():
            m(x)
    if i >= a.warmup:
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
times.sort()
n = len(times)
med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
print("# torch %s, CPU capability %s, mkldnn %s, threads %d%s" % (torch.__version__, cap,
      torch.backends.mkldnn.is_available(), torch.get_num_threads(), ", v1 strides" if a.v1 else ""))
key = "torch.resnet50.%s.s%d.b%d" % (a.mode, a.size, a.batch)
print("# %s: step median %.3f s (min %.3f max %.3f)" % (key, med, times[0], times[-1]))
print("R\t%s.images_per_s\t%.3f\timages/s" % (key, a.batch / med))
cpu.sort()
cmed = cpu[n // 2] if n % 2 else (cpu[n // 2 - 1] + cpu[n // 2]) / 2
print("R\t%s.images_per_cpu_s\t%.3f\timages/s" % (key, a.batch / cmed))
sys.stdout.flush()
