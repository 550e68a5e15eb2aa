"""Summary of bench/bench_ctr.sh's raw file: medians (min-max), ratios of medians and the targets.

usage: python3 bench/ctr_summary.py RAW OUT BATCHES PS_THREADS "TORCH_MODES" PS_EXTRA "TORCH_AMP_MODES"
           "PADDLE_CONFIGS"
Reads the 'R<TAB>key<TAB>value<TAB>unit' lines of every run (ours.ctr.*, torch.ctr.*, paddle.ctr.*,
ours.ctrps.*, ours.ctrqueue.*) and the parser's table, writes OUT (markdown) and prints it.
  f32: per batch and thread count, ours (Hogwild) against the fastest PyTorch mode with that many
       threads and the fastest Paddle configuration with that many threads; target: ours >= 1.5x
       the fastest peer.
  bf16: ours --amp 1 against ours f32 (target >= 2x at batch 512) and against the fastest peer's
       bf16 with the same threads (target >= 1x).
"""
import statistics
import sys

raw, out, batches, pthreads, tmodes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
psextra = sys.argv[6]
amodes = sys.argv[7].split() if len(sys.argv) > 7 else []
pconfigs = sys.argv[8].split() if len(sys.argv) > 8 else []
vals, rnd, parser = {}, 0, []
with open(raw) as f:
    for line in f:
        if line.startswith("# round "):
            rnd = line.split()[2]
            continue
        if rnd == "parser" and not line.startswith("## "):
            t = line.rstrip("\n")
            parser.extend(["", t[2:], ""] if t.startswith("# ") else [t])
        p = line.rstrip("\n").split("\t")
        if len(p) == 4 and p[0] == "R":
            try:
                vals.setdefault(p[1], []).append(float(p[2]))
            except ValueError:
                pass


def med(k):
    return statistics.median(vals[k]) if vals.get(k) else None


def rng(k):
    return "%.0f-%.0f" % (min(vals[k]), max(vals[k])) if vals.get(k) else ""


def fmt(x, s="%.0f"):
    return "n/a" if x is None else s % x


def cell(k):
    return "%s (%s)" % (fmt(med(k)), rng(k)) if med(k) is not None else "n/a"


def ratio(a, b):
    return a / b if a and b else None


def mode_threads(m):
    return 1 if m == "t1" else 2


def paddle_key(b, c):
    """static.f32.2.onednn -> paddle.ctr.b512.static.f32.t2.onednn"""
    g, d, t = c.split(".")[:3]
    return "paddle.ctr.b%d.%s.%s.t%s%s" % (b, g, d, t, ".onednn" if c.endswith(".onednn") else ""), int(t), d


def best(cands):
    """cands: {label: key}; the label and key of the highest median, or (None, None)."""
    have = {n: k for n, k in cands.items() if med(k) is not None}
    if not have:
        return None, None
    n = max(have, key=lambda x: med(have[x]))
    return n, have[n]


def met(r, target):
    return "n/a" if r is None else ("yes" if r >= target else "NO")


L = []
L.append("### CTR-DNN training, float32, examples/s, medians of %d rounds (min-max)\n" % max(len(v) for v in vals.values()))
L.append("Fastest peer per row: PyTorch's fastest mode and Paddle's fastest configuration with the same thread count.\n")
L.append("| config | ours | PyTorch (mode) | Paddle (config) | ours / PyTorch | ours / Paddle | ours / fastest peer |"
         " target | met | other_cpu ours |")
L.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
for b in [int(x) for x in batches.split(",")]:
    for t in (1, 2):
        ok = "ours.ctr.b%d.t%d" % (b, t)
        o = med(ok + ".ex_per_s")
        tn, tk = best({m: "torch.ctr.b%d.%s.ex_per_s" % (b, m) for m in (["t1"] if t == 1 else tmodes)})
        pc = {}
        for c in pconfigs:
            k, th, d = paddle_key(b, c)
            if th == t and d == "f32":
                pc[c] = k + ".ex_per_s"
        pn, pk = best(pc)
        tv, pv = (med(tk) if tk else None), (med(pk) if pk else None)
        peer = max([v for v in (tv, pv) if v is not None] or [0]) or None
        r = ratio(o, peer)
        L.append("| batch %d, %d thread%s | %s | %s%s | %s%s | %s | %s | %s | >= 1.50x | %s | %s |" % (
            b, t, "s" if t > 1 else "", cell(ok + ".ex_per_s"), cell(tk) if tk else "n/a", " (%s)" % tn if tn else "",
            cell(pk) if pk else "n/a", " (%s)" % pn if pn else "", fmt(ratio(o, tv), "%.2fx"), fmt(ratio(o, pv), "%.2fx"),
            fmt(r, "%.2fx"), met(r, 1.5), fmt(med(ok + ".other_cpu"), "%.2f")))
        others = [("PyTorch " + m, "torch.ctr.b%d.%s.ex_per_s" % (b, m)) for m in tmodes if t == 2]
        others += [("Paddle " + c, paddle_key(b, c)[0] + ".ex_per_s") for c in pconfigs
                   if paddle_key(b, c)[1] == t and paddle_key(b, c)[2] == "f32"]
        for name, k in others:
            if med(k) is not None:
                L.append("| &nbsp;&nbsp; %s, batch %d | | %s | | | | %s | | | |" % (name, b, cell(k), fmt(ratio(o, med(k)), "%.2fx")))
