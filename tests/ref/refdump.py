"""The one copy of what the PyTorch reference generators in tests/ref share: one thread, the "FLREF 1"
writer, the output folder, the SGD loop that records each step's loss, the step-0 gradients and the
final values, and the dump of a network written op by op (make_bert_reference.py,
make_transformer_reference.py).  tests/refdump.h is its reader on the C side.

Importing it sets the thread count (one OpenBLAS, OpenMP and MKL thread, one torch thread: the
summation order is fixed, two runs give the same bytes), so a generator imports it before numpy and
torch.  It is not a generator itself and writes nothing on import.

File format ("FLREF 1", readable without any library): the first line is "FLREF 1\\n"; then for each
tensor one ASCII header line "NAME DTYPE NDIM D0 D1 ...\\n" (DTYPE f32, f64 or i64) immediately
followed by numel * size bytes of little-endian row-major data; the file ends with the line "end\\n".
"""
import os
import sys

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


def write_dump(path, tensors):
    """tensors: list of (name, np.ndarray with dtype float32/float64/int64)."""
    codes = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int64): "i64"}
    with open(path, "wb") as f:
        f.write(b"FLREF 1\n")
        for name, a in tensors:
            a = np.ascontiguousarray(a)
            assert " " not in name and a.dtype in codes, (name, a.dtype)
            dims = " ".join(str(d) for d in a.shape)
            f.write(("%s %s %d%s%s\n" % (name, codes[a.dtype], a.ndim, " " if a.ndim else "", dims)).encode())
            f.write(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
        f.write(b"end\n")
    print("wrote %s (%d bytes, %d tensors)" % (path, os.path.getsize(path), len(tensors)))


def out_dir(args=None):
    """The folder to write into: the first of args (default: the command line), else tests/ref; made if absent."""
    args = sys.argv[1:] if args is None else args
    d = args[0] if args else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(d, exist_ok=True)
    return d


def config(pairs):
    """("config.KEY", [value]) tensors of (KEY, value) pairs: a float as f64, an integer as i64."""
    return [("config." + k, np.array([v], np.float64 if isinstance(v, float) else np.int64)) for k, v in pairs]


def train_steps(named, opt, loss_of_step, steps, layout=None, log=None):
    """Runs `steps` steps of opt on loss_of_step(s) (a scalar tensor of step s).

    named: (name, tensor) pairs, the tensors opt updates among them.  Returns (the loss of each step,
    computed before that step's update, float64 [steps]; {name: step-0 gradient} of the tensors that
    require a gradient; {name: final value} of all), as float64 numpy arrays passed through
    layout(name, array) when given (e.g. PyTorch's [out, in] to Paddle's [in, out]).  log(s, loss),
    when given, is called after each step."""
    named = list(named)

    def arr(n, t):
        a = t.detach().numpy().astype(np.float64)
        return layout(n, a) if layout else a

    losses, grad0 = [], None
    for s in range(steps):
        loss = loss_of_step(s)
        opt.zero_grad()
        loss.backward()
        if s == 0:
            grad0 = {n: arr(n, t.grad) for n, t in named if t.requires_grad}
        opt.step()
        losses.append(loss.item())
        if log:
            log(s, losses[-1])
    final = {n: arr(n, t) for n, t in named}
    return np.array(losses, dtype=np.float64), grad0, final


def write_network_dump(path, cfg, init, batch, forward, lr, steps, frozen=(), spreads=False):
    """Trains a network written op by op with SGD (lr, `steps` steps on one batch) from init in float32
    and in float64, prints each step's losses and the largest float32 / float64 gaps, and writes path:
    config(cfg), batch.*, loss.f32 / loss.f64, init.*, grad0.* (float32 run, trained parameters),
    final.* (float32 run) and, with spreads, f32err.* (max |final f32 - final f64|) and update.* (max
    |final f32 - init|) per parameter.

    init: {Paddle name: float32 array} in the dump's order; batch: {name: array}; forward(P, batch):
    the loss of the parameters P ({name: tensor}); frozen: names that are not trained."""
    runs = []
    for dtype in (torch.float32, torch.float64):
        P = {n: torch.tensor(a, dtype=dtype, requires_grad=n not in frozen) for n, a in init.items()}
        opt = torch.optim.SGD([t for t in P.values() if t.requires_grad], lr=lr)
        runs.append(train_steps(P.items(), opt, lambda s: forward(P, batch), steps))
    (l32, g32, f32), (l64, g64, f64) = runs
    names = list(init)
    trained = [n for n in names if n in g32]
    t = config(cfg)
    t += [("batch." + k, v) for k, v in batch.items()]
    t += [("loss.f32", l32), ("loss.f64", l64)]
    t += [("init." + n, init[n]) for n in names]
    t += [("grad0." + n, g32[n].astype(np.float32)) for n in trained]
    t += [("final." + n, f32[n].astype(np.float32)) for n in names]
    if spreads:
        t += [("f32err." + n, np.array([np.abs(f32[n] - f64[n]).max()])) for n in names]
        t += [("update." + n, np.array([np.abs(f32[n] - init[n]).max()])) for n in names]
    for s in range(steps):
        print("step %d loss: f32 %.8f  f64 %.8f" % (s, l32[s], l64[s]))
    worst = max(trained, key=lambda n: np.abs(g32[n] - g64[n]).max())
    print("largest f32-f64 gradient gap: %s %.2e; largest final gap: %.2e" %
          (worst, np.abs(g32[worst] - g64[worst]).max(), max(np.abs(f32[n] - f64[n]).max() for n in names)))
    write_dump(path, t)
