"""gloo_allreduce_ref.py - the torch.distributed gloo reference for bench/allreduce_peers.sh.

usage: /usr/bin/python3 bench/peers/gloo_allreduce_ref.py [--np N] [--seconds S] [SIZE ...]
(SIZE with K/M suffixes; default 4K 16K 64K 256K 1M 4M 16M 64M)

N processes (default 2) on 127.0.0.1, one thread each, float32 SUM allreduce in place (the only
form torch offers).  Per size: 3 warm-up ops, one timed op to pick ITERS (~S seconds, 3..2000),
a barrier, ITERS ops; time/op = the slowest rank's elapsed time / ITERS; p50 from rank 0's
individually timed ops; every element of the last result is checked.  Output lines as
bench/bench_allreduce.c prints them: "R\tgloo.<SIZE>.us\t<v>\tus/op" (.p50us, .algbw, .busbw).
"""
import os
import socket
import sys
import time


def parse(s):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1:].upper(), 1)
    return int(s[:-1] if mult > 1 else s) * mult


def emit(key, value, unit, fmt="%.3f"):
    print(("R\t%s\t" + fmt + "\t%s") % (key, value, unit), flush=True)


def worker(rank, world, port, sizes, secs):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    for ss in sizes:
        nbytes = parse(ss)
        n = nbytes // 4
        base = torch.arange(n, dtype=torch.int64).remainder(7).to(torch.float32) + float(rank + 1)
        t = base.clone()
        for _ in range(3):
            t.copy_(base)
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        one = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(one, op=dist.ReduceOp.MAX)
        iters = int(min(2000, max(3, secs / max(one.item(), 1e-9))))
        dist.barrier()
        ts = []
        t0 = tp = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)  # in place: values grow, the time does not depend on them
            tn = time.perf_counter()
            ts.append(tn - tp)
            tp = tn
        el = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(el, op=dist.ReduceOp.MAX)
        t.copy_(base)
        dist.all_reduce(t)
        want = torch.arange(n, dtype=torch.int64).remainder(7).to(torch.float32) * world + world * (world + 1) / 2
        wrong = torch.tensor([int((t != want).sum().item())], dtype=torch.int64)
        dist.all_reduce(wrong)
        ts.sort()
        per = el.item() / iters
        if rank == 0:
            alg = nbytes / per / 1e9
            emit("gloo.%s.us" % ss, per * 1e6, "us/op", "%.2f")
            emit("gloo.%s.p50us" % ss, ts[len(ts) // 2] * 1e6, "us/op", "%.2f")
            emit("gloo.%s.algbw" % ss, alg, "GB/s")
            emit("gloo.%s.busbw" % ss, alg * 2 * (world - 1) / world, "GB/s")
            if wrong.item():
                emit("gloo.%s.wrong" % ss, wrong.item(), "elements", "%d")
    dist.barrier()
    dist.destroy_process_group()


def main():
    args = sys.argv[1:]
    world, secs, sizes = 2, 0.5, []
    while args:
        a = args.pop(0)
        if a == "--np":
            world = int(args.pop(0))
        elif a == "--seconds":
            secs = float(args.pop(0))
        else:
            sizes.append(a)
    sizes = sizes or ["4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(world, port, sizes, secs), nprocs=world, join=True)


if __name__ == "__main__":
    main()