L.append("")
if vals.get("ours.ctr.b%s.t1.amp.ex_per_s" % batches.split(",")[0]) or amodes or any(".bf16." in c for c in pconfigs):
    L.append("### CTR-DNN training, bf16 AMP, examples/s (ours: fl_amp_decorate; PyTorch: autocast bf16; Paddle: "
             "static bf16 AMP)\n")
    L.append("| config | ours AMP | ours f32 | AMP / f32 | PyTorch bf16 (mode) | Paddle bf16 (config) |"
             " ours AMP / fastest peer bf16 | target | met |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for b in [int(x) for x in batches.split(",")]:
        for t in (1, 2):
            ak, fk = "ours.ctr.b%d.t%d.amp.ex_per_s" % (b, t), "ours.ctr.b%d.t%d.ex_per_s" % (b, t)
            tn, tk = best({m: "torch.ctr.b%d.%s.bf16.ex_per_s" % (b, m) for m in amodes if mode_threads(m) == t})
            pc = {}
            for c in pconfigs:
                k, th, d = paddle_key(b, c)
                if th == t and d == "bf16":
                    pc[c] = k + ".ex_per_s"
            pn, pk = best(pc)
            peer = max([med(k) for k in (tk, pk) if k] or [0]) or None
            r1, r2 = ratio(med(ak), med(fk)), ratio(med(ak), peer)
            tg = ">= 1x peer" + ("; >= 2x f32" if b >= 512 else "")
            ok = "peer " + met(r2, 1.0) + ("; 2x " + met(r1, 2.0) if b >= 512 else "")
            L.append("| batch %d, %d thread%s | %s | %s | %s | %s%s | %s%s | %s | %s | %s |" % (
                b, t, "s" if t > 1 else "", cell(ak), cell(fk), fmt(r1, "%.2fx"), cell(tk) if tk else "n/a",
                " (%s)" % tn if tn else "", cell(pk) if pk else "n/a", " (%s)" % pn if pn else "", fmt(r2, "%.2fx"),
                tg, ok))
    L.append("")
if any(k.startswith("ours.ctrps.") for k in vals):
    L.append("### Parameter server async (1 server + 2 workers x %d thread(s), 127.0.0.1) vs local Hogwild with %d threads\n" % (
        pthreads, 2 * pthreads))
    L.append("| batch | strategy | PS total examples/s | local Hogwild examples/s | PS / local | target | met |")
    L.append("|---|---|---:|---:|---:|---:|---|")
    for b in [int(x) for x in batches.split(",")]:
        for tag, label in (("", "default a_sync_configs"), (".tuned", psextra + " (context)")):
            pk = "ours.ctrps.b%d.w2t%d%s.ex_per_s" % (b, pthreads, tag)
            p = med(pk)
            if p is None and tag:
                continue
            loc = med("ours.ctr.b%d.t%d.ex_per_s" % (b, 2 * pthreads))
            r = p / loc if p and loc else None
            L.append("| %d | %s | %s (%s) | %s | %s | %s | %s |" % (b, label, fmt(p), rng(pk), fmt(loc), fmt(r, "%.2fx"),
                     ">= 0.80x" if not tag else "", ("n/a" if r is None else ("yes" if r >= 0.8 else "NO")) if not tag else ""))
    L.append("")
qs = sorted(k for k in vals if k.startswith("ours.ctrqueue.") and k.endswith(".ex_per_s"))
if qs:
    L.append("### Full pipeline: one QueueDataset pass (parse + batch + train), round 1 only\n")
    L.append("| config | examples/s | InMemoryDataset, same config (median) |")
    L.append("|---|---:|---:|")
    for k in qs:
        cfg = k.split(".")[2] + "." + k.split(".")[3]
        L.append("| %s | %s | %s |" % (cfg, fmt(med(k)), fmt(med("ours.ctr.%s.ex_per_s" % cfg))))
    L.append("")
if parser:
    L.append("### Parser (bench_data_parse)\n")
    L.extend(parser)
    L.append("")
text = "\n".join(L) + "\n"
print(text, end="")
open(out, "w").write(text)
