"""images_torch.py ROOT [--workers W] [--images N] [--batch B] [--crop C] - the reference of
bench_images decode: torchvision's ImageFolder + DataLoader with the ImageNet training
transform (RandomResizedCrop(C), RandomHorizontalFlip, ToTensor, Normalize) over the class
folders at ROOT, the first N images of a shuffled epoch, W worker processes (0: in this
process).  Pillow decodes with libjpeg-turbo; the versions are printed.  Output:
"R<TAB>key<TAB>value<TAB>unit" lines, as bench_images."""
import argparse
import time

import PIL
import torch
import torchvision
from PIL import features
from torchvision import datasets, transforms

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=1)
ap.add_argument("--images", type=int, default=2000)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--crop", type=int, default=224)
a = ap.parse_args()
torch.set_num_threads(1)
tf = transforms.Compose([transforms.RandomResizedCrop(a.crop), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(a.root, transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                 generator=torch.Generator().manual_seed(7))
print("# torch %s, torchvision %s, Pillow %s (libjpeg-turbo %s)" % (torch.__version__, torchvision.__version__,
                                                                   PIL.__version__, features.version("libjpeg_turbo")))
t0, done = None, 0
it = iter(dl)
first = next(it)  # worker start-up is not counted: the clock starts at the first batch
t0 = time.perf_counter()
for x, y in it:
    done += x.shape[0]
    if done >= a.images:
        break
dt = time.perf_counter() - t0
w = max(a.workers, 1)
print("# %d images after the first batch, %d worker(s), %.2f s" % (done, a.workers, dt))
print("R\ttorch_decode_images_per_s_w%d\t%.1f\timages/s" % (a.workers, done / dt))
print("R\ttorch_decode_images_per_s_per_worker_w%d\t%.1f\timages/s" % (a.workers, done / dt / w))
